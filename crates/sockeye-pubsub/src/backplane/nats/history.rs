//! Reading a topic's history from JetStream: which publications are of the current epoch (the
//! stream's and the server's life), whether the one at a position is still kept, and the read
//! itself through a consumer filtered to the topic, up to its newest publication when it began.

use std::time::Duration;

use async_nats::jetstream::{consumer, stream};
use futures_util::StreamExt;

use super::connection::Shared;
use super::life;
use super::stream::{Js, STREAM, epoch_of, stored_at};
use super::wire::{decode, subject};
use crate::backplane::api::History;
use crate::backplane::position::{Position, Publication};
use crate::error::Error;
use crate::topic::Topic;

/// How long reading a history may take.
const HISTORY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times a history read is made again when the connection was made again during it.
const READS_ACROSS_RECONNECTS: usize = 3;

/// Publications fetched from history per pull request.
const HISTORY_BATCH: usize = 500;

impl Shared {
    /// See [`Backplane::history`](crate::backplane::Backplane::history); the arguments owned, for
    /// the backplane's boxed future. Without JetStream there is no history: [`History::Lost`].
    pub(super) async fn history(
        &self,
        topic: Topic,
        since: Option<Position>,
        limit: usize,
    ) -> Result<History, Error> {
        match &self.js {
            None => Ok(History::Lost { latest: None }),
            Some(js) => {
                // A read is several requests (the stream's info, the topic's newest publication,
                // whether `since` is still kept, the consumer's pulls) answered by one life of the
                // server only if the connection lasted: after a reconnect, maybe to a server
                // restarted meanwhile (a new life, its store's tail maybe lost), the rest of the
                // read would be answered by another life than the one it took for current, and
                // what it answered would mix them (the same class as a publish batch cut by a
                // reconnect, `publish.rs`). Read again, on the new connection, a few times; then
                // failed (the hub's repair of the topic is then a gap, a resuming client's
                // subscription is refused and retried).
                for _ in 0..READS_ACROSS_RECONNECTS {
                    let connects = self.connects();
                    let history = self.history_js(js, &topic, since.as_ref(), limit).await?;
                    if self.connects() == connects {
                        return Ok(history);
                    }
                }
                Err(Error::Backplane {
                    what: format!(
                        "{}: reading the history of {topic}: the connection was lost and made \
                         again during each of {READS_ACROSS_RECONNECTS} reads",
                        self.server
                    ),
                    source: None,
                })
            }
        }
    }

