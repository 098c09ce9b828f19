//! # Sockeye: a fast, strictly conformant WebSocket client and server for tokio
//!
//! The protocol lives in [`sockeye_proto`], a deterministic engine without I/O; this crate moves
//! bytes between sockets and that engine.
//!
//! ```text
//!   socket ──read──► Connection (frames, masks, UTF-8, reassembly) ──► WebSocket::recv / Stream
//!   WebSocket::send / feed / Sink ──► Connection::transmit (batched) ──one writev──► socket
//! ```
//!
//! An echo server and a client, in one program:
//!
//! ```
//! use futures_util::StreamExt;
//! use sockeye::{Message, Server};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = Server::bind("127.0.0.1:0", sockeye::Config::default()).await?;
//! let url = format!("ws://{}/", server.local_addr()?);
//! tokio::spawn(server.serve(|mut ws, _peer| async move {
//!     while let Some(Ok(message)) = ws.next().await {
//!         if message.is_data() && ws.feed(message).await.is_err() {
//!             break;
//!         }
//!     }
//! }));
//!
//! let (mut ws, _response) = sockeye::connect(url.as_str()).await?;
//! ws.send("hello").await?;
//! assert_eq!(ws.recv().await.transpose()?, Some(Message::text("hello")));
//! ws.close(None).await?;
//! # Ok(())
//! # }
//! ```

//!
//! ## Where things are
//!
//! - [`connect`] / [`connect_with`] for clients (`ws://`, `wss://`, through [`proxy`]s),
//!   [`Server`] (with [`ShutdownHandle`]) or [`accept_with`] for servers,
//!   [`upgrade::Upgrade`] to take over a request served by hyper or axum;
//! - [`WebSocket`]: `recv`/`send`/`feed`/`try_send`/`close`, `Stream` + `Sink`; messages of any
//!   size in bounded memory with `recv_chunk` (pieces as they arrive) and `send_stream` /
//!   `send_reader` (fragments from a `Stream` or an `AsyncRead`);
//! - [`Config`]: every limit, timeout and default in one place, each with its reason;
//! - [`ReconnectingClient`] ([`reconnect`]): a client that stays connected — jittered
//!   exponential backoff, the keepalive as heartbeat, events, an offline queue, a hook to
//!   resubscribe on each connection; [`backoff::Backoff`], its jittered exponential backoff, for
//!   any other retry loop.
//!
//! Features: `tls` (default; rustls with aws-lc-rs), `deflate` (default; permessage-deflate),
//! `http2` (default; WebSockets over HTTP/2, RFC 8441, in [`Server`] and, when
//! [`Config::http_version`] asks, in clients),
//! `webpki-roots`, `hyper` (the [`upgrade`] module), `axum` (`Upgrade` as an extractor).

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
mod client;
mod config;
mod error;
mod head;
#[cfg(feature = "http2")]
pub mod http2;
pub mod proxy;
pub mod reconnect;
mod send_source;
mod sender;
mod server;
mod shutdown;
mod split;
mod stats;
mod stream;
mod thread_buffers;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "hyper")]
pub mod upgrade;
mod wakers;
mod websocket;

pub use client::{IntoClientRequest, client_handshake, connect, connect_with};
pub use config::{Config, ConfigBuilder, HttpVersion};
pub use error::{Error, ErrorKind, TimeoutCause};
pub use reconnect::ReconnectingClient;
pub use server::{Server, accept, accept_with};
pub use shutdown::ShutdownHandle;
pub use sockeye_proto::Config as ProtocolConfig;
pub use sockeye_proto::Error as ProtocolError;
pub use sockeye_proto::{
    self as proto, Bytes, CloseCode, CloseFrame, DataKind, HandshakeError, Incoming, Message, MessageChunk,
    PreparedMessage, ProtocolViolation, Role, Utf8Bytes,
};
pub use split::{WebSocketReader, WebSocketWriter};
pub use stats::ServerStats;
#[allow(deprecated)]
pub use stream::{MaybeTlsStream, TransportStream};
pub use websocket::WebSocket;
