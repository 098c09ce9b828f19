//! What a receive takes from the engine: a whole message ([`Message`]) or a piece
//! ([`Incoming`]), behind one trait so that `recv` and `recv_chunk` share one receive path.

use sockeye_proto::{CloseFrame, Connection, Incoming, Message};

use crate::error::Error;

/// What a receive takes from the engine: a whole message ([`Message`]) or a piece
/// ([`Incoming`]).
pub(super) trait Received: Sized {
    fn next(conn: &mut Connection) -> Result<Option<Self>, sockeye_proto::Error>;
    fn is_close(&self) -> bool;
    /// The peer's close frame, for a close that carries one.
    fn close_frame(&self) -> Option<&CloseFrame>;
}

impl Received for Message {
    #[inline]
    fn next(conn: &mut Connection) -> Result<Option<Self>, sockeye_proto::Error> {
        conn.poll_message()
    }

    #[inline]
    fn is_close(&self) -> bool {
        matches!(self, Message::Close(_))
    }

    fn close_frame(&self) -> Option<&CloseFrame> {
        match self {
            Message::Close(frame) => frame.as_ref(),
            _ => None,
        }
    }
}

impl Received for Incoming {
    #[inline]
    fn next(conn: &mut Connection) -> Result<Option<Self>, sockeye_proto::Error> {
        conn.poll_chunk()
    }

    #[inline]
    fn is_close(&self) -> bool {
        matches!(self, Incoming::Control(Message::Close(_)))
    }

    fn close_frame(&self) -> Option<&CloseFrame> {
        match self {
            Incoming::Control(message) => message.close_frame(),
            Incoming::Chunk(_) => None,
        }
    }
}

/// The next message or piece the engine has, to hand over. A protocol error is kept by the
/// engine and reported once the stream is closed, after the close frame that explains it has
/// gone out (§7.1.7); the application's own mistake (receiving a streamed message whole) is
/// reported at once.
#[inline(always)]
pub(super) fn take_next<T: Received>(conn: &mut Connection) -> Option<Result<T, Error>> {
    match T::next(conn) {
        Ok(Some(next)) => Some(Ok(next)),
        Err(e @ sockeye_proto::Error::InvalidInput(_)) => Some(Err(e.into())),
        _ => None,
    }
}