    /// See [`Backplane::history`]; the epoch rules are in "A server's life is part of the
    /// epoch" in the [NATS backplane's documentation](super).
    async fn history_js(
        &self,
        js: &Js,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> Result<History, Error> {
        let subject = subject(topic);
        let stream = js
            .context
            .get_stream(STREAM)
            .await
            .map_err(|e| self.failed(format_args!("JetStream stream {STREAM} info"), e))?;
        let info = stream.cached_info().clone();
        let created = epoch_of(&info);
        // Read once the server answered: the client records a new server's identity before it
        // sends anything on the new connection.
        let current = self.life(js);
        let current = current.as_deref();
        // The topic's newest publication, and whether it is of the current epoch.
        let newest = match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => Some((m.sequence, life::of_message(Some(&m.headers)) == current)),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => None,
            Err(e) => return Err(self.failed(format_args!("last publication of {topic}"), e)),
        };
        // `None`: nothing published in the current epoch (the newest is of an earlier life).
        let latest = newest.filter(|(_, ours)| *ours).map(|(offset, _)| Position {
            epoch: life::epoch(&created, current),
            offset,
        });
        let lost = || {
            Ok(History::Lost {
                latest: latest.clone(),
            })
        };
        // Lost after `p`, a position of the current life still kept: the current epoch goes on
        // from there at least, whatever the newest publication names. (Answered "nothing known
        // of the current epoch" when the newest was a straggler of an earlier life, the hub took
        // it as a gap into nothing and delivered the stragglers after it, under the life its
        // subscribers had left: issue 39's checker, web variant, NATS JetStream, seed 1, 40
        // `EpochWentBack`.)
        let lost_in_current = |p: &Position| {
            Ok(History::Lost {
                latest: latest.clone().or_else(|| Some(p.clone())),
            })
        };
        let start = match since {
            None => 1,
            Some(p) => {
                // Of this stream and of the current life (a position of an earlier life may
                // name a publication that life lost with its tail, or be followed by some it
                // lost), still kept (not dropped by the limits, not given to another
                // publication by a stream that went back).
                let (p_created, p_life) = life::split(&p.epoch);
                if p_created != created
                    || p_life != current
                    || p.offset > info.state.last_sequence
                    || !self
                        .still_kept_or_just_before(&stream, &subject, p, topic)
                        .await?
                {
                    return lost();
                }
                // A publication of another life after it: the batch of a publisher that
                // reconnected meanwhile (see "The window"): a gap rather than one skipped.
                if newest.is_some_and(|(seq, ours)| seq > p.offset && !ours) {
                    return lost_in_current(p);
                }
                p.offset + 1
            }
        };
        if limit == 0 || latest.as_ref().is_none_or(|l| l.offset < start) {
            return Ok(History::Complete(Vec::new()));
        }
        let consumer: consumer::PullConsumer = stream
            .create_consumer(consumer::pull::Config {
                filter_subject: subject.clone(),
                deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                },
                ack_policy: consumer::AckPolicy::None,
                inactive_threshold: Duration::from_secs(30),
                memory_storage: true,
                ..Default::default()
            })
            .await
            .map_err(|e| self.failed(format_args!("JetStream history consumer for {topic}"), e))?;
        // Up to the topic's newest publication when the read began (not the consumer's count of
        // pending messages: in a cluster that count comes from a replica that may lag the one
        // that answered `newest`, and a read that stopped there answered complete while missing
        // the rest). From `since`: at most `limit` messages. From the start: the current epoch's
        // first publication is known only once every earlier one was read (lives are not
        // indexed): the topic's whole history, at most `max_len` publications (the stream's
        // limit per topic).
        let until = newest.map_or(0, |(seq, _)| seq);
        let pending = usize::try_from(consumer.cached_info().num_pending).unwrap_or(usize::MAX);
        let at_most = if since.is_some() { limit } else { usize::MAX };
        let mut kept = Kept {
            epochs: life::Epochs::new(created),
            current,
            limit,
            publications: Vec::with_capacity(limit.min(HISTORY_BATCH)),
            foreign: false,
        };
        let read = tokio::time::timeout(
            HISTORY_TIMEOUT,
            self.read_history(&consumer, topic, (until, at_most, pending), &mut kept),
        )
        .await;
        let _ = stream.delete_consumer(&consumer.cached_info().name).await;
        match read {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::Backplane {
                    what: format!("{}: reading the history of {topic}: timed out", self.server),
                    source: None,
                });
            }
        }
        // From the start: nothing anchors the read, and the topic's limits may have dropped
        // publications while it went on, which the consumer then skipped: a hole inside what it
        // returns (issue 39's checker: a burst read from the start while it went on, a dozen
        // publications missing from the middle of a repair, delivered without a gap). Limits
        // drop a topic's oldest first, so a publication still kept now had none after it
        // dropped before now, when the read was over: what follows the oldest one read that
        // is still kept has no hole. What precedes it is left out (the hub's gap covers it).
        if since.is_none() {
            let keep_from = self
                .first_still_kept(&stream, &subject, &kept.publications, topic)
                .await?;
            kept.publications.drain(..keep_from);
        }
        if let Some(p) = since {
            // Limits drop a topic's oldest publications first: if the one at `since` (or the
            // one just after it) is still there, none after it was dropped before being read.
            if !self
                .still_kept_or_just_before(&stream, &subject, p, topic)
                .await?
            {
                return lost();
            }
            if kept.foreign {
                return lost_in_current(p);
            }
        }
        Ok(History::Complete(kept.publications))
    }

    /// The index of the oldest of `read` (a topic's publications in order) still in the stream
    /// (`read.len()` when none is): gone ones are all before kept ones, since limits drop the
    /// oldest first, so a binary search (a request each step, only when the first is gone).
    async fn first_still_kept(
        &self,
        stream: &stream::Stream,
        subject: &str,
        read: &[Publication],
        topic: &Topic,
    ) -> Result<usize, Error> {
        let kept = |i: usize| {
            let at = read[i].position.clone();
            async move {
                match at {
                    Some(at) => self.still_kept(stream, subject, &at, topic).await,
                    None => Ok(true),
                }
            }
        };
        if read.is_empty() || kept(0).await? {
            return Ok(0);
        }
        // `read[lo - 1]` is gone; the answer is in `lo..=hi`.
        let (mut lo, mut hi) = (1, read.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if kept(mid).await? {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok(lo)
    }

    /// [`still_kept`](Self::still_kept), or `at` is just before a kept publication of the topic
    /// in its life: sequences are the stream's, shared by every topic, so a gap's `resume` (the
    /// position just before the first publication after the gap, `first − 1`) is another
    /// topic's sequence, or 0; nothing of this topic can lie between it and the next, so
    /// resuming from it skips nothing. Once that publication is gone (the limits), it is lost.
    async fn still_kept_or_just_before(
        &self,
        stream: &stream::Stream,
        subject: &str,
        at: &Position,
        topic: &Topic,
    ) -> Result<bool, Error> {
        if at.offset > 0 && self.still_kept(stream, subject, at, topic).await? {
            return Ok(true);
        }
        let next = Position {
            epoch: at.epoch.clone(),
            offset: at.offset.saturating_add(1),
        };
        self.still_kept(stream, subject, &next, topic).await
    }

    /// Whether the publication at `at` is still in the stream, on `subject`, of the life `at`
    /// names.
    async fn still_kept(
        &self,
        stream: &stream::Stream,
        subject: &str,
        at: &Position,
        topic: &Topic,
    ) -> Result<bool, Error> {
        match stored_at(stream, at.offset).await {
            Ok(Some(m)) => Ok(m.subject == subject && m.life.as_deref() == life::split(&at.epoch).1),
            Ok(None) => Ok(false),
            Err(e) => Err(self.failed(format_args!("history of {topic}: publication {}", at.offset), e)),
        }
    }

    /// Messages from the history consumer, into `kept`, until the one at stream sequence
    /// `until` (or a later one) is read or `at_most` messages were: a server that stops giving
    /// messages before is an error, never a short history called complete. `pending`: what
    /// the consumer said it holds, the size of the first pull (each message then tells what is
    /// left; a pull asks for no more, since one for more than the server has waits for its
    /// expiry).
    async fn read_history(
        &self,
        consumer: &consumer::PullConsumer,
        topic: &Topic,
        (until, at_most, mut pending): (u64, usize, usize),
        kept: &mut Kept<'_>,
    ) -> Result<(), Error> {
        let mut seen = 0;
        let mut reached = 0;
        while reached < until && seen < at_most {
            // Nothing pending yet short of `until`: a replica behind the one that answered
            // `until`; one message, which comes once it has caught up.
            let n = (at_most - seen).min(HISTORY_BATCH).min(pending.max(1));
            let mut batch = consumer
                .batch()
                .max_messages(n)
                .expires(Duration::from_secs(5))
                .messages()
                .await
                .map_err(|e| self.failed(format_args!("history of {topic}"), e))?;
            let mut got = 0;
            while let Some(m) = batch.next().await {
                let m = m.map_err(|e| self.failed(format_args!("history of {topic}"), e))?;
                let info = m
                    .info()
                    .map_err(|e| self.failed(format_args!("history of {topic}: message info"), e))?;
                let seq = info.stream_sequence;
                pending = usize::try_from(info.pending).unwrap_or(usize::MAX);
                got += 1;
                reached = reached.max(seq);
                let life = life::of_message(m.message.headers.as_ref());
                if !kept.of_current(life) {
                    continue;
                }
                let position = Position {
                    epoch: kept.epochs.of(life),
                    offset: seq,
                };
                match decode(topic, &m.message.payload, Some(position)) {
                    Ok(p) => kept.push(p),
                    Err(why) => {
                        tracing::warn!("{}: skipped publication {seq} on {topic}: {why}", self.server)
                    }
                }
            }
            if got == 0 {
                return Err(Error::Backplane {
                    what: format!(
                        "{}: history of {topic}: the server gave nothing more after sequence \
                         {reached} ({seen} messages read), though the topic reached {until}",
                        self.server
                    ),
                    source: None,
                });
            }
            seen += got;
        }
        Ok(())
    }
}

/// What a history read keeps: the first `limit` publications of the current life after the
/// last publication of another (which sets `foreign`).
struct Kept<'a> {
    epochs: life::Epochs,
    current: Option<&'a str>,
    limit: usize,
    publications: Vec<Publication>,
    foreign: bool,
}

impl Kept<'_> {
    /// Whether a publication of `life` is of the current epoch; one that is not ends the run
    /// kept so far.
    fn of_current(&mut self, life: Option<&str>) -> bool {
        if life == self.current {
            return true;
        }
        self.foreign = true;
        self.publications.clear();
        false
    }

    fn push(&mut self, p: Publication) {
        if self.publications.len() < self.limit {
            self.publications.push(p);
        }
    }
}
