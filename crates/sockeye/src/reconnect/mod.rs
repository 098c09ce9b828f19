//! A client that stays connected: [`ReconnectingClient`] reconnects with jittered exponential
//! backoff, keeps the connection checked with the engine's keepalive, tells what happens as
//! [`Event`]s, queues (bounded) or refuses what is sent while it is disconnected, and runs a hook
//! on every new connection to subscribe or resume.
//!
//! ```text
//!   caller ── next() ◄──── events (bounded channel) ◄──┐
//!          ── send() ──► the connection's sending half ─┤   one driver task: the connection,
//!                    └─► the offline queue ─────────────┤   the backoff timer, the hook
//!          ── pause() / resume() / close() ──► commands ┘
//! ```
//!
//! One driver task owns the connection's receiving half, the backoff timer and the hook; the
//! handle talks to it through channels, and sends go straight to the connection's sending half
//! (or to the offline queue). Every wait of the driver also listens for commands and for the
//! handle going away: dropping the [`ReconnectingClient`] closes the connection (1001, bounded by
//! the close timeout) and ends the task.
//!
//! # Heartbeat
//!
//! The heartbeat is the engine's keepalive, set in the [`Config`](crate::Config):
//! [`keepalive`](crate::ConfigBuilder::keepalive) pings a peer that has been silent that long, and
//! [`keepalive_timeout`](crate::ConfigBuilder::keepalive_timeout) declares it dead when the ping
//! goes unanswered. A dead peer ends the connection with an error whose
//! [`timeout`](crate::Error::timeout) is `Some(TimeoutCause::Keepalive)` ([`Disconnect::Lost`]),
//! and the client reconnects as after any other loss.
//!
//! # Example
//!
//! ```
//! use futures_util::StreamExt;
//! use sockeye::reconnect::{Event, ReconnectingClient};
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
//! let mut client = ReconnectingClient::builder(url)
//!     // On every connection, before anything queued is sent: subscribe again.
//!     .on_connect(|ws| Box::pin(async move { ws.send("subscribe").await }))
//!     .start();
//! // Sent while not connected yet: queued, and sent after the hook's message.
//! client.send("hello").await?;
//! let mut heard = Vec::new();
//! while let Some(event) = client.next().await {
//!     match event {
//!         Event::Connected { .. } => {}
//!         Event::Message(m) => {
//!             heard.push(m);
//!             if heard.len() == 2 {
//!                 break;
//!             }
//!         }
//!         other => println!("{other:?}"),
//!     }
//! }
//! assert_eq!(heard, [Message::text("subscribe"), Message::text("hello")]);
//! client.close(None);
//! while client.next().await.is_some() {} // the closing handshake, then the end
//! # Ok(())
//! # }
//! ```
//!
//! The files: `config` and `events` (with `send_error`) are what the caller sets and hears;
//! `link` (the connection's sending half or the offline queue) is shared by `handle` (the
//! caller's side) and `driver` (the task), which talk through `channels`.

mod channels;
mod config;
mod driver;
mod events;
mod handle;
mod link;
mod send_error;

pub use crate::backoff::{Backoff, Jitter};
pub use config::{FinalRefusal, Offline, ReconnectConfig, default_final_refusal};
pub use driver::HookFuture;
pub use events::{Attempt, Disconnect, Event, GiveUp};
pub use handle::{Builder, ReconnectingClient, Sender};
pub use send_error::SendError;
