//! The engines a chaos run covers, and what their own faults do to them: which servers run,
//! where the nodes connect (through one proxy per node and server, so that a node can be
//! blackholed or partitioned, or straight to the servers where the engine hands out addresses
//! of its own: Redis Cluster), which faults of `nemesis.rs` they suffer, and the heal.
//!
//! Every call here blocks (it starts, kills and asks servers): the runner makes them on a
//! blocking thread.
#![allow(dead_code)]

use std::time::Duration;

use super::nemesis::{COMMON, Fault, Menu};
use crate::support::clusters::{NatsCluster, RedisCluster, redis_cli, wait_until};
use crate::support::servers::{BackplaneServer, Kind};

/// An engine, as `scripts/chaos.sh` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    /// One redis-server without persistence: a kill loses everything (a new epoch).
    Redis,
    /// One redis-server saving snapshots when the nemesis says (`SAVE`): a kill restarts it
    /// from the last one, older than what was acknowledged.
    RedisRdb,
    /// One redis-server with an append-only file (`appendfsync always`): a kill loses nothing,
    /// unless the nemesis cuts the file's tail.
    RedisAof,
    /// A primary and its replica (asynchronous replication, no persistence), the nodes'
    /// address following the primary; failovers lose what the replica had not received.
    RedisReplicated,
    /// A Redis Cluster of 3 primaries with a replica each: failovers, hung primaries, slot
    /// migrations with data.
    RedisCluster,
    /// One nats-server without JetStream: no history, every loss a gap.
    NatsCore,
    /// One nats-server with JetStream (file store).
    NatsJetStream,
    /// Three nats-servers in a cluster, the stream with three copies: servers killed.
    NatsCluster,
}

impl Engine {
    pub(crate) const ALL: [Engine; 8] = [
        Engine::Redis,
        Engine::RedisRdb,
        Engine::RedisAof,
        Engine::RedisReplicated,
        Engine::RedisCluster,
        Engine::NatsCore,
        Engine::NatsJetStream,
        Engine::NatsCluster,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Engine::Redis => "redis",
            Engine::RedisRdb => "redis-rdb",
            Engine::RedisAof => "redis-aof",
            Engine::RedisReplicated => "redis-replicated",
            Engine::RedisCluster => "redis-cluster",
            Engine::NatsCore => "nats",
            Engine::NatsJetStream => "nats-jetstream",
            Engine::NatsCluster => "nats-cluster",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Whether it may lose publications it acknowledged and give their offsets to new ones with
    /// nothing Sockeye can see: a NATS cluster killed whole at once (its servers write their
    /// quorum's last entries to disk later; no server life is written in a cluster). The
    /// checker's `lost_by_engine` sorts out what the history proves it lost; the README's
    /// compound-fault table says what a user gets then.
    pub(crate) fn loses_acknowledged_tail_unseen(self) -> bool {
        matches!(self, Engine::NatsCluster)
    }

    /// The faults it suffers.
    pub(crate) fn menu(self) -> Menu {
        match self {
            Engine::Redis | Engine::NatsCore | Engine::NatsJetStream => COMMON,
            Engine::RedisRdb => &[
                |_| Fault::EngineDown,
                |_| Fault::Snapshot,
                |_| Fault::Snapshot,
                Fault::SlowConsumer,
                Fault::NodeCrash,
                Fault::Blackhole,
                Fault::Partition,
                Fault::Reconnect,
            ],
            Engine::RedisAof => &[
                |_| Fault::EngineDown,
                |_| Fault::TailLost,
                Fault::SlowConsumer,
                Fault::NodeCrash,
                Fault::Blackhole,
                Fault::Partition,
                Fault::Reconnect,
            ],
            Engine::RedisReplicated => &[
                |_| Fault::EngineDown,
                Fault::Failover,
                Fault::Failover,
                Fault::SlowConsumer,
                Fault::NodeCrash,
                Fault::Blackhole,
                Fault::Partition,
                Fault::Reconnect,
            ],
            // The nodes connect to the servers the cluster names: no proxy to blackhole.
            Engine::RedisCluster => &[
                Fault::Failover,
                Fault::PrimaryHang,
                Fault::SlotMigration,
                Fault::SlotMigration,
                Fault::SlowConsumer,
                Fault::NodeCrash,
                Fault::Reconnect,
            ],
            Engine::NatsCluster => &[
                |_| Fault::EngineDown,
                Fault::ServerDown,
                Fault::ServerDown,
                Fault::SlowConsumer,
                Fault::NodeCrash,
                Fault::Blackhole,
                Fault::Partition,
                Fault::Reconnect,
            ],
        }
    }

    /// How many publications a [`Fault::SlowConsumer`] burst sends: past what the client holds
    /// for a stalled hub (NATS core: 65,536 per subscription and the event queues; Redis: the
    /// event queues, 4,096 each).
    pub(crate) fn burst(self) -> usize {
        match self {
            Engine::NatsCore => 75_000,
            _ => 12_000,
        }
    }

    pub(crate) fn scheme(self) -> &'static str {
        match self {
            Engine::NatsCore | Engine::NatsJetStream | Engine::NatsCluster => "nats",
            _ => "redis",
        }
    }
}

