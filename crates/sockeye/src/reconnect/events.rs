//! What a [`ReconnectingClient`](crate::reconnect::ReconnectingClient) tells its caller, in
//! order: [`Event`]s, with the [`Attempt`] they concern and the [`Disconnect`] that ended a
//! connection.

use std::fmt;
use std::time::Duration;

use http::Response;
use sockeye_proto::{CloseFrame, Message};

use crate::error::Error;

/// Which connection attempt this is, for the request factory (fail over between URLs, put a
/// resume position in each attempt's URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// 1 for the first attempt of this client, counting every attempt since.
    pub number: u64,
    /// How many attempts in a row failed just before this one (0 after a connection opened).
    pub failures: u32,
}

/// Why a connection ended, or an attempt failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Disconnect {
    /// A connection attempt failed: the request factory, the connection, the opening handshake
    /// (`error.handshake_error()` tells a refusal's status), or the
    /// [`on_connect`](crate::reconnect::Builder::on_connect) hook.
    Failed {
        /// The attempt.
        attempt: Attempt,
        /// What failed.
        error: Error,
    },
    /// The server closed the connection (closing handshake) with this close frame.
    Closed {
        /// The server's close frame (`None`: without a status code).
        frame: Option<CloseFrame>,
        /// How long the connection was up.
        uptime: Duration,
    },
    /// The connection was lost: reset, dropped without a close frame, a protocol violation, or
    /// a peer found dead by the keepalive (`error.timeout() == Some(TimeoutCause::Keepalive)`).
    Lost {
        /// What happened.
        error: Error,
        /// How long the connection was up.
        uptime: Duration,
    },
    /// The closing handshake that [`pause`](crate::reconnect::ReconnectingClient::pause) or
    /// [`close`](crate::reconnect::ReconnectingClient::close) started is over.
    ClosedByUs {
        /// The peer's reply, if it sent one in time.
        reply: Option<CloseFrame>,
        /// How long the connection was up.
        uptime: Duration,
    },
}

impl fmt::Display for Disconnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = |frame: &Option<CloseFrame>| frame.as_ref().map_or(1005, |f| f.code.0);
        match self {
            Disconnect::Failed { error, .. } => write!(f, "connection failed: {error}"),
            Disconnect::Closed { frame, .. } => write!(f, "closed by the server ({})", code(frame)),
            Disconnect::Lost { error, .. } => write!(f, "connection lost: {error}"),
            Disconnect::ClosedByUs { reply, .. } => write!(f, "closed ({})", code(reply)),
        }
    }
}

/// Why the client gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUp {
    /// The [`Disconnected`](Event::Disconnected) event just before was a final refusal
    /// ([`ReconnectConfig::final_refusal`](crate::reconnect::ReconnectConfig::final_refusal)).
    FinalRefusal,
    /// [`ReconnectConfig::max_attempts`](crate::reconnect::ReconnectConfig::max_attempts) attempts
    /// in a row failed.
    MaxAttempts,
}

/// What happens to a [`ReconnectingClient`](crate::reconnect::ReconnectingClient), in order.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// A connection is open; the hook has run and what was queued is on its way.
    Connected {
        /// The server's handshake response (subprotocol, cookies...).
        response: Response<()>,
        /// The attempt that opened it.
        attempt: Attempt,
    },
    /// A message from the server (close frames are reported in [`Disconnect`]).
    Message(Message),
    /// The connection ended or an attempt failed. Followed by [`Reconnecting`](Event::Reconnecting),
    /// [`GaveUp`](Event::GaveUp), [`Paused`](Event::Paused), or the end (after `close`).
    Disconnected(Disconnect),
    /// The next attempt starts after `delay`.
    Reconnecting {
        /// The attempt to come.
        attempt: Attempt,
        /// The wait, jitter included.
        delay: Duration,
    },
    /// [`pause`](crate::reconnect::ReconnectingClient::pause) took effect: no connection until
    /// [`resume`](crate::reconnect::ReconnectingClient::resume).
    Paused,
    /// The client will not reconnect; [`next`](crate::reconnect::ReconnectingClient::next) then
    /// returns `None`.
    GaveUp(GiveUp),
}
