//! TLS for `wss://`, with rustls and the aws-lc-rs crypto provider (chosen by measurement: in
//! `bench/tls-providers` it ran about 16% more handshakes and 16% more AES-GCM throughput than
//! ring on this machine). No OpenSSL.
//!
//! Client: [`ClientTlsOptions`] builds a `rustls::ClientConfig` — the platform's root
//! certificates by default, extra CA files, a client certificate for mutual TLS, ALPN `http/1.1`,
//! and two clearly named `danger_` switches for testing. SNI is sent from the URL's host name.
//!
//! Server: [`ServerTls`] loads a PEM certificate chain and key (PKCS#8, PKCS#1 or SEC1), can
//! require client certificates, and swaps its certificate without a restart
//! ([`ServerTls::reload_pem`]). Any `tokio_rustls::TlsAcceptor` of your own works too
//! ([`Server::with_tls`](crate::Server::with_tls)): its `ServerConfig` is what is used.
//!
//! Connections: [`TlsStream`] drives rustls's unbuffered API over buffers of Sockeye's own,
//! given back while a connection waits, so that an idle `wss://` connection holds only rustls's
//! keys and state (6.7 KiB of heap per idle server connection in all, against 10.7 KiB through
//! `tokio-rustls`, whose rustls connection keeps a 4 KiB receive buffer for life).
//!
//! [`TlsSession`] is the same connection without a socket, for a loop that moves the bytes
//! itself (`sockeye-loop`).
//!
//! The files: `client` and `server` (the configurations), `verify` (the `danger_` certificate
//! checks), `pem` and `provider` (what both sides load with), `error`, and `stream` (the
//! connection, a folder of its own).

pub(crate) mod client;
pub(crate) mod error;
mod pem;
mod provider;
pub(crate) mod server;
pub(crate) mod stream;
mod verify;

pub use rustls;
pub use tokio_rustls::{TlsAcceptor, TlsConnector};

pub use client::{ClientTlsOptions, Roots};
pub use error::{TlsError, TlsErrorKind};
pub use server::ServerTls;
pub use stream::connection::{ClientTlsStream, ServerTlsStream, TlsStream};
pub use stream::session::{ServerTlsSession, TlsSession};
pub use stream::side::TlsSide;
