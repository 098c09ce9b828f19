//! [`H2Stream`]: one HTTP/2 stream as an `AsyncRead + AsyncWrite` byte stream (RFC 8441 §5).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::{RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::pool::StreamSlot;

/// The most bytes one write hands to h2 at once: one DATA frame's worth of work per write keeps
/// the connection task interleaving streams fairly.
const MAX_WRITE: usize = 256 << 10;

/// One WebSocket's HTTP/2 stream as a byte stream: DATA frames in, DATA frames out, END_STREAM as
/// end of file both ways (RFC 8441 §5). Reads give the flow-control window back as soon as the
/// bytes are taken, so the WebSocket's own input backpressure (it stops reading while its output
/// is stuck) is what holds the peer back; writes go no further than the peer's window.
pub struct H2Stream {
    send: Option<SendStream<Bytes>>,
    recv: Option<RecvStream>,
    /// Received bytes not yet read.
    pending: Bytes,
    read_eof: bool,
    write_shut: bool,
    tls: bool,
    /// How long a stream we ended waits for the peer's END_STREAM once dropped (see `Drop`).
    linger: Duration,
    /// Client side: keeps the shared HTTP/2 connection open while this stream lives.
    _slot: Option<StreamSlot>,
}

impl std::fmt::Debug for H2Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Stream")
            .field("stream_id", &self.send.as_ref().map(|s| s.stream_id().as_u32()))
            .field("read_eof", &self.read_eof)
            .field("write_shut", &self.write_shut)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl H2Stream {
    pub(super) fn new(
        send: SendStream<Bytes>,
        recv: RecvStream,
        tls: bool,
        linger: Duration,
        slot: Option<StreamSlot>,
    ) -> Self {
        H2Stream {
            send: Some(send),
            recv: Some(recv),
            pending: Bytes::new(),
            read_eof: false,
            write_shut: false,
            tls,
            linger,
            _slot: slot,
        }
    }

    /// The HTTP/2 stream identifier (odd: opened by the client).
    pub fn stream_id(&self) -> Option<u32> {
        self.send.as_ref().map(|s| s.stream_id().as_u32())
    }

    /// Whether the HTTP/2 connection underneath is encrypted.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Waits for send capacity (the peer's window, RFC 9113 §5.2) and returns how much there is.
    fn poll_capacity(&mut self, cx: &mut Context<'_>, wanted: usize) -> Poll<io::Result<usize>> {
        let Some(send) = &mut self.send else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        loop {
            send.reserve_capacity(wanted);
            let available = send.capacity();
            if available > 0 {
                return Poll::Ready(Ok(available));
            }
            match ready!(send.poll_capacity(cx)) {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(to_io(e))),
                // The stream can no longer send: the peer reset it.
                None => return Poll::Ready(Err(stream_gone())),
            }
        }
    }
}

impl AsyncRead for H2Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        // A read takes a unit of the task's budget, as tokio's own streams do: h2 queues DATA
        // frames for the stream from the connection's task, which may refill the queue (on
        // another thread) as fast as a reader empties it, and h2 itself never makes a reader
        // yield. Without this, a loop receiving a flood over HTTP/2 would starve its task's other
        // work (a `timeout`, a `select!` branch).
        let coop = ready!(tokio::task::coop::poll_proceed(cx));
        let this = self.get_mut();
        while this.pending.is_empty() {
            let Some(recv) = &mut this.recv else {
                return Poll::Ready(Ok(()));
            };
            if this.read_eof {
                return Poll::Ready(Ok(()));
            }
            match ready!(recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    // Cannot fail for bytes the stream just delivered.
                    let _ = recv.flow_control().release_capacity(data.len());
                    this.pending = data;
                }
                Some(Err(e)) => return Poll::Ready(Err(to_io(e))),
                // END_STREAM: the peer's orderly end, TCP's FIN (RFC 8441 §5).
                None => this.read_eof = true,
            }
        }
        let n = this.pending.len().min(buf.remaining());
        buf.put_slice(&this.pending[..n]);
        bytes::Buf::advance(&mut this.pending, n);
        coop.made_progress();
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for H2Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    /// h2 takes owned buffers, so the slices are copied once into one DATA payload, as much as
    /// the peer's window allows.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        let this = self.get_mut();
        if this.write_shut {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let n = ready!(this.poll_capacity(cx, total.min(MAX_WRITE)))?.min(total);
        let mut chunk = BytesMut::with_capacity(n);
        for piece in leading_bytes(bufs, n) {
            chunk.extend_from_slice(piece);
        }
        let Some(send) = &mut this.send else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        send.send_data(chunk.freeze(), false).map_err(to_io)?;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// h2's connection task writes what streams queue; there is nothing to flush per stream.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Ends our side with END_STREAM, RFC 8441 §5's equivalent of TCP's FIN.
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.write_shut {
            this.write_shut = true;
            if let Some(send) = &mut this.send {
                send.send_data(Bytes::new(), true).map_err(to_io)?;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for H2Stream {
    /// Dropping a stream ends it the way closing a TCP socket does (RFC 8441 §5 maps one to the
    /// other): our side ends with END_STREAM after whatever is still queued — h2 would otherwise
    /// reset the stream (CANCEL) and throw the queued data away. Until the peer's END_STREAM
    /// arrives (the client closes after the server, RFC 6455 §7.1.1) the stream is kept, for up to
    /// the close timeout, as a TCP socket lingers in FIN-WAIT; then it is reset.
    fn drop(&mut self) {
        let (Some(mut send), Some(mut recv)) = (self.send.take(), self.recv.take()) else {
            return;
        };
        if !self.write_shut {
            // Fails only when the stream is already reset or ended.
            let _ = send.send_data(Bytes::new(), true);
        }
        if self.read_eof {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let linger = self.linger;
        let slot = self._slot.take();
        runtime.spawn(async move {
            let drain = async {
                while let Some(Ok(data)) = recv.data().await {
                    let _ = recv.flow_control().release_capacity(data.len());
                }
            };
            let _ = tokio::time::timeout(linger, drain).await;
            drop((send, slot));
        });
    }
}

/// The first `n` bytes of `bufs`, slice by slice (what a vectored write of `n` bytes took): the
/// one walk over written slices, for [`H2Stream`]'s copy and the frame guard's cursor.
pub(super) fn leading_bytes<'a>(bufs: &'a [IoSlice<'_>], n: usize) -> impl Iterator<Item = &'a [u8]> {
    bufs.iter().scan(n, |left, buf| {
        if *left == 0 {
            return None;
        }
        let take = (*left).min(buf.len());
        *left -= take;
        Some(&buf[..take])
    })
}

pub(super) fn to_io(e: h2::Error) -> io::Error {
    if e.is_io() {
        return e
            .into_io()
            .unwrap_or_else(|| io::Error::other("HTTP/2 I/O error"));
    }
    let kind = if e.is_reset() || e.is_go_away() {
        io::ErrorKind::ConnectionReset
    } else {
        io::ErrorKind::Other
    };
    io::Error::new(kind, e)
}

fn stream_gone() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "the HTTP/2 stream was reset")
}
