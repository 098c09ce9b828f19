//! Publishing through a backplane outage: which failures are retried, and for how long.

use std::time::Duration;

use sockeye::Message;

use crate::{Error, Position, Publisher, Topic};

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
/// let retry = PublishRetry::default(); // 10 s in all, waits from 50 ms doubling to 1 s
/// let batch = vec!["one".into(), "two".into()];
/// let last = retry.publish_many(&publisher, &topic, batch).await?;
/// println!("published, the last at {last:?}");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PublishRetry {
    /// How long a batch may wait for the backplane in all, its tries included. Default 10 s: a
    /// backplane restart of a few seconds loses nothing, and a client is not held much longer
    /// than it would wait for an answer.
    pub patience: Duration,
    /// The wait after the first failed try; it doubles after each. Default 50 ms.
    pub first_delay: Duration,
    /// The longest wait between two tries. Default 1 s: a backplane that is back is used within
    /// a second.
    pub max_delay: Duration,
}

impl Default for PublishRetry {
    fn default() -> Self {
        PublishRetry {
            patience: Duration::from_secs(10),
            first_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(1),
        }
    }
}

impl PublishRetry {
    /// Sets [`patience`](Self::patience) (`Duration::ZERO`: never retry).
    pub fn patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    /// Sets [`first_delay`](Self::first_delay).
    pub fn first_delay(mut self, delay: Duration) -> Self {
        self.first_delay = delay;
        self
    }

    /// Sets [`max_delay`](Self::max_delay).
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Publishes `messages` in order as `publisher` ([`Publisher::publish_many`]), retrying
    /// under this policy. Returns the position of the last message (`None` from a backplane
    /// that gives none, or for an empty batch), or the error that ended it, which says what was
    /// published (see [`Error::PartlyPublished`]; the counts are of what the last try sent).
    pub async fn publish_many(
        &self,
        publisher: &Publisher,
        topic: &Topic,
        mut messages: Vec<Message>,
    ) -> Result<Option<Position>, Error> {
        let start = tokio::time::Instant::now();
        let mut delay = self.first_delay;
        loop {
            // Only a wait that ends within the patience is worth it.
            let patient = start.elapsed().saturating_add(delay) < self.patience;
            match publisher.publish_many(topic, messages.clone()).await {
                Ok(positions) => return Ok(positions.last().cloned()),
                Err(Error::Backplane { .. }) if patient => {}
                Err(Error::PartlyPublished { published, sent, .. }) if patient && published == sent => {
                    messages.drain(..sent.min(messages.len()));
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(delay).await;
            delay = delay.saturating_mul(2).min(self.max_delay);
        }
    }
}
