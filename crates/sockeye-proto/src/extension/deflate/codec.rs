//! The compressing and inflating of [`PerMessageDeflate`] (RFC 7692 §7.2): a message is
//! sync-flushed and loses its trailing `00 00 FF FF`, which the receiver puts back; inflation is
//! capped at the message size limit before the memory is spent. The hot path of a compressed
//! connection: every message goes through here.

use bytes::Bytes;
use flate2::{Compress, FlushCompress, FlushDecompress, Status};

use super::state::PerMessageDeflate;
use crate::error::ProtocolViolation;

/// The four bytes a sync flush ends with, removed by the sender and restored by the receiver (§7.2).
const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

/// A last frame of at most this many compressed bytes is inflated with its tail in one call, from
/// a copy on the stack: the copy costs less than a second call into the inflater.
const JOINED_TAIL_UP_TO: usize = 256;

/// An inflated whole message of at most this many bytes is copied into the connection's
/// [`finished`](PerMessageDeflate::finished) buffer (the copy costs less than the two
/// allocations it saves); a larger one leaves in the buffer it was inflated into.
pub(super) const COPY_UP_TO: usize = 1024;

/// The size of [`finished`](PerMessageDeflate::finished)'s allocations. A `Bytes` kept by the
/// application keeps its chunk alive (as a message kept from the read buffer does), so it is
/// small.
pub(super) const FINISHED_CHUNK: usize = 4096;

/// A message buffer ([`deflating`](PerMessageDeflate::deflating),
/// [`inflating`](PerMessageDeflate::inflating)) that grew past this for a large message is not
/// kept for the next one.
const KEEP_BUFFER_UP_TO: usize = 64 << 10;

impl PerMessageDeflate {
    /// Whether a message of `len` bytes should be sent compressed.
    pub(crate) fn should_compress(&self, len: usize) -> bool {
        // zlib cannot compress with an 8-bit window: send uncompressed (see the module docs).
        // Never an empty message: right after a sync flush the compressor has nothing to emit,
        // and an empty payload with RSV1 is not DEFLATE data (found by the connection fuzzer).
        len > 0 && len >= self.min_compress_size && self.compress_bits >= 9
    }

    /// Whether each message is compressed from a fresh state (no context takeover on our side),
    /// and so depends only on (level, window bits): the key under which a
    /// [`PreparedMessage`](crate::PreparedMessage) shares it.
    pub(crate) fn shared_key(&self) -> Option<(u32, u8)> {
        self.compress_reset.then_some((self.level, self.compress_bits))
    }

    /// Makes sure a compressor is held for the message being sent: our own, or one from the pool
    /// with our context.
    fn hold_deflater(&mut self) -> Result<&mut Compress, String> {
        if self.deflater.is_none() {
            let c = self.borrow_deflater()?;
            self.deflater = Some(c);
        }
        self.deflater.as_mut().ok_or_else(|| "no compressor".to_string())
    }

    /// At the end of a message: the compressor stays held, reset first when no context is kept;
    /// a dedicated one without context takeover is freed until the next message. A pooled one
    /// goes back to the pool at once when the connection is waiting for input (the message was
    /// pushed, not an answer): no input, no wait to give it back at.
    fn message_compressed(&mut self) {
        self.mid_send = false;
        if self.waiting && self.return_deflater() {
            return;
        }
        if self.compress_reset {
            match (&self.pool, &mut self.deflater) {
                (Some(_), Some(c)) => c.reset(),
                _ => self.deflater = None,
            }
        }
    }

    /// Makes sure a decompressor is held for the message that is arriving (and after it, until
    /// [`release_idle`](Self::release_idle)).
    fn hold_inflater(&mut self) -> Result<(), ProtocolViolation> {
        self.mid_receive = true;
        if self.inflater.is_some() {
            return Ok(());
        }
        self.borrow_inflater()
    }

    /// At the end of a message: the decompressor stays held, reset first when no context is
    /// kept; a dedicated one without context takeover is freed until the next message. A pooled
    /// one goes back to the pool at once when the connection is waiting (input it was not told
    /// of, such as bytes handed over with the handshake): as for a push, there may be no wait to
    /// give it back at.
    fn message_inflated(&mut self) {
        self.mid_receive = false;
        let given_back = self.waiting && self.return_inflater();
        if given_back || !self.inflate_reset {
            return;
        }
        match (&self.pool, &mut self.inflater) {
            (Some(_), Some(d)) => d.reset(false),
            _ => {
                self.inflater = None;
                self.drop_message_buffers();
            }
        }
    }

