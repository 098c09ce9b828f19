//! The opening handshake, RFC 6455 §4: an HTTP/1.1 `GET` with `Upgrade: websocket`, answered by
//! `101 Switching Protocols`. Bytes in, typed [`http`] values out, and back.
//!
//! Client: [`ClientHandshake::new`] → [`ClientHandshake::encode_request`] → write → read until
//! [`ClientHandshake::parse_response`] returns a response → leftover bytes belong to the connection.
//!
//! Server: read until [`parse_request`] returns a request → [`ClientHello::from_request`] validates
//! it → the application accepts ([`ClientHello::accept`], then edit the response) or rejects
//! ([`reject_response`]) → [`encode_response`] → write.
//!
//! Over HTTP/2 (RFC 8441) the same negotiation rides on an extended CONNECT: the client sends
//! [`extended_connect_request`] with `:protocol: websocket`, the server checks it with
//! [`ClientHello::from_extended_connect`] and answers [`ClientHello::accept`] (`200`), and the client
//! checks that with [`check_extended_connect_response`]. The HTTP/2 layer itself lives above.

mod client;
mod common;
mod extended_connect;
mod server;

pub use client::{ClientHandshake, response_extensions};
pub use common::{UrlTarget, accept_key, header_has_token, header_list, url_target};
pub use extended_connect::{WEBSOCKET_PROTOCOL, check_extended_connect_response, extended_connect_request};
pub use server::{ClientHello, ResponseBody, encode_response, parse_request, reject_response};
