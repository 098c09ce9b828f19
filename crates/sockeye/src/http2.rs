//! WebSockets over HTTP/2 (RFC 8441), on the `h2` crate.
//!
//! ```text
//!   TCP/TLS ── h2 connection task ──┬── stream 1: extended CONNECT ─ H2Stream ─ WebSocket (same engine)
//!    (one per peer)                 ├── stream 3: …
//!                                   └── stream 5: …
//! ```
//!
//! An HTTP/2 stream opened with an extended CONNECT (`:protocol: websocket`, answered `200`) is a
//! byte stream like a TCP connection (RFC 8441 §5): [`H2Stream`] makes it an `AsyncRead +
//! AsyncWrite`, and the WebSocket engine runs over it unchanged — framing, masking, limits,
//! compression, keepalive and the closing handshake are the same code as over HTTP/1.1. Only the
//! opening handshake differs (see `sockeye_proto::handshake`'s RFC 8441 functions), and the
//! transport close: END_STREAM stands for TCP's FIN, RST_STREAM(CANCEL) for a reset.
//!
//! Servers accept it on the same port as HTTP/1.1 upgrades: over TLS when ALPN chose `h2`, in
//! cleartext when the client starts with the HTTP/2 connection preface (prior knowledge, RFC 9113
//! §3.3). Clients use it when [`Config::http_version`](crate::Config::http_version) asks, and share
//! one HTTP/2 connection between the WebSockets they open to one origin.

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::{RecvStream, SendStream};
use http::{Request, Response};
use sockeye_proto::Role;
use sockeye_proto::extension;
use sockeye_proto::handshake::{
    ClientHello, WEBSOCKET_PROTOCOL, check_extended_connect_response, extended_connect_request,
    reject_response,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::config::{Config, HttpVersion};
use crate::error::Error;
use crate::server::{ServerStats, ShutdownSignal, kept_deflate, negotiate, service_unavailable};
use crate::stream::MaybeTlsStream;
use crate::websocket::WebSocket;

/// The HTTP/2 connection preface a client with prior knowledge starts with (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Flow-control window of each stream (RFC 9113 §6.9): how much a peer may send before we read.
/// 1 MiB, like the write high-water mark: a large message streams without waiting a round trip
/// per 64 KiB (the protocol's default), and the window is credit, not memory allocated up front.
const STREAM_WINDOW: u32 = 1 << 20;

/// The connection's window: room for several streams to be busy at once, so one stream whose
/// application stops reading cannot starve the others.
const CONNECTION_WINDOW: u32 = 16 << 20;

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
    fn new(
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
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        if this.write_shut {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let n = ready!(this.poll_capacity(cx, total.min(MAX_WRITE)))?.min(total);
        let mut chunk = BytesMut::with_capacity(n);
        for buf in bufs {
            let take = buf.len().min(n - chunk.len());
            chunk.extend_from_slice(&buf[..take]);
            if chunk.len() == n {
                break;
            }
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

fn to_io(e: h2::Error) -> io::Error {
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

// ------------------------------------------------------------------------------------- server

/// Reads the start of a cleartext connection into `head` until it is the HTTP/2 preface (prior
/// knowledge) or cannot be: an HTTP/1.1 request differs at its first byte, so this usually
/// decides on the first read, and the bytes stay in `head` for whichever protocol goes on.
pub(crate) async fn read_preface(tcp: &mut TcpStream, head: &mut BytesMut) -> io::Result<bool> {
    use tokio::io::AsyncReadExt;
    loop {
        let n = head.len().min(PREFACE.len());
        if head[..n] != PREFACE[..n] {
            return Ok(false);
        }
        if n == PREFACE.len() {
            return Ok(true);
        }
        if tcp.read_buf(head).await? == 0 {
            return Ok(false);
        }
    }
}

/// Whether ALPN chose `h2` on a server TLS stream.
pub(crate) fn alpn_is_h2(stream: &MaybeTlsStream) -> bool {
    match stream {
        #[cfg(feature = "tls")]
        MaybeTlsStream::ServerTls(s) => s.alpn_protocol() == Some(b"h2"),
        #[cfg(feature = "tls")]
        MaybeTlsStream::ClientTls(s) => s.alpn_protocol() == Some(b"h2"),
        _ => false,
    }
}

/// What every stream of a served HTTP/2 connection shares (cloned per stream: the handler need
/// not be `Sync`).
#[derive(Clone)]
pub(crate) struct ServeContext<H> {
    pub(crate) config: Arc<Config>,
    pub(crate) shutdown: ShutdownSignal,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) handler: H,
    pub(crate) peer: SocketAddr,
    pub(crate) stats: ServerStats,
}

/// Serves one HTTP/2 connection (its preface due by `deadline`): each extended CONNECT stream
/// becomes a [`WebSocket`] handed to the handler in its own task; anything else is answered with
/// an HTTP/2 error response on that stream alone. A server shutdown sends GOAWAY (no new streams) while the open WebSockets close
/// with 1001 by themselves; the connection ends when its last stream does.
pub(crate) async fn serve_connection<H, Fut>(
    stream: MaybeTlsStream,
    head: BytesMut,
    admitted: bool,
    deadline: tokio::time::Instant,
    context: ServeContext<H>,
) where
    H: Fn(WebSocket<MaybeTlsStream>, Request<()>, SocketAddr) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let config = &context.config;
    let tls = stream.is_tls();
    let handshake = server_builder(config).handshake::<_, Bytes>(StreamErrorGuard::new(stream, head));
    let mut connection = match tokio::time::timeout_at(deadline, handshake).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(e)) => {
            context
                .stats
                .handshake_failed(context.peer, "HTTP/2 connection preface", &e);
            return;
        }
        Err(_) => {
            let timeout = Error::timed_out("handshake");
            context
                .stats
                .handshake_failed(context.peer, "HTTP/2 connection preface", &timeout);
            return;
        }
    };
    // Over the connection limit (cleartext only: over TLS such a connection is closed before the
    // TLS handshake): no new streams (GOAWAY); any already sent get 503 for want of a permit, and
    // the connection ends with them.
    let mut going_away = !admitted;
    if going_away {
        connection.graceful_shutdown();
    }
    // A connection that carries no WebSocket is a handshake not yet done: like an HTTP/1.1
    // client that sends no request, it is closed after the handshake timeout.
    let idle = tokio::time::sleep(config.handshake_timeout);
    tokio::pin!(idle);
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = context.shutdown.token.cancelled(), if !going_away => {
                connection.graceful_shutdown();
                going_away = true;
            }
            _ = &mut idle, if streams.is_empty() && !going_away => {
                connection.graceful_shutdown();
                going_away = true;
            }
            Some(_) = streams.join_next(), if !streams.is_empty() => {
                if streams.is_empty() {
                    idle.as_mut().reset(tokio::time::Instant::now() + config.handshake_timeout);
                }
            }
            next = connection.accept() => match next {
                Some(Ok((request, respond))) => {
                    if let Some((ws, request, permit)) = accept_stream(request, respond, tls, &context) {
                        let handler = context.handler.clone();
                        let peer = context.peer;
                        streams.spawn(async move {
                            handler(ws, request, peer).await;
                            drop(permit);
                        });
                    }
                }
                // A connection error (GOAWAY sent, socket failed) or the end.
                Some(Err(_)) | None => break,
            },
        }
    }
    // The streams' handlers run to their end, as over HTTP/1.1 (their sockets now fail); a
    // server's shutdown deadline still bounds them by aborting this task.
    while streams.join_next().await.is_some() {}
}

