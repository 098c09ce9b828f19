//! The HTTP API for backends: `POST /publish/<topic>`, `POST /publish` (a batch) and
//! `GET /history/<topic>`, behind the operator's bearer token. Bodies are JSON, at most the
//! hub's largest publication (413 past it); errors are `{"error":{"code","message"}}` with the
//! protocol's codes.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use http::{HeaderMap, StatusCode, Uri, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;
use serde_json::value::RawValue;
use sockeye::Message;

use super::auth::same;
use super::query::{decode, query_param};
use super::respond;
use super::shared::Shared;
use crate::backplane::api::History;
use crate::backplane::position::Position;
use crate::error::Error;
use crate::json_protocol::not_relayable;
use crate::json_protocol::reply::{push_data, push_position_fields, push_string};
use crate::topic::Topic;

/// A refused request: its status and the error object.
struct Refusal(Response);

type Answer = Result<Response, Refusal>;

fn refuse(status: StatusCode, code: &str, message: impl AsRef<str>) -> Refusal {
    Refusal(respond::error(status, code, message.as_ref()))
}

fn finish(answer: Answer) -> Response {
    answer.unwrap_or_else(|Refusal(response)| response)
}

/// `POST /publish/<topic>`: the body is the data.
pub(crate) async fn publish_one(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    finish(
        async {
            let body = authorized_body(&shared, &headers, body).await?;
            let topic = topic_of(&uri, "/publish/")?;
            let data = json_text(&body)?;
            let items = vec![(topic, data.to_owned())];
            publish(&shared, items, false).await
        }
        .await,
    )
}

#[derive(Deserialize)]
struct Batch<'a> {
    #[serde(borrow)]
    publications: Vec<Item<'a>>,
}

#[derive(Deserialize)]
struct Item<'a> {
    topic: String,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// `POST /publish`: `{"publications":[{"topic":T,"data":D},…]}`, published in order.
pub(crate) async fn publish_batch(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    finish(
        async {
            let body = authorized_body(&shared, &headers, body).await?;
            let batch: Batch<'_> = serde_json::from_slice(&body).map_err(|e| {
                let code = if e.is_data() { "bad_request" } else { "bad_json" };
                refuse(
                    StatusCode::BAD_REQUEST,
                    code,
                    format!("the body must be {{\"publications\":[{{\"topic\":…,\"data\":…}},…]}}: {e}"),
                )
            })?;
            let mut items = Vec::with_capacity(batch.publications.len());
            for (i, item) in batch.publications.into_iter().enumerate() {
                let topic = Topic::new(&item.topic).map_err(|e| {
                    refuse(
                        StatusCode::BAD_REQUEST,
                        "invalid_topic",
                        format!("publications[{i}]: {e}; nothing was published"),
                    )
                })?;
                if let Some(why) = not_relayable(item.data.get()) {
                    return Err(refuse(
                        StatusCode::BAD_REQUEST,
                        "bad_json",
                        format!("publications[{i}].data {why}; nothing was published"),
                    ));
                }
                items.push((topic, item.data.get().to_owned()));
            }
            publish(&shared, items, true).await
        }
        .await,
    )
}

/// Publishes `items` in order, consecutive ones on one topic as one batch.
async fn publish(shared: &Shared, items: Vec<(Topic, String)>, batch: bool) -> Answer {
    let total = items.len();
    let mut positions: Vec<(Topic, Option<Position>)> = Vec::with_capacity(total);
    let mut rest = items.into_iter().peekable();
    while let Some((topic, first)) = rest.next() {
        let mut run = vec![Message::text(first)];
        while let Some((_, data)) = rest.next_if(|(t, _)| *t == topic) {
            run.push(Message::text(data));
        }
        let len = run.len();
        match shared.hub.publish_many(&topic, run).await {
            Ok(got) => {
                shared.metrics.published_by_http(len);
                let mut got = got.into_iter();
                positions.extend((0..len).map(|_| (topic.clone(), got.next())));
            }
            Err(e) => {
                let (published, sent) = match &e {
                    Error::PartlyPublished { published, sent, .. } => (*published, *sent),
                    _ => (0, 0),
                };
                shared.metrics.published_by_http(published);
                return Err(not_published(&e, positions, published, sent, total, batch));
            }
        }
    }
    Ok(respond::json(
        StatusCode::OK,
        match (batch, positions.as_slice()) {
            (false, [(topic, position)]) => position_json(topic, position.as_ref()),
            _ => format!(r#"{{"positions":[{}]}}"#, positions_json(&positions)),
        },
    ))
}

/// What a failed publication answers: what was published, and what may have been.
fn not_published(
    e: &Error,
    mut positions: Vec<(Topic, Option<Position>)>,
    published_of_run: usize,
    sent_of_run: usize,
    total: usize,
    batch: bool,
) -> Refusal {
    let (status, code) = match e {
        Error::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        Error::InvalidTopic(_) => (StatusCode::BAD_REQUEST, "invalid_topic"),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    };
    // Positions of a partly published run are not known: the backplane's answer was lost.
    let published = positions.len() + published_of_run;
    let uncertain = sent_of_run.saturating_sub(published_of_run);
    let message = if batch {
        format!(
            "{e}: the first {published} of the {total} publications were published{}, the rest were not; retry from publication {}",
            match uncertain {
                0 => String::new(),
                n => format!(", the next {n} may or may not have been"),
            },
            published + uncertain
        )
    } else if uncertain > 0 {
        format!("{e}: the publication may or may not have been published")
    } else {
        format!("{e}: nothing was published")
    };
    positions.truncate(published);
    let extra = format!(
        r#","published":{published},"uncertain":{uncertain},"positions":[{}]"#,
        positions_json(&positions)
    );
    Refusal(respond::json(status, respond::error_body(code, &message, &extra)))
}

fn positions_json(positions: &[(Topic, Option<Position>)]) -> String {
    let mut out = String::new();
    for (i, (topic, position)) in positions.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&position_json(topic, position.as_ref()));
    }
    out
}

