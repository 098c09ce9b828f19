//! The JSON protocol's WebSocket at `/`: the client checked ([`auth`](super::auth)), then a
//! [`Session`] with a [`JsonProtocol`], counted for the metrics and closed with 1001 on
//! shutdown.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{Method, StatusCode, Version, header};
use sockeye::upgrade::Upgrade;

use super::auth::{Grant, Refused};
use super::caps::{OverCap, Peer};
use super::metrics::{Metrics, RefusedBy};
use super::publish_limit::PublishLimit;
use super::query::query_param;
use super::refusal::RefusalKind;
use super::respond;
use super::session_end::{self, SessionEnd, Tally};
use super::shared::Shared;
use crate::access::Access;
use crate::backplane::position::{Position, Recovery};
use crate::delivery::Delivery;
use crate::error::Error;
use crate::json_protocol::{ErrorCode, JsonProtocol, Refusal, parse_request, reply};
use crate::protocol::{Outgoing, Protocol, Request};
use crate::session::{Ended, Session};
use crate::topic::Topic;

/// `/`: upgrades a WebSocket; a plain `GET` is told where the page is.
pub(crate) async fn serve(
    State(shared): State<Arc<Shared>>,
    peer: Option<axum::Extension<Peer>>,
    method: Method,
    version: Version,
    headers: http::HeaderMap,
    uri: http::Uri,
    upgrade: Result<Upgrade, http::Response<String>>,
) -> Response {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(_)
            if method == Method::GET
                && version < Version::HTTP_2
                && !headers.contains_key(header::UPGRADE) =>
        {
            let mut response = respond::error(
                StatusCode::UPGRADE_REQUIRED,
                "upgrade_required",
                "this is the pub/sub WebSocket endpoint (docs/pubsub-protocol.md): open /demo for the demo page, /client.js for the JavaScript client",
            );
            // RFC 9110 §15.5.22: a 426 names the protocol to upgrade to.
            response
                .headers_mut()
                .insert(header::UPGRADE, header::HeaderValue::from_static("websocket"));
            return response;
        }
        Err(refusal) => return refusal.into_response(),
    };
    // A browser is told why after the upgrade (see `refusal`): it sends Origin, others rarely.
    let browser = headers.contains_key(header::ORIGIN);
    // Over HTTP/2 the socket is one stream of its connection, which holds one place under the
    // caps for all its streams: it takes one of its own.
    let mut stream_admitted = None;
    if version >= Version::HTTP_2
        && let Some(axum::Extension(Peer(peer))) = peer
    {
        match shared.admit(peer) {
            Ok(admitted) => stream_admitted = Some(admitted),
            Err(cap) => {
                let kind = match cap {
                    OverCap::Address(_) => RefusalKind::TooManyConnections,
                    _ => RefusalKind::NodeFull,
                };
                let why = format!("{cap}: a WebSocket over HTTP/2 counts as a connection");
                return refuse(&shared, upgrade, browser, kind, &why);
            }
        }
    }
    if let Err(foreign) = shared.config.origins.check(&headers, &uri, shared.config.tls) {
        // What to do first: a close reason is cut at 123 bytes.
        let why = format!(
            "--allowed-origin {} (WebConfig::allowed_origin) lets pages of {} open sockets on this node",
            foreign.0, foreign.0
        );
        return refuse(&shared, upgrade, browser, RefusalKind::OriginNotAllowed, &why);
    }
    let grant = match &shared.config.authorize {
        None => Grant::new(Access::everything()),
        Some(check) => match check(query_param(&uri, "token").as_deref()) {
            Ok(grant) => grant,
            Err(Refused::Unauthorized(why)) => {
                return refuse(&shared, upgrade, browser, RefusalKind::Unauthorized, &why);
            }
            Err(Refused::Forbidden(why)) => {
                return refuse(&shared, upgrade, browser, RefusalKind::NotAllowed, &why);
            }
        },
    };
    let shared_for_socket = Arc::clone(&shared);
    // Counted from the answer on, not from when the socket's task first runs: a shutdown that
    // comes in between still waits for the socket (and sends it 1001). Dropped with the
    // handler, or unused if the switch fails.
    let open = shared.sockets.token();
    let client = peer.map(|axum::Extension(Peer(ip))| ip);
    upgrade
        .config(shared.socket.clone())
        .on_upgrade(move |mut ws| async move {
            let _open = open;
            let _admitted = stream_admitted;
            let shared = shared_for_socket;
            ws.close_on_shutdown(&shared.shutdown);
            shared.metrics.connected();
            let started = std::time::Instant::now();
            let expires = grant.expires;
            let protocol = Counted {
                tally: Arc::default(),
                json: json_protocol(&shared, grant),
                metrics: shared.metrics.clone(),
                subscribed: Arc::default(),
                limit: PublishLimit::new(shared.config.max_publish_rate, shared.config.max_publish_topics),
            };
            let subscribed = Arc::clone(&protocol.subscribed);
            let tally = Arc::clone(&protocol.tally);
            let mut session = Session::new(&shared.hub, protocol, shared.config.session);
            if let Some(at) = expires {
                session = session.expires(at, expired());
            }
            let ended = session.run(ws).await;
            let left = crate::lock::lock(&subscribed).len();
            shared.metrics.disconnected(left, matches!(ended, Ended::TooSlow));
            let end = SessionEnd::of(&ended, shared.shutdown.is_shutting_down());
            shared.metrics.closed(end.reason, end.code);
            session_end::log(client, started, &tally, end);
        })
}

