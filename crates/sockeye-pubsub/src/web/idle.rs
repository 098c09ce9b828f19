//! An idle connection's end: [`Activity`] wraps a connection's I/O and notes that bytes moved
//! (a relaxed store per read or write); [`quiet_for`] ends once none have for a whole timeout.
//! The wrapper also holds the connection's place under the caps: it moves into a WebSocket
//! upgraded from the connection, and the place is given back when that socket ends.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use super::caps::Admitted;

/// A connection's I/O, noting each read and write in a flag that [`quiet_for`] clears.
pub(crate) struct Activity<I> {
    io: I,
    moved: Arc<AtomicBool>,
    /// The connection's place under the caps, until the I/O is dropped.
    _admitted: Option<Admitted>,
}

impl<I> Activity<I> {
    /// `io` holding `admitted`, and the flag its reads and writes set.
    pub(crate) fn new(io: I, admitted: Option<Admitted>) -> (Activity<I>, Arc<AtomicBool>) {
        let moved = Arc::new(AtomicBool::new(false));
        let activity = Activity {
            io,
            moved: Arc::clone(&moved),
            _admitted: admitted,
        };
        (activity, moved)
    }

    fn noted<T>(&self, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if matches!(poll, Poll::Ready(Ok(_))) {
            self.moved.store(true, Ordering::Relaxed);
        }
        poll
    }
}

impl<I: hyper::rt::Read + Unpin> hyper::rt::Read for Activity<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Ready(Ok) with nothing read is the end of the stream: noted too, harmlessly.
        let poll = Pin::new(&mut this.io).poll_read(cx, buf);
        this.noted(poll)
    }
}

impl<I: hyper::rt::Write + Unpin> hyper::rt::Write for Activity<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write(cx, buf);
        this.noted(poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.noted(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Ends once no byte has moved (`moved` stayed clear) for `timeout`, give or take a quarter of
/// it; never with `None`.
pub(crate) async fn quiet_for(moved: &AtomicBool, timeout: Option<Duration>) {
    let Some(timeout) = timeout else {
        return std::future::pending().await;
    };
    let tick = (timeout / 4).max(Duration::from_millis(1));
    let mut quiet = Duration::ZERO;
    loop {
        tokio::time::sleep(tick).await;
        if moved.swap(false, Ordering::Relaxed) {
            quiet = Duration::ZERO;
        } else {
            quiet += tick;
            if quiet >= timeout {
                return;
            }
        }
    }
}
