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

/// A piece of a data message, delivered as it arrives by
/// [`Connection::poll_chunk`](crate::Connection::poll_chunk), for messages too large to hold
/// whole (RFC 6455 §5.4: a message is a sequence of frames, and a frame a sequence of bytes; the
/// pieces follow neither boundary).
///
/// The pieces of one message arrive in order, the first with `first` set and the last with
/// `last` set (one piece may be both). Their concatenation is the message. The limits of the
/// [`Config`](crate::Config) hold as for whole messages, and a text message is checked as it
/// arrives: every piece handed over is a valid UTF-8 prefix, though one piece may end inside a
/// code point that the next one finishes (the whole message is valid once `last` arrives).
/// Compressed messages (RFC 7692) arrive inflated, a bounded piece at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessageChunk {
    /// Whether the message is text or binary.
    pub kind: crate::role::DataKind,
    /// The bytes of this piece, possibly empty (an empty message is one empty piece).
    pub data: Bytes,
    /// The first piece of its message.
    pub first: bool,
    /// The last piece of its message: the message is complete.
    pub last: bool,
}

/// What [`Connection::poll_chunk`](crate::Connection::poll_chunk) hands over: a piece of a data
/// message, or a control frame (ping, pong, close) whole, as [`Message`] carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A piece of a text or binary message.
    Chunk(MessageChunk),
    /// A ping, pong or close frame: never `Message::Text` or `Message::Binary`.
    Control(Message),
}