    /// Compresses one whole message (§7.2.1): sync flush, then drop the trailing `00 00 FF FF`.
    ///
    /// `input` is never empty: the connection compresses only what
    /// [`should_compress`](Self::should_compress) accepts, and that refuses empty messages, which
    /// then cost no payload at all. (A compressor that has just sync-flushed emits nothing for
    /// empty input, and an empty payload with RSV1 is not DEFLATE data.)
    pub(crate) fn compress(&mut self, input: &[u8]) -> Result<Vec<u8>, String> {
        debug_assert!(!input.is_empty(), "empty messages are sent uncompressed");
        self.compress_fragment(input, true)
    }

    /// Compresses the next fragment of a message sent in pieces (§7.2.1 over §5.4). Each piece is
    /// sync-flushed, so the peer can inflate all of it as soon as it arrives (a streamed message
    /// must not wait for its end); only the last (`fin`) loses the trailing `00 00 FF FF`. The
    /// compressor is held from the first piece to the last (borrowed from the pool, if any, for
    /// that long).
    ///
    /// The connection starts a compressed message only with a non-empty first piece (see
    /// [`compress`](Self::compress)); later pieces may be empty.
    pub(crate) fn compress_fragment(&mut self, input: &[u8], fin: bool) -> Result<Vec<u8>, String> {
        self.mid_send = true;
        let mut out = std::mem::take(&mut self.deflating);
        out.clear();
        out.reserve(input.len() / 2 + 64);
        let c = self.hold_deflater()?;
        let start = c.total_in();
        loop {
            let consumed = (c.total_in() - start) as usize;
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(64));
            }
            // On error the state stays held (`mid_send`) until the connection ends, and goes back
            // to the pool as nobody's: the connection fails anyway.
            c.compress_vec(&input[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| e.to_string())?;
            // Done when all input is in and the flush left room to spare.
            if (c.total_in() - start) as usize == input.len() && out.len() < out.capacity() {
                break;
            }
        }
        if self.pool.is_some() && !self.compress_reset {
            self.sent.push(input);
        }
        if !fin {
            return Ok(out);
        }
        if out.ends_with(&TAIL) {
            out.truncate(out.len() - TAIL.len());
        } else {
            // Nothing came out: an empty last piece after a piece that was already flushed (zlib
            // refuses a second flush in a row). The message's data must still end with an empty
            // stored block less its last four bytes (§7.2.1 steps 2-3), or the `00 00 FF FF` the
            // peer appends would be read as the start of a block: the block's first byte it is
            // (BFINAL 0, BTYPE 00, padding), from the byte boundary the last flush left.
            debug_assert!(out.is_empty(), "a sync flush that emits ends with the marker");
            out.push(0x00);
        }
        self.message_compressed();
        Ok(out)
    }

    /// The frame was encoded from `deflated` (what [`compress_fragment`](Self::compress_fragment)
    /// returned), which is kept for the next message while the compressor is held.
    pub(crate) fn reuse_deflated(&mut self, deflated: Vec<u8>) {
        if self.deflater.is_some() && deflated.capacity() <= KEEP_BUFFER_UP_TO {
            self.deflating = deflated;
        }
    }

    /// Inflates the next frame of a compressed whole message into the connection's own buffer
    /// (see [`inflate`](Self::inflate) for the failures); the `first` frame starts the message
    /// afresh and the `last` returns it. [`inflated_so_far`](Self::inflated_so_far) is what the
    /// frames before the last gave.
    pub(crate) fn inflate_message(
        &mut self,
        input: &[u8],
        first: bool,
        last: bool,
        limit: usize,
    ) -> Result<Option<Bytes>, ProtocolViolation> {
        if first {
            self.inflating.clear();
        }
        let mut out = std::mem::take(&mut self.inflating);
        let inflated = self.inflate(input, last, &mut out, limit);
        if inflated.is_err() || !last {
            self.inflating = out;
            return inflated.map(|()| None);
        }
        // Still held: the message was the answer to input (see `message_inflated`).
        let kept = self.inflater.is_some();
        if !kept || out.len() > COPY_UP_TO {
            return Ok(Some(Bytes::from(out)));
        }
        if self.finished.capacity() - self.finished.len() < out.len() {
            // Takes back the chunk in place when every message that shared it has been dropped.
            self.finished.reserve(FINISHED_CHUNK);
        }
        self.finished.extend_from_slice(&out);
        // Kept for the next message, unless a large compressed frame made the inflater's output
        // room grow before the message turned out small.
        if out.capacity() <= KEEP_BUFFER_UP_TO {
            out.clear();
            self.inflating = out;
        }
        Ok(Some(self.finished.split().freeze()))
    }

    /// The message being received will never be finished (the connection ended): what it
    /// inflated to so far is let go now, not when the connection is dropped.
    pub(crate) fn abandon_receive(&mut self) {
        self.inflating = Vec::new();
    }

    /// What the frames of the whole message in progress have inflated to so far.
    #[inline]
    pub(crate) fn inflated_so_far(&self) -> &[u8] {
        &self.inflating
    }

    /// Streaming takes over the whole message in progress: what it has inflated to so far.
    pub(crate) fn take_inflated_so_far(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.inflating)
    }

    /// Inflates the next piece of a compressed message into `out`; `last` restores the tail. Fails
    /// with 1009 as soon as `out` would pass `limit`, before the memory is spent, and with 1007 on
    /// data that is not deflate.
    pub(super) fn inflate(
        &mut self,
        input: &[u8],
        last: bool,
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), ProtocolViolation> {
        if last && input.len() <= JOINED_TAIL_UP_TO {
            // A small last frame and its tail in one pass through the inflater: a second call
            // for four bytes cost about as much as the frame (~500 instructions of a 5,800
            // instruction echo of uWebSockets' compressed load-test message, callgrind).
            let mut joined = [0u8; JOINED_TAIL_UP_TO + TAIL.len()];
            joined[..input.len()].copy_from_slice(input);
            joined[input.len()..input.len() + TAIL.len()].copy_from_slice(&TAIL);
            self.inflate_piece(&joined[..input.len() + TAIL.len()], out, limit)?;
            self.message_inflated();
            return Ok(());
        }
        self.inflate_piece(input, out, limit)?;
        if last {
            self.inflate_piece(&TAIL, out, limit)?;
            self.message_inflated();
        }
        Ok(())
    }

    fn inflate_piece(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), ProtocolViolation> {
        let mut consumed = 0;
        loop {
            if out.len() == out.capacity() {
                let target = grow_target(out.len(), out.capacity(), input.len() - consumed, limit);
                out.reserve_exact(target - out.len());
            }
            consumed += self.inflate_some(&input[consumed..], out, 0, limit)?;
            if consumed == input.len() && out.len() < out.capacity() {
                return Ok(());
            }
        }
    }

    /// Streaming receive: inflates what it can of `input` into `out`, up to `out`'s capacity, the
    /// bound of one piece handed to the application. Returns how much of `input` it used; what it
    /// did not use is to be passed again with the next call. Call it with empty input to drain
    /// what a full `out` left inside the inflater. Fails with 1009 once the message (`so_far`
    /// bytes before this piece) would pass `limit`, and with 1007 on data that is not deflate.
    pub(crate) fn inflate_some(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        so_far: usize,
        limit: usize,
    ) -> Result<usize, ProtocolViolation> {
        let keep_history = self.pool.is_some() && !self.inflate_reset;
        self.hold_inflater()?;
        let (Some(d), received) = (&mut self.inflater, &mut self.received) else {
            return Err(ProtocolViolation::Decompression("no decompressor".into()));
        };
        let mut consumed = 0;
        loop {
            let (in_before, out_before) = (d.total_in(), out.len());
            let status = d
                .decompress_vec(&input[consumed..], out, FlushDecompress::Sync)
                .map_err(|e| ProtocolViolation::Decompression(e.to_string()))?;
            consumed += (d.total_in() - in_before) as usize;
            if keep_history {
                received.push(&out[out_before..]);
            }
            let size = so_far.saturating_add(out.len());
            if size > limit {
                return Err(ProtocolViolation::MessageTooBig {
                    size: size as u64,
                    limit,
                });
            }
            if status == Status::StreamEnd {
                // The peer ended the deflate stream (BFINAL); the next data starts a new one,
                // with no history.
                d.reset(false);
                received.clear();
            }
            if consumed == input.len() || out.len() == out.capacity() {
                return Ok(consumed);
            }
            let progressed = d.total_in() != in_before || out.len() != out_before;
            if !progressed && status != Status::StreamEnd {
                return Err(ProtocolViolation::Decompression(
                    "the compressed data stopped making progress".into(),
                ));
            }
        }
    }

    /// Streaming receive, once the last frame's payload is in: feeds the four bytes the sender
    /// removed (§7.2.2) and drains the inflater. Returns whether the message is complete; while
    /// `false`, `out` is full: hand it over and call again with a fresh one.
    pub(crate) fn inflate_finish(
        &mut self,
        out: &mut Vec<u8>,
        so_far: usize,
        limit: usize,
    ) -> Result<bool, ProtocolViolation> {
        let fed = self.inflate_some(&TAIL[self.tail_fed..], out, so_far, limit)?;
        self.tail_fed += fed;
        if self.tail_fed < TAIL.len() || out.len() == out.capacity() {
            return Ok(false);
        }
        self.tail_fed = 0;
        self.message_inflated();
        Ok(true)
    }
}

