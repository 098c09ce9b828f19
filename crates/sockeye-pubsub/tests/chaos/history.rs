//! What a chaos run records: every publish (called, acknowledged with its position, or failed),
//! every subscribe with the position it resumed from and how it began, every delivery with its
//! position, every gap, and what the nemesis did; in one order, the order things happened in
//! this process (each record is appended under one lock when it happens).
#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use sockeye_pubsub::Position;

/// How a subscribe began (`Recovery`, or its failure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Began {
    /// No position given: live from now.
    Live,
    /// Everything after the position recovered: this many publications.
    Recovered(usize),
    /// Recovery impossible: a gap was queued first.
    Lost,
    /// The subscribe failed (an error or a timeout): not subscribed.
    Failed(String),
}

/// One event of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// A publish was called: by `publisher`, its `seq`th (increasing per publisher).
    Invoke {
        publisher: usize,
        seq: u64,
        topic: String,
        payload: String,
    },
    /// It was acknowledged, with its position (`None` from a backplane that gives none).
    Ack {
        publisher: usize,
        seq: u64,
        position: Option<Position>,
    },
    /// It failed or timed out: it may or may not have been published.
    Fail { publisher: usize, seq: u64 },
    /// A subscribe was called, resuming from `from` (`None`: live).
    Subscribe {
        subscriber: usize,
        topic: String,
        from: Option<Position>,
    },
    /// How that subscribe ended.
    Subscribed {
        subscriber: usize,
        topic: String,
        began: Began,
    },
    /// A publication delivered.
    Delivery {
        subscriber: usize,
        topic: String,
        payload: String,
        position: Option<Position>,
    },
    /// A gap delivered.
    Gap {
        subscriber: usize,
        topic: String,
        resume: Option<Position>,
    },
    /// What the nemesis did (for the reader of a history).
    Nemesis(String),
    /// Every fault is over: from here, delivery must resume (within the run's stated bound).
    Healed,
}

/// Each publish's payload, by its publisher and seq (what an `Ack` names it by).
pub(crate) fn payloads(history: &[Record]) -> HashMap<(usize, u64), &str> {
    history
        .iter()
        .filter_map(|r| match r {
            Record::Invoke {
                publisher,
                seq,
                payload,
                ..
            } => Some(((*publisher, *seq), payload.as_str())),
            _ => None,
        })
        .collect()
}

fn pos(p: &Option<Position>) -> String {
    p.as_ref().map_or_else(|| "-".to_owned(), ToString::to_string)
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Invoke {
                publisher,
                seq,
                topic,
                payload,
            } => write!(f, "publisher {publisher} publish #{seq} {payload:?} on {topic}"),
            Record::Ack {
                publisher,
                seq,
                position,
            } => write!(f, "publisher {publisher} ack #{seq} at {}", pos(position)),
            Record::Fail { publisher, seq } => write!(f, "publisher {publisher} failed #{seq}"),
            Record::Subscribe {
                subscriber,
                topic,
                from,
            } => write!(f, "subscriber {subscriber} subscribe {topic} from {}", pos(from)),
            Record::Subscribed {
                subscriber,
                topic,
                began,
            } => write!(f, "subscriber {subscriber} subscribed {topic}: {began:?}"),
            Record::Delivery {
                subscriber,
                topic,
                payload,
                position,
            } => write!(
                f,
                "subscriber {subscriber} got {payload:?} on {topic} at {}",
                pos(position)
            ),
            Record::Gap {
                subscriber,
                topic,
                resume,
            } => write!(
                f,
                "subscriber {subscriber} GAP on {topic}, resume {}",
                pos(resume)
            ),
            Record::Nemesis(what) => write!(f, "nemesis: {what}"),
            Record::Healed => write!(f, "nemesis: every fault healed"),
        }
    }
}

/// The records of a run, appended by every task as things happen.
#[derive(Debug, Default)]
pub(crate) struct Recorder(Mutex<Vec<Record>>);

impl Recorder {
    /// Appends `record`.
    pub(crate) fn record(&self, record: Record) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(record);
    }

    /// A copy of what was recorded so far.
    pub(crate) fn snapshot(&self) -> Vec<Record> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
