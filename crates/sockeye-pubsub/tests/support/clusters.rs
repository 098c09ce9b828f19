//! Several real servers working as one, for the failure tests: a Redis primary with a replica, a
//! Redis Cluster (3 primaries, 3 replicas) and a NATS cluster (3 servers with routes and
//! JetStream). Every server is a [`BackplaneServer`]: its own directory, started on a free
//! loopback port, killed by its own PID (on drop too), never by name.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use super::servers::{BackplaneServer, Kind, binary};

/// A loopback port free now (another process may take it before it is used: the servers' own
/// start retries cover the client port; the others are picked from distinct listeners held
/// together, so at least they do not collide with each other).
pub(crate) fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Waits until `ready` holds, checking every 50 ms; panics with `what` after `within`.
pub(crate) fn wait_until(what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
    wait_for(what, within, || if ready() { Ok(()) } else { Err(String::new()) });
}

/// Whether `ready` holds within `within`, checked every 50 ms.
pub(crate) fn holds_within(within: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`wait_until`] for a check that says what is not ready yet: the last answer is in the panic.
pub(crate) fn wait_for(what: &str, within: Duration, mut ready: impl FnMut() -> Result<(), String>) {
    let mut why = String::new();
    let held = holds_within(within, || match ready() {
        Ok(()) => true,
        Err(w) => {
            why = w;
            false
        }
    });
    assert!(held, "not within {within:?}: {what}{why}");
}

