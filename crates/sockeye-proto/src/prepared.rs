//! A data message prepared once and sent on many connections (fan-out, pub/sub).
//!
//! The payload is shared (`Bytes`), never copied per connection beyond what a short frame costs.
//! With permessage-deflate, a connection that does not keep compression context between messages
//! (the server side negotiated `server_no_context_takeover`, RFC 7692 §7.1.1.1; the client side
//! `client_no_context_takeover`) compresses every message from a fresh state, so the result
//! depends only on the level and the window size: it is computed once per distinct (level,
//! window bits) and shared by every such connection. A connection that keeps context must
//! compress for itself (its compressor's history is its own).

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::message::Message;
use crate::role::DataKind;

/// A text or binary message to send on many connections: cheap to clone (shared), its payload
/// and its compressed forms computed once. Send it with
/// [`Connection::send_prepared`](crate::Connection::send_prepared).
///
/// ```
/// use sockeye_proto::{Message, PreparedMessage};
/// let prepared = PreparedMessage::new(Message::text("to everyone")).unwrap();
/// assert_eq!(prepared.message(), &Message::text("to everyone"));
/// ```
#[derive(Clone, Debug)]
pub struct PreparedMessage(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    message: Message,
    /// Compressed payloads by (level, window bits); rarely more than one or two.
    compressed: Mutex<Vec<(u32, u8, Bytes)>>,
}

impl PreparedMessage {
    /// Prepares a text or binary message; `None` for a control message (ping, pong, close),
    /// which belongs to one connection.
    pub fn new(message: Message) -> Option<PreparedMessage> {
        if !message.is_data() {
            return None;
        }
        Some(PreparedMessage(Arc::new(Inner {
            message,
            compressed: Mutex::new(Vec::new()),
        })))
    }

    /// The message.
    pub fn message(&self) -> &Message {
        &self.0.message
    }

    /// Text or binary.
    pub fn kind(&self) -> DataKind {
        match self.0.message {
            Message::Text(_) => DataKind::Text,
            _ => DataKind::Binary,
        }
    }

    /// The payload, shared.
    pub fn payload(&self) -> &[u8] {
        self.0.message.as_payload()
    }

    /// The payload compressed from a fresh state at `level` with `bits` of window, computed by
    /// `compress` the first time it is asked for and shared after that.
    pub(crate) fn compressed_with(
        &self,
        level: u32,
        bits: u8,
        compress: impl FnOnce(&[u8]) -> Result<Vec<u8>, String>,
    ) -> Result<Bytes, String> {
        // A panic while holding the lock leaves at most a missing entry: still usable.
        let mut cache = self
            .0
            .compressed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, _, b)) = cache.iter().find(|(l, b, _)| *l == level && *b == bits) {
            return Ok(b.clone());
        }
        let out = Bytes::from(compress(self.payload())?);
        cache.push((level, bits, out.clone()));
        Ok(out)
    }

    /// How many compressed forms have been computed (for tests and statistics).
    pub fn compressed_forms(&self) -> usize {
        self.0
            .compressed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// Equal when the messages are (the cached compressed forms are a cost, not a value).
impl PartialEq for PreparedMessage {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.message == other.0.message
    }
}

impl Eq for PreparedMessage {}

impl From<PreparedMessage> for Message {
    fn from(p: PreparedMessage) -> Message {
        p.0.message.clone()
    }
}
