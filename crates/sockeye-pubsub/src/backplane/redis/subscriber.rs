//! The pub/sub connection: subscribing and unsubscribing topics' channels, and the reader that
//! forwards messages to the hub (in bounded memory: `backplane/forward.rs`), checks the connection with a PING, and on a loss says
//! [`Event::Lost`], reconnects with backoff, subscribes again to every topic and says
//! [`Event::Restored`].

use std::sync::Arc;

use futures_util::StreamExt;
use redis::Value;
use redis::aio::PubSubStream;

use super::connection::{
    BACKOFF, Commands, HEALTH_INTERVAL, RESPONSE_TIMEOUT, Shared, answers, unsubscribe_within,
};
use super::wire::{channel, decode_message, record_history};
use crate::backplane::api::Event;
use crate::backplane::forward::Forwarder;
use crate::error::Error;
use crate::topic::Topic;

/// The pub/sub reader: forwards messages, and reconnects when the connection drops. Ends when the
/// hub stops listening (or the backplane is dropped, which aborts it).
pub(super) async fn read(shared: Arc<Shared>, mut stream: PubSubStream) {
    let mut to_hub = Forwarder::new(shared.events.clone(), format!("redis {}", shared.addr));
    loop {
        // The old connection goes with its stream.
        let reason = forward(&shared, &mut to_hub, stream).await;
        let Some(reason) = reason else { return };
        shared.subs.lock().await.sink = None;
        shared.reset_commands().await;
        if to_hub.send(Event::Lost { reason }).await.is_err() {
            return;
        }
        let mut retry = 0;
        stream = loop {
            tokio::time::sleep(BACKOFF.random_delay(retry)).await;
            match shared.resubscribe().await {
                Ok(stream) => break stream,
                Err(e) => {
                    tracing::debug!("pub/sub backplane: reconnecting: {e}");
                    retry = retry.saturating_add(1);
                }
            }
        };
        // A command connection made while Redis was going down may be dead: start afresh.
        shared.reset_commands().await;
        if to_hub.send(Event::Restored).await.is_err() {
            return;
        }
    }
}

impl Shared {
    /// Subscribes to `topic`'s channel (or leaves it to the reconnection under way), then
    /// records this node's history setting for the topic (best effort: see
    /// [`RECORD_HISTORY_SCRIPT`](super::wire::RECORD_HISTORY_SCRIPT)).
    pub(super) async fn subscribe(&self, topic: Topic) -> Result<(), Error> {
        self.subscribe_channel(topic.clone()).await?;
        if let Some(invocation) = record_history(&self.history, &topic) {
            let recorded = async {
                let Commands { mut conn, .. } = self.commands().await?;
                invocation
                    .invoke_async::<Value>(&mut conn)
                    .await
                    .map_err(|e| self.error(&format!("record the history setting of {topic}"), e))
            };
            match tokio::time::timeout(RESPONSE_TIMEOUT, recorded).await {
                Ok(Ok(_)) => {}
                // Not recorded: until a node with history publishes on the topic, what a node
                // without history publishes on it is not kept (a gap for whoever resumes across
                // it, never a silent miss).
                Ok(Err(e)) => tracing::debug!("pub/sub backplane: {e}"),
                Err(_) => tracing::debug!(
                    "pub/sub backplane: redis {}: recording the history setting of {topic}: no answer",
                    self.addr
                ),
            }
        }
        Ok(())
    }

    async fn subscribe_channel(&self, topic: Topic) -> Result<(), Error> {
        let mut subs = self.subs.lock().await;
        if !subs.topics.insert(topic.clone()) {
            return Ok(());
        }
        let Some(sink) = subs.sink.as_mut() else {
            // Reconnecting: the reconnection subscribes to it.
            return Ok(());
        };
        match tokio::time::timeout(RESPONSE_TIMEOUT, sink.subscribe(channel(&topic.to_hex()))).await {
            Ok(Ok(())) => Ok(()),
            // The connection is going (or the server hangs, which the health check
            // notices): the reader reconnects and subscribes to it.
            Err(_) => Ok(()),
            Ok(Err(e)) if e.is_connection_dropped() || e.is_io_error() => Ok(()),
            Ok(Err(e)) => {
                subs.topics.remove(&topic);
                Err(self.error(&format!("subscribe to {topic}"), e))
            }
        }
    }

    /// Unsubscribes from `topic`'s channel.
    pub(super) async fn unsubscribe(&self, topic: Topic) -> Result<(), Error> {
        let mut subs = self.subs.lock().await;
        if !subs.topics.remove(&topic) {
            return Ok(());
        }
        let Some(sink) = subs.sink.as_mut() else {
            return Ok(());
        };
        unsubscribe_within(sink.unsubscribe(channel(&topic.to_hex())))
            .await
            .map_err(|e| self.error(&format!("unsubscribe from {topic}"), e))
    }

    /// A new pub/sub connection subscribed to every current topic, installed.
    async fn resubscribe(&self) -> Result<PubSubStream, Error> {
        let mut subs = self.subs.lock().await;
        let channels: Vec<String> = subs.topics.iter().map(|t| channel(&t.to_hex())).collect();
        let (sink, stream) = self.connect_pubsub(RESPONSE_TIMEOUT, &channels).await?;
        subs.sink = Some(sink);
        Ok(stream)
    }

    /// Health check of the pub/sub connection: `false` if it does not answer.
    async fn ping(&self) -> bool {
        let mut subs = self.subs.lock().await;
        let Some(sink) = subs.sink.as_mut() else {
            return false;
        };
        answers(sink.ping::<Value>()).await
    }
}

/// Forwards messages until the connection is lost (`Some(reason)`) or the hub stops (`None`),
/// never waiting on the hub: the client buffers what it reads without bound, so what the hub
/// cannot take is dropped and reported (see `backplane/forward.rs`).
async fn forward(shared: &Shared, to_hub: &mut Forwarder, mut stream: PubSubStream) -> Option<String> {
    let mut health = tokio::time::interval(HEALTH_INTERVAL);
    health.tick().await;
    loop {
        tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else {
                    return Some(format!("redis {}: pub/sub connection closed", shared.addr));
                };
                let Some(p) = decode_message(msg.get_channel_name().as_bytes(), msg.get_payload_bytes()) else {
                    tracing::warn!(
                        "pub/sub backplane: redis {}: skipped a malformed message on channel {:?}",
                        shared.addr,
                        msg.get_channel_name()
                    );
                    continue;
                };
                if to_hub.publication(p).is_err() {
                    return None;
                }
            }
            reported = to_hub.room(), if to_hub.owes() => {
                if reported.is_err() {
                    return None;
                }
            }
            _ = health.tick() => {
                if !shared.ping().await {
                    return Some(format!("redis {}: pub/sub connection does not answer PING", shared.addr));
                }
            }
        }
    }
}