/// The capacity to give the inflate buffer when it is full: geometric growth (amortised copies),
/// but never past the limit plus one byte, the byte that detects excess, so a bomb cannot make us
/// allocate more; always at least one byte more than `len`. Every step saturates: the limit may be
/// `usize::MAX` ("no limit"), and `limit + 1` must then not wrap to 0, which would grow the buffer
/// one byte per call into zlib.
fn grow_target(len: usize, capacity: usize, input_len: usize, limit: usize) -> usize {
    let step = input_len.saturating_mul(4).clamp(1024, 256 << 10);
    let wanted = capacity.saturating_mul(2).max(len.saturating_add(step));
    wanted.min(limit.saturating_add(1)).max(len.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extension::deflate::negotiation::TAKEOVER_15;
    use crate::extension::deflate::{DeflateConfig, DeflateParams};
    use crate::role::Role;
    use proptest::prelude::*;

    fn pair(params: DeflateParams) -> (PerMessageDeflate, PerMessageDeflate) {
        let c = DeflateConfig {
            min_compress_size: 0,
            ..DeflateConfig::default()
        };
        (
            PerMessageDeflate::new(Role::Client, params, &c),
            PerMessageDeflate::new(Role::Server, params, &c),
        )
    }

    #[test]
    fn inflation_is_capped_before_memory_is_spent() {
        let (mut client, mut server) = pair(TAKEOVER_15);
        let bomb = client.compress(&vec![0u8; 10 << 20]).unwrap();
        assert!(
            bomb.len() < (10 << 20) / 50,
            "10 MiB of zeros compresses to {} bytes",
            bomb.len()
        );
        let mut out = Vec::new();
        let err = server.inflate(&bomb, true, &mut out, 1 << 20).unwrap_err();
        assert!(matches!(
            err,
            ProtocolViolation::MessageTooBig { limit: 1048576, .. }
        ));
        assert!(out.capacity() <= (1 << 20) + 1, "capacity {}", out.capacity());
    }

    /// Regression (issue 13): with `limit == usize::MAX`, `limit + 1` panicked in debug builds and
    /// wrapped to 0 in release, where the buffer then grew one byte per call into zlib (~50×
    /// slower).
    #[test]
    fn buffer_growth_saturates_at_an_unbounded_limit() {
        assert_eq!(grow_target(0, 0, 100, usize::MAX), 1024);
        assert_eq!(grow_target(1 << 20, 1 << 20, 10, usize::MAX), 2 << 20);
        assert_eq!(grow_target(5000, 5000, 100, usize::MAX), 10_000);
        assert_eq!(grow_target(0, 0, 1 << 20, usize::MAX), 256 << 10);
        let huge = usize::MAX / 2 + 1;
        assert_eq!(grow_target(huge, huge, usize::MAX, usize::MAX), usize::MAX);
        // A real limit still caps the buffer at one byte past it.
        assert_eq!(grow_target(0, 0, 100, 10), 11);
        assert_eq!(grow_target(11, 11, 100, 10), 12);
    }

    /// Inflating 1 MiB with no limit (`usize::MAX`) works, and as fast as with a real limit.
    #[test]
    fn inflation_without_a_limit_runs_at_full_speed() {
        let (mut client, mut server) = pair(TAKEOVER_15);
        let message: Vec<u8> = (0..1u32 << 20)
            .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
            .collect();
        let z = client.compress(&message).unwrap();
        let fastest = |limit: usize| {
            (0..3)
                .map(|_| {
                    let mut out = Vec::new();
                    let started = std::time::Instant::now();
                    let mut server =
                        PerMessageDeflate::new(Role::Server, TAKEOVER_15, &DeflateConfig::default());
                    server.inflate(&z, true, &mut out, limit).unwrap();
                    let took = started.elapsed();
                    assert!(out == message, "inflated {} bytes", out.len());
                    took
                })
                .min()
                .unwrap()
        };
        let bounded = fastest(64 << 20);
        let unbounded = fastest(usize::MAX);
        assert!(
            unbounded <= bounded * 4 + std::time::Duration::from_millis(20),
            "1 MiB inflated in {unbounded:?} without a limit, {bounded:?} with one"
        );
        let mut out = Vec::new();
        server.inflate(&z, true, &mut out, usize::MAX).unwrap();
        assert!(out == message);
    }

    /// A message compressed in pieces (each sync-flushed, some empty, the last one empty after a
    /// flushed piece) is, with the four bytes the receiver appends, DEFLATE data that zlib itself
    /// inflates to the pieces put together; and the next message, in the same context, too.
    #[test]
    fn pieces_inflate_with_plain_zlib_and_keep_the_context() {
        let mut sender =
            PerMessageDeflate::new(Role::Server, TAKEOVER_15, &DeflateConfig::default().pool(None));
        let mut zlib = flate2::Decompress::new_with_window_bits(false, 15);
        let mut inflate = |data: &[u8]| {
            let mut input = data.to_vec();
            input.extend_from_slice(&TAIL);
            let mut out = Vec::with_capacity(1 << 16);
            zlib.decompress_vec(&input, &mut out, flate2::FlushDecompress::Sync)
                .unwrap();
            out
        };
        let messages: [&[&[u8]]; 4] = [
            &[b"streamed piece one, ", b"", b"piece two, ", b"piece three", b""],
            &[b"whole, after the stream: piece one, piece two"],
            &[b"one piece and then nothing", b""],
            &[b"piece two, piece three", b"!"],
        ];
        for pieces in messages {
            let mut data = Vec::new();
            for (i, piece) in pieces.iter().enumerate() {
                let out = sender.compress_fragment(piece, i + 1 == pieces.len()).unwrap();
                data.extend_from_slice(&out);
            }
            assert_eq!(inflate(&data), pieces.concat(), "{pieces:?}");
        }
    }

    /// Empty messages bypass compression even with no threshold, and the compressed messages
    /// around them stay in step.
    #[test]
    fn empty_messages_are_never_compressed() {
        let (mut client, mut server) = pair(TAKEOVER_15);
        assert!(!server.should_compress(0));
        assert!(server.should_compress(1));
        for m in [&b"hello hello hello"[..], b"", b"", b"hello again, hello"] {
            if !server.should_compress(m.len()) {
                continue;
            }
            let z = server.compress(m).unwrap();
            assert!(!z.is_empty(), "a compressed payload is never empty");
            let mut out = Vec::new();
            client.inflate(&z, true, &mut out, 1 << 20).unwrap();
            assert_eq!(out, m);
        }
    }

    #[test]
    fn corrupt_data_is_a_1007_not_a_panic() {
        let (_, mut server) = pair(TAKEOVER_15);
        let mut out = Vec::new();
        let err = server
            .inflate(&[0xff, 0xff, 0xff, 0xff, 0x00], true, &mut out, 1 << 20)
            .unwrap_err();
        assert_eq!(err.close_code(), crate::CloseCode::INVALID_PAYLOAD);
    }

    proptest! {
        /// Compress → inflate round-trips for random messages, random negotiated parameters, and
        /// the compressed bytes split into pieces at random points (as frames would be).
        #[test]
        fn round_trip(
            messages in proptest::collection::vec(proptest::collection::vec(0u8..8, 0..3000), 1..6),
            snct in any::<bool>(), cnct in any::<bool>(), sbits in 9u8..16, cbits in 9u8..16,
            cut in any::<prop::sample::Index>(),
        ) {
            let params = DeflateParams { server_no_context_takeover: snct, client_no_context_takeover: cnct, server_max_window_bits: sbits, client_max_window_bits: cbits };
            let (mut client, mut server) = pair(params);
            // Empty messages go uncompressed (`should_compress`), as the connection sends them.
            for m in messages.iter().filter(|m| !m.is_empty()) {
                let z = client.compress(m).unwrap();
                let at = cut.index(z.len() + 1);
                let mut out = Vec::new();
                server.inflate(&z[..at], false, &mut out, 1 << 20).unwrap();
                server.inflate(&z[at..], true, &mut out, 1 << 20).unwrap();
                prop_assert_eq!(&out, m);
                let z = server.compress(m).unwrap();
                let mut out = Vec::new();
                client.inflate(&z, true, &mut out, 1 << 20).unwrap();
                prop_assert_eq!(&out, m);
            }
        }

        /// Arbitrary input inflates, or fails as undecodable (1007) or too big (1009): never a
        /// panic, never past the limit.
        #[test]
        fn truncated_or_corrupt_input_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (_, mut server) = pair(TAKEOVER_15);
            let mut out = Vec::new();
            match server.inflate(&data, true, &mut out, 1 << 16) {
                Ok(()) => prop_assert!(out.len() <= 1 << 16),
                Err(ProtocolViolation::Decompression(_)) => {}
                Err(ProtocolViolation::MessageTooBig { limit, .. }) => prop_assert_eq!(limit, 1 << 16),
                Err(other) => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
