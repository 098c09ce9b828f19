//! Reading what a publishing connection has already sent, for one
//! [`publish_many`](crate::Publisher::publish_many).

use futures_util::{FutureExt, Stream, StreamExt};
use sockeye::Message;

/// Waits for the next message of `stream`, then takes every message already received without
/// waiting again, up to `max_messages` data messages or `max_bytes` of payload, into `batch`
/// (control messages are skipped): what a connection publishes with one backplane round trip
/// instead of one per message, in its order.
///
/// Returns `false` once the stream has ended or failed; what was read before that is in
/// `batch`, to publish still.
///
/// ```no_run
/// # async fn demo(
/// #     mut reader: sockeye::WebSocketReader<sockeye::TransportStream>,
/// #     publisher: sockeye_pubsub::Publisher,
/// #     topic: sockeye_pubsub::Topic,
/// # ) -> Result<(), sockeye_pubsub::Error> {
/// let mut batch = Vec::new();
/// let mut open = true;
/// while open {
///     open = sockeye_pubsub::next_batch(&mut reader, &mut batch, 256, 1 << 20).await;
///     if !batch.is_empty() {
///         publisher.publish_many(&topic, std::mem::take(&mut batch)).await?;
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub async fn next_batch<S>(
    stream: &mut S,
    batch: &mut Vec<Message>,
    max_messages: usize,
    max_bytes: usize,
) -> bool
where
    S: Stream<Item = Result<Message, sockeye::Error>> + Unpin,
{
    let Some(Ok(first)) = stream.next().await else {
        return false;
    };
    let mut bytes = take(first, batch);
    while batch.len() < max_messages && bytes < max_bytes {
        match stream.next().now_or_never() {
            Some(Some(Ok(m))) => bytes += take(m, batch),
            // Ended (or failed): what was read still goes out.
            Some(_) => return false,
            None => break,
        }
    }
    true
}

/// Adds a data message to the batch; its payload length (0 for a control message, not added).
fn take(m: Message, batch: &mut Vec<Message>) -> usize {
    if !m.is_data() {
        return 0;
    }
    let len = m.as_payload().len();
    batch.push(m);
    len
}
