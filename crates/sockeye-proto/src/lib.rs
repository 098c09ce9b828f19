//! # sockeye-proto: the WebSocket protocol, without I/O
//!
//! An RFC 6455 engine that never touches a socket, a clock or a random source of its own: bytes
//! go in, messages and bytes come out. The `sockeye` crate runs it over tokio; tests and fuzzers
//! run it over byte slices.
//!
//! ```text
//!   peer bytes ──► Connection::read_buffer / receive ──► Connection::poll_message ──► Message
//!   Message ──► Connection::send / close ──► Connection::transmit (a bytes::Buf) ──► socket
//! ```
//!
//! The opening handshake lives in [`handshake`]: [`handshake::ClientHandshake`] for clients,
//! [`handshake::parse_request`] and [`handshake::ClientHello`] for servers.
//!
//! ```
//! use sockeye_proto::{CloseCode, CloseFrame, Config, Connection, Message};
//!
//! use sockeye_proto::frame::insecure_mask_keys_for_tests;
//!
//! // A real client takes its mask keys from the OS's random source (RFC 6455 §10.3).
//! let mut client = Connection::client(Config::default(), insecure_mask_keys_for_tests(1));
//! let mut server = Connection::server(Config::default());

//! client.send(Message::text("hi")).unwrap();
//! server.receive(&client.transmit_bytes());
//! assert_eq!(server.poll_message().unwrap(), Some(Message::text("hi")));
//!
//! // The closing handshake: the server answers a close frame by itself.
//! client.close(Some(CloseFrame::new(CloseCode::NORMAL, "bye"))).unwrap();
//! server.receive(&client.transmit_bytes());
//! assert!(matches!(server.poll_message().unwrap(), Some(Message::Close(Some(_)))));
//! client.receive(&server.transmit_bytes());
//! assert!(matches!(client.poll_message().unwrap(), Some(Message::Close(Some(_)))));
//! assert!(client.is_closed() && server.is_closed());
//! ```

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod connection;
mod error;
pub mod extension;
pub mod frame;
pub mod handshake;
mod message;
mod prepared;
mod role;
mod transmit;
pub mod utf8;

pub use bytes::Bytes;
pub use config::Config;
pub use connection::{CloseState, Connection, Transport};
pub use error::{Error, HandshakeError, ProtocolViolation};
pub use frame::{CloseCode, CloseFrame};
pub use message::{Incoming, Message, MessageChunk};
pub use prepared::PreparedMessage;
pub use role::{DataKind, MaskKeySource, Role};
pub use transmit::Transmit;
pub use utf8::Utf8Bytes;
