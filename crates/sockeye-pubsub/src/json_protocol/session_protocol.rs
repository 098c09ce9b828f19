//! The JSON protocol as a [`Session`](crate::Session) speaks it: each client frame parsed and
//! checked against the connection's [`Access`], each delivery framed once per node.

use std::sync::Arc;
use std::time::SystemTime;

use sockeye::{Message, Utf8Bytes};

use super::common::{ErrorCode, Refusal, RequestId};
use super::reply;
use super::request::{Request as ClientRequest, parse_request};
use crate::access::Access;
use crate::delivery::Delivery;
use crate::error::Error;
use crate::protocol::{Outgoing, Protocol, Request};
use crate::topic::Topic;

/// The [`Protocol`] of the JSON protocol, for one connection: what it may subscribe to and
/// publish on ([`Access`]), and the largest publication the node takes. Serve it with
/// [`OnGap::Deliver`](crate::OnGap::Deliver): a gap reaches the client as a `gap` frame (with the
/// position to resume from) and the connection stays up. Under [`OnGap::Close`](crate::OnGap::Close)
/// the `gap` frame is written before the 1013 close.
///
/// ```
/// use sockeye_pubsub::json_protocol::JsonProtocol;
/// use sockeye_pubsub::access::Access;
/// use sockeye_pubsub::{Hub, OnGap, Session, SessionConfig};
///
/// # async fn serve(hub: Hub, ws: sockeye::WebSocket<tokio::net::TcpStream>) {
/// let protocol = JsonProtocol::new(Access::everything(), hub.max_payload());
/// let session = Session::new(&hub, protocol, SessionConfig::default().on_gap(OnGap::Deliver));
/// let ended = session.run(ws).await; // the client subscribes, publishes, resumes
/// # let _ = ended;
/// # }
/// ```
#[derive(Clone)]
pub struct JsonProtocol {
    access: Access,
    max_payload: usize,
    refresh: Option<Refresh>,
}

/// [`JsonProtocol::refresh`]'s check.
type Refresh = Arc<dyn Fn(&str) -> Result<Option<SystemTime>, String> + Send + Sync>;

impl std::fmt::Debug for JsonProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonProtocol")
            .field("access", &self.access)
            .field("max_payload", &self.max_payload)
            .field("refresh", &self.refresh.is_some())
            .finish()
    }
}

impl JsonProtocol {
    /// A connection with `access`, on a node that takes publications of at most `max_payload`
    /// bytes (its [`HubConfig::max_payload`](crate::HubConfig::max_payload)).
    pub fn new(access: Access, max_payload: usize) -> JsonProtocol {
        JsonProtocol {
            access,
            max_payload,
            refresh: None,
        }
    }

    /// Takes `refresh` requests: `check` gets the new token and answers when the connection
    /// expires with it (`Ok(None)`: never), or why it is refused (the client gets an `error`
    /// with `unauthorized` and keeps its current expiry). `check` decides what a token may
    /// renew: the web face's accepts only one granting the same [`Access`]. Serve it with
    /// [`Session::expires`](crate::Session::expires). Without this, a refresh is answered
    /// `refreshed` with `"expires":null`: the connection does not expire.
    #[must_use]
    pub fn refresh(
        mut self,
        check: impl Fn(&str) -> Result<Option<SystemTime>, String> + Send + Sync + 'static,
    ) -> JsonProtocol {
        self.refresh = Some(Arc::new(check));
        self
    }
}

impl Protocol for JsonProtocol {
    fn request(&self, message: Message) -> Request {
        let Message::Text(text) = message else {
            return refuse(Refusal::new(
                None,
                ErrorCode::BadJson,
                "binary frames are not part of the protocol: send each request as a JSON text frame",
            ));
        };
        let request = match parse_request(text.as_bytes()) {
            Ok(request) => request,
            Err(refusal) => return refuse(refusal),
        };
        match request {
            ClientRequest::Subscribe { topic, since, id } => {
                if !self.access.may_subscribe(&topic) {
                    return refuse(not_allowed(id, "subscribe to", &topic));
                }
                Request::Subscribe {
                    topic: topic.clone(),
                    since,
                    answer: Box::new(move |result| {
                        Some(Message::text(match result {
                            Ok(recovery) => reply::subscribed(&topic, &recovery, id.as_ref()),
                            Err(e) => reply::error(&refusal(e, id)),
                        }))
                    }),
                }
            }
            ClientRequest::Unsubscribe { topic, id } => Request::Unsubscribe {
                topic: topic.clone(),
                answer: Box::new(move |result| {
                    Some(Message::text(match result {
                        Ok(()) => reply::unsubscribed(&topic, id.as_ref()),
                        Err(e) => reply::error(&refusal(e, id)),
                    }))
                }),
            },
            ClientRequest::Publish { topic, data, id } => {
                if !self.access.may_publish(&topic) {
                    return refuse(not_allowed(id, "publish on", &topic));
                }
                if data.len() > self.max_payload {
                    let why = format!(
                        "this publication's data has {} bytes; this node takes at most {}",
                        data.len(),
                        self.max_payload
                    );
                    return refuse(Refusal::new(id, ErrorCode::TooLarge, why));
                }
                // The data is a slice of a text frame: UTF-8 already.
                let Ok(data) = Utf8Bytes::try_from(data) else {
                    return refuse(Refusal::new(id, ErrorCode::BadJson, "data is not UTF-8"));
                };
                Request::PublishAnswered {
                    topic: topic.clone(),
                    message: Message::Text(data),
                    answer: Box::new(move |result| {
                        Some(Message::text(match result {
                            Ok(position) => reply::published(&topic, position.as_ref(), id.as_ref()),
                            Err(e) => reply::error(&refusal(e, id)),
                        }))
                    }),
                }
            }
            ClientRequest::Refresh { token, id } => {
                let checked = match &self.refresh {
                    Some(check) => check(&token),
                    None => Ok(None),
                };
                match checked {
                    Ok(expires) => Request::Refreshed {
                        expires,
                        reply: Message::text(reply::refreshed(expires, id.as_ref())),
                    },
                    Err(why) => refuse(Refusal::new(
                        id,
                        ErrorCode::Unauthorized,
                        format!(
                            "the refresh token was refused, the connection keeps its current one until it expires: {why}"
                        ),
                    )),
                }
            }
        }
    }

    fn outgoing<'a>(&self, delivery: &'a Delivery) -> Outgoing<'a> {
        match delivery {
            Delivery::Message(published) => {
                match published.prepared_as::<JsonProtocol>(|p| Some(Message::text(reply::message(p)))) {
                    Some(framed) => Outgoing::Prepared(framed),
                    None => Outgoing::Message(Message::text(reply::message(published))),
                }
            }
            Delivery::Gap { topic, resume } => {
                Outgoing::Message(Message::text(reply::gap(topic, resume.as_ref())))
            }
            Delivery::Dropped { count } => Outgoing::Message(Message::text(reply::dropped(*count))),
        }
    }
}

fn refuse(refusal: Refusal) -> Request {
    Request::Reply(Message::text(reply::error(&refusal)))
}

fn not_allowed(id: Option<RequestId>, what: &str, topic: &Topic) -> Refusal {
    Refusal::new(
        id,
        ErrorCode::NotAllowed,
        format!("this connection may not {what} {:?}", topic.as_str()),
    )
}

/// A hub's refusal of a request, as the client is told it.
fn refusal(e: &Error, id: Option<RequestId>) -> Refusal {
    Refusal::new(id, ErrorCode::of(e), e.to_string())
}
