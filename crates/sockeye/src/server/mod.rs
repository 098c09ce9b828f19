//! Accepting connections as a server (RFC 6455 §4.2; over HTTP/2, RFC 8441): the HTTP/1.1
//! upgrade on one stream (`accept.rs`), a new connection's handshakes — TLS, the HTTP/2 sniff,
//! the upgrade — within one timeout (`establish.rs`), the [`Server`] that accepts, limits and
//! shuts down connections (`listener.rs`), and the refusals (`refusal.rs`). The HTTP/2 side of a
//! connection is `http2/serve.rs`'s.

mod accept;
mod establish;
mod listener;
pub(crate) mod refusal;

pub use accept::{accept, accept_with};
pub use listener::Server;
