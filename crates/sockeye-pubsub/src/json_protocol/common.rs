//! What requests and replies share: a request's id, the error codes, a refused request.

use std::fmt;

use crate::error::Error;

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
    /// The node already follows as many topics as it allows
    /// ([`HubConfig::max_topics`](crate::HubConfig)): not the client's fault; retry later, or on
    /// another node.
    NodeFull,
    /// The connection publishes faster than the node allows it (`--max-publish-rate`): nothing
    /// was published; send it again a little later.
    RateLimited,
    /// A refresh's token was refused (not valid, or for another identity): the connection
    /// stays up until its current token expires.
    Unauthorized,
}

impl ErrorCode {
    /// Every code, in the order of the protocol document's table.
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::BadJson,
        ErrorCode::UnknownType,
        ErrorCode::BadRequest,
        ErrorCode::InvalidTopic,
        ErrorCode::TooLarge,
        ErrorCode::NotAllowed,
        ErrorCode::TooManySubscriptions,
        ErrorCode::Unavailable,
        ErrorCode::NodeFull,
        ErrorCode::RateLimited,
        ErrorCode::Unauthorized,
    ];

    /// Whether the refused request may succeed when sent again unchanged, later: the condition
    /// is the node's and passes (its backplane down, the node full). A client retries these
    /// with backoff and keeps what it had (a topic, its position); every other code is
    /// permanent: sending the same request again gets the same answer. The protocol document's
    /// "retryable" column, which the JavaScript client follows.
    pub fn retryable(self) -> bool {
        match self {
            ErrorCode::Unavailable | ErrorCode::NodeFull | ErrorCode::RateLimited => true,
            ErrorCode::BadJson
            | ErrorCode::UnknownType
            | ErrorCode::BadRequest
            | ErrorCode::InvalidTopic
            | ErrorCode::TooLarge
            | ErrorCode::NotAllowed
            | ErrorCode::TooManySubscriptions
            | ErrorCode::Unauthorized => false,
        }
    }

    /// The code a hub's refusal of a request is answered with: the one table from [`Error`] to
    /// the wire, with no catch-all, so that a new error has to be placed in it. A retryable code
    /// exactly for what a reconnect may cure (the error's close code is 1013).
    pub fn of(error: &Error) -> ErrorCode {
        match error {
            Error::TooManySubscriptions { .. } => ErrorCode::TooManySubscriptions,
            Error::InvalidTopic(_) => ErrorCode::InvalidTopic,
            Error::PayloadTooLarge { .. } => ErrorCode::TooLarge,
            Error::InvalidPosition(_) | Error::NotData => ErrorCode::BadRequest,
            Error::TooManyTopics { .. } | Error::NodeQueuesFull { .. } => ErrorCode::NodeFull,
            // The node's own backplane URL or setting: another node, or this one fixed, may
            // serve it.
            Error::Backplane { .. }
            | Error::PartlyPublished { .. }
            | Error::Closed
            | Error::InvalidUrl(_)
            | Error::InvalidConfig(_) => ErrorCode::Unavailable,
            // Never the answer to a request (the session closes with 1008 first); the client
            // reconnects and resumes, as for an outage.
            Error::TooSlow { .. } => ErrorCode::Unavailable,
        }
    }

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
            ErrorCode::NodeFull => "node_full",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Unauthorized => "unauthorized",
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

#[cfg(test)]
mod tests {
    use sockeye::CloseCode;

    use super::*;

    fn every_error() -> Vec<Error> {
        vec![
            Error::InvalidTopic("x".into()),
            Error::InvalidUrl("x".into()),
            Error::InvalidConfig("x".into()),
            Error::PayloadTooLarge { len: 2, max: 1 },
            Error::NotData,
            Error::Backplane {
                what: "x".into(),
                source: None,
            },
            Error::TooManySubscriptions { max: 1 },
            Error::TooManyTopics { max: 1 },
            Error::NodeQueuesFull { queued: 1, max: 1 },
            Error::InvalidPosition("x".into()),
            Error::Closed,
            Error::PartlyPublished {
                published: 0,
                sent: 1,
                source: Box::new(Error::Closed),
            },
        ]
    }

    /// Issue 39 (b): `TooManyTopics` was answered `unavailable` by a catch-all; every error now
    /// has its code, retryable exactly when a reconnect may cure it.
    #[test]
    fn a_retryable_condition_gets_a_retryable_code_and_only_it() {
        for e in every_error() {
            let code = ErrorCode::of(&e);
            let cured_by_retry = e.close_frame().code == CloseCode::TRY_AGAIN_LATER;
            assert_eq!(code.retryable(), cured_by_retry, "{e:?} answered {code}");
        }
        assert_eq!(
            ErrorCode::of(&Error::TooManyTopics { max: 1 }),
            ErrorCode::NodeFull
        );
        assert_eq!(
            ErrorCode::of(&Error::TooManySubscriptions { max: 1 }),
            ErrorCode::TooManySubscriptions
        );
    }

    /// The protocol document's error table is this one: every code, in order, with its
    /// retryable column.
    #[test]
    fn the_protocol_document_lists_every_code_and_whether_it_is_retryable() {
        let doc = include_str!("../../../../docs/pubsub-protocol.md");
        let errors = &doc[doc.find("## Errors").unwrap()..doc.find("## A session").unwrap()];
        let rows: Vec<(String, bool)> = errors
            .lines()
            .filter_map(|line| {
                let mut cells = line.strip_prefix("| `")?.split(" | ");
                let code = cells.next()?.strip_suffix('`')?.to_owned();
                let retryable = match cells.next()? {
                    "yes" => true,
                    "no" => false,
                    _ => return None,
                };
                Some((code, retryable))
            })
            .collect();
        let table: Vec<(String, bool)> = ErrorCode::ALL
            .iter()
            .map(|c| (c.as_str().to_owned(), c.retryable()))
            .collect();
        assert_eq!(rows, table);
    }
}
