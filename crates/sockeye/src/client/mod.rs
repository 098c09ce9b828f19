//! Opening a connection as a client (RFC 6455 §4.1; over HTTP/2, RFC 8441): a URL or request
//! made into the handshake request (`request.rs`); [`connect`] and [`connect_with`], which open
//! the transport to the server — TCP or a proxy's tunnel, TLS, HTTP/1.1 or HTTP/2 — and run the
//! handshake over it (`transport.rs`); and the HTTP/1.1 handshake over any stream
//! (`handshake.rs`). The HTTP/2 handshake is `http2/client.rs`'s.

mod handshake;
mod request;
mod transport;

pub use handshake::client_handshake;
pub use request::IntoClientRequest;
pub use transport::{connect, connect_with};
