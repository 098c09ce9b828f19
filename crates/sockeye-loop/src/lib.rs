//! # sockeye-loop: Sockeye's own server loop
//!
//! The WebSocket engine ([`sockeye_proto`]) is sans-I/O so that any loop can drive it. This crate's
//! loop is built for a server's throughput, as uWebSockets' is: a thread per core, each with its
//! own `SO_REUSEPORT` listener, its own io_uring (multishot accept, multishot receive into a ring
//! of provided buffers, every send of a loop turn submitted with one system call) or, where
//! io_uring is refused (Docker's default seccomp profile, `kernel.io_uring_disabled`), an epoll
//! loop of the same shape. No task, no waker, no future per connection: a completion hands bytes
//! straight to the connection's engine, and the handler's replies are written at the end of the
//! turn.
//!
//! ```text
//!   ring/epoll ──bytes──► Conn (upgrade, then the engine) ──Message──► Handler::message
//!   Socket::send ──► engine's queue ──one writev / SendMsg per connection per turn──► socket
//! ```
//!
//! The application writes a [`Handler`]: callbacks per event (open, message, drain, close), with
//! a [`Socket`] to send, close and keep its per-connection data. The tokio layer ([`sockeye`])
//! stays the choice for clients and for servers inside async code; configuration is the same
//! [`sockeye::Config`].
//!
//! ```no_run
//! use sockeye_loop::{Handler, Message, Runtime, Server, Socket};
//!
//! struct Echo;
//!
//! impl Handler for Echo {
//!     type Data = ();
//!     fn message(&mut self, socket: &mut Socket<'_, ()>, message: Message) {
//!         socket.send(message);
//!     }
//! }
//!
//! let server = Server::new(sockeye::Config::default())
//!     .runtime(Runtime::Auto)
//!     .listen("127.0.0.1:9001", || Echo)?;
//! eprintln!("ws://{} on {:?}", server.local_addr(), server.runtime());
//! server.wait()?;
//! # Ok::<(), std::io::Error>(())
//! ```

#![deny(missing_docs)]

mod connection;
mod epoll;
mod handler;
mod listener;
mod membership;
mod server;
mod shared;
mod timers;
#[cfg(feature = "tls")]
mod tls;
mod topics;
mod turn;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod uring;

pub use handler::{Closed, Handler, Sent, Socket};
pub use server::{DEFAULT_MAX_BACKLOG, Listening, Runtime, Server, ServerHandle};
pub use sockeye_proto::{CloseCode, CloseFrame, Message};
pub use topics::{INBOX_LIMIT, MAX_TOPIC_LEN, MAX_TOPICS_PER_SOCKET, PublishError, SocketId};
