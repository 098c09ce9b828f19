//! Client → server: a text frame parsed into a [`Request`], or refused with a [`Refusal`].

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::common::{ErrorCode, Refusal, RequestId};
use super::relayable::not_relayable;
use crate::backplane::position::Position;
use crate::topic::Topic;

/// The longest epoch a client may send in `since`. Epochs are the node's own (a few dozen
/// bytes); a longer one cannot be a position this node handed out.
const MAX_EPOCH_LEN: usize = 256;

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// `{"type":"subscribe","topic":T}`, or with `"since":{"offset":N,"epoch":E}` to resume
    /// after the publication at that position.
    Subscribe {
        /// The topic.
        topic: Topic,
        /// Where to resume from: the last position the client received.
        since: Option<Position>,
        /// The id to echo.
        id: Option<RequestId>,
    },
    /// `{"type":"unsubscribe","topic":T}`.
    Unsubscribe {
        /// The topic.
        topic: Topic,
        /// The id to echo.
        id: Option<RequestId>,
    },
    /// `{"type":"publish","topic":T,"data":ANY_JSON}`.
    Publish {
        /// The topic.
        topic: Topic,
        /// The JSON text of `data`, exactly as the client sent it: the publication's payload,
        /// delivered to subscribers inside their `message` frames unchanged.
        data: Bytes,
        /// The id to echo.
        id: Option<RequestId>,
    },
    /// `{"type":"refresh","token":T}`: the connection's token, renewed before it expires.
    Refresh {
        /// The new token.
        token: String,
        /// The id to echo.
        id: Option<RequestId>,
    },
}

impl Request {
    /// The request's id, if it had one.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Request::Subscribe { id, .. }
            | Request::Unsubscribe { id, .. }
            | Request::Publish { id, .. }
            | Request::Refresh { id, .. } => id.as_ref(),
        }
    }
}

/// Parses one text frame of a client. Never panics; anything that is not a request of the
/// protocol is a [`Refusal`] naming what was wrong (with the request's id when it had one).
/// Unknown fields are ignored, so that clients may send fields a later version understands.
pub fn parse_request(frame: &[u8]) -> Result<Request, Refusal> {
    let fields: HashMap<Cow<'_, str>, &RawValue> = serde_json::from_slice(frame).map_err(|e| {
        Refusal::new(
            None,
            ErrorCode::BadJson,
            format!("a request is one JSON object in a text frame ({e})"),
        )
    })?;
    let field = |name: &str| fields.get(name).copied();
    let id = match field("id") {
        None => None,
        Some(raw) => Some(RequestId::from_json(raw.get()).ok_or_else(|| {
            Refusal::new(
                None,
                ErrorCode::BadRequest,
                format!(
                    "\"id\" must be a string or a number of at most {} characters",
                    RequestId::MAX_LEN
                ),
            )
        })?),
    };
    let refuse = |code, message: String| Refusal::new(id.clone(), code, message);
    let kind: String = field("type")
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
        .ok_or_else(|| {
            refuse(
                ErrorCode::UnknownType,
                "a request needs a \"type\": \"subscribe\", \"unsubscribe\", \"publish\" or \"refresh\""
                    .into(),
            )
        })?;
    let topic = || -> Result<Topic, Refusal> {
        let name: String = field("topic")
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .ok_or_else(|| {
                refuse(
                    ErrorCode::BadRequest,
                    format!("a {kind} request needs a \"topic\" (a string)"),
                )
            })?;
        Topic::new(&name).map_err(|e| refuse(ErrorCode::InvalidTopic, e.to_string()))
    };
    match kind.as_str() {
        "subscribe" => {
            let topic = topic()?;
            let since = match field("since") {
                None => None,
                Some(raw) if raw.get() == "null" => None,
                Some(raw) => Some(since(raw.get()).map_err(|why| refuse(ErrorCode::BadRequest, why))?),
            };
            Ok(Request::Subscribe { topic, since, id })
        }
        "unsubscribe" => Ok(Request::Unsubscribe { topic: topic()?, id }),
        "publish" => {
            let topic = topic()?;
            let data = field("data").ok_or_else(|| {
                refuse(
                    ErrorCode::BadRequest,
                    "a publish request needs \"data\" (any JSON value)".into(),
                )
            })?;
            if let Some(why) = not_relayable(data.get()) {
                return Err(refuse(ErrorCode::BadJson, format!("\"data\" {why}")));
            }
            Ok(Request::Publish {
                topic,
                data: Bytes::copy_from_slice(data.get().as_bytes()),
                id,
            })
        }
        "refresh" => {
            let token: String = field("token")
                .and_then(|raw| serde_json::from_str(raw.get()).ok())
                .filter(|t: &String| !t.is_empty())
                .ok_or_else(|| {
                    refuse(
                        ErrorCode::BadRequest,
                        "a refresh request needs a \"token\" (a non-empty string: the new token)".into(),
                    )
                })?;
            Ok(Request::Refresh { token, id })
        }
        other => Err(refuse(
            ErrorCode::UnknownType,
            format!(
                "unknown request type {:?}: send \"subscribe\", \"unsubscribe\", \"publish\" or \"refresh\"",
                truncated(other)
            ),
        )),
    }
}