/// Keeps one stream's DATA after its END_STREAM from ending the whole connection.
///
/// RFC 9113 §5.1 and §6.1 make that a *stream* error (RST_STREAM with STREAM_CLOSED); h2 0.4
/// answers it with GOAWAY(PROTOCOL_ERROR), which §5.4.1 allows but which would take down every
/// other WebSocket on the connection. This filter, between the socket and h2, follows the
/// client's frames (headers only: 9 bytes each, payloads pass through) and, for such a DATA frame,
/// hands h2 an RST_STREAM from the client instead — h2 then ends that stream alone — and itself
/// sends the client RST_STREAM(STREAM_CLOSED) and a connection WINDOW_UPDATE for the bytes h2 never
/// saw (so flow control stays in step), at the next boundary between h2's own frames.
struct StreamErrorGuard<S> {
    io: S,
    /// The client preface (RFC 9113 §3.4) still to pass through before frames start.
    preface_left: usize,
    /// Read from the socket, not yet filtered.
    raw: BytesMut,
    /// Filtered, for h2 to read.
    filtered: BytesMut,
    inbound: FrameCursor,
    /// The payload of the current inbound frame is dropped (a DATA frame after END_STREAM).
    skipping: bool,
    /// Streams the client ended (END_STREAM seen), and whether each was reset here already.
    ended: std::collections::BTreeMap<u32, bool>,
    outbound: FrameCursor,
    /// Frames of ours waiting for a boundary between h2's frames (resets: at most one per stream).
    inject: BytesMut,
    /// Connection window to give back for DATA dropped here, sent as one WINDOW_UPDATE with the
    /// next injection, so that a flood of dropped frames costs no memory.
    credit: u64,
    /// Streams reset here; past `MAX_GUARD_RESETS` the client is abusing it and the connection
    /// ends (what h2 does for its own resets, against CVE-2025-8671 "MadeYouReset").
    resets: usize,
    /// Part of `inject` is on the wire: finish it before any more of h2's bytes.
    injecting: bool,
}

