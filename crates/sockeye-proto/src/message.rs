//! Messages as the application sees them.

use bytes::Bytes;

use crate::frame::CloseFrame;
use crate::utf8::Utf8Bytes;

/// A WebSocket message, or a control frame the application may want to see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A text message: UTF-8, checked on receipt.
    Text(Utf8Bytes),
    /// A binary message.
    Binary(Bytes),
    /// A ping. Received pings are answered automatically unless [`Config::auto_pong`](crate::Config)
    /// is off.
    Ping(Bytes),
    /// A pong.
    Pong(Bytes),
    /// A close frame: `None` when it carried no status code (reported as 1005).
    Close(Option<CloseFrame>),
}

impl Message {
    /// A text message.
    pub fn text(s: impl Into<Utf8Bytes>) -> Message {
        Message::Text(s.into())
    }

    /// A binary message.
    pub fn binary(b: impl Into<Bytes>) -> Message {
        Message::Binary(b.into())
    }

    /// Whether this is a text or binary message (not a control frame).
    pub fn is_data(&self) -> bool {
        matches!(self, Message::Text(_) | Message::Binary(_))
    }

    /// The payload bytes (for a close frame, the reason).
    pub fn as_payload(&self) -> &[u8] {
        match self {
            Message::Text(t) => t.as_bytes(),
            Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => b,
            Message::Close(Some(f)) => f.reason.as_bytes(),
            Message::Close(None) => &[],
        }
    }

    /// The payload as a `Bytes` (for a close frame, the reason), without copying.
    pub fn into_payload(self) -> Bytes {
        match self {
            Message::Text(t) => t.into_bytes(),
            Message::Binary(b) | Message::Ping(b) | Message::Pong(b) => b,
            Message::Close(Some(f)) => f.reason.into_bytes(),
            Message::Close(None) => Bytes::new(),
        }
    }
}

impl From<String> for Message {
    fn from(s: String) -> Self {
        Message::Text(s.into())
    }
}

impl From<&str> for Message {
    fn from(s: &str) -> Self {
        Message::Text(s.into())
    }
}

impl From<Vec<u8>> for Message {
    fn from(b: Vec<u8>) -> Self {
        Message::Binary(b.into())
    }
}

impl From<Bytes> for Message {
    fn from(b: Bytes) -> Self {
        Message::Binary(b)
    }
}
