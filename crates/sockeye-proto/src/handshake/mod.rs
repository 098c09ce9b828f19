//! The opening handshake, RFC 6455 §4: an HTTP/1.1 `GET` with `Upgrade: websocket`, answered by
//! `101 Switching Protocols`. Bytes in, typed [`http`] values out, and back.
//!
//! Extensions are negotiated here (§9.1), as part of the handshake: the client's request carries
//! the offers its [`Config`](crate::Config) makes, the server's response the ones it accepts, and
//! each side comes out with the permessage-deflate state (RFC 7692) to install with
//! [`Connection::set_deflate`](crate::Connection::set_deflate).
//!
//! Client: [`ClientHandshake::new`] (adds the offer) → [`ClientHandshake::encode_request`] →
//! write → read until [`ClientHandshake::parse_response`] returns an [`AcceptedResponse`] (the
//! response and the state) → leftover bytes belong to the connection.
//!
//! Server: read until [`parse_request`] returns a request → [`ClientHello::from_request`] validates
//! it → the application accepts ([`ClientHello::accept_with`]: the response with the extensions
//! agreed, then edit it) or rejects ([`reject_response`]) → [`encode_response`] → write →
//! [`NegotiatedExtensions::kept_by`] the response sent gives the state.
//!
//! Over HTTP/2 (RFC 8441) the same negotiation rides on an extended CONNECT: the client sends
//! [`extended_connect_request`] (with the offer) and `:protocol: websocket`, the server checks it
//! with [`ClientHello::from_extended_connect`] and answers [`ClientHello::accept_with`] (`200`),
//! and the client checks that with [`check_extended_connect_response`], which returns the state.
//! The HTTP/2 layer itself lives above.

mod client;
mod common;
mod extended_connect;
mod server;

pub use client::{AcceptedResponse, ClientHandshake};
pub use common::{UrlTarget, accept_key, header_has_token, header_list, url_target};
pub use extended_connect::{WEBSOCKET_PROTOCOL, check_extended_connect_response, extended_connect_request};
pub use server::{
    ClientHello, NegotiatedExtensions, ResponseBody, encode_response, parse_request, reject_response,
    service_unavailable, write_response,
};
