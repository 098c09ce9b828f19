//! What requests and replies share: a request's id, the error codes, a refused request.

use std::fmt;

/// A request's `"id"`, echoed verbatim in the answer so that a client can match the two.
///
/// Held as the JSON text the client sent (a string or a number, at most
/// [`RequestId::MAX_LEN`] bytes), so that `7`, `7.0` and `"7"` come back exactly as sent.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(Box<str>);

impl RequestId {
    /// The longest id, as JSON text. Ids are for matching answers, not for carrying data.
    pub const MAX_LEN: usize = 128;

    /// Wraps the JSON text of an id; `None` unless it is a JSON string or number of at most
    /// [`MAX_LEN`](Self::MAX_LEN) bytes.
    pub fn from_json(text: &str) -> Option<RequestId> {
        let text = text.trim();
        if text.len() > Self::MAX_LEN {
            return None;
        }
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::String(_) | serde_json::Value::Number(_)) => Some(RequestId(text.into())),
            _ => None,
        }
    }

    /// The id as JSON text (`7`, `"a"`).
    pub fn as_json(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a request was refused: the `"code"` of an `error` frame. Clients match on the code, not
/// on the message (which is for people and may change).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The frame is not a JSON object (or not UTF-8 text, or a binary frame).
    BadJson,
    /// A JSON object without a known `"type"`.
    UnknownType,
    /// A known type with a field missing or of the wrong kind.
    BadRequest,
    /// The topic name is empty, longer than [`Topic::MAX_LEN`](crate::Topic::MAX_LEN) bytes or
    /// has control characters.
    InvalidTopic,
    /// A publication larger than the node accepts.
    TooLarge,
    /// The connection may not subscribe to or publish on this topic.
    NotAllowed,
    /// The connection already has as many subscriptions as the node allows.
    TooManySubscriptions,
    /// The node's backplane cannot be reached: nothing was published; the client may retry.
    Unavailable,
}

impl ErrorCode {
    /// The code as it appears on the wire (`"bad_json"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadJson => "bad_json",
            ErrorCode::UnknownType => "unknown_type",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::InvalidTopic => "invalid_topic",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::NotAllowed => "not_allowed",
            ErrorCode::TooManySubscriptions => "too_many_subscriptions",
            ErrorCode::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request the node will not carry out, answered with an `error` frame; the connection stays
/// up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The request's id, when it had a usable one.
    pub id: Option<RequestId>,
    /// Why, for programs.
    pub code: ErrorCode,
    /// Why, for people: what was wrong and what to send instead.
    pub message: String,
}

impl Refusal {
    /// A refusal of the request with `id`.
    pub fn new(id: Option<RequestId>, code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            id,
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Refusal {}