/// The servers of a run.
enum Servers {
    One(BackplaneServer),
    /// Two redis-servers; `primary` indexes the one the nodes' address follows.
    Replicated {
        pair: [BackplaneServer; 2],
        primary: usize,
    },
    RedisCluster(RedisCluster),
    NatsCluster(NatsCluster),
}

/// An engine's servers, and what its faults do to them.
pub(crate) struct Cluster {
    engine: Engine,
    servers: Servers,
    /// The nemesis's doings that did nothing (a failover with the replica down), for the history.
    pub(crate) skipped: Vec<String>,
}

/// What the nodes' proxies are to do after a fault.
pub(crate) enum Route {
    /// Nothing.
    Same,
    /// Forward to this port now (the primary moved).
    To(u16),
}

impl Cluster {
    /// Starts `engine`'s servers and waits until they serve.
    pub(crate) fn start(engine: Engine) -> Cluster {
        let redis = |persistent| Kind::Redis { persistent };
        let servers = match engine {
            Engine::Redis | Engine::RedisRdb => Servers::One(BackplaneServer::start(redis(false))),
            Engine::RedisAof => Servers::One(BackplaneServer::start(redis(true))),
            Engine::NatsCore => Servers::One(BackplaneServer::start(Kind::Nats { jetstream: false })),
            Engine::NatsJetStream => Servers::One(BackplaneServer::start(Kind::Nats { jetstream: true })),
            Engine::RedisReplicated => {
                let primary = BackplaneServer::start(redis(false));
                let replica = BackplaneServer::start(redis(false));
                let pair = [primary, replica];
                follow(&pair[1], &pair[0]);
                Servers::Replicated { pair, primary: 0 }
            }
            Engine::RedisCluster => Servers::RedisCluster(RedisCluster::start()),
            // The servers do not tell the clients each other's addresses: the nodes reach them
            // through their proxies only.
            Engine::NatsCluster => Servers::NatsCluster(NatsCluster::start_with(&["--no_advertise"])),
        };
        Cluster {
            engine,
            servers,
            skipped: Vec::new(),
        }
    }

    /// Its servers' state as they tell it, for a run that could not start (a NATS cluster's
    /// monitors: health, routes, JetStream); their ports for the others.
    pub(crate) fn describe(&self) -> String {
        match &self.servers {
            Servers::NatsCluster(c) => c.report(),
            _ => format!("ports {:?}", self.endpoints()),
        }
    }

    /// The ports a node reaches through proxies of its own (one each); none: it connects to
    /// [`direct_url`](Self::direct_url).
    pub(crate) fn endpoints(&self) -> Vec<u16> {
        match &self.servers {
            Servers::One(s) => vec![s.port()],
            Servers::Replicated { pair, primary } => vec![pair[*primary].port()],
            Servers::RedisCluster(_) => Vec::new(),
            Servers::NatsCluster(c) => c.servers.iter().map(BackplaneServer::port).collect(),
        }
    }

    /// The URL of the nodes that reach the engine without proxies.
    pub(crate) fn direct_url(&self) -> String {
        match &self.servers {
            Servers::RedisCluster(c) => c.url(),
            _ => unreachable!("{:?} is reached through proxies", self.engine),
        }
    }

