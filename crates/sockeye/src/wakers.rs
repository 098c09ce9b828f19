//! The wakers a connection polls its stream with, once its receiving and sending sides may be in
//! two tasks ([`WebSocket::split`](crate::WebSocket::split), `StreamExt::split`).
//!
//! A stream keeps one waker per direction, and both sides write to it (the reader writes pongs,
//! close replies and the queue it flushes before waiting). So once the sides are in two tasks,
//! every stream operation is polled with one waker that wakes both ([`Wakers`]), each registered
//! by its own side: neither side can take the other's wake-up.

use std::sync::Arc;
use std::task::{Wake, Waker};

use futures_util::task::AtomicWaker;

/// Which side of a connection is polling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// Receiving (`recv`, the `Stream`).
    Reader,
    /// Sending (`send`, `feed`, `flush`, the `Sink`).
    Writer,
}

/// The wakers a connection polls its stream with.
///
/// While one task does both the receiving and the sending (or only one side is used), the
/// stream is polled with that task's own waker: nothing to add on the hot path. Once the two
/// sides are polled by different tasks, every stream operation is polled with one waker that
/// wakes both ([`IoWakers`]), each side registering its own task there.
#[derive(Default)]
pub(crate) struct Wakers {
    /// The last waker each side polled with (compared, cloned only when it changes).
    reader: Option<Waker>,
    writer: Option<Waker>,
    /// Set for good once the sides are seen in two tasks.
    shared: Option<(Arc<IoWakers>, Waker)>,
}

impl Wakers {
    /// The waker to poll the stream with on behalf of `side`, whose task's waker is `own`.
    #[inline]
    pub(crate) fn select<'a>(&'a mut self, side: Side, own: &'a Waker) -> &'a Waker {
        let mine = match side {
            Side::Reader => &self.reader,
            Side::Writer => &self.writer,
        };
        // One task so far, and this side's waker has not changed: nothing can have split.
        if self.shared.is_none() && mine.as_ref().is_some_and(|w| w.will_wake(own)) {
            return own;
        }
        self.select_changed(side, own)
    }

    /// A side polled with a new waker, or the halves are in two tasks already.
    #[cold]
    fn select_changed<'a>(&'a mut self, side: Side, own: &'a Waker) -> &'a Waker {
        let (mine, other) = match side {
            Side::Reader => (&mut self.reader, &self.writer),
            Side::Writer => (&mut self.writer, &self.reader),
        };
        if !mine.as_ref().is_some_and(|w| w.will_wake(own)) {
            *mine = Some(own.clone());
        }
        if self.shared.is_none() {
            match other {
                Some(other) if !other.will_wake(own) => {
                    // Two tasks: from now on, one waker for both, each side registered.
                    let io = Arc::new(IoWakers::default());
                    let waker = Waker::from(Arc::clone(&io));
                    self.shared = Some((io, waker));
                }
                _ => return own,
            }
        }
        let Some((io, waker)) = &self.shared else {
            return own;
        };
        for (slot, registered) in [(&io.reader, &self.reader), (&io.writer, &self.writer)] {
            if let Some(w) = registered {
                slot.register(w);
            }
        }
        waker
    }

    /// Wakes the sending side (the connection ended: a sender waiting for room must learn it).
    pub(crate) fn wake_writer(&self) {
        if let Some(w) = &self.writer {
            w.wake_by_ref();
        }
    }

    /// Wakes the receiving side (the sender's close answered a held close: the transport is for
    /// the reader to finish, and it may be waiting for input that will never come).
    pub(crate) fn wake_reader(&self) {
        if let Some(w) = &self.reader {
            w.wake_by_ref();
        }
    }
}

/// The receiving and the sending task, each registered by its own side.
#[derive(Default)]
pub(crate) struct IoWakers {
    reader: AtomicWaker,
    writer: AtomicWaker,
}

impl Wake for IoWakers {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.reader.wake();
        self.writer.wake();
    }
}