/// `redis-cli -p PORT ARGS…`'s output (empty when the server does not answer).
pub(crate) fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new(binary("redis-cli"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Redis primary and its replica (`--replicaof`), in sync.
pub(crate) struct RedisReplicated {
    pub(crate) primary: BackplaneServer,
    pub(crate) replica: BackplaneServer,
}

impl RedisReplicated {
    pub(crate) fn start() -> RedisReplicated {
        let primary = BackplaneServer::start(Kind::Redis { persistent: false });
        let replica = BackplaneServer::start_with(
            Kind::Redis { persistent: false },
            &["--replicaof", "127.0.0.1", &primary.port().to_string()],
        );
        wait_until("the replica syncs", Duration::from_secs(10), || {
            redis_cli(replica.port(), &["INFO", "replication"]).contains("master_link_status:up")
        });
        RedisReplicated { primary, replica }
    }

    /// The primary dies (SIGKILL) and the replica is promoted (`REPLICAOF NO ONE`), as an
    /// operator or Sentinel would.
    pub(crate) fn fail_over(&mut self) {
        self.primary.kill();
        let reply = redis_cli(self.replica.port(), &["REPLICAOF", "NO", "ONE"]);
        assert!(reply.contains("OK"), "REPLICAOF NO ONE: {reply:?}");
    }
}

/// A Redis Cluster: 3 primaries with a replica each, `cluster-node-timeout` 1000 ms (a
/// primary that stops answering is failed over in a second or two).
pub(crate) struct RedisCluster {
    pub(crate) nodes: Vec<BackplaneServer>,
    /// A node stopped with SIGSTOP (it hangs with its connections open): not asked anything.
    hung: Option<usize>,
}

impl RedisCluster {
    pub(crate) fn start() -> RedisCluster {
        let nodes: Vec<BackplaneServer> = (0..6)
            .map(|_| {
                BackplaneServer::start_with(
                    Kind::Redis { persistent: false },
                    // The bus port is picked with the client port, on each try of the start.
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-node-timeout",
                        "1000",
                        "--cluster-port",
                        "0",
                    ],
                )
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect();
        let out = Command::new(binary("redis-cli"))
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("All 16384 slots covered"),
            "redis-cli --cluster create: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes, hung: None };
        cluster.wait_healthy();
        cluster
    }

    /// `redis+cluster://` with every node.
    pub(crate) fn url(&self) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", addrs.join(","))
    }

    /// `redis+cluster://` with every live node (not a hung one).
    pub(crate) fn live_url(&self) -> String {
        let addrs: Vec<String> = self.live().map(|n| format!("127.0.0.1:{}", n.port())).collect();
        format!("redis+cluster://{}", addrs.join(","))
    }

    /// Every live node sees the cluster as ok, and every replica of a live primary is in sync.
    pub(crate) fn wait_healthy(&self) {
        wait_until("the cluster is ok on every node", Duration::from_secs(20), || {
            self.live().all(|n| {
                redis_cli(n.port(), &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                    && !redis_cli(n.port(), &["CLUSTER", "NODES"]).lines().any(|l| {
                        // A node still being told about, or a replica not yet in sync.
                        let flags = l.split(' ').nth(2).unwrap_or("");
                        !flags.contains("fail") && (flags.contains("handshake") || flags.contains("noaddr"))
                    })
                    && {
                        let info = redis_cli(n.port(), &["INFO", "replication"]);
                        !info.contains("role:slave") || info.contains("master_link_status:up")
                    }
            })
        });
    }

    fn live(&self) -> impl Iterator<Item = &BackplaneServer> {
        let hung = self.hung.map(|i| self.nodes[i].port());
        self.nodes
            .iter()
            .filter(move |n| n.is_running() && Some(n.port()) != hung)
    }

    /// The index in `nodes` of the primary serving `key`'s slot.
    pub(crate) fn primary_of(&self, key: &str) -> usize {
        self.serving(key)
            .unwrap_or_else(|nodes| panic!("no primary serves the slot of {key:?}:\n{nodes}"))
    }

    /// The index in `nodes` of the primary serving `key`'s slot, as a live node sees it; the
    /// cluster's node list if none (it is failing over).
    fn serving(&self, key: &str) -> Result<usize, String> {
        let any = self.live().next().unwrap().port();
        let slot: u16 = redis_cli(any, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .unwrap();
        let nodes = redis_cli(any, &["CLUSTER", "NODES"]);
        let Some(line) = owner_in(&nodes, slot) else {
            return Err(nodes);
        };
        let port: u16 = line
            .split(' ')
            .nth(1)
            .unwrap()
            .split(['@', ','])
            .next()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        Ok(self.nodes.iter().position(|n| n.port() == port).unwrap())
    }

    /// Kills (SIGKILL) the primary serving `key` and waits until its replica has taken over.
    pub(crate) fn kill_primary_of(&mut self, key: &str) -> usize {
        let victim = self.primary_of(key);
        self.nodes[victim].kill();
        self.wait_taken_over(key, victim);
        victim
    }

    /// Stops (SIGSTOP) the primary serving `key`, as a host that died without closing its
    /// connections, and waits until its replica has taken over. Killed when the cluster is
    /// dropped.
    pub(crate) fn hang_primary_of(&mut self, key: &str) -> usize {
        let victim = self.primary_of(key);
        self.nodes[victim].signal("STOP");
        self.hung = Some(victim);
        self.wait_taken_over(key, victim);
        victim
    }

    fn wait_taken_over(&self, key: &str, victim: usize) {
        wait_until("a replica takes over", Duration::from_secs(20), || {
            self.live()
                .all(|n| redis_cli(n.port(), &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
                && self.serving(key).is_ok_and(|p| p != victim)
        });
    }

    /// Forgets every live node's command counts (`CONFIG RESETSTAT`).
    pub(crate) fn reset_stats(&self) {
        for n in self.live() {
            assert!(redis_cli(n.port(), &["CONFIG", "RESETSTAT"]).contains("OK"));
        }
    }

    /// Scripts (`EVAL`, `EVALSHA`) each node received since [`reset_stats`](Self::reset_stats)
    /// (0 for a dead one), from `INFO commandstats`: run (`calls`) or refused before running
    /// (`rejected_calls`: a MOVED redirection, say).
    pub(crate) fn scripts_received(&self) -> Vec<u64> {
        let received = |port| {
            redis_cli(port, &["INFO", "commandstats"])
                .lines()
                .filter(|l| l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:"))
                .flat_map(|l| l.split([':', ',']))
                .filter_map(|field| match field.split_once('=') {
                    Some(("calls" | "rejected_calls", n)) => n.parse::<u64>().ok(),
                    _ => None,
                })
                .sum()
        };
        self.nodes
            .iter()
            .map(|n| if n.is_running() { received(n.port()) } else { 0 })
            .collect()
    }

    /// Moves the slot of `key` (which must hold no key) from its primary to node `to`
    /// (`CLUSTER SETSLOT … NODE`, on `to` first, then on every other primary, as a resharding
    /// does), so that a client that knew the old owner meets a MOVED redirection.
    pub(crate) fn move_empty_slot_of(&self, key: &str, to: usize) {
        let from = self.primary_of(key);
        let port = self.nodes[from].port();
        let slot = redis_cli(port, &["CLUSTER", "KEYSLOT", key]).trim().to_owned();
        assert_eq!(
            redis_cli(port, &["CLUSTER", "COUNTKEYSINSLOT", &slot]).trim(),
            "0"
        );
        self.assign_slot(&slot, from, to);
    }

    /// Migrates the slot of `key`, with every key it holds, from its primary to node `to`, as a
    /// resharding does (`redis-cli --cluster reshard`): `CLUSTER SETSLOT … IMPORTING` on `to`,
    /// `MIGRATING` on the owner, `MIGRATE … KEYS` until the owner holds none of the slot's keys
    /// (each key moved whole, then deleted on the owner), then the slot assigned to `to`
    /// everywhere. Returns how many keys moved.
    pub(crate) fn migrate_slot_of(&self, key: &str, to: usize) -> usize {
        let from = self.primary_of(key);
        let port = self.nodes[from].port();
        let slot = redis_cli(port, &["CLUSTER", "KEYSLOT", key]).trim().to_owned();
        let id = |i: usize| {
            redis_cli(self.nodes[i].port(), &["CLUSTER", "MYID"])
                .trim()
                .to_owned()
        };
        let importing = redis_cli(
            self.nodes[to].port(),
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id(from)],
        );
        let migrating = redis_cli(port, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id(to)]);
        assert!(
            importing.contains("OK") && migrating.contains("OK"),
            "{importing:?} {migrating:?}"
        );
        let to_port = self.nodes[to].port().to_string();
        let mut moved = 0;
        loop {
            let keys = redis_cli(port, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
            let keys: Vec<&str> = keys.lines().map(str::trim).filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            args.extend(&keys);
            let reply = redis_cli(port, &args);
            assert!(reply.contains("OK"), "MIGRATE {keys:?}: {reply:?}");
            moved += keys.len();
        }
        self.assign_slot(&slot, from, to);
        moved
    }

    /// Assigns `slot` to node `to` (`CLUSTER SETSLOT … NODE`, on `to` first, then on `from`,
    /// then on every other primary, as a resharding does) and waits until every node sees it.
    fn assign_slot(&self, slot: &str, from: usize, to: usize) {
        let id = redis_cli(self.nodes[to].port(), &["CLUSTER", "MYID"])
            .trim()
            .to_owned();
        // The new owner's claim must win over the old one's on the nodes not told directly (the
        // replicas): a configuration epoch above every other, taken *before* it claims the slot.
        // Bumped after, a ping from the old owner (its epoch then higher) could take the slot
        // back between the two, and nothing would move it again (seen: 1 run in 6 under load).
        let reply = redis_cli(self.nodes[to].port(), &["CLUSTER", "BUMPEPOCH"]);
        assert!(
            reply.contains("BUMPED") || reply.contains("STILL"),
            "CLUSTER BUMPEPOCH: {reply:?}"
        );
        let mut order = vec![to, from];
        order.extend((0..self.nodes.len()).filter(|i| *i != to && *i != from));
        for i in order {
            let info = redis_cli(self.nodes[i].port(), &["INFO", "replication"]);
            if info.contains("role:master") {
                let reply = redis_cli(self.nodes[i].port(), &["CLUSTER", "SETSLOT", slot, "NODE", &id]);
                assert!(reply.contains("OK"), "CLUSTER SETSLOT on node {i}: {reply:?}");
            }
        }
        let what = format!("every node sees slot {slot} moved to {id}; these do not:");
        wait_for(&what, Duration::from_secs(30), || {
            let behind: Vec<String> = self
                .live()
                .filter_map(|n| {
                    let nodes = redis_cli(n.port(), &["CLUSTER", "NODES"]);
                    let owner = owner_in(&nodes, slot.parse().unwrap());
                    (!owner.is_some_and(|l| l.starts_with(&id)))
                        .then(|| format!("\nnode on {}:\n{nodes}", n.port()))
                })
                .collect();
            if behind.is_empty() {
                Ok(())
            } else {
                Err(behind.concat())
            }
        });
    }

    /// Starts migrating the slot of `key` from its primary to node `to` (`CLUSTER SETSLOT …
    /// MIGRATING` on the owner, `IMPORTING` on `to`): the owner answers ASK for a command whose
    /// keys it does not hold.
    pub(crate) fn start_migrating_slot_of(&self, key: &str, to: usize) {
        let from = self.primary_of(key);
        let slot = redis_cli(self.nodes[from].port(), &["CLUSTER", "KEYSLOT", key])
            .trim()
            .to_owned();
        let id = |i: usize| {
            redis_cli(self.nodes[i].port(), &["CLUSTER", "MYID"])
                .trim()
                .to_owned()
        };
        let importing = redis_cli(
            self.nodes[to].port(),
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id(from)],
        );
        let migrating = redis_cli(
            self.nodes[from].port(),
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id(to)],
        );
        assert!(
            importing.contains("OK") && migrating.contains("OK"),
            "{importing:?} {migrating:?}"
        );
    }

    /// Whether every node runs and none is hung.
    pub(crate) fn whole(&self) -> bool {
        self.hung.is_none() && self.nodes.iter().all(BackplaneServer::is_running)
    }

    /// Starts every killed node again (on its port and directory: it rejoins, a replica if its
    /// shard failed over meanwhile).
    pub(crate) fn restart_dead(&mut self) {
        for n in &mut self.nodes {
            if !n.is_running() {
                n.restart();
            }
        }
    }

    /// Continues the hung node (SIGCONT), if one: it rejoins, a replica once failed over.
    pub(crate) fn unhang(&mut self) {
        if let Some(i) = self.hung.take() {
            self.nodes[i].signal("CONT");
        }
    }

    /// The index of a primary other than node `not`.
    pub(crate) fn other_primary(&self, not: usize) -> usize {
        (0..self.nodes.len())
            .find(|&i| {
                i != not
                    && self.nodes[i].is_running()
                    && redis_cli(self.nodes[i].port(), &["INFO", "replication"]).contains("role:master")
            })
            .unwrap()
    }
}

/// The line of `CLUSTER NODES`' reply (`nodes`) of the live primary serving `slot`.
fn owner_in(nodes: &str, slot: u16) -> Option<&str> {
    nodes.lines().find(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        fields.len() >= 9
            && fields[2].contains("master")
            && !fields[2].contains("fail")
            && fields[8..].iter().any(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
            })
    })
}

/// A NATS cluster: 3 servers with routes to each other and JetStream (each its own store).
pub(crate) struct NatsCluster {
    pub(crate) servers: Vec<BackplaneServer>,
    monitors: Vec<u16>,
}

impl NatsCluster {
    pub(crate) fn start() -> NatsCluster {
        NatsCluster::start_with(&[])
    }

    /// Starts one with more arguments for every server (`--no_advertise`: the clients are not
    /// told the others' addresses, and reach only the ones listed, through proxies say).
    ///
    /// A cluster not ready within 60 s, or whose JetStream meta group does not take all three
    /// servers within 20 s, is started again, anew, up to 3 times. A 30-minute web-nats-cluster
    /// run stopped twice on a fresh cluster that answered "no suitable peers for placement" for
    /// good, every server healthy and routed to the others but the meta group of size 2, one
    /// server left out; a fresh-clone CI stopped on one whose servers, routed to each other,
    /// never "established contact with a meta leader" in 60 s.
    pub(crate) fn start_with(extra: &[&str]) -> NatsCluster {
        const TRIES: usize = 3;
        for attempt in 1..=TRIES {
            let cluster = NatsCluster::launch(extra);
            let why = if !cluster.ready(Duration::from_secs(60)) {
                "not ready within 60 s"
            } else if !cluster.meta_group_whole(Duration::from_secs(20)) {
                "its JetStream meta group left a server out"
            } else {
                return cluster;
            };
            eprintln!(
                "NATS cluster, try {attempt} of {TRIES}: {why}; starting a new one. The servers said:{}",
                cluster.report()
            );
        }
        panic!(
            "no NATS cluster of 3, ready and whose JetStream meta group took every server, in {TRIES} tries"
        );
    }

    /// Starts 3 servers routed to each other, under a cluster name of their own.
    fn launch(extra: &[&str]) -> NatsCluster {
        let ports = free_ports(6);
        let (routes, monitors) = ports.split_at(3);
        let all_routes: Vec<String> = routes
            .iter()
            .map(|p| format!("nats-route://127.0.0.1:{p}"))
            .collect();
        // A name of its own: suites run side by side, and a port one cluster picked as free
        // may be another's route by the time it listens (two clusters of one name joined into
        // one of six servers, named twice, whose JetStream placed no stream: "no suitable peers
        // for placement" for a minute, in a fresh CI). Servers of different clusters refuse
        // each other's routes.
        static CLUSTERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let name = format!(
            "sockeye-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let servers = (0..3)
            .map(|i| {
                BackplaneServer::start_with(
                    Kind::Nats { jetstream: true },
                    &[
                        "--server_name",
                        &format!("{name}-n{i}"),
                        "--cluster_name",
                        &name,
                        "--cluster",
                        &format!("nats://127.0.0.1:{}", routes[i]),
                        "--routes",
                        &all_routes.join(","),
                        "-m",
                        &monitors[i].to_string(),
                    ]
                    .iter()
                    .copied()
                    .chain(extra.iter().copied())
                    .collect::<Vec<&str>>(),
                )
            })
            .collect();
        NatsCluster {
            servers,
            monitors: monitors.to_vec(),
        }
    }

    /// Whether, within `bound`, every server's JetStream meta group counts all 3 servers.
    fn meta_group_whole(&self, bound: Duration) -> bool {
        holds_within(bound, || {
            self.monitors
                .iter()
                .all(|&m| http_get(m, "/jsz").is_some_and(|jsz| json_number(&jsz, "cluster_size") == Some(3)))
        })
    }

    /// Waits until JetStream answers on every server: a meta leader elected, the server current.
    /// Up to 60 s (a cluster killed whole and started again on a loaded machine: a 30-minute
    /// web-nats-cluster run beside the test command ended on "not within 30s" at a heal); then
    /// panics with what every server says.
    pub(crate) fn wait_ready(&self) {
        assert!(
            self.ready(Duration::from_secs(60)),
            "not within 60 s: JetStream ready on every server; the servers said:{}",
            self.report()
        );
    }

    /// Whether, within `bound`, JetStream answers on every server.
    fn ready(&self, bound: Duration) -> bool {
        holds_within(bound, || self.monitors.iter().all(|&m| http_ok(m, "/healthz")))
    }

    /// What each server's monitor says of its health, its routes and JetStream (for a test
    /// that failed on the cluster: which server is down, unrouted, or without a meta leader).
    pub(crate) fn report(&self) -> String {
        let mut out = String::new();
        for (i, &m) in self.monitors.iter().enumerate() {
            for path in ["/healthz", "/routez", "/jsz"] {
                let answer = http_get(m, path).unwrap_or_else(|| "no answer".to_owned());
                let body = answer.split_once("\r\n\r\n").map_or(answer.as_str(), |(_, b)| b);
                out.push_str(&format!("\nserver {i} (monitor {m}) {path}: {}", body.trim()));
            }
        }
        out
    }

    /// `nats://` with every server.
    pub(crate) fn url(&self) -> String {
        let addrs: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!("nats://{}", addrs.join(","))
    }
}

/// The number after the first `"key":` in `json` (a monitor's answer; no JSON crate needed for
/// one field).
fn json_number(json: &str, key: &str) -> Option<u64> {
    let at = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = json[at..].trim_start();
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Whether `GET path` on the loopback `port` answers 200.
fn http_ok(port: u16, path: &str) -> bool {
    http_get(port, path).is_some_and(|r| r.get(9..12) == Some("200"))
}

/// The whole answer (status line, headers, body) to `GET path` on the loopback `port`, read
/// for up to 2 s; `None` if nothing could be sent or read.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .ok()?;
    let mut answer = Vec::new();
    // HTTP/1.0: the server closes after its answer; a timeout keeps what was read.
    let _ = s.read_to_end(&mut answer);
    (!answer.is_empty()).then(|| String::from_utf8_lossy(&answer).into_owned())
}