/// Where a byte stream of HTTP/2 frames is: in a frame header (`have` bytes of it) or in a
/// payload (`remaining` bytes to go).
#[derive(Debug, Default)]
struct FrameCursor {
    header: [u8; FRAME_HEADER_LEN],
    have: usize,
    remaining: usize,
}

const FRAME_HEADER_LEN: usize = 9;
const FRAME_DATA: u8 = 0x0;
const FRAME_HEADERS: u8 = 0x1;
const FRAME_RST_STREAM: u8 = 0x3;
const FRAME_WINDOW_UPDATE: u8 = 0x8;
const FLAG_END_STREAM: u8 = 0x1;
const STREAM_CLOSED: u32 = 0x5;
/// Ended streams remembered; only the most recent can still be half-closed (at most
/// `http2_max_concurrent_streams` streams are open at once).
const ENDED_REMEMBERED: usize = 4096;
/// Resets this filter makes on one connection before it gives up on the client.
const MAX_GUARD_RESETS: usize = 1024;

impl FrameCursor {
    fn at_boundary(&self) -> bool {
        self.have == 0 && self.remaining == 0
    }

    /// Takes header bytes from the front of `bytes`; returns the header once it is whole (the
    /// payload's length is then in `remaining`).
    fn take_header(&mut self, bytes: &mut &[u8]) -> Option<[u8; FRAME_HEADER_LEN]> {
        let n = (FRAME_HEADER_LEN - self.have).min(bytes.len());
        self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
        self.have += n;
        *bytes = &bytes[n..];
        if self.have < FRAME_HEADER_LEN {
            return None;
        }
        self.have = 0;
        self.remaining = usize::from(self.header[0]) << 16
            | usize::from(self.header[1]) << 8
            | usize::from(self.header[2]);
        Some(self.header)
    }

    /// Follows bytes that went by without looking at them.
    fn advance(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let n = self.remaining.min(bytes.len());
                self.remaining -= n;
                bytes = &bytes[n..];
            } else {
                self.take_header(&mut bytes);
            }
        }
    }
}

fn frame(kind: u8, stream: u32, payload: u32) -> [u8; FRAME_HEADER_LEN + 4] {
    let mut f = [0u8; FRAME_HEADER_LEN + 4];
    f[2] = 4;
    f[3] = kind;
    f[5..9].copy_from_slice(&stream.to_be_bytes());
    f[9..].copy_from_slice(&payload.to_be_bytes());
    f
}

impl<S: AsyncRead + AsyncWrite + Unpin> StreamErrorGuard<S> {
    /// `head`: bytes already read from `io` (the preface, in cleartext).
    fn new(io: S, head: BytesMut) -> Self {
        StreamErrorGuard {
            io,
            preface_left: PREFACE.len(),
            raw: head,
            filtered: BytesMut::new(),
            inbound: FrameCursor::default(),
            skipping: false,
            ended: Default::default(),
            outbound: FrameCursor::default(),
            inject: BytesMut::new(),
            credit: 0,
            resets: 0,
            injecting: false,
        }
    }

