//! A topic's history: read from one server (the meta hash and the Stream, in one atomic
//! pipeline), and what it holds after a position by the epoch rules, for one server and a
//! cluster alike.

use redis::Value;

use super::connection::{Commands, Shared};
use super::wire::{has_history, meta_key, parse_entries, parse_meta, stream_key};
use crate::backplane::api::History;
use crate::backplane::position::{Position, Publication};
use crate::error::Error;
use crate::topic::Topic;

impl Shared {
    /// Whether it keeps any history.
    pub(super) fn has_history(&self) -> bool {
        has_history(&self.history)
    }

    /// See [`Backplane::history`](crate::backplane::Backplane::history); the arguments owned,
    /// for the backplane's boxed future.
    pub(super) async fn history(
        &self,
        topic: Topic,
        since: Option<Position>,
        limit: usize,
    ) -> Result<History, Error> {
        let (topic, since) = (&topic, since.as_ref());
        let hex = topic.to_hex();
        let start = match since {
            None => "-".to_owned(),
            Some(p) => format!("{}-0", p.offset.saturating_add(1)),
        };
        // One more than asked: `limit` 0 still shows whether the history reaches back.
        let count = limit.saturating_add(1);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HMGET")
            .arg(meta_key(&hex))
            .arg("e")
            .arg("o")
            .arg("r")
            .cmd("XRANGE")
            .arg(stream_key(&hex))
            .arg(&start)
            .arg("+")
            .arg("COUNT")
            .arg(count);
        // Read-only, so retried once on a fresh connection: after Redis restarted, the old
        // connection fails at its first use.
        let mut reply = None;
        for attempt in 0..2 {
            let Commands { mut conn, life } = self.commands().await?;
            match pipe.query_async::<(Value, Value)>(&mut conn).await {
                Ok((meta, entries)) => {
                    reply = Some((meta, entries, life));
                    break;
                }
                Err(e) => {
                    self.reset_commands().await;
                    if attempt == 1 || !(e.is_connection_dropped() || e.is_io_error()) {
                        return Err(self.error(&format!("history of {topic}"), e));
                    }
                }
            }
        }
        let Some((meta, entries, life)) = reply else {
            return Err(self.error(&format!("history of {topic}"), "no reply"));
        };
        history_from(topic, since, limit, (meta, entries, &life))
            .map_err(|what| self.error(&format!("history of {topic}"), format!("malformed {what}")))
    }
}

/// What the history holds after `since` (at most `limit`), from the topic's meta hash (HMGET
/// `e o r`), its Stream entries from `since + 1` (XRANGE, one more than `limit`) and the `run_id`
/// of the server that answered (empty: unknown); `Err(what)` when a reply is malformed.
///
/// Complete only if contiguous: from a position, the entries must be exactly `since + 1`,
/// `since + 2`, … up to the meta hash's last offset (or one past `limit`), else
/// [`History::Lost`]; from the start, only what follows the last hole, if it reaches the last
/// offset (see [`History::Complete`]). Shared by one server and a cluster.
pub(crate) fn history_from(
    topic: &Topic,
    since: Option<&Position>,
    limit: usize,
    (meta, entries, life): (Value, Value, &str),
) -> Result<History, &'static str> {
    let (mut epoch, offset, by) = parse_meta(meta).ok_or("meta hash")?;
    if !life.is_empty() && by.is_some_and(|by| by != life) {
        // The epoch was given by another life of the server (it restarted, or another one
        // was promoted): its last offsets may be lost and the next publication starts a new
        // epoch. Until then the topic is as one with nothing published in this epoch: no
        // position of the old one is recovered (some of what followed it may be gone), and
        // none is handed out.
        epoch = None;
    }
    let mut entries = parse_entries(entries, topic, epoch.as_deref().unwrap_or("")).ok_or("stream entry")?;
    let Some(epoch) = epoch else {
        // Nothing published in this epoch (or its meta expired): a position cannot be
        // recovered; no position means "everything", which is nothing.
        return Ok(match since {
            Some(_) => History::Lost { latest: None },
            None => History::Complete(Vec::new()),
        });
    };
    let latest = Some(Position {
        epoch: epoch.as_str().into(),
        offset,
    });
    let offset_of = |p: &Publication| p.position.as_ref().map_or(0, |p| p.offset);
    match since {
        Some(since) => {
            if *since.epoch != *epoch || since.offset > offset {
                return Ok(History::Lost { latest });
            }
            // Complete only if contiguous: `since + 1`, `since + 2`, … with no hole, up to the
            // latest offset (or past `limit`: the read asked for one more). A hole is an offset
            // given without a Stream entry (trimmed, expired, deleted, or published when the
            // topic kept no history): what was published there cannot be recovered.
            let want = usize::try_from(offset - since.offset)
                .unwrap_or(usize::MAX)
                .min(limit.saturating_add(1));
            let contiguous = entries.len() == want
                && entries
                    .iter()
                    .zip(since.offset + 1..)
                    .all(|(p, expected)| offset_of(p) == expected);
            if !contiguous {
                return Ok(History::Lost { latest });
            }
        }
        None => {
            // From the start: the publications after the last hole, if they reach the latest
            // offset (none otherwise), so that what is returned follows on without a miss from
            // the position before its first. A read of more than `limit` is checked as far as it
            // goes; a hole in it is answered as a loss (it cannot be shown to reach the latest).
            let hole = entries
                .windows(2)
                .rposition(|w| offset_of(&w[1]) != offset_of(&w[0]) + 1);
            if entries.len() > limit {
                if hole.is_some() {
                    return Ok(History::Lost { latest });
                }
            } else {
                let reaches = entries.last().is_none_or(|p| offset_of(p) == offset);
                if !reaches {
                    entries.clear();
                } else if let Some(hole) = hole {
                    entries.drain(..=hole);
                }
            }
        }
    }
    entries.truncate(limit);
    Ok(History::Complete(entries))
}
