//! What requests and replies share: a request's id, the error codes, a refused request, and
//! the check that JSON relayed as sent reads the same in every parser.

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

/// The byte offset of the first `\uXXXX` escape in `json` that is half of a UTF-16 surrogate
/// pair without its other half, if any. `json` is valid JSON text (RFC 8259), so every
/// backslash starts an escape.
///
/// RFC 8259 §8.2 lets such strings through its grammar but leaves what a parser does with them
/// unpredictable (serde_json refuses the whole text, a browser keeps the lone half, Python's
/// text then fails to encode); I-JSON (RFC 7493 §2.1) forbids them. Data the node relays as
/// sent is checked with this, so that every subscriber can read every frame.
pub(crate) fn unpaired_surrogate(json: &str) -> Option<usize> {
    let bytes = json.as_bytes();
    // A high surrogate's escape just read, whose low half must be the very next escape.
    let mut high: Option<usize> = None;
    let mut from = 0;
    while let Some(found) = json.get(from..).and_then(|rest| rest.find('\\')) {
        let at = from + found;
        if high.is_some() && at != from {
            return high;
        }
        if bytes.get(at + 1) != Some(&b'u') {
            // `\n`, `\"`, `\\`…: two bytes.
            if high.is_some() {
                return high;
            }
            from = at + 2;
            continue;
        }
        let Some(unit) = json
            .get(at + 2..at + 6)
            .and_then(|hex| u16::from_str_radix(hex, 16).ok())
        else {
            return Some(at); // not valid JSON after all: refuse rather than relay
        };
        match unit {
            0xD800..=0xDBFF if high.is_none() => high = Some(at),
            0xDC00..=0xDFFF if high.is_some() => high = None,
            0xD800..=0xDFFF => return high.or(Some(at)),
            _ if high.is_some() => return high,
            _ => {}
        }
        from = at + 6;
    }
    high
}

/// Why `json` (valid JSON text) cannot be relayed as sent, if it cannot: for an error message
/// that says what to send instead.
pub(crate) fn not_relayable(json: &str) -> Option<String> {
    let at = unpaired_surrogate(json)?;
    let escape = json.get(at..at + 6).unwrap_or("\\u…");
    Some(format!(
        "holds an unpaired UTF-16 surrogate escape ({escape} at byte {at}), which I-JSON (RFC 7493 §2.1) forbids and JSON parsers read differently: escape a character beyond U+FFFF as its pair of surrogates, or send the character itself"
    ))
}

#[cfg(test)]
mod tests {
    use super::unpaired_surrogate;

    #[test]
    fn surrogate_escapes_must_come_in_pairs() {
        for ok in [
            r#""plain""#,
            r#""\u00e9 \n \" \\ \/""#,
            r#""\ud83d\ude00""#,
            r#""\uD83D\uDE00 and \ud83d\ude01""#,
            r#"["\\ud800"]"#,
            r#"{"a\\":"\\udc00"}"#,
            "1e400",
        ] {
            assert_eq!(unpaired_surrogate(ok), None, "{ok}");
        }
        for (bad, at) in [
            (r#""\udddd""#, 1),
            (r#""\ud83d""#, 1),
            (r#""\ud83d x""#, 1),
            (r#""\ud83d\n""#, 1),
            (r#""\ud83d\u0041""#, 1),
            (r#""\ud83d\ud83d\ude00""#, 1),
            (r#""\ude00\ud83d""#, 1),
            (r#"{"a":"ok","b":"\\\udfff"}"#, 17),
        ] {
            assert_eq!(unpaired_surrogate(bad), Some(at), "{bad}");
        }
    }
}