    /// Starts (`start`) or ends an engine's fault (not a node's or a client's); where the
    /// nodes' proxies are to forward now. `topic_keys`: each topic's Redis key (its slot).
    pub(crate) fn apply(&mut self, fault: Fault, start: bool, topic_keys: &[String]) -> Route {
        let key = |n: usize| topic_keys[n % topic_keys.len()].clone();
        match (&mut self.servers, fault) {
            (Servers::One(s), Fault::EngineDown) => {
                if start {
                    s.kill();
                } else if !s.is_running() {
                    s.restart();
                }
            }
            (Servers::One(s), Fault::TailLost) => {
                if start {
                    s.kill();
                } else if !s.is_running() {
                    cut_append_only_tail(s);
                    s.restart();
                }
            }
            (Servers::One(s), Fault::Snapshot) if start && s.is_running() => {
                let reply = redis_cli(s.port(), &["SAVE"]);
                if !reply.contains("OK") {
                    self.skipped.push(format!("SAVE: {reply:?}"));
                }
            }
            (Servers::Replicated { pair, primary }, Fault::EngineDown) => {
                if start {
                    pair[*primary].kill();
                } else if !pair[*primary].is_running() {
                    // Empty (no persistence): the replica, following it, empties too.
                    pair[*primary].restart();
                    promote(&pair[*primary]);
                }
            }
            (Servers::Replicated { pair, primary }, Fault::Failover(_)) => {
                let other = 1 - *primary;
                if start {
                    if !pair[other].is_running() {
                        self.skipped.push("failover: the replica is down".to_owned());
                        return Route::Same;
                    }
                    pair[*primary].kill();
                    promote(&pair[other]);
                    *primary = other;
                    return Route::To(pair[other].port());
                } else if !pair[other].is_running() {
                    pair[other].restart();
                    follow(&pair[other], &pair[*primary]);
                }
            }
            (Servers::RedisCluster(c), Fault::Failover(n)) => {
                if start {
                    if !c.whole() {
                        self.skipped.push("failover: a server is down or hung".to_owned());
                        return Route::Same;
                    }
                    let key = key(n);
                    Cluster::tried(&mut self.skipped, "failover", || c.kill_primary_of(&key));
                } else {
                    c.restart_dead();
                }
            }
            (Servers::RedisCluster(c), Fault::PrimaryHang(n)) => {
                if start {
                    if !c.whole() {
                        self.skipped.push("hang: a server is down or hung".to_owned());
                        return Route::Same;
                    }
                    let key = key(n);
                    Cluster::tried(&mut self.skipped, "hang", || c.hang_primary_of(&key));
                } else {
                    c.unhang();
                }
            }
            (Servers::RedisCluster(c), Fault::SlotMigration(n)) if start => {
                if !c.whole() {
                    self.skipped
                        .push("migration: a server is down or hung".to_owned());
                    return Route::Same;
                }
                let key = key(n);
                Cluster::tried(&mut self.skipped, "migration", || {
                    c.migrate_slot_of(&key, c.other_primary(c.primary_of(&key)))
                });
            }
            (Servers::NatsCluster(c), Fault::EngineDown) => {
                for s in &mut c.servers {
                    if start {
                        s.kill();
                    } else if !s.is_running() {
                        s.restart();
                    }
                }
            }
            (Servers::NatsCluster(c), Fault::ServerDown(n)) => {
                let s = &mut c.servers[n % 3];
                if start {
                    s.kill();
                } else if !s.is_running() {
                    s.restart();
                }
            }
            _ => {}
        }
        Route::Same
    }

    /// Runs a Redis Cluster fault that waits on the cluster (a replica taking over, a slot seen
    /// moved everywhere); one that does not happen in time (the shard's replica not yet in
    /// sync after an earlier fault, say) is recorded as skipped, not a failed run: the heal
    /// makes the cluster whole again.
    fn tried<T>(skipped: &mut Vec<String>, what: &str, fault: impl FnOnce() -> T) {
        if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(fault)) {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            skipped.push(format!("{what}: {why}"));
        }
    }

    /// Ends every engine fault: every server running, replicas following, a cluster whole
    /// and healthy. Where the proxies are to forward.
    pub(crate) fn heal(&mut self, topic_keys: &[String]) -> Route {
        match &mut self.servers {
            Servers::One(s) => {
                if !s.is_running() {
                    s.restart();
                }
            }
            Servers::Replicated { pair, primary } => {
                let other = 1 - *primary;
                if !pair[*primary].is_running() {
                    pair[*primary].restart();
                    promote(&pair[*primary]);
                }
                if !pair[other].is_running() {
                    pair[other].restart();
                }
                follow(&pair[other], &pair[*primary]);
                return Route::To(pair[*primary].port());
            }
            Servers::RedisCluster(c) => {
                c.unhang();
                c.restart_dead();
                c.wait_healthy();
                // Every topic's slot served (a failover may still be under way).
                for k in topic_keys {
                    c.primary_of(k);
                }
            }
            Servers::NatsCluster(c) => {
                for s in &mut c.servers {
                    if !s.is_running() {
                        s.restart();
                    }
                }
                c.wait_ready();
            }
        }
        Route::Same
    }
}

/// `replica` follows `primary` (`REPLICAOF`), and has synced.
fn follow(replica: &BackplaneServer, primary: &BackplaneServer) {
    let port = primary.port().to_string();
    let reply = redis_cli(replica.port(), &["REPLICAOF", "127.0.0.1", &port]);
    assert!(reply.contains("OK"), "REPLICAOF: {reply:?}");
    wait_until("the replica syncs", Duration::from_secs(30), || {
        redis_cli(replica.port(), &["INFO", "replication"]).contains("master_link_status:up")
    });
}

/// `server` follows nobody (`REPLICAOF NO ONE`): a primary.
fn promote(server: &BackplaneServer) {
    let reply = redis_cli(server.port(), &["REPLICAOF", "NO", "ONE"]);
    assert!(reply.contains("OK"), "REPLICAOF NO ONE: {reply:?}");
}

/// Cuts the end of a stopped Redis's append-only file (the last of its increment files, Redis
/// 7's layout): a quarter of what it holds, up to 4 KiB, mid-command as a crash leaves it
/// (Redis loads a truncated tail: `aof-load-truncated yes`, its default).
fn cut_append_only_tail(server: &BackplaneServer) {
    let dir = server.dir().join("appendonlydir");
    let Some(last) = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
    else {
        return;
    };
    let len = std::fs::metadata(&last).map_or(0, |m| m.len());
    let cut = (len / 4).min(4096);
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    file.set_len(len - cut).unwrap();
}
