//! The server's frame guard: one stream's DATA after its END_STREAM ends that stream alone, not
//! the whole connection (see [`StreamErrorGuard`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::h2_stream::leading_bytes;
use super::sniff::PREFACE;

/// Keeps one stream's DATA after its END_STREAM from ending the whole connection.
///
/// RFC 9113 §5.1 and §6.1 make that a *stream* error (RST_STREAM with STREAM_CLOSED); h2 0.4
/// answers it with GOAWAY(PROTOCOL_ERROR), which §5.4.1 allows but which would take down every
/// other WebSocket on the connection. This filter, between the socket and h2, follows the
/// client's frames (headers only: 9 bytes each, payloads pass through) and, for such a DATA frame,
/// hands h2 an RST_STREAM from the client instead — h2 then ends that stream alone — and itself
/// sends the client RST_STREAM(STREAM_CLOSED) and a connection WINDOW_UPDATE for the bytes h2 never
/// saw (so flow control stays in step), at the next boundary between h2's own frames.
pub(super) struct StreamErrorGuard<S> {
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
    /// Streams the client ended (END_STREAM seen), and whether each was reset here already: at
    /// most `remembered` of them (see `remember_ended`).
    ended: BTreeMap<u32, bool>,
    /// Those of `ended` that our side has ended too (END_STREAM or RST_STREAM from h2): closed
    /// both ways, h2 lets them go once its frames are out, after which it answers DATA on them
    /// with a reset of its own. The first to forget.
    finished: BTreeSet<u32>,
    /// How many ended streams can still matter: the streams that can be open, or half-closed,
    /// at once (`http2_max_concurrent_streams`; a stream the client ended but we did not stays
    /// counted against it).
    remembered: usize,
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
/// The most ended streams one connection's guard remembers, whatever the concurrency limit.
const MAX_REMEMBERED: usize = 4096;
const FRAME_WINDOW_UPDATE: u8 = 0x8;
const FLAG_END_STREAM: u8 = 0x1;
const STREAM_CLOSED: u32 = 0x5;
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

    /// Follows bytes that went by, handing each whole frame header to `on_header`.
    fn advance(&mut self, mut bytes: &[u8], mut on_header: impl FnMut(&[u8; FRAME_HEADER_LEN])) {
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let n = self.remaining.min(bytes.len());
                self.remaining -= n;
                bytes = &bytes[n..];
            } else if let Some(header) = self.take_header(&mut bytes) {
                on_header(&header);
            }
        }
    }
}

/// A frame header's type, flags and stream.
fn parts(header: &[u8; FRAME_HEADER_LEN]) -> (u8, u8, u32) {
    let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7FFF_FFFF;
    (header[3], header[4], stream)
}

