//! Publishing: a message checked and made a [`Publication`], handed to the backplane alone or
//! in a batch, with the rule for what an error says was published; and [`Publisher`], which
//! publishes as a subscriber.

use std::sync::atomic::Ordering;

use sockeye::{DataKind, Message};

use super::node::Hub;
use crate::backplane::position::{Origin, Position, Publication};
use crate::error::Error;
use crate::topic::Topic;

impl Hub {
    /// Publishes to every subscriber of `topic`, on every node. Returns once the backplane has
    /// the publication, with the position it got (`None` from a backplane that gives none: NATS
    /// without JetStream); it is delivered when the backplane hands it back. (Redis's position is
    /// given by the publish script itself; NATS JetStream's is the acknowledged sequence with the
    /// stream's epoch as this node last saw it, at connect or after a reconnect.)
    ///
    /// An error says whether it was published, by the rule of
    /// [`publish_many`](Self::publish_many) for a batch of one: [`Error::PartlyPublished`]
    /// (`published` 0, `sent` 1) when it was sent and the answer was lost, so it may or may not
    /// have been published (retrying may deliver it twice); any other error means it was not
    /// published, and may be retried ([`PublishRetry`](crate::PublishRetry) does both right).
    pub async fn publish(&self, topic: &Topic, message: Message) -> Result<Option<Position>, Error> {
        self.publish_as(0, topic, message).await
    }

    /// Publishes `messages` to every subscriber of `topic`, on every node, in order, as
    /// [`publish`](Self::publish) one after the other would, but in one go: over Redis one round
    /// trip for the whole batch, over NATS one server check and the acknowledgements awaited
    /// together (see [`Backplane::publish_many`](crate::backplane::Backplane::publish_many)).
    /// Returns the positions they got, in order (empty from a backplane that gives none).
    ///
    /// Every message is checked first (data only, each at most
    /// [`HubConfig::max_payload`](crate::HubConfig)): one that does not pass refuses the whole
    /// batch ([`Error::NotData`], [`Error::PayloadTooLarge`]) and nothing is published.
    ///
    /// Not all-or-nothing: a batch that fails at the backplane may be partly published, and
    /// [`Error::PartlyPublished`] says how far it got; any other error means none of it was
    /// published (it may be retried whole).
    pub async fn publish_many(&self, topic: &Topic, messages: Vec<Message>) -> Result<Vec<Position>, Error> {
        self.publish_many_as(0, topic, messages).await
    }

    /// One rule for one publication and a batch: a publication goes out as a batch of one, whose
    /// error says whether it was published (a backplane's `publish` need not).
    pub(super) async fn publish_as(
        &self,
        publisher: u64,
        topic: &Topic,
        message: Message,
    ) -> Result<Option<Position>, Error> {
        let publication = self.publication(publisher, topic, message)?;
        let positions = self.timed_publish(vec![publication]).await?;
        Ok(positions.into_iter().next())
    }

    pub(super) async fn publish_many_as(
        &self,
        publisher: u64,
        topic: &Topic,
        messages: Vec<Message>,
    ) -> Result<Vec<Position>, Error> {
        let publications = messages
            .into_iter()
            .map(|m| self.publication(publisher, topic, m))
            .collect::<Result<Vec<_>, _>>()?;
        match publications.len() {
            0 => Ok(Vec::new()),
            _ => self.timed_publish(publications).await,
        }
    }

    /// Publishes at the backplane, keeping how long it took for
    /// [`last_publish_round_trip`](Self::last_publish_round_trip).
    async fn timed_publish(&self, publications: Vec<Publication>) -> Result<Vec<Position>, Error> {
        let start = std::time::Instant::now();
        let result = self.inner.backplane.publish_many(publications).await;
        if result.is_ok() {
            let nanos = u64::try_from(start.elapsed().as_nanos())
                .unwrap_or(u64::MAX)
                .max(1);
            self.inner.last_publish_nanos.store(nanos, Ordering::Relaxed);
        }
        result
    }

    /// How long the last successful publication (or batch) of this node took the backplane to
    /// acknowledge: its round trip to the backplane's server (`None` before the first one).
    pub fn last_publish_round_trip(&self) -> Option<std::time::Duration> {
        match self.inner.last_publish_nanos.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(std::time::Duration::from_nanos(nanos)),
        }
    }

    /// A message as a publication, if it may be published.
    fn publication(&self, publisher: u64, topic: &Topic, message: Message) -> Result<Publication, Error> {
        let kind = match &message {
            Message::Text(_) => DataKind::Text,
            Message::Binary(_) => DataKind::Binary,
            _ => return Err(Error::NotData),
        };
        let payload = message.into_payload();
        if payload.len() > self.inner.config.max_payload {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: self.inner.config.max_payload,
            });
        }
        Ok(Publication {
            topic: topic.clone(),
            position: None,
            origin: Origin {
                node: self.inner.node,
                publisher,
            },
            kind,
            payload,
        })
    }
}

/// Publishes as a [`Subscriber`](super::Subscriber) (see
/// [`Subscriber::publisher`](super::Subscriber::publisher)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Publisher {
    pub(super) hub: Hub,
    pub(super) id: u64,
}

impl Publisher {
    /// Publishes to every subscriber of `topic` but the one this handle came from, on every node:
    /// see [`Hub::publish`] for what it returns and what an error means.
    pub async fn publish(&self, topic: &Topic, message: Message) -> Result<Option<Position>, Error> {
        self.hub.publish_as(self.id, topic, message).await
    }

    /// Publishes `messages` in order, in one go, as this handle's subscriber: see
    /// [`Hub::publish_many`] for what is checked, what it returns and what an error means.
    pub async fn publish_many(&self, topic: &Topic, messages: Vec<Message>) -> Result<Vec<Position>, Error> {
        self.hub.publish_many_as(self.id, topic, messages).await
    }
}