/// `{"topic":T,"offset":N,"epoch":E}` (`offset` and `epoch` null from a backplane without
/// positions).
fn position_json(topic: &Topic, position: Option<&Position>) -> String {
    let mut out = String::from(r#"{"topic":"#);
    push_string(&mut out, topic.as_str());
    match position {
        Some(p) => {
            out.push(',');
            push_position_fields(&mut out, p);
        }
        None => out.push_str(r#","offset":null,"epoch":null"#),
    }
    out.push('}');
    out
}

/// `GET /history/<topic>?since=offset@epoch&limit=N`.
pub(crate) async fn history(State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    finish(
        async {
            check_token(&shared, &headers)?;
            let topic = topic_of(&uri, "/history/")?;
            let since = match query_param(&uri, "since") {
                None => None,
                Some(text) => Some(text.parse::<Position>().map_err(|e| {
                    refuse(
                        StatusCode::BAD_REQUEST,
                        "bad_request",
                        format!("since: {e} (write it offset@epoch, as a message's offset and epoch)"),
                    )
                })?),
            };
            let max = shared.config.history_limit;
            let limit = match query_param(&uri, "limit") {
                None => max,
                Some(text) => text
                    .parse::<usize>()
                    .map_err(|_| {
                        refuse(
                            StatusCode::BAD_REQUEST,
                            "bad_request",
                            format!("limit: {text:?} is not a count of messages"),
                        )
                    })?
                    .min(max),
            };
            let unavailable =
                |e: Error| refuse(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.to_string());
            let (complete, publications) = match shared
                .hub
                .history(&topic, since.as_ref(), limit)
                .await
                .map_err(unavailable)?
            {
                History::Complete(publications) => (true, publications),
                // What no history can give any more: what it still holds, marked incomplete.
                History::Lost { .. } => match shared
                    .hub
                    .history(&topic, None, limit)
                    .await
                    .map_err(unavailable)?
                {
                    History::Complete(publications) => (false, publications),
                    History::Lost { .. } => (false, Vec::new()),
                },
            };
            let mut body = String::from(r#"{"topic":"#);
            push_string(&mut body, topic.as_str());
            let _ = write!(body, r#","complete":{complete},"messages":["#);
            for (i, p) in publications.iter().enumerate() {
                if i > 0 {
                    body.push(',');
                }
                body.push('{');
                match &p.position {
                    Some(position) => push_position_fields(&mut body, position),
                    None => body.push_str(r#""offset":null,"epoch":null"#),
                }
                push_data(&mut body, &p.payload);
                body.push('}');
            }
            body.push_str("]}");
            Ok(respond::json(StatusCode::OK, body))
        }
        .await,
    )
}

/// The operator's token, as `Authorization: Bearer TOKEN`.
fn check_token(shared: &Shared, headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(expected) = &shared.config.api_token else {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "not_allowed",
            "the HTTP API is off on this node: start it with --api-token TOKEN (WebConfig::api_token) and send Authorization: Bearer TOKEN",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if same(given.trim().as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err(refuse(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the bearer token is not this node's API token",
        )),
        None => Err(refuse(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send the node's API token as Authorization: Bearer TOKEN",
        )),
    }
}

/// The topic: the rest of the path after `prefix`, percent-decoded (it may contain `/`).
fn topic_of(uri: &Uri, prefix: &str) -> Result<Topic, Refusal> {
    let raw = uri.path().strip_prefix(prefix).unwrap_or_default();
    Topic::new(&decode(raw)).map_err(|e| refuse(StatusCode::BAD_REQUEST, "invalid_topic", e.to_string()))
}

/// The body of a request with the API token: at most the hub's largest publication.
async fn authorized_body(shared: &Shared, headers: &HeaderMap, body: Body) -> Result<bytes::Bytes, Refusal> {
    check_token(shared, headers)?;
    let max = shared.hub.max_payload();
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "the body is over this node's limit of {max} bytes, its largest publication (HubConfig::max_payload; ws pubsub_server --max-message-size)"
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max as u64) {
        return Err(too_large());
    }
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(e) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the body could not be read: {e}"),
        )),
    }
}

/// The body as one JSON value's text.
fn json_text(body: &[u8]) -> Result<&str, Refusal> {
    let text = std::str::from_utf8(body)
        .map_err(|_| refuse(StatusCode::BAD_REQUEST, "bad_json", "the body is not UTF-8"))?;
    serde_json::from_str::<&RawValue>(text).map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            "bad_json",
            format!("the body must be one JSON value (the data to publish): {e}"),
        )
    })?;
    if let Some(why) = not_relayable(text) {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "bad_json",
            format!("the body {why}"),
        ));
    }
    Ok(text.trim())
}