/// Whether a frame ends its stream on the sender's side.
fn ends_stream(kind: u8, flags: u8) -> bool {
    (kind == FRAME_DATA || kind == FRAME_HEADERS) && flags & FLAG_END_STREAM != 0
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
    /// `head`: bytes already read from `io` (the preface, in cleartext); `max_concurrent_streams`:
    /// the limit announced to the client.
    pub(super) fn new(io: S, head: BytesMut, max_concurrent_streams: u32) -> Self {
        StreamErrorGuard {
            io,
            preface_left: PREFACE.len(),
            raw: head,
            filtered: BytesMut::new(),
            inbound: FrameCursor::default(),
            skipping: false,
            ended: BTreeMap::new(),
            finished: BTreeSet::new(),
            // The concurrency limit, and never more than the 4,096 remembered before it was the
            // bound: a limit set very high must not let one connection grow this without end.
            remembered: usize::try_from(max_concurrent_streams)
                .unwrap_or(usize::MAX)
                .clamp(1, MAX_REMEMBERED),
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
            let (kind, flags, stream) = parts(&header);
            self.skipping = kind == FRAME_DATA && self.ended.contains_key(&stream);
            if !self.skipping {
                self.filtered.extend_from_slice(&header);
                if ends_stream(kind, flags) {
                    self.remember_ended(stream);
                } else if kind == FRAME_RST_STREAM && self.ended.contains_key(&stream) {
                    // The client reset a stream it had ended: closed both ways (RFC 9113
                    // §5.1), h2 answers anything late on it; forgettable first, like one we
                    // ended too.
                    self.finished.insert(stream);
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

    /// Notes a stream the client ended. Past `remembered`, one is forgotten: a stream we ended
    /// too (the oldest), else the oldest. A stream the client ended and we did not is still
    /// counted against the concurrency limit, so at most `remembered` of those exist: what is
    /// forgotten is a stream that h2 has closed or is closing, where a late DATA frame is h2's to
    /// answer with a reset (h2 resets a stream it forgot; only one it still holds half-closed
    /// would take the connection down).
    fn remember_ended(&mut self, stream: u32) {
        self.ended.insert(stream, false);
        if self.ended.len() > self.remembered {
            if let Some(finished) = self.finished.pop_first() {
                self.ended.remove(&finished);
            } else {
                self.ended.pop_first();
            }
        }
    }

    /// Follows h2's bytes on their way out: a stream the client ended that we end too is
    /// finished (see `finished`).
    fn sent(&mut self, bytes: &[u8]) {
        let Self {
            outbound,
            ended,
            finished,
            ..
        } = self;
        outbound.advance(bytes, |header| {
            let (kind, flags, stream) = parts(header);
            if (ends_stream(kind, flags) || kind == FRAME_RST_STREAM) && ended.contains_key(&stream) {
                finished.insert(stream);
            }
        });
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
        this.sent(&buf[..n]);
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
        for written in leading_bytes(bufs, n) {
            this.sent(written);
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
        let mut guard = StreamErrorGuard::new(io, BytesMut::new(), 128);
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

    /// Regression: every stream the client ended was remembered, refused plain requests
    /// included, up to 4,096 per connection (~60 KB held for the handshake timeout, for ~80 KB
    /// of HEADERS frames). Only a stream that can still be open can matter: at most the
    /// concurrency limit are remembered.
    #[test]
    fn no_more_ended_streams_are_remembered_than_can_be_open() {
        let mut input = PREFACE.to_vec();
        input.extend(header(0, 0x4, 0, 0));
        for i in 0..5000u32 {
            input.extend(header(2, FRAME_HEADERS, 0x4 | FLAG_END_STREAM, 2 * i + 1));
            input.extend([0x82, 0x84]);
        }
        let (io, _peer) = tokio::io::duplex(64);
        let mut guard = StreamErrorGuard::new(io, BytesMut::new(), 128);
        guard.raw.extend_from_slice(&input);
        guard.filter();
        assert!(
            guard.ended.len() <= 128,
            "{} ended streams remembered, for a concurrency limit of 128",
            guard.ended.len()
        );
    }

    /// What the bound keeps: a stream the client ended while ours goes on (half-closed, the
    /// case the guard is for) is remembered however many refused requests end after it, as we
    /// end those too.
    /// The client's opening, then stream 1 ended by the client while ours goes on.
    fn half_closed_stream_1() -> Vec<u8> {
        let mut input = PREFACE.to_vec();
        input.extend(header(0, 0x4, 0, 0));
        input.extend(header(2, FRAME_HEADERS, 0x4, 1));
        input.extend([0x82, 0x84]);
        input.extend(header(0, FRAME_DATA, FLAG_END_STREAM, 1));
        input
    }

    /// Feeds a late DATA frame on stream 1: what reaches h2 (a reset of stream 1 if the guard
    /// still remembers it; the frame itself, which h2 answers with a GOAWAY, if not).
    fn late_data_on_1(guard: &mut StreamErrorGuard<tokio::io::DuplexStream>) -> Vec<u8> {
        guard.filtered.clear();
        let mut late = header(3, FRAME_DATA, 0, 1);
        late.extend(b"late");
        guard.raw.extend_from_slice(&late);
        guard.filter();
        guard.filtered.to_vec()
    }

    #[test]
    fn a_half_closed_stream_outlives_any_number_of_finished_ones() {
        let (io, _peer) = tokio::io::duplex(64);
        let mut guard = StreamErrorGuard::new(io, BytesMut::new(), 128);
        guard.raw.extend_from_slice(&half_closed_stream_1());
        guard.filter();
        for i in 1..1000u32 {
            let stream = 2 * i + 1;
            let mut request = header(2, FRAME_HEADERS, 0x4 | FLAG_END_STREAM, stream);
            request.extend([0x82, 0x84]);
            guard.raw.extend_from_slice(&request);
            guard.filter();
            // Our refusal: HEADERS, then DATA with END_STREAM.
            let mut refusal = header(1, FRAME_HEADERS, 0x4, stream);
            refusal.push(0x88);
            refusal.extend(header(2, FRAME_DATA, FLAG_END_STREAM, stream));
            refusal.extend(b"no");
            guard.sent(&refusal);
        }
        assert!(guard.ended.len() <= 128, "{}", guard.ended.len());
        assert_eq!(
            late_data_on_1(&mut guard),
            frame(FRAME_RST_STREAM, 1, STREAM_CLOSED)
        );
        assert_eq!(guard.inject.to_vec(), frame(FRAME_RST_STREAM, 1, STREAM_CLOSED));
    }

    /// The same with requests the client cancels itself (HEADERS with END_STREAM, then its own
    /// RST_STREAM): such a stream is closed both ways, so it must not push the half-closed one
    /// out of the guard's memory. And a huge concurrency limit still bounds that memory.
    #[test]
    fn streams_the_client_resets_do_not_push_out_a_half_closed_one() {
        let (io, _peer) = tokio::io::duplex(64);
        let mut guard = StreamErrorGuard::new(io, BytesMut::new(), 128);
        let mut input = half_closed_stream_1();
        for i in 1..1000u32 {
            let stream = 2 * i + 1;
            input.extend(header(2, FRAME_HEADERS, 0x4 | FLAG_END_STREAM, stream));
            input.extend([0x82, 0x84]);
            input.extend(frame(FRAME_RST_STREAM, stream, 0x8));
        }
        guard.raw.extend_from_slice(&input);
        guard.filter();
        assert!(guard.ended.len() <= 128, "{}", guard.ended.len());
        assert_eq!(
            late_data_on_1(&mut guard),
            frame(FRAME_RST_STREAM, 1, STREAM_CLOSED)
        );

        let (io, _peer) = tokio::io::duplex(64);
        let unbounded = StreamErrorGuard::new(io, BytesMut::new(), u32::MAX);
        assert!(unbounded.remembered <= 4096, "{}", unbounded.remembered);
    }

    #[test]
    fn outbound_boundaries_are_followed_across_writes() {
        let mut cursor = FrameCursor::default();
        let mut bytes = header(3, FRAME_DATA, 0, 1);
        bytes.extend(b"abc");
        bytes.extend(header(0, 0x4, 0x1, 0));
        for (i, byte) in bytes.iter().enumerate() {
            cursor.advance(std::slice::from_ref(byte), |_| {});
            let boundary = i + 1 == 12 || i + 1 == bytes.len();
            assert_eq!(cursor.at_boundary(), boundary, "after byte {i}");
        }
    }
}
