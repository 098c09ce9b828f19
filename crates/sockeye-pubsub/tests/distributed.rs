//! Real distributed engines, the way they fail (issue 29 §4): a Redis primary killed and its
//! replica promoted, a primary of a Redis Cluster killed (its replica takes over), a server of
//! a NATS cluster killed, a node partitioned from its backplane. Each during traffic from three
//! publishers on three nodes (three hubs in this process, each with its own backplane
//! connection), six subscribers; `support::traffic` checks that every subscriber ends with
//! every publication once in each publisher's order, or a `Gap` before what was lost, never a
//! silent miss or a reused position. Each takes seconds (small counts, low timeouts).
#![cfg(all(feature = "redis", feature = "nats"))]
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use sockeye_pubsub::{HistoryConfig, Hub, HubConfig, Topic};
use support::clusters::{NatsCluster, RedisCluster, RedisReplicated};
use support::proxy::Proxy;
use support::servers::{BackplaneServer, Kind};
use support::traffic::{Outcome, Plan, run};
use tokio::time::timeout;

/// Three nodes on the backplane at `url` (`urls[i]`: node `i`'s).
async fn nodes(urls: [&str; 3]) -> Vec<Hub> {
    let mut hubs = Vec::new();
    for url in urls {
        // A cluster may still be settling (JetStream electing its stream's leader): retried.
        let mut tries = 0;
        let hub = loop {
            match Hub::connect(url, HubConfig::default(), HistoryConfig::default()).await {
                Ok(hub) => break hub,
                Err(e) if tries < 20 => {
                    tries += 1;
                    eprintln!("{url}: {e}; again");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("{url}: {e}"),
            }
        };
        hubs.push(hub);
    }
    hubs
}

fn plan(topics: &[&str]) -> Plan {
    Plan {
        topics: topics.iter().map(|t| Topic::new(t).unwrap()).collect(),
        publications: 120,
        pause: Duration::from_millis(5),
        fault_at: 40,
        after: 40,
        quiet: Duration::from_secs(6),
    }
}

/// Runs the plan within 120 s and prints what happened.
async fn traffic(what: &str, hubs: &[Hub], plan: &Plan, fault: impl AsyncFnOnce()) -> Outcome {
    let outcome = timeout(Duration::from_secs(120), run(hubs, plan, fault))
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 120 s"));
    eprintln!("{what}: {outcome:?}");
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_primary_killed_and_its_replica_promoted_during_traffic() {
    let mut servers = RedisReplicated::start();
    // The nodes reach the primary at an address that the failover moves to the promoted
    // replica (a virtual IP, a DNS name, a TCP proxy following `role:master`): see the Redis
    // backplane's documentation.
    let address = Proxy::start(servers.primary.port()).await;
    let url = address.url("redis");
    let hubs = nodes([&url, &url, &url]).await;
    let plan = plan(&["replica a", "replica b"]);
    let outcome = traffic("redis failover", &hubs, &plan, async || {
        tokio::task::block_in_place(|| servers.fail_over());
        address.retarget(servers.replica.port());
    })
    .await;
    // The promoted replica is another server: a new epoch on each topic, told to everyone.
    for (t, gaps) in outcome.gaps_by_topic.iter().enumerate() {
        assert!(*gaps >= 6, "topic {t}: {gaps} gaps for 6 subscribers");
    }
}

/// Node 2 reaches the server through a proxy that is cut for 1.5 s during the traffic: the
/// server kept everything, so node 2 recovers it all from history, with no gap.
async fn partition(kind: Kind, scheme: &str) {
    let server = BackplaneServer::start(kind);
    let cut = Proxy::start(server.port()).await;
    let (direct, through) = (server.url(), cut.url(scheme));
    let hubs = nodes([&direct, &direct, &through]).await;
    let plan = plan(&["partition a", "partition b"]);
    let outcome = traffic(&format!("{scheme} partition"), &hubs, &plan, async || {
        cut.cut();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cut.reopen();
    })
    .await;
    assert_eq!(outcome.gaps, 0, "{outcome:?}");
    assert!(outcome.failed > 0, "node 2 could not publish while cut off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_partitioned_from_redis_during_traffic_misses_nothing() {
    partition(Kind::Redis { persistent: false }, "redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_partitioned_from_nats_during_traffic_misses_nothing() {
    partition(Kind::Nats { jetstream: true }, "nats").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_cluster_server_killed_during_traffic() {
    let mut cluster = NatsCluster::start();
    let url = cluster.url();
    let hubs = nodes([&url, &url, &url]).await;
    let plan = Plan {
        // The cluster takes seconds to elect new leaders (its metadata's and the stream's)
        // when the killed server led them; a node whose consumer was there sees it stall,
        // checks after 3 s of quiet and restores it once a leader answers.
        quiet: Duration::from_secs(15),
        ..plan(&["nats cluster a", "nats cluster b"])
    };
    let outcome = traffic("nats cluster", &hubs, &plan, async || {
        cluster.servers[0].kill();
    })
    .await;
    // The stream is replicated on all three (R3): two of three still hold every acknowledged
    // publication, and every node fails over to one of them.
    assert_eq!(outcome.missed_after_a_gap, 0, "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_primary_killed_during_traffic() {
    let mut cluster = RedisCluster::start();
    let url = cluster.url();
    let hubs = nodes([&url, &url, &url]).await;
    // Topics in different slots (and shards, most likely): only the killed primary's lose their
    // epoch.
    let names = ["cluster a", "cluster b", "cluster c", "cluster d"];
    let plan = plan(&names);
    let keys: Vec<String> = plan
        .topics
        .iter()
        .map(|t| format!("sockeye:{{{}}}:meta", t.to_hex()))
        .collect();
    let shards: Vec<usize> = keys.iter().map(|k| cluster.primary_of(k)).collect();
    let outcome = traffic("redis cluster", &hubs, &plan, async || {
        let killed = tokio::task::block_in_place(|| cluster.kill_primary_of(&keys[0]));
        assert_eq!(killed, shards[0]);
    })
    .await;
    for (t, gaps) in outcome.gaps_by_topic.iter().enumerate() {
        if shards[t] == shards[0] {
            // Its promoted replica is another server: a new epoch, told to everyone.
            assert!(
                *gaps >= 6,
                "topic {t} (failed over): {gaps} gaps for 6 subscribers"
            );
        } else {
            assert_eq!(*gaps, 0, "topic {t} (its shard did not fail): {outcome:?}");
        }
    }
}
