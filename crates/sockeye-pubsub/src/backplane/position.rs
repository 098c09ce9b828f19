//! Where a publication stands and who made it: [`Position`] (offset and epoch, printed and parsed
//! as `offset@epoch`), [`Origin`], [`Publication`] as it travels between nodes, and
//! [`Recovery`], how a resume from a position began. Plain values that every other part of the
//! crate names, so this file names none of them back.

use std::fmt;

use bytes::Bytes;
use sockeye::DataKind;

use crate::error::Error;
use crate::topic::Topic;

/// Where a publication stands in its topic's history: an offset that grows with every publication
/// on the topic, and the epoch of that history.
///
/// A position names one publication forever. The epoch changes whenever the backplane may have lost
/// positions it handed out (its storage was wiped, the stream was recreated, the Redis server or a
/// single NATS JetStream server restarted, Redis failed over): a subscriber resuming from a
/// position of another epoch learns that recovery is impossible (a
/// [`Delivery::Gap`](crate::Delivery::Gap), then what the new epoch holds) instead of silently
/// missing publications, and an offset is never reused for another publication under the same epoch
/// (Centrifugo's stream position, made safe against rollbacks).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// The history's identity; opaque, never empty (the hub asks for a topic's newest position
    /// with the empty epoch, which every history answers with [`History::Lost`](super::History::Lost)).
    pub epoch: std::sync::Arc<str>,
    /// The publication's offset in the topic. Contiguous (each publication is the previous plus
    /// one) where [`Capabilities::contiguous_offsets`](super::Capabilities::contiguous_offsets)
    /// says so; always increasing.
    pub offset: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.offset, self.epoch)
    }
}

/// Reads a position as it prints, `offset@epoch` (a client keeps it as text, in a URL's
/// `?since=` say): the offset in decimal digits, the epoch anything but empty (it is opaque; it
/// may contain `@`: the first one ends the offset). Anything else is
/// [`Error::InvalidPosition`], saying what is wrong.
///
/// ```
/// use sockeye_pubsub::Position;
/// let p: Position = "42@5f3a9c".parse()?;
/// assert_eq!((p.offset, &*p.epoch), (42, "5f3a9c"));
/// assert_eq!(p.to_string(), "42@5f3a9c");
/// assert!("42".parse::<Position>().is_err());
/// # Ok::<(), sockeye_pubsub::Error>(())
/// ```
impl std::str::FromStr for Position {
    type Err = Error;

    fn from_str(s: &str) -> Result<Position, Error> {
        let bad = |why: &str| {
            let shown: String = s.chars().take(64).collect();
            Error::InvalidPosition(format!(
                "{shown:?}: {why}; expected OFFSET@EPOCH, as a position prints"
            ))
        };
        let Some((offset, epoch)) = s.split_once('@') else {
            return Err(bad("no @"));
        };
        if offset.is_empty() || !offset.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the offset is not a number"));
        }
        let offset = offset
            .parse::<u64>()
            .map_err(|_| bad("the offset is over 18446744073709551615"))?;
        if epoch.is_empty() {
            return Err(bad("the epoch is empty"));
        }
        Ok(Position {
            epoch: epoch.into(),
            offset,
        })
    }
}

/// Who published: the node and, on that node, the publisher (a connection, say). A hub uses it
/// to leave the publisher out of its own fan-out when asked to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The node, random per [`Hub`](crate::Hub).
    pub node: u64,
    /// The publisher on that node (0: none in particular).
    pub publisher: u64,
}

/// A publication as it travels between nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publication {
    /// Its topic.
    pub topic: Topic,
    /// Its place in the topic's history; `None` from a backplane without history.
    pub position: Option<Position>,
    /// Who published it.
    pub origin: Origin,
    /// Text or binary (a text payload is valid UTF-8: the hub checks before publishing).
    pub kind: DataKind,
    /// The payload, shared.
    pub payload: Bytes,
}

/// How a subscription with a position to resume from began.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recovery {
    /// No position was given: live publications from now on.
    Live,
    /// Everything published after the position was queued first (`count` publications), then
    /// live ones: no gap, no duplicate. This subscriber's own publications are left out, as live
    /// delivery leaves them out ([`Subscriber::publish`](crate::Subscriber::publish)).
    Recovered {
        /// Publications recovered (queued).
        count: usize,
    },
    /// Recovery of everything after the position was impossible: the position is of another epoch
    /// (the backplane may have lost publications since), older than the history keeps, ahead of
    /// what the history holds (the backplane went back), or the backplane has no history. A
    /// [`Delivery::Gap`](crate::Delivery::Gap) was queued first, then whatever the history still
    /// holds after the position (for another epoch: all of the current one), then live
    /// publications; see [`Delivery::Gap`](crate::Delivery::Gap) for its `resume`.
    Lost,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn a_position_reads_back_as_it_prints(offset in any::<u64>(), epoch in ".+") {
            let p = Position { epoch: epoch.into(), offset };
            prop_assert_eq!(p.to_string().parse::<Position>().unwrap(), p);
        }

        #[test]
        fn any_text_is_a_position_or_a_clear_error(text in ".*") {
            match text.parse::<Position>() {
                // Leading zeros are read, not printed: what it reads prints canonically.
                Ok(p) => prop_assert_eq!(p.to_string().parse::<Position>().unwrap(), p),
                Err(e) => {
                    prop_assert!(matches!(e, Error::InvalidPosition(_)));
                    prop_assert!(e.is_caller_fault());
                }
            }
        }
    }

    #[test]
    fn garbage_is_refused_saying_why() {
        for (text, why) in [
            ("", "no @"),
            ("12", "no @"),
            ("@e", "not a number"),
            ("+1@e", "not a number"),
            ("-1@e", "not a number"),
            ("1.5@e", "not a number"),
            ("18446744073709551616@e", "over"),
            ("7@", "epoch is empty"),
        ] {
            let e = text.parse::<Position>().unwrap_err();
            assert!(e.to_string().contains(why), "{text:?}: {e}");
        }
        assert_eq!("0@a@b".parse::<Position>().unwrap().epoch.as_ref(), "a@b");
    }
}
