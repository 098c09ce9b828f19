//! A topic's history: read from one server (the meta hash and the Stream, in one atomic
//! pipeline), and what it holds after a position by the epoch rules, for one server and a
//! cluster alike.

use redis::Value;

use super::connection::{Commands, Shared};
use super::wire::{has_history, meta_key, parse_entries, parse_meta, stream_key};
use crate::backplane::api::History;
use crate::backplane::position::Position;
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
    if let Some(since) = since {
        if *since.epoch != *epoch || since.offset > offset {
            return Ok(History::Lost { latest });
        }
        if since.offset < offset {
            // The history must reach back to the first publication after `since`.
            let first = entries
                .first()
                .and_then(|p| p.position.as_ref())
                .map(|p| p.offset);
            if first != Some(since.offset + 1) {
                return Ok(History::Lost { latest });
            }
        }
    }
    entries.truncate(limit);
    Ok(History::Complete(entries))
}
