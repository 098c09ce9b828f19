//! The closing handshake (RFC 6455 §7) and what the transport should do (§7.1.1): where the
//! handshake stands ([`Stage`], shown to the application as [`CloseState`]), what the I/O layer
//! is asked to do with the transport ([`Transport`]), whether its writing side is shut, and why
//! the connection ended (the diagram is in the connection module's documentation).
//!
//! `Closing` is two stages inside: we sent our close and wait for the peer's
//! ([`Stage::CloseSent`]), or the peer closed first and the application answers
//! ([`Stage::ReplyOwed`], with `auto_close_reply` off). This room owns those transitions; sending
//! the close frames is the sending room's, and the front ties the two together.

use crate::error::Error;
use crate::frame::CloseFrame;
use crate::role::Role;

/// Where the connection is in the closing handshake (§7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseState {
    /// Messages flow both ways.
    Open,
    /// We sent a close frame and wait for the peer's.
    Closing,
    /// Both close frames have been sent, or the connection failed (§7.1.7) or timed out: nothing
    /// more is read or sent; what still arrives is discarded unread.
    Closed,
}

/// What the I/O layer does with the transport (RFC 6455 §7.1.1), as the engine asks through
/// [`Connection::transport`](crate::Connection::transport). The engine decides; the I/O layer
/// only carries it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// Read, and write whatever is queued.
    Open,
    /// Write what is queued, shut down the writing side (TCP FIN, TLS close_notify) and call
    /// [`Connection::write_shut_down`](crate::Connection::write_shut_down); keep reading until
    /// the peer's FIN: the engine discards what arrives. Asked after failing the connection
    /// (§7.1.7), so that the close frame reaches the peer before the socket closes (closing with
    /// unread input would reset the connection and could destroy the close frame in flight).
    ShutdownWrite,
    /// Write what is queued, shut down the writing side and close the transport, then call
    /// [`Connection::transport_closed`](crate::Connection::transport_closed). The server's move
    /// once the closing handshake is done (it closes TCP first, §7.1.1), and anyone's once the
    /// peer has closed.
    Finish,
    /// Close the transport at once, writing nothing more, then call
    /// [`Connection::transport_closed`](crate::Connection::transport_closed): a deadline passed
    /// (the peer stopped answering), or the writing side is already shut down.
    Abort,
    /// The transport is closed: the connection is over.
    Closed,
}

/// Where the closing handshake stands, as the engine keeps it: [`CloseState`] with its
/// `Closing` told apart by who closed first.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// Messages flow both ways.
    Open,
    /// We sent a close frame and wait for the peer's.
    CloseSent,
    /// The peer closed first and, with `auto_close_reply` off, the application has yet to answer:
    /// `echo` is what the engine sends if the close deadline passes first. Data may still be sent;
    /// nothing more is read (nothing may follow the peer's close, §5.5.1).
    ReplyOwed {
        /// The close frame the engine answers with for the application.
        echo: Option<CloseFrame>,
    },
    /// Both close frames have been sent, or the connection failed or timed out.
    Closed,
}

/// §7.1.1: once both close frames are sent, the server closes the transport first, the
/// client waits (up to the close deadline) for it to.
pub(super) fn after_close_handshake(role: Role) -> Transport {
    match role {
        Role::Server => Transport::Finish,
        Role::Client => Transport::Open,
    }
}

/// The closing handshake's state and the transport's.
#[derive(Debug)]
pub(super) struct Closing {
    stage: Stage,
    transport: Transport,
    /// The writing side of the transport is shut down.
    write_shut: bool,
    /// Why the connection ended, kept to be reported once the transport is closed.
    error: Option<Error>,
}

impl Closing {
    pub(super) fn new() -> Self {
        Closing {
            stage: Stage::Open,
            transport: Transport::Open,
            write_shut: false,
            error: None,
        }
    }

    /// Where the closing handshake stands, as the application sees it.
    #[inline]
    pub(super) fn state(&self) -> CloseState {
        match self.stage {
            Stage::Open => CloseState::Open,
            Stage::CloseSent | Stage::ReplyOwed { .. } => CloseState::Closing,
            Stage::Closed => CloseState::Closed,
        }
    }

    /// Messages flow both ways.
    #[inline]
    pub(super) fn is_open(&self) -> bool {
        matches!(self.stage, Stage::Open)
    }

    #[inline]
    pub(super) fn is_closed(&self) -> bool {
        matches!(self.stage, Stage::Closed)
    }

    /// Whether data may be sent: the connection is open, or the peer closed first and the
    /// application has yet to answer.
    #[inline]
    pub(super) fn sendable(&self) -> bool {
        matches!(self.stage, Stage::Open | Stage::ReplyOwed { .. })
    }

    /// Whether input is processed: not after failing or after the closing handshake (§7.1.7),
    /// nor after the peer's close (§5.5.1).
    #[inline]
    pub(super) fn reads_input(&self) -> bool {
        matches!(self.stage, Stage::Open | Stage::CloseSent)
    }

    /// We sent our close first.
    pub(super) fn close_sent(&mut self) {
        self.stage = Stage::CloseSent;
    }

    /// The peer closed first, and the application answers: `echo` is the answer the engine
    /// sends for it if the close deadline passes first.
    pub(super) fn owe_reply(&mut self, echo: Option<CloseFrame>) {
        self.stage = Stage::ReplyOwed { echo };
    }

    /// The answer owed to the peer's close, if one is: it is being sent now, so none is owed
    /// any more (the handshake ends next).
    pub(super) fn take_reply_owed(&mut self) -> Option<Option<CloseFrame>> {
        match std::mem::replace(&mut self.stage, Stage::CloseSent) {
            Stage::ReplyOwed { echo } => Some(echo),
            stage => {
                self.stage = stage;
                None
            }
        }
    }

    /// What the I/O layer should do with the transport now.
    #[inline]
    pub(super) fn transport(&self) -> Transport {
        self.transport
    }

    /// The I/O layer shut down the writing side, as [`Transport::ShutdownWrite`] asked.
    pub(super) fn write_shut_down(&mut self) {
        self.write_shut = true;
        if self.transport == Transport::ShutdownWrite {
            self.transport = Transport::Open;
        }
    }

    /// The transport is closed: the connection is over.
    pub(super) fn transport_closed(&mut self) {
        self.transport = Transport::Closed;
        self.stage = Stage::Closed;
    }

    /// Moves to `Closed` and asks the transport for `transport` (only to be closed, when the
    /// writing side is already shut).
    pub(super) fn end(&mut self, transport: Transport) {
        self.stage = Stage::Closed;
        self.transport = match transport {
            Transport::ShutdownWrite | Transport::Finish if self.write_shut => Transport::Abort,
            t => t,
        };
    }

    /// Keeps why the connection ended, unless an earlier reason is kept already.
    pub(super) fn keep_error(&mut self, error: impl FnOnce() -> Error) {
        self.error.get_or_insert_with(error);
    }

    /// Why the connection ended, if it did not end cleanly; a second call returns `None`.
    pub(super) fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }
}