    /// Moves `raw` into `filtered`, frame by frame.
    fn filter(&mut self) {
        let raw = self.raw.split().freeze();
        let mut bytes = &raw[..];
        while !bytes.is_empty() {
            if self.preface_left > 0 || self.inbound.remaining > 0 {
                let in_preface = self.preface_left > 0;
                let left = if in_preface {
                    self.preface_left
                } else {
                    self.inbound.remaining
                };
                let n = left.min(bytes.len());
                if in_preface || !self.skipping {
                    self.filtered.extend_from_slice(&bytes[..n]);
                }
                if in_preface {
                    self.preface_left -= n;
                } else {
                    self.inbound.remaining -= n;
                }
                bytes = &bytes[n..];
                continue;
            }
            let Some(header) = self.inbound.take_header(&mut bytes) else {
                break;
            };
            let (kind, flags) = (header[3], header[4]);
            let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7FFF_FFFF;
            self.skipping = kind == FRAME_DATA && self.ended.contains_key(&stream);
            if !self.skipping {
                self.filtered.extend_from_slice(&header);
                if (kind == FRAME_DATA || kind == FRAME_HEADERS) && flags & FLAG_END_STREAM != 0 {
                    self.ended.insert(stream, false);
                    if self.ended.len() > ENDED_REMEMBERED {
                        self.ended.pop_first();
                    }
                }
                continue;
            }
            if self.ended.insert(stream, true) == Some(false) {
                self.resets += 1;
                self.filtered
                    .extend_from_slice(&frame(FRAME_RST_STREAM, stream, STREAM_CLOSED));
                self.inject
                    .extend_from_slice(&frame(FRAME_RST_STREAM, stream, STREAM_CLOSED));
            }
            self.credit += self.inbound.remaining as u64;
        }
    }