/// The JSON protocol for a connection granted `grant`: it takes a refreshed token that the
/// node's check grants the same access (the same identity: a token for another user is
/// refused, not swapped in), and renews the connection's expiry with it.
fn json_protocol(shared: &Shared, grant: Grant) -> JsonProtocol {
    let protocol = JsonProtocol::new(grant.access.clone(), shared.hub.max_payload());
    let Some(check) = shared.config.authorize.clone() else {
        return protocol;
    };
    protocol.refresh(move |token| match check(Some(token)) {
        Ok(fresh) if fresh.access == grant.access => Ok(fresh.expires),
        Ok(_) => Err(
            "it grants other topics than this connection's token (another user?): \
                      to change who the connection is, reconnect with it"
                .into(),
        ),
        Err(Refused::Unauthorized(why) | Refused::Forbidden(why)) => Err(why),
    })
}

/// The close of a socket whose token expired without a refresh: 4002 `token_expired`.
fn expired() -> sockeye::CloseFrame {
    RefusalKind::TokenExpired.close_frame(
        "the token expired; send {\"type\":\"refresh\",\"token\":…} before exp, or reconnect with a fresh token",
    )
}

/// Refuses the WebSocket `upgrade` for `kind` and `why`, counted: a browser's (it sent
/// `Origin`) is upgraded and closed with the kind's code and reason; any other client gets the
/// HTTP status and JSON error (see `refusal`).
fn refuse(shared: &Arc<Shared>, upgrade: Upgrade, browser: bool, kind: RefusalKind, why: &str) -> Response {
    match kind {
        RefusalKind::OriginNotAllowed => shared.metrics.refused(RefusedBy::Origin),
        // Counted where the cap refused it (`Shared::admit`).
        RefusalKind::TooManyConnections | RefusalKind::NodeFull => {}
        _ => shared.metrics.refused(RefusedBy::Token),
    }
    if !browser {
        return respond::error(kind.status(), kind.name(), why);
    }
    let frame = kind.close_frame(why);
    // Under the shutdown's count like any socket; the close handshake is bounded by the
    // socket configuration's close timeout.
    let open = shared.sockets.token();
    upgrade
        .config(shared.socket.clone())
        .on_upgrade(|mut ws| async move {
            let _open = open;
            let _ = ws.close(Some(frame)).await;
        })
}

