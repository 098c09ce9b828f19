//! [`SendError`]: why a [`ReconnectingClient`](crate::reconnect::ReconnectingClient) did not
//! send a message, with the message handed back.

use std::fmt;

use sockeye_proto::Message;

use crate::error::Error;

/// Why a message was not sent. Each variant but `Failed` hands the message back.
#[derive(Debug)]
#[non_exhaustive]
pub enum SendError {
    /// No connection is open and [`Offline::Refuse`](crate::reconnect::Offline::Refuse) is configured.
    NotConnected(Message),
    /// No connection is open and the offline queue is at its bound.
    QueueFull(Message),
    /// The client was closed, gave up, or its handle was dropped.
    Closed(Message),
    /// The connection failed while the message was being written: it may or may not have
    /// reached the peer. The client reconnects as usual.
    Failed {
        /// The error.
        error: Error,
        /// The message.
        message: Message,
    },
}

impl SendError {
    /// The message that was not sent (or, for `Failed`, perhaps not).
    pub fn into_message(self) -> Message {
        match self {
            SendError::NotConnected(m) | SendError::QueueFull(m) | SendError::Closed(m) => m,
            SendError::Failed { message, .. } => message,
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::NotConnected(_) => f.write_str("not connected: the message was not sent"),
            SendError::QueueFull(_) => {
                f.write_str("not connected and the offline queue is full: the message was not queued")
            }
            SendError::Closed(_) => {
                f.write_str("the reconnecting client is closed: the message was not sent")
            }
            SendError::Failed { error, .. } => write!(f, "the connection failed while sending: {error}"),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::Failed { error, .. } => Some(error),
            _ => None,
        }
    }
}
