//! The JSON protocol that web clients speak to a node: one WebSocket, many topics.
//!
//! The wire format is specified, with an example of every frame, in the repository's
//! `docs/pubsub-protocol.md`.
//! This module is the protocol alone, with no I/O: [`parse_request`] turns a client's text frame
//! into a [`Request`] or a [`Refusal`] (answered with an `error` frame, the connection stays up),
//! and the [`reply`] functions write the server's frames. A server loop (the `ws pubsub_server`
//! command, or your own) reads frames, calls the [`Hub`](crate::Hub) and writes what these
//! functions return.
//!
//! ```
//! use sockeye_pubsub::json_protocol::{parse_request, reply, Request};
//!
//! let request = parse_request(br#"{"type":"subscribe","topic":"user/42","id":7}"#).unwrap();
//! let Request::Subscribe { topic, since, id } = request else { unreachable!() };
//! assert_eq!(topic.as_str(), "user/42");
//! assert!(since.is_none());
//!
//! let answer = reply::subscribed(&topic, &sockeye_pubsub::Recovery::Live, id.as_ref());
//! assert_eq!(answer, r#"{"type":"subscribed","topic":"user/42","recovery":"live","recovered":0,"id":7}"#);
//!
//! let refusal = parse_request(br#"{"type":"subscribe","id":"a"}"#).unwrap_err();
//! assert_eq!(refusal.code.as_str(), "bad_request");
//! assert_eq!(
//!     reply::error(&refusal),
//!     r#"{"type":"error","code":"bad_request","message":"a subscribe request needs a \"topic\" (a string)","id":"a"}"#
//! );
//! ```

mod common;
mod relayable;
pub mod reply;
mod request;
mod session_protocol;

pub use common::{ErrorCode, Refusal, RequestId};
#[cfg(feature = "web")]
pub(crate) use relayable::not_relayable;
pub use request::{Request, parse_request};
pub use session_protocol::JsonProtocol;
