//! The nemesis's schedule: from a seed, faults at random times with random lengths, free to
//! overlap (the engine killed while a node is blackholed, two nodes down at once). Pure: the same
//! seed gives the same schedule; `runner.rs` carries it out.
#![allow(dead_code)]

use std::time::Duration;

/// A small seeded PRNG (SplitMix64): enough for a schedule, and the same everywhere.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A duration in `min..max`.
    pub(crate) fn between(&mut self, min: Duration, max: Duration) -> Duration {
        let span = u64::try_from((max - min).as_millis()).unwrap_or(1);
        min + Duration::from_millis(self.below(span))
    }
}

/// One fault, on its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Fault {
    /// The engine killed with SIGKILL (every server of it), restarted at the end: without
    /// persistence its data is gone; with it, it comes back from its files.
    EngineDown,
    /// Redis with an append-only file: killed, and restarted at the end with the file's last
    /// bytes cut (writes acknowledged but never synced: what `appendfsync everysec` may lose).
    TailLost,
    /// Redis with snapshots: `SAVE` now; a later [`EngineDown`](Fault::EngineDown) restarts
    /// from it (an older snapshot: what followed it is lost). Its end does nothing.
    Snapshot,
    /// A primary killed and its replica promoted (Redis primary + replica: by hand, as
    /// Sentinel would, the nodes' address following it; Redis Cluster: the shard of topic
    /// `n % topics`, by the cluster). The old primary comes back as a replica at the end.
    Failover(usize),
    /// Redis Cluster: the primary of topic `n % topics`'s shard stopped (SIGSTOP) with its
    /// connections open, a blackholed primary; its replica takes over. Continued at the end (a
    /// replica then).
    PrimaryHang(usize),
    /// Redis Cluster: the slot of topic `n % topics` migrated, with its keys, to another
    /// primary. Its end does nothing.
    SlotMigration(usize),
    /// NATS cluster: server `n` killed (SIGKILL), restarted at the end.
    ServerDown(usize),
    /// Node `n`'s hub takes nothing from its backplane (a hub behind, busy elsewhere) while a
    /// burst is published through another node, past what the backplane's client holds for it
    /// (Redis: the event queue, then a reported miss; NATS core: the client's 65,536 per
    /// subscription, then a slow-consumer drop). Its end lets the hub take again.
    SlowConsumer(usize),
    /// A node's hub dropped with its subscribers' connections (a crash), started again at the end.
    NodeCrash(usize),
    /// Between a node and the engine, a proxy that stops forwarding without closing.
    Blackhole(usize),
    /// A node partitioned from the engine: its connections closed, new ones refused.
    Partition(usize),
    /// A subscriber's connection dropped: it resumes from its last positions at once (while
    /// the engine is down, if it is). Its end does nothing.
    Reconnect(usize),
}

/// A kind of fault an engine can suffer, made into a [`Fault`] on a random target (a node, a
/// subscriber, a topic or a server: `0..targets`).
pub(crate) type Menu = &'static [fn(usize) -> Fault];

/// The faults every engine suffers: the engine killed, a burst past a slow node, nodes crashed,
/// blackholed, partitioned, subscribers reconnecting.
pub(crate) const COMMON: Menu = &[
    |_| Fault::EngineDown,
    Fault::SlowConsumer,
    Fault::NodeCrash,
    Fault::Blackhole,
    Fault::Partition,
    Fault::Reconnect,
];

/// A step of the schedule: at `at` after the faults begin, `fault` starts (or ends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) at: Duration,
    pub(crate) fault: Fault,
    pub(crate) start: bool,
}

/// `count` faults from `menu` over `span` on `targets` targets (3: nodes, subscribers, topics
/// and servers are taken modulo their number), each lasting 0.2 to 2.5 s; their steps in time
/// order (a fault may end after `span`: the heal ends every fault anyway).
pub(crate) fn schedule(seed: u64, span: Duration, count: usize, targets: usize, menu: Menu) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut steps = Vec::new();
    for _ in 0..count {
        let target = usize::try_from(rng.below(targets as u64)).unwrap_or(0);
        let fault = menu[usize::try_from(rng.below(menu.len() as u64)).unwrap_or(0)](target);
        let at = rng.between(Duration::ZERO, span);
        let length = rng.between(Duration::from_millis(200), Duration::from_millis(2500));
        steps.push(Step {
            at,
            fault,
            start: true,
        });
        steps.push(Step {
            at: at + length,
            fault,
            start: false,
        });
    }
    steps.sort_by_key(|s| (s.at, !s.start));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_schedule_of_overlapping_faults() {
        let span = Duration::from_secs(5);
        let a = schedule(7, span, 8, 3, COMMON);
        assert_eq!(a, schedule(7, span, 8, 3, COMMON));
        assert_ne!(a, schedule(8, span, 8, 3, COMMON));
        assert_eq!(a.len(), 16);
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        // Over a few seeds, every kind of fault, and two at once.
        let all: Vec<Step> = (0..20).flat_map(|s| schedule(s, span, 8, 3, COMMON)).collect();
        for kind in [
            Fault::EngineDown,
            Fault::NodeCrash(0),
            Fault::Blackhole(1),
            Fault::Partition(2),
        ] {
            assert!(all.iter().any(|s| s.fault == kind), "{kind:?} never scheduled");
        }
        let mut open = 0;
        let mut most = 0;
        for s in &a {
            open = if s.start { open + 1 } else { open - 1 };
            most = most.max(open);
        }
        assert!(most >= 2, "no overlap in {a:?}");
    }
}
