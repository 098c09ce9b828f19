//! Issue 39's fault-injection checker, in the manner of Jepsen: a nemesis, clients that record,
//! a checker that proves. Files (`tests/chaos/`): `history.rs` (what is recorded), `checker.rs`
//! (the pure checker and its unit tests on hand-made histories), `nemesis.rs` (a seeded
//! schedule of overlapping faults), `runner.rs` (three hubs over one engine, subscribers and
//! publishers that record, the nemesis carried out, the heal and the check), `tail.rs` (what a
//! NATS cluster killed whole kept of what it had acknowledged, read back after its restart).
//!
//! Engines (`chaos/engines.rs`): Redis single without persistence (`redis`), with snapshots
//! (`redis-rdb`: `SAVE` at random, a kill restarts from the last one, older than what was
//! acknowledged), with an append-only file (`redis-aof`: a kill loses nothing, unless its tail
//! is cut), a primary and its replica (`redis-replicated`: failovers by hand, the nodes'
//! address following the primary), Redis Cluster 3 + 3 (`redis-cluster`: failovers, hung
//! primaries, slots migrated with their keys), NATS core (`nats`), NATS JetStream single
//! (`nats-jetstream`), a NATS cluster of three with three copies (`nats-cluster`: servers
//! killed). Faults on every engine: a node's hub crashed and started again (its clients resume
//! elsewhere), a subscriber's connection dropped (it resumes at once, while the engine is down
//! if it is), a node's hub stalled while a burst is published past what its backplane's client
//! holds for it (Redis: the event queues, then a reported miss; NATS core: the client's 65,536
//! per subscription, then a slow-consumer drop); on all but Redis Cluster, the engine killed
//! with SIGKILL and restarted, a blackhole between a node and the engine, a node partitioned
//! from the engine. The fixed seeds
//! below run in the test command; `bash scripts/chaos.sh ENGINE MINUTES [SEED]` runs random
//! ones for longer.
//!
//! Fixed seeds (the test command): 1 and 2 on every engine, 6 s of faults each (10 to 25 s a
//! run, with the engine's start). A seed fixes the schedule, not the timing: the threads and servers race
//! as they would, so a seed may pass once and fail another time; a failure prints the seed and,
//! per violation, the shortest prefix of the history that shows it (its records on that
//! subscriber, topic and publisher, and the nemesis).
//!
//! The web variant (`chaos/web.rs`, `chaos/web_clients.mjs`, `chaos/process.rs`): the same, two
//! nodes also serving the web face (`sockeye_pubsub::web::Web`, as `ws pubsub_server` configures
//! it) and the third being `ws pubsub_server` itself, a process killed with `kill -9` at its
//! crashes (`CHAOS_WS`, or the target directory's `ws`), each on a port it keeps across its
//! crashes; subscribers in Node besides the Rust ones (the project's
//! JavaScript client failing over on its own, and the `ws` package's raw socket speaking the
//! JSON protocol by hand), publishers on the HTTP API and on the socket besides `Hub::publish`.
//! Fixed seeds: 1 and 2 on `redis` and on `nats-jetstream` (11 to 14 s a run; the two engines run side by side).
//! Needs `node` and interop/node's `ws` (`bash interop/install-node.sh`; the test command runs
//! it). Long runs: `scripts/chaos.sh web-ENGINE MINUTES [SEED]` (or `CHAOS_WEB=1`).
//!
//! Long runs: `chaos_long` (ignored by the test command) reads `CHAOS_ENGINE` (an engine's
//! name above), `CHAOS_MINUTES` (runs random seeds until then; `0`: one run) and
//! `CHAOS_SEED` (that seed only, again and again), the web variant with `web-` before the
//! engine's name or `CHAOS_WEB=1`; `scripts/chaos.sh` sets them. `CHAOS_LOG=1`
//! prints the nodes' log (info and up), `CHAOS_HISTORY=FILE` keeps a failing run's history,
//! `CHAOS_SPAN=SECONDS` sets the faults' span (10; a fixed seed replays with its test's, 6).
#![cfg(all(feature = "redis", feature = "nats"))]
#![allow(clippy::unwrap_used)]

