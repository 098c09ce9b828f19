//! Server → client: the text of each frame the node sends.
//!
//! A `message` frame is the same for every subscriber of its topic on a node: build it once per
//! publication with [`message`] and send the same text (or one prepared message) to all.

use std::fmt::Write as _;

use base64::Engine as _;

use super::common::{Refusal, RequestId};
use super::relayable::not_relayable;
use crate::backplane::position::{Position, Recovery};
use crate::delivery::Published;
use crate::topic::Topic;

/// `{"type":"subscribed","topic":T,"recovery":"live"|"recovered"|"lost","recovered":N}`: the
/// answer to a subscribe. After `"lost"` a `gap` frame follows, then what the history still
/// holds, then live messages.
pub fn subscribed(topic: &Topic, recovery: &Recovery, id: Option<&RequestId>) -> String {
    let (how, count) = match recovery {
        Recovery::Live => ("live", 0),
        Recovery::Recovered { count } => ("recovered", *count),
        Recovery::Lost => ("lost", 0),
    };
    let mut frame = head("subscribed", topic);
    let _ = write!(frame, r#","recovery":"{how}","recovered":{count}"#);
    end(frame, id)
}

/// `{"type":"unsubscribed","topic":T}`: the answer to an unsubscribe (also when the connection
/// was not subscribed: the end state is the one asked for).
pub fn unsubscribed(topic: &Topic, id: Option<&RequestId>) -> String {
    end(head("unsubscribed", topic), id)
}

/// `{"type":"published","topic":T,"offset":N,"epoch":E}`: the answer to a publish, with the
/// position the publication got (without `offset` and `epoch` on a backplane without history).
pub fn published(topic: &Topic, position: Option<&Position>, id: Option<&RequestId>) -> String {
    let mut frame = head("published", topic);
    if let Some(position) = position {
        push_position(&mut frame, position);
    }
    end(frame, id)
}

/// `{"type":"message","topic":T,"offset":N,"epoch":E,"data":ANY_JSON}`: a publication.
///
/// `data` is the payload as published through this protocol (a JSON value). A payload that is
/// not JSON (published by another kind of client, such as `ws broadcast_server`'s) is sent as a
/// JSON string when it is UTF-8 text, and as `"data_base64"` (standard alphabet, padded) in place
/// of `"data"` otherwise, so that a frame is always valid JSON.
pub fn message(publication: &Published) -> String {
    let mut frame = head("message", publication.topic());
    if let Some(position) = publication.position() {
        push_position(&mut frame, position);
    }
    push_data(&mut frame, publication.message().as_payload());
    frame.push('}');
    frame
}

/// `,"data":…` (or `,"data_base64":…`) for a payload, as [`message`] writes it.
pub(crate) fn push_data(frame: &mut String, payload: &[u8]) {
    match std::str::from_utf8(payload) {
        // JSON that every parser reads alike goes as it is; anything else as a string.
        Ok(text)
            if serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok()
                && not_relayable(text).is_none() =>
        {
            frame.push_str(r#","data":"#);
            frame.push_str(text.trim());
        }
        Ok(text) => {
            frame.push_str(r#","data":"#);
            push_string(frame, text);
        }
        Err(_) => {
            frame.push_str(r#","data_base64":""#);
            base64::engine::general_purpose::STANDARD.encode_string(payload, frame);
            frame.push('"');
        }
    }
}

/// `{"type":"gap","topic":T,"resume":{"offset":N,"epoch":E}}`: publications on the topic may
/// have been missed and cannot be recovered. Store `resume` as the topic's last position (it is
/// `null` when there is none to store: keep the one held before). See `Delivery::Gap`.
pub fn gap(topic: &Topic, resume: Option<&Position>) -> String {
    let mut frame = head("gap", topic);
    match resume {
        Some(position) => {
            frame.push_str(r#","resume":{"#);
            push_position_fields(&mut frame, position);
            frame.push('}');
        }
        None => frame.push_str(r#","resume":null"#),
    }
    frame.push('}');
    frame
}

/// `{"type":"dropped","count":N}`: this many publications did not fit in the connection's
/// queue and were dropped (a node configured to drop for slow clients rather than close them).
pub fn dropped(count: u64) -> String {
    format!(r#"{{"type":"dropped","count":{count}}}"#)
}

/// `{"type":"refreshed","expires":UNIX_SECONDS}`: the answer to a refresh; the connection now
/// expires at `expires` (`null`: never).
pub fn refreshed(expires: Option<std::time::SystemTime>, id: Option<&RequestId>) -> String {
    let mut frame = String::from(r#"{"type":"refreshed","expires":"#);
    match expires.and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok()) {
        Some(since) => {
            let _ = write!(frame, "{}", since.as_secs());
        }
        None => frame.push_str("null"),
    }
    end(frame, id)
}

/// `{"type":"error","code":C,"message":M,"id":I}`: a refused request.
pub fn error(refusal: &Refusal) -> String {
    let mut frame = String::from(r#"{"type":"error","code":""#);
    frame.push_str(refusal.code.as_str());
    frame.push_str(r#"","message":"#);
    push_string(&mut frame, &refusal.message);
    end(frame, refusal.id.as_ref())
}

/// `{"type":KIND,"topic":T` (unterminated).
fn head(kind: &str, topic: &Topic) -> String {
    let mut frame = String::with_capacity(64 + topic.as_str().len());
    let _ = write!(frame, r#"{{"type":"{kind}","topic":"#);
    push_string(&mut frame, topic.as_str());
    frame
}

/// Adds the id, if any, and closes the object.
fn end(mut frame: String, id: Option<&RequestId>) -> String {
    if let Some(id) = id {
        frame.push_str(r#","id":"#);
        frame.push_str(id.as_json());
    }
    frame.push('}');
    frame
}

fn push_position(frame: &mut String, position: &Position) {
    frame.push(',');
    push_position_fields(frame, position);
}

pub(crate) fn push_position_fields(frame: &mut String, position: &Position) {
    let _ = write!(frame, r#""offset":{},"epoch":"#, position.offset);
    push_string(frame, &position.epoch);
}

/// A JSON string literal (quoted and escaped).
pub(crate) fn push_string(frame: &mut String, s: &str) {
    // Serialising a &str cannot fail.
    frame.push_str(&serde_json::to_string(s).unwrap_or_default());
}