    /// Writes our queued frames once h2 is between frames; until they are out, h2 waits.
    fn poll_inject(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let idle = self.inject.is_empty() && self.credit == 0;
        if idle || !(self.injecting || self.outbound.at_boundary()) {
            return Poll::Ready(Ok(()));
        }
        if !self.injecting {
            // RFC 9113 §6.9: an increment is at most 2^31 - 1.
            while self.credit > 0 {
                let increment = self.credit.min(0x7FFF_FFFF);
                self.inject
                    .extend_from_slice(&frame(FRAME_WINDOW_UPDATE, 0, increment as u32));
                self.credit -= increment;
            }
        }
        self.injecting = true;
        while !self.inject.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.inject))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            bytes::Buf::advance(&mut self.inject, n);
        }
        self.injecting = false;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for StreamErrorGuard<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        while this.filtered.is_empty() {
            if !this.raw.is_empty() {
                this.filter();
                continue;
            }
            this.raw.reserve(16 << 10);
            let n = ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut this.io),
                cx,
                &mut this.raw
            ))?;
            if n == 0 {
                return Poll::Ready(Ok(()));
            }
            this.filter();
            if this.resets > MAX_GUARD_RESETS {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the client keeps sending DATA on streams it ended (RFC 9113 §5.1)",
                )));
            }
            if !this.inject.is_empty() || this.credit > 0 {
                // Best effort now; otherwise with h2's next write or flush.
                let _ = this.poll_inject(cx);
            }
        }
        let n = this.filtered.len().min(buf.remaining());
        buf.put_slice(&this.filtered.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for StreamErrorGuard<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_inject(cx))?;
        let n = ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        this.outbound.advance(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_inject(cx))?;
        let n = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))?;
        let mut left = n;
        for buf in bufs {
            let take = left.min(buf.len());
            this.outbound.advance(&buf[..take]);
            left -= take;
            if left == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_inject(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_inject(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

fn server_builder(config: &Config) -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .enable_connect_protocol()
        .max_concurrent_streams(config.http2_max_concurrent_streams)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(u32::try_from(config.protocol.max_handshake_size).unwrap_or(u32::MAX));
    builder
}

/// Answers one stream: a WebSocket, accepted with `200` (RFC 8441 §5) and ready for its handler,
/// or a refusal sent on that stream alone. Runs on the connection's task, so the response goes
/// out with the connection's next write, without waiting for a task of its own to be scheduled.
fn accept_stream<H>(
    request: Request<RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    tls: bool,
    context: &ServeContext<H>,
) -> Option<(
    WebSocket<MaybeTlsStream>,
    Request<()>,
    tokio::sync::OwnedSemaphorePermit,
)> {
    let (parts, recv) = request.into_parts();
    let protocol = parts.extensions.get::<h2::ext::Protocol>().map(|p| p.as_str());
    let hello = match ClientHello::from_extended_connect(&parts.method, protocol, &parts.headers) {
        Ok(hello) => hello,
        Err(e) => {
            refuse(&mut respond, reject_response(&e));
            let e = Error::from(e);
            context
                .stats
                .handshake_failed(context.peer, "HTTP/2 extended CONNECT", &e);
            return None;
        }
    };
    let Ok(permit) = Arc::clone(&context.permits).try_acquire_owned() else {
        refuse(&mut respond, service_unavailable());
        context.stats.refused_one();
        tracing::debug!(peer = %context.peer, "over max_connections: HTTP/2 stream refused");
        return None;
    };
    let config = &context.config;
    let (response, deflate) = negotiate(&hello, &config.protocol);
    let deflate = kept_deflate(deflate, &response);
    let send = respond.send_response(response, false).ok()?;
    let stream = H2Stream::new(send, recv, tls, config.protocol.close_timeout, None);
    let mut ws = WebSocket::from_upgraded(MaybeTlsStream::Http2(stream), Role::Server, config, &[], deflate);
    ws.set_shutdown(&context.shutdown);
    Some((ws, Request::from_parts(parts, ()), permit))
}

/// Answers a refused stream with an HTTP/2 response carrying the refusal's status and text.
fn refuse(respond: &mut h2::server::SendResponse<Bytes>, refusal: Response<String>) {
    let (mut parts, body) = refusal.into_parts();
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Ok(mut send) = respond.send_response(Response::from_parts(parts, ()), body.is_empty()) {
        let _ = send.send_data(Bytes::from(body), true);
    }
}

// ------------------------------------------------------------------------------------- client

/// The ALPN protocols a client offers for `version`.
pub(crate) fn client_alpn(version: HttpVersion) -> &'static [&'static [u8]] {
    match version {
        HttpVersion::Http1 => &[b"http/1.1"],
        HttpVersion::Http2Preferred => &[b"h2", b"http/1.1"],
        HttpVersion::Http2Only => &[b"h2"],
    }
}

/// One HTTP/2 connection shared by a client's WebSockets to one origin. The pool holds it weakly:
/// it lives while some WebSocket uses it, and closes once the last one is gone.
#[derive(Debug)]
pub(crate) struct PooledConnection {
    requests: h2::client::SendRequest<Bytes>,
    tls: bool,
    /// WebSockets open on it, against the server's `SETTINGS_MAX_CONCURRENT_STREAMS`: a full
    /// connection is not offered again (h2 would queue the stream until one ends).
    open: std::sync::atomic::AtomicUsize,
}

impl PooledConnection {
    fn has_room(&self) -> bool {
        self.open.load(std::sync::atomic::Ordering::Acquire) < self.requests.current_max_send_streams()
    }
}

/// A WebSocket's place on a pooled connection: keeps the connection open, and counts.
#[derive(Debug)]
struct StreamSlot(Arc<PooledConnection>);

impl StreamSlot {
    fn new(connection: Arc<PooledConnection>) -> Self {
        connection.open.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        StreamSlot(connection)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// What makes two connections interchangeable: the origin, the proxy, and the very TLS
/// configuration (held, so that its address cannot be reused by another while the key exists:
/// a connection made with one client certificate is never handed to another configuration).
#[derive(Debug, Clone)]
pub(crate) struct PoolKey {
    pub(crate) tls: bool,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) proxy: String,
    #[cfg(feature = "tls")]
    pub(crate) tls_config: Option<Arc<rustls::ClientConfig>>,
}

impl PoolKey {
    fn tls_config_address(&self) -> usize {
        #[cfg(feature = "tls")]
        if let Some(config) = &self.tls_config {
            return Arc::as_ptr(config) as usize;
        }
        0
    }
}

impl PartialEq for PoolKey {
    fn eq(&self, other: &Self) -> bool {
        (
            self.tls,
            &self.host,
            self.port,
            &self.proxy,
            self.tls_config_address(),
        ) == (
            other.tls,
            &other.host,
            other.port,
            &other.proxy,
            other.tls_config_address(),
        )
    }
}

impl Eq for PoolKey {}

impl std::hash::Hash for PoolKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (
            self.tls,
            &self.host,
            self.port,
            &self.proxy,
            self.tls_config_address(),
        )
            .hash(state);
    }
}