/// `{"offset":N,"epoch":E}`: a position the node handed out in a `message` or `gap` frame.
fn since(text: &str) -> Result<Position, String> {
    #[derive(serde::Deserialize)]
    struct Since {
        offset: u64,
        epoch: String,
    }
    let why = "\"since\" must be {\"offset\": N, \"epoch\": E}: the position of the last message \
               (or the \"resume\" of the last gap) received on the topic";
    let since: Since = serde_json::from_str(text).map_err(|e| format!("{why} ({e})"))?;
    if since.epoch.is_empty() || since.epoch.len() > MAX_EPOCH_LEN {
        return Err(format!(
            "{why}; the epoch must be 1 to {MAX_EPOCH_LEN} characters"
        ));
    }
    Ok(Position {
        epoch: since.epoch.into(),
        offset: since.offset,
    })
}

/// At most 64 characters of a client's string, for an error message.
fn truncated(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(frame: &str) -> (ErrorCode, Option<String>) {
        let r = parse_request(frame.as_bytes()).unwrap_err();
        (r.code, r.id.map(|id| id.as_json().to_owned()))
    }

    #[test]
    fn every_request_type_parses() {
        assert_eq!(
            parse_request(br#"{"type":"subscribe","topic":"a","since":{"offset":5,"epoch":"e1"},"id":"x"}"#),
            Ok(Request::Subscribe {
                topic: Topic::new("a").unwrap(),
                since: Some(Position {
                    epoch: "e1".into(),
                    offset: 5
                }),
                id: RequestId::from_json("\"x\""),
            })
        );
        assert_eq!(
            parse_request(br#"{"topic":"a","type":"unsubscribe"}"#),
            Ok(Request::Unsubscribe {
                topic: Topic::new("a").unwrap(),
                id: None
            })
        );
        let Ok(Request::Publish { data, id, .. }) =
            parse_request(br#"{"type":"publish","topic":"a","data": {"k": [1, 2]} ,"id":12}"#)
        else {
            panic!("not a publish")
        };
        assert_eq!(&data[..], br#"{"k": [1, 2]}"#);
        assert_eq!(id.unwrap().as_json(), "12");
    }

    #[test]
    fn null_data_is_a_publication_and_null_since_is_none() {
        assert!(matches!(
            parse_request(br#"{"type":"publish","topic":"a","data":null}"#),
            Ok(Request::Publish { data, .. }) if &data[..] == b"null"
        ));
        assert!(matches!(
            parse_request(br#"{"type":"subscribe","topic":"a","since":null}"#),
            Ok(Request::Subscribe { since: None, .. })
        ));
    }

    /// Found by the fuzzer: `data` with a lone surrogate escape passed the parser's check (RFC
    /// 8259's grammar) and was relayed, and serde_json then refused the whole frame; its
    /// siblings, data nested too deep and numbers beyond a float, are refused too.
    #[test]
    fn data_not_every_parser_reads_is_refused_and_a_surrogate_pair_is_kept() {
        let lone =
            br#"{"type":"publish","topic":"chat","data":{"text":" hi\udddd15e9","n":[1,2.5e3,null]},"id":3}"#;
        let refusal = parse_request(lone).unwrap_err();
        assert_eq!(refusal.code, ErrorCode::BadJson);
        assert_eq!(refusal.id.unwrap().as_json(), "3");
        assert!(refusal.message.contains("\\udddd"), "{}", refusal.message);
        let too_deep = format!("{}{}", "[".repeat(101), "]".repeat(101));
        for bad in [
            r#""\ud83d""#,
            r#"["\ude00"]"#,
            r#"{"k":"\ud83d\u0041"}"#,
            "1e400",
            &too_deep,
        ] {
            let frame = format!(r#"{{"type":"publish","topic":"a","data":{bad}}}"#);
            assert_eq!(refused(&frame), (ErrorCode::BadJson, None), "{bad}");
        }
        let pair = br#"{"type":"publish","topic":"a","data":"\ud83d\ude00 \\udddd"}"#;
        assert!(matches!(
            parse_request(pair),
            Ok(Request::Publish { data, .. }) if &data[..] == br#""\ud83d\ude00 \\udddd""#
        ));
    }

    #[test]
    fn escaped_topic_names_are_unescaped() {
        assert!(matches!(
            parse_request(br#"{"type":"unsubscribe","topic":"user\/4\u0032"}"#),
            Ok(Request::Unsubscribe { topic, .. }) if topic.as_str() == "user/42"
        ));
    }

    #[test]
    fn refusals_name_the_code_and_keep_the_id() {
        assert_eq!(refused("not json"), (ErrorCode::BadJson, None));
        assert_eq!(refused("[1,2]"), (ErrorCode::BadJson, None));
        assert_eq!(refused(r#"{"id":1}"#), (ErrorCode::UnknownType, Some("1".into())));
        assert_eq!(
            refused(r#"{"type":"dance","id":"d"}"#),
            (ErrorCode::UnknownType, Some("\"d\"".into()))
        );
        assert_eq!(
            refused(r#"{"type":7,"id":2}"#),
            (ErrorCode::UnknownType, Some("2".into()))
        );
        assert_eq!(
            refused(r#"{"type":"subscribe","id":3}"#),
            (ErrorCode::BadRequest, Some("3".into()))
        );
        assert_eq!(
            refused(r#"{"type":"subscribe","topic":5}"#),
            (ErrorCode::BadRequest, None)
        );
        assert_eq!(
            refused(r#"{"type":"subscribe","topic":""}"#),
            (ErrorCode::InvalidTopic, None)
        );
        assert_eq!(
            refused(r#"{"type":"subscribe","topic":"a\u0000"}"#),
            (ErrorCode::InvalidTopic, None)
        );
        assert_eq!(
            refused(r#"{"type":"subscribe","topic":"a","since":{"offset":-1,"epoch":"e"}}"#),
            (ErrorCode::BadRequest, None)
        );
        assert_eq!(
            refused(r#"{"type":"subscribe","topic":"a","since":{"offset":1,"epoch":""}}"#),
            (ErrorCode::BadRequest, None)
        );
        assert_eq!(
            refused(r#"{"type":"subscribe","topic":"a","since":"1@e"}"#),
            (ErrorCode::BadRequest, None)
        );
        assert_eq!(
            refused(r#"{"type":"publish","topic":"a","id":4}"#),
            (ErrorCode::BadRequest, Some("4".into()))
        );
        // An id that is neither a string nor a number cannot be echoed: refused without one.
        assert_eq!(
            refused(r#"{"type":"publish","topic":"a","data":1,"id":{}}"#),
            (ErrorCode::BadRequest, None)
        );
        let long_id = format!(
            r#"{{"type":"unsubscribe","topic":"a","id":"{}"}}"#,
            "i".repeat(200)
        );
        assert_eq!(refused(&long_id), (ErrorCode::BadRequest, None));
    }

    #[test]
    fn invalid_utf8_and_truncated_frames_are_refused() {
        assert_eq!(
            parse_request(b"{\"type\":\"subscribe\",\"topic\":\"\xff\"}")
                .unwrap_err()
                .code,
            ErrorCode::BadJson
        );
        let whole = br#"{"type":"publish","topic":"a","data":{"x":[1,2,3]},"id":9}"#;
        for end in 0..whole.len() {
            assert!(
                parse_request(&whole[..end]).is_err(),
                "prefix of {end} bytes accepted"
            );
        }
        assert!(parse_request(whole).is_ok());
    }

    #[test]
    fn a_long_unknown_type_is_truncated_in_the_message() {
        let frame = format!(r#"{{"type":"{}"}}"#, "t".repeat(10_000));
        assert!(parse_request(frame.as_bytes()).unwrap_err().message.len() < 200);
    }
}
