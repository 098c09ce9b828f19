//! Publishing through a backplane outage: which failures are retried, and for how long.

use std::time::Duration;

use sockeye::Message;
use sockeye::backoff::Backoff;

use crate::backplane::position::Position;
use crate::error::Error;
use crate::hub::Publisher;
use crate::topic::Topic;

/// How a batch of a connection's messages waits out a backplane that is down: the policy of the
/// `ws` relay, for any server that publishes what its clients send.
///
/// Retried only when the error says that what is retried was not published, so that nothing is
/// published twice: the whole batch when nothing of it was sent ([`Error::Backplane`]: the
/// backplane is not connected, the usual outage), the rest of it when its start is known
/// published and the rest known not ([`Error::PartlyPublished`] with `published == sent`). A
/// batch that may be partly published (sent, and the answer lost: a connection dropped or a
/// server hung mid-batch) is not retried, nor is any other error: it is returned, and a server
/// should close the client's connection with [`Error::close_code`] (1013, try again later), so
/// that the client knows its last messages may not all have been delivered.
///
/// ```no_run
/// # async fn demo(publisher: sockeye_pubsub::Publisher, topic: sockeye_pubsub::Topic)
/// # -> Result<(), sockeye_pubsub::Error> {
/// use sockeye_pubsub::PublishRetry;
/// let retry = PublishRetry::default(); // 10 s in all, waits from 50 ms doubling to 1 s, jittered
/// let batch = vec!["one".into(), "two".into()];
/// let positions = retry.publish_many(&publisher, &topic, batch).await?;
/// println!("published, the last at {:?}", positions.last());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct PublishRetry {
    /// How long a batch may wait for the backplane in all, its tries included. Default 10 s: a
    /// backplane restart of a few seconds loses nothing, and a client is not held much longer
    /// than it would wait for an answer. `Duration::MAX`: never give up.
    pub patience: Duration,
    /// The waits between tries. Default 50 ms doubling to 1 s, equal jitter: quick after a
    /// blip, a backplane that is back is used within a second, and the connections of a node
    /// do not all retry in step after an outage.
    pub backoff: Backoff,
}

impl Default for PublishRetry {
    fn default() -> Self {
        PublishRetry {
            patience: Duration::from_secs(10),
            backoff: Backoff::new(Duration::from_millis(50), Duration::from_secs(1)),
        }
    }
}

impl PublishRetry {
    /// Sets [`patience`](Self::patience) (`Duration::ZERO`: never retry).
    #[must_use]
    pub fn patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    /// Sets [`backoff`](Self::backoff).
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Publishes `messages` in order as `publisher` ([`Publisher::publish_many`]), retrying
    /// under this policy. Returns each message's position, in order: `None` from a backplane
    /// that gives none, and for the start of a batch published by an earlier try (the backplane
    /// said how many, not where). Or the error that ended it, which says what was published (see
    /// [`Error::PartlyPublished`]; the counts are of what the last try sent).
    pub async fn publish_many(
        &self,
        publisher: &Publisher,
        topic: &Topic,
        mut messages: Vec<Message>,
    ) -> Result<Vec<Option<Position>>, Error> {
        let give_up = tokio::time::Instant::now().checked_add(self.patience);
        let mut unknown = 0;
        let mut retry = 0u32;
        loop {
            let delay = self.backoff.random_delay(retry);
            // Only a wait that ends within the patience is worth it.
            let patient = give_up.is_none_or(|end| tokio::time::Instant::now() + delay < end);
            match publisher.publish_many(topic, messages.clone()).await {
                Ok(positions) => {
                    let mut all = vec![None; unknown];
                    if positions.len() == messages.len() {
                        all.extend(positions.into_iter().map(Some));
                    } else {
                        all.resize(unknown + messages.len(), None);
                    }
                    return Ok(all);
                }
                Err(Error::Backplane { .. }) if patient => {}
                Err(Error::PartlyPublished { published, sent, .. }) if patient && published == sent => {
                    let sent = sent.min(messages.len());
                    messages.drain(..sent);
                    unknown += sent;
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(delay).await;
            retry = retry.saturating_add(1);
        }
    }
}