fn pool() -> &'static Mutex<HashMap<PoolKey, Weak<PooledConnection>>> {
    static POOL: OnceLock<Mutex<HashMap<PoolKey, Weak<PooledConnection>>>> = OnceLock::new();
    POOL.get_or_init(Default::default)
}

/// Opens a WebSocket on a pooled connection to the same origin, if there is one that is still
/// up. `Ok(None)`: open a new connection.
pub(crate) async fn connect_pooled(
    key: &PoolKey,
    request: &Request<()>,
    config: &Config,
) -> Result<Option<(WebSocket<MaybeTlsStream>, Response<()>)>, Error> {
    let shared = {
        let mut pool = pool().lock().unwrap_or_else(|e| e.into_inner());
        pool.retain(|_, weak| weak.strong_count() > 0);
        pool.get(key).and_then(Weak::upgrade)
    };
    let Some(shared) = shared.filter(|c| c.has_room()) else {
        return Ok(None);
    };
    match open_stream(shared, request.clone(), config).await {
        Ok(connected) => Ok(Some(connected)),
        // The connection went away (GOAWAY, reset) between uses: start a new one.
        Err(Error::Io(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Starts HTTP/2 on a fresh transport, waits for the server's SETTINGS (which say whether it
/// takes extended CONNECT, RFC 8441 §3), pools the connection, and opens the WebSocket.
pub(crate) async fn connect_new(
    stream: MaybeTlsStream,
    key: PoolKey,
    request: Request<()>,
    config: &Config,
) -> Result<(WebSocket<MaybeTlsStream>, Response<()>), Error> {
    let tls = stream.is_tls();
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(u32::try_from(config.protocol.max_handshake_size).unwrap_or(u32::MAX));
    // In cleartext nothing was negotiated: a server that does not answer the preface does not
    // speak h2c, which is what the caller needs to hear.
    let failed = |e: h2::Error| match tls {
        true => Error::Io(to_io(e)),
        false => sockeye_proto::HandshakeError::Http2Unavailable(
            "the server did not answer the HTTP/2 preface (h2c with prior knowledge)",
        )
        .into(),
    };
    let (requests, mut connection) = builder.handshake::<_, Bytes>(stream).await.map_err(failed)?;
    let ping_pong = connection.ping_pong();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    // The server's SETTINGS come first in its preface (RFC 9113 §3.4), so once a PING is
    // answered they have been applied.
    if let Some(mut ping_pong) = ping_pong {
        ping_pong.ping(h2::Ping::opaque()).await.map_err(failed)?;
    }
    if !requests.is_extended_connect_protocol_enabled() {
        return Err(sockeye_proto::HandshakeError::Http2Unavailable(
            "the server speaks HTTP/2 but does not accept WebSockets over it (no SETTINGS_ENABLE_CONNECT_PROTOCOL, RFC 8441 §3)",
        )
        .into());
    }
    let shared = Arc::new(PooledConnection {
        requests,
        tls,
        open: Default::default(),
    });
    pool()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, Arc::downgrade(&shared));
    open_stream(shared, request, config).await
}

/// Sends the extended CONNECT on a connection and turns the stream into a WebSocket.
async fn open_stream(
    shared: Arc<PooledConnection>,
    request: Request<()>,
    config: &Config,
) -> Result<(WebSocket<MaybeTlsStream>, Response<()>), Error> {
    let mut request = extended_connect_request(request)?;
    let headers = request.headers_mut();
    if !headers.contains_key(http::header::SEC_WEBSOCKET_EXTENSIONS)
        && let Some(offer) = extension::client_offer(&config.protocol)
        && let Ok(value) = http::HeaderValue::from_str(&offer)
    {
        headers.insert(http::header::SEC_WEBSOCKET_EXTENSIONS, value);
    }
    let io = |e: h2::Error| Error::Io(to_io(e));
    let mut requests = shared.requests.clone().ready().await.map_err(io)?;
    let mut outgoing = request.clone();
    outgoing
        .extensions_mut()
        .insert(h2::ext::Protocol::from(WEBSOCKET_PROTOCOL));
    let (response, send) = requests.send_request(outgoing, false).map_err(io)?;
    let response = response.await.map_err(io)?;
    let (parts, recv) = response.into_parts();
    let response = Response::from_parts(parts, ());
    check_extended_connect_response(&request, &response)?;
    let deflate = extension::client_accept(&config.protocol, response.headers())?;
    let tls = shared.tls;
    let stream = H2Stream::new(
        send,
        recv,
        tls,
        config.protocol.close_timeout,
        Some(StreamSlot::new(shared)),
    );
    let ws = WebSocket::from_upgraded(MaybeTlsStream::Http2(stream), Role::Client, config, &[], deflate);
    Ok((ws, response))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: usize, kind: u8, flags: u8, stream: u32) -> Vec<u8> {
        let mut h = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        h.extend_from_slice(&stream.to_be_bytes());
        h
    }

    /// The client's bytes: preface, SETTINGS, HEADERS(3, END_STREAM), then DATA on 3 and 5.
    fn client_bytes() -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(header(0, 0x4, 0, 0));
        bytes.extend(header(2, FRAME_HEADERS, 0x4 | FLAG_END_STREAM, 3));
        bytes.extend([0x82, 0x84]);
        bytes.extend(header(5, FRAME_DATA, 0, 3));
        bytes.extend(b"after");
        bytes.extend(header(3, FRAME_DATA, 0, 5));
        bytes.extend(b"ok!");
        bytes.extend(header(4, FRAME_DATA, 0, 3));
        bytes.extend(b"more");
        bytes
    }

    /// Filters `input` delivered in the pieces `cuts` makes; returns (to h2, to the client).
    fn run(input: &[u8], cuts: &[usize]) -> (Vec<u8>, Vec<u8>, u64) {
        let (io, _peer) = tokio::io::duplex(64);
        let mut guard = StreamErrorGuard::new(io, BytesMut::new());
        let mut start = 0;
        for &end in cuts.iter().chain([&input.len()]) {
            guard.raw.extend_from_slice(&input[start..end]);
            guard.filter();
            start = end;
        }
        (guard.filtered.to_vec(), guard.inject.to_vec(), guard.credit)
    }

    #[test]
    fn data_after_end_stream_becomes_a_reset_of_that_stream_alone() {
        let input = client_bytes();
        let (to_h2, to_client, credit) = run(&input, &[]);
        let mut expected = input[..PREFACE.len() + 9 + 9 + 2].to_vec();
        expected.extend(frame(FRAME_RST_STREAM, 3, STREAM_CLOSED));
        expected.extend(header(3, FRAME_DATA, 0, 5));
        expected.extend(b"ok!");
        assert_eq!(to_h2, expected);
        // One reset for the stream, and the connection window owed for both dropped frames
        // (sent as one WINDOW_UPDATE when the reset goes out).
        assert_eq!(to_client, frame(FRAME_RST_STREAM, 3, STREAM_CLOSED));
        assert_eq!(credit, 9);
    }

    #[test]
    fn every_split_point_gives_the_same_result() {
        let input = client_bytes();
        let whole = run(&input, &[]);
        for cut in 0..input.len() {
            assert_eq!(run(&input, &[cut]), whole, "split at {cut}");
        }
        let bytewise: Vec<usize> = (1..input.len()).collect();
        assert_eq!(run(&input, &bytewise), whole);
    }

    #[test]
    fn outbound_boundaries_are_followed_across_writes() {
        let mut cursor = FrameCursor::default();
        let mut bytes = header(3, FRAME_DATA, 0, 1);
        bytes.extend(b"abc");
        bytes.extend(header(0, 0x4, 0x1, 0));
        for (i, byte) in bytes.iter().enumerate() {
            cursor.advance(std::slice::from_ref(byte));
            let boundary = i + 1 == 12 || i + 1 == bytes.len();
            assert_eq!(cursor.at_boundary(), boundary, "after byte {i}");
        }
    }
}