/// Any other path: a WebSocket is closed with 1008 saying where the protocol is; anything
/// else is a 404.
pub(crate) async fn elsewhere(
    State(shared): State<Arc<Shared>>,
    upgrade: Result<Upgrade, http::Response<String>>,
) -> Response {
    match upgrade {
        Ok(upgrade) => {
            let open = shared.sockets.token();
            upgrade.on_upgrade(|mut ws| async move {
                let _open = open;
                let why = sockeye::CloseFrame::new(
                    sockeye::CloseCode::POLICY_VIOLATION,
                    "the pub/sub protocol is served at /",
                );
                let _ = ws.close(Some(why)).await;
            })
        }
        Err(_) => respond::error(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such path: see docs/pubsub-protocol.md for what a node serves",
        ),
    }
}

/// The JSON protocol, counting what it sees for the metrics: a relaxed atomic add per delivery.
struct Counted {
    json: JsonProtocol,
    metrics: Metrics,
    /// The topics this connection is subscribed to, so that the subscriptions gauge counts each
    /// once and gives them back when the connection ends.
    subscribed: Arc<Mutex<HashSet<Topic>>>,
    /// Its bounds on publishing.
    limit: PublishLimit,
    /// Its messages each way, for its log line.
    tally: Arc<Tally>,
}

impl Counted {
    /// The `error` frame refusing the publication `original` (with its id, if it has one).
    fn refuse(&self, original: &sockeye::Message, (code, why): (ErrorCode, String)) -> Request {
        self.metrics.refused(match code {
            ErrorCode::RateLimited => RefusedBy::PublishRate,
            _ => RefusedBy::PublishTopics,
        });
        let frame: &[u8] = match original {
            sockeye::Message::Text(text) => text.as_str().as_bytes(),
            sockeye::Message::Binary(bytes) => bytes,
            _ => &[],
        };
        let id = parse_request(frame).ok().and_then(|r| r.id().cloned());
        let refusal = Refusal::new(id, code, why);
        Request::Reply(sockeye::Message::text(reply::error(&refusal)))
    }
}

impl Protocol for Counted {
    fn request(&self, message: sockeye::Message) -> Request {
        Tally::count(&self.tally.received);
        // A refcount: kept for the id of a publication refused by the bounds.
        let original = message.clone();
        let request = self.json.request(message);
        if let Request::Publish { topic, .. } | Request::PublishAnswered { topic, .. } = &request
            && let Err(refused) = self.limit.check(topic)
        {
            return self.refuse(&original, refused);
        }
        match request {
            Request::Subscribe { topic, since, answer } => {
                let (metrics, subscribed, t) =
                    (self.metrics.clone(), Arc::clone(&self.subscribed), topic.clone());
                Request::Subscribe {
                    topic,
                    since,
                    answer: Box::new(move |result: Result<Recovery, &Error>| {
                        if result.is_ok() && crate::lock::lock(&subscribed).insert(t) {
                            metrics.subscriptions.inc();
                        }
                        if let Err(Error::TooManySubscriptions { .. }) = result {
                            metrics.refused(RefusedBy::Subscriptions);
                        }
                        answer(result)
                    }),
                }
            }
            Request::Unsubscribe { topic, answer } => {
                let (metrics, subscribed, t) =
                    (self.metrics.clone(), Arc::clone(&self.subscribed), topic.clone());
                Request::Unsubscribe {
                    topic,
                    answer: Box::new(move |result: Result<(), &Error>| {
                        if result.is_ok() && crate::lock::lock(&subscribed).remove(&t) {
                            metrics.subscriptions.dec();
                        }
                        answer(result)
                    }),
                }
            }
            Request::PublishAnswered {
                topic,
                message,
                answer,
            } => {
                let metrics = self.metrics.clone();
                Request::PublishAnswered {
                    topic,
                    message,
                    answer: Box::new(move |result: Result<Option<Position>, &Error>| {
                        if result.is_ok() {
                            metrics.published_by_socket.inc();
                        }
                        answer(result)
                    }),
                }
            }
            other => other,
        }
    }

    fn outgoing<'a>(&self, delivery: &'a Delivery) -> Outgoing<'a> {
        Tally::count(&self.tally.sent);
        match delivery {
            Delivery::Message(_) => self.metrics.deliveries.inc(),
            Delivery::Gap { .. } => self.metrics.gaps.inc(),
            Delivery::Dropped { count } => self.metrics.dropped.inc_by(*count),
        };
        self.json.outgoing(delivery)
    }
}
