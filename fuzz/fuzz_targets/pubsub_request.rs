//! The pub/sub JSON protocol's request parser on arbitrary bytes: never panics, and whatever it
//! answers is well-formed: a refusal's `error` frame and every answer to an accepted request are
//! valid JSON that carry the request's id back unchanged; a publication's data reads the same
//! in a strict parser (regressions/: an unpaired surrogate escape it once let through).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sockeye_pubsub::json_protocol::{parse_request, reply, Request};
use sockeye_pubsub::Recovery;

fn json(frame: &str) -> serde_json::Value {
    serde_json::from_str(frame).unwrap_or_else(|e| panic!("not JSON ({e}): {frame}"))
}

/// A publication's data reads in a strict parser (serde_json: surrogate escapes in pairs, at
/// most 128 levels, numbers within an f64), and so does the frame that carries it to
/// subscribers.
fn data_reads_alike(data: &str) {
    json(data);
    json(&format!(r#"{{"type":"message","topic":"t","data":{data}}}"#));
}

fuzz_target!(|data: &[u8]| {
    match parse_request(data) {
        Err(refusal) => {
            let frame = json(&reply::error(&refusal));
            if let Some(id) = &refusal.id {
                assert_eq!(frame["id"], json(id.as_json()));
            }
        }
        Ok(request) => {
            let id = request.id().cloned();
            let frame = match &request {
                Request::Subscribe { topic, .. } => reply::subscribed(topic, &Recovery::Lost, id.as_ref()),
                Request::Unsubscribe { topic, .. } => reply::unsubscribed(topic, id.as_ref()),
                Request::Publish { topic, data, .. } => {
                    // The data is one JSON value, kept as sent.
                    data_reads_alike(std::str::from_utf8(data).expect("data is UTF-8"));
                    reply::published(topic, None, id.as_ref())
                }
                _ => return,
            };
            let frame = json(&frame);
            if let Some(id) = &id {
                assert_eq!(frame["id"], json(id.as_json()));
            }
        }
    }
});