mod support;

mod chaos {
    pub(crate) mod checker;
    pub(crate) mod engines;
    pub(crate) mod history;
    pub(crate) mod nemesis;
    #[cfg(feature = "web")]
    pub(crate) mod process;
    pub(crate) mod runner;
    pub(crate) mod tail;
    #[cfg(feature = "web")]
    pub(crate) mod web;
}

use std::time::{Duration, Instant};

use chaos::engines::Engine;
use chaos::runner::{Plan, run};

/// Runs each plan; panics with every failing run's report. No violation is tolerated: each
/// kind the checker finds fails the test command (`scripts/chaos.sh` too).
///
/// Found by the fixed seeds and fixed (each fails them again if it comes back): on NATS
/// JetStream (one server), `StaleGap`, tolerated here until this fix (a fresh CI's seed 1, once
/// in two runs; `scripts/chaos.sh nats-jetstream 30`, seed 358805; one web seed-1 run in 16
/// here): a subscriber already in the server's current life failed over to a node still behind
/// in the previous one after several restarts within seconds, and resumed through history
/// (`Recovered`: no epoch left); the node's catch-up gap in its old life ended the
/// subscriber's seam, and its next gap, into the current life behind the subscriber, reached it
/// (gaps told again, never a publication missed; the queue now keeps the node's epoch at the
/// join among the epochs a resumed subscription is past: `queue.rs`, `Resumed`; 0 in 51 runs
/// after).
///
/// Fixed, and failing the fixed seeds again if they come back: on NATS JetStream (one server
/// and the R3 cluster, seed 2), `Lost` and `RecoveredSkipped`: a burst of 12,000 skipped with
/// no gap by subscribers resumed before it. A topic's consumer skips what the stream no longer
/// holds, and the topic's limit had dropped the burst's start (and the last publication
/// delivered) while the node was cut off or its hub stalled: the consumer went on at the
/// oldest kept, silently, and the hub repaired from past the hole (`backplane/nats/follow.rs`
/// now checks the last delivery still kept when a drop was possible, and reports `Missed`
/// first). On NATS core (seed 1, once), `Lost`: 212 of a 75,000 burst in no gap: the client
/// dropped what its full buffer could not take, and the gap reported for it reached the
/// subscriber ahead of the publications received before the loss (the node now drops at its
/// event queue, and reports `Missed` in the topic's order). `StaleGap` on one server
/// (`Queue::push_catch_up`); `EpochWentBack` (a node that learnt of a new epoch after a
/// subscriber had resumed into it); on Redis Cluster, `StaleGap` and `Duplicate` (seed 1: the
/// client held a moving channel's subscription on two connections for a moment, every
/// publication came twice, and the hub took the repeats for a rollback; the backplane now
/// forwards a position once, `backplane/redis_cluster.rs`).
///
/// Found by random schedules (`scripts/chaos.sh`) and fixed: `redis-replicated`, `Reordered`
/// and `Duplicate` (seeds 308949, 759318, 15725, 687863): after a failover a repair's or a
/// resume's gap into nothing ended a resumed subscriber's seam, and the old epoch still on its
/// way came again (`queue.rs`, `Seam`); `nats`, `Lost` at the start of a run (seed 1): a core
/// subscription was called live once written, before the server had it (a round trip now);
/// `nats-jetstream`, `Lost` (seed 16680 and others): a history read from the start returned a
/// hole where the limits dropped publications while it went on (it now fails instead);
/// `redis-cluster`, `Lost` (seed 511958, 89 publications): a node with no seam in the epoch a
/// failover began (its repair had told a gap into nothing) and a subscription deaf to it
/// delivered the first publication that reached it, 92, with nothing before it (a first
/// publication past offset 1 in such an epoch is now a jump, repaired: `hub/fan_out.rs`).
///
/// Found by the web variant and fixed: `bash scripts/chaos.sh web-redis 0 723720` (on the
/// fault menu before the slow-consumer burst joined it, which changed every seed's schedule),
/// `Lost` and `NotResumed` for the JavaScript client only: dropped while the engine was down,
/// it tried the next node, which refused the upgrade (503, its backplane down); Node 20's
/// WebSocket reported that with an error and never a close event, and the client waited for
/// the close for good, silent. It now ends an attempt at an error before the socket opens, or
/// at `connectTimeoutMs`. `bash scripts/chaos.sh web-redis-aof 0 416366`, `NotResumed` (270
/// publications after the heal): a web client that had resumed past its node kept its seam
/// behind the node's gap into nothing after the engine restarted, and the seam dropped every
/// publication of the next epoch (`queue.rs`, `Seam::behind_nothing`).
///
/// Not tolerated by kind, only when proven the engine's: on the NATS cluster, publications the
/// cluster lost after acknowledging them when killed whole (`checker::lost_by_engine`: the
/// runner read the last acknowledged publication back after the restart and found it gone, and
/// the history shows offsets given again; `Engine::loses_acknowledged_tail_unseen`): printed,
/// and counted in the summary's `lost_by_engine`. Open: a fresh CI's seed 1 (once in three
/// runs; before that read-back existed), 3 `Lost`, 2 `RecoveredSkipped` and a `PositionReused`
/// after the cluster was killed whole while one server, down already, was started alone first;
/// not reproduced by direct trials, which lost nothing acknowledged (README, compound faults).
///
/// Found by `scripts/chaos.sh web-redis-cluster 30` and fixed (2026-12-07, once in 43 runs; one
/// replay passed): seed 531182, `EpochWentBack` (15) and `StaleGap` (593), the JavaScript
/// client, the only subscriber then on node 0, while the primary of both topics hung and its
/// replica took over. The node entered the new epochs through a gap into nothing, which left
/// the old epoch remembered nowhere; the hung primary, let go, ran the queued publishes in the
/// old epoch (publishes their publishers saw fail) while the new primary hung in turn, so the
/// node's repair of the "jump" went unanswered and it delivered them; its next repair, from
/// that dead position, told a gap resuming from 0 of the current epoch and gave it again. A
/// node now remembers every epoch its delivery moves out of (`hub/fan_out.rs`, `fan`). Found
/// the same day and fixed in the runner, not Sockeye: seed 871377, `Lost` (6): three failovers
/// given up after 20 s each made the run outlast the clients' deadline, which stopped them with
/// publications in flight (the deadline now covers the schedule, and a run that outlasts it
/// fails as such, unchecked).
async fn plans(plans: impl Iterator<Item = Plan>) {
    let mut failures = Vec::new();
    for plan in plans {
        match run(&plan).await {
            Ok(summary) => eprintln!("chaos {} seed {}: {summary:?}", plan.name(), plan.seed),
            Err(report) => failures.push(report),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs `seeds` on `engine`, each with `span` of faults; panics with every failing seed's report.
async fn seeds(engine: Engine, seeds: &[u64], span: Duration) {
    plans(seeds.iter().map(|&seed| Plan::new(engine, seed, span))).await;
}

/// [`seeds`] on the web variant.
#[cfg(feature = "web")]
async fn web_seeds(engine: Engine, seeds: &[u64], span: Duration) {
    plans(seeds.iter().map(|&seed| Plan::web(engine, seed, span))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_redis_fixed_seeds() {
    seeds(Engine::Redis, &[1, 2], Duration::from_secs(6)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_redis_rdb_fixed_seeds() {
    seeds(Engine::RedisRdb, &[1, 2], Duration::from_secs(6)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_redis_aof_fixed_seeds() {
    seeds(Engine::RedisAof, &[1, 2], Duration::from_secs(6)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_redis_replicated_fixed_seeds() {
    seeds(Engine::RedisReplicated, &[1, 2], Duration::from_secs(6)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_redis_cluster_fixed_seeds() {
    seeds(Engine::RedisCluster, &[1, 2], Duration::from_secs(6)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_nats_core_fixed_seeds() {
    seeds(Engine::NatsCore, &[1, 2], Duration::from_secs(6)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_nats_jetstream_fixed_seeds() {
    seeds(Engine::NatsJetStream, &[1, 2], Duration::from_secs(6)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_nats_cluster_fixed_seeds() {
    seeds(Engine::NatsCluster, &[1, 2], Duration::from_secs(6)).await;
}

#[cfg(feature = "web")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_web_redis_fixed_seeds() {
    web_seeds(Engine::Redis, &[1, 2], Duration::from_secs(6)).await;
}

#[cfg(feature = "web")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_web_nats_jetstream_fixed_seeds() {
    web_seeds(Engine::NatsJetStream, &[1, 2], Duration::from_secs(6)).await;
}

/// `scripts/chaos.sh ENGINE MINUTES [SEED]`: random seeds (or one) on one engine for that long;
/// fails with the report of every failing seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long schedules: run by scripts/chaos.sh"]
async fn chaos_long() {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if let Some(level) = var("CHAOS_LOG") {
        // The nodes' own account (warnings of gaps, rollbacks, outages) on stderr, to read
        // beside a history; `CHAOS_LOG=debug`: sockeye's debug lines too (each repair's
        // outcome, each check of a JetStream consumer's skip).
        use tracing_subscriber::prelude::*;
        let sockeye = if level == "debug" {
            tracing::Level::DEBUG
        } else {
            tracing::Level::INFO
        };
        let filter = tracing_subscriber::filter::Targets::new()
            .with_default(tracing::Level::INFO)
            .with_target("sockeye_pubsub", sockeye);
        let _ = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .with(filter)
            .try_init();
    }
    let name = var("CHAOS_ENGINE").unwrap_or_else(|| "redis".to_owned());
    // `web-ENGINE`: the web variant.
    let web = name.starts_with("web-") || var("CHAOS_WEB").is_some_and(|v| v != "0");
    let engine = name.strip_prefix("web-").unwrap_or(&name);
    let engine = Engine::parse(engine).unwrap_or_else(|| {
        let names: Vec<&str> = Engine::ALL.iter().map(|e| e.name()).collect();
        panic!(
            "CHAOS_ENGINE={name}: one of {}, each with web- before it or not",
            names.join(", ")
        )
    });
    let minutes: f64 = var("CHAOS_MINUTES").map_or(1.0, |m| m.parse().expect("CHAOS_MINUTES: a number"));
    let fixed: Option<u64> = var("CHAOS_SEED").map(|s| s.parse().expect("CHAOS_SEED: a number"));
    let until = Instant::now() + Duration::from_secs_f64(minutes.max(0.0) * 60.0);
    let mut next = fixed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let (mut runs, mut failures) = (0, Vec::new());
    loop {
        let seed = next;
        // `CHAOS_SPAN`: seconds of faults per run (10; the fixed seeds' are 6, to replay one).
        let span = Duration::from_secs_f64(
            var("CHAOS_SPAN").map_or(10.0, |s| s.parse().expect("CHAOS_SPAN: seconds")),
        );
        let plan = if web {
            Plan::web(engine, seed, span)
        } else {
            Plan::new(engine, seed, span)
        };
        match run(&plan).await {
            Ok(summary) => eprintln!("chaos {} seed {seed}: ok, {summary:?}", plan.name()),
            Err(report) => {
                eprintln!("{report}");
                failures.push(seed);
            }
        }
        runs += 1;
        if fixed.is_none() {
            next = chaos::nemesis::Rng::new(seed).next() % 1_000_000;
        }
        if Instant::now() >= until {
            break;
        }
    }
    assert!(
        failures.is_empty(),
        "chaos {name}: {} of {runs} runs failed, seeds {failures:?} (reports above)",
        failures.len()
    );
}
