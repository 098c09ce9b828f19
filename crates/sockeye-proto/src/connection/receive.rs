//! The receiving side: bytes from the peer pile up in the read buffer; frame headers are parsed
//! and checked (§5.2, §5.1 masking, RFC 7692 §6 RSV1, the size limits); payloads are unmasked
//! and, inside a text message, UTF-8-checked as they arrive; fragments are reassembled (§5.4) or
//! handed over as they come (streaming), inflated when compressed.
//!
//! This room owns the read buffer and the frame being received; the data message the frames
//! make up (reassembly, inflation, the UTF-8 check across frames) is its `assembly`, which it
//! feeds payloads. It reports a broken rule as the [`ProtocolViolation`] and leaves failing the
//! connection (§7.1.7) to the front, which also acts on pings and closes ([`Part::Ping`],
//! [`Part::Close`]): answering them is the sending and closing rooms' business. The front asks
//! only while input is processed at all.

use bytes::{Buf, Bytes, BytesMut};

use crate::config::Config;
use crate::error::ProtocolViolation;
use crate::extension::deflate::PerMessageDeflate;
use crate::frame::{FrameHeader, OpCode, apply_mask};
use crate::message::{Message, MessageChunk};
use crate::role::Role;
use crate::utf8::Utf8Bytes;

use super::assembly::Assembly;

/// A frame whose header has been read and whose payload is arriving.
#[derive(Debug)]
struct IncomingFrame {
    header: FrameHeader,
    /// Payload bytes not yet taken from the read buffer.
    len: usize,
    /// Payload bytes already taken (streamed) from the read buffer: where the mask's phase is.
    offset: usize,
    /// Payload bytes at the front of the read buffer already unmasked (and checked, if text).
    processed: usize,
}

/// The most a streamed compressed message inflates to in one piece: the bound on the memory a
/// streamed message takes, whatever its size.
const STREAM_INFLATE_PIECE: usize = 64 << 10;

/// Frames at least this large are read into a buffer of their own size, reused while large frames
/// follow each other; after the first smaller frame the connection moves what is left to a fresh
/// buffer, so that it does not keep the largest message it ever received (tungstenite #500).
const SHRINK_AFTER_FRAME: usize = 256 << 10;

/// One step of the streaming receive path.
enum StreamStep {
    /// A piece to hand over.
    Chunk(MessageChunk),
    /// The frame's bytes have not arrived yet.
    Wait,
    /// Progress without a piece (an empty fragment, input the inflater buffered): go on.
    Continue,
}

/// What the receive path hands the front.
pub(super) enum Part {
    /// A whole message: data (whole-message mode), or a pong.
    Message(Message),
    /// A piece of a streamed data message.
    Chunk(MessageChunk),
    /// A ping's payload, for the front to answer (§5.5.2).
    Ping(Bytes),
    /// A close frame's payload, for the front to parse and answer (§5.5.1).
    Close(Bytes),
}

/// The read buffer and the frame and message being received.
#[derive(Debug)]
pub(super) struct Receiver {
    /// The peer is a client: its frames must be masked (§5.1).
    peer_masks: bool,
    read_buf: BytesMut,
    /// `read_buf` grew for a large frame (see [`SHRINK_AFTER_FRAME`]).
    read_buf_grown: bool,
    incoming: Option<IncomingFrame>,
    /// The data message the frames belong to.
    message: Assembly,
    /// Data messages and pieces of them handed out so far (see `Connection::data_delivered`).
    data_delivered: u64,
}

impl Receiver {
    pub(super) fn new(role: Role) -> Self {
        Receiver {
            peer_masks: role == Role::Server,
            read_buf: BytesMut::new(),
            read_buf_grown: false,
            incoming: None,
            message: Assembly::default(),
            data_delivered: 0,
        }
    }

    /// Data messages and pieces of them handed out so far.
    #[inline]
    pub(super) fn data_delivered(&self) -> u64 {
        self.data_delivered
    }

    /// A data message or a piece of one goes to the application.
    #[inline]
    pub(super) fn count_data_delivered(&mut self) {
        self.data_delivered += 1;
    }

    /// Appends bytes received from the peer.
    #[inline]
    pub(super) fn receive(&mut self, bytes: &[u8]) {
        self.read_buf.extend_from_slice(bytes);
    }

    /// The buffer received bytes are appended to.
    #[inline]
    pub(super) fn read_buffer(&mut self) -> &mut BytesMut {
        &mut self.read_buf
    }

    /// How many received bytes are buffered and not yet turned into messages.
    #[inline]
    pub(super) fn buffered(&self) -> usize {
        self.read_buf.len()
    }

    /// How many bytes of the frame being received have yet to arrive (0 between frames).
    #[inline]
    pub(super) fn frame_bytes_missing(&self) -> usize {
        self.incoming
            .as_ref()
            .map_or(0, |f| f.len.saturating_sub(self.read_buf.len()))
    }

    /// Gives up the read buffer when it is empty, returning it when it has room for `reuse`
    /// bytes (see [`Connection::release_idle_buffers`](crate::Connection::release_idle_buffers)).
    #[inline]
    pub(super) fn release_read_buffer(&mut self, reuse: usize) -> Option<BytesMut> {
        if !self.read_buf.is_empty() || self.read_buf.capacity() == 0 {
            return None;
        }
        let mut buffer = std::mem::take(&mut self.read_buf);
        (reuse > 0 && buffer.try_reclaim(reuse)).then_some(buffer)
    }

    /// Nothing to parse: no bytes, no frame in progress and no message being streamed (which
    /// may still have inflated output to hand over).
    #[inline]
    pub(super) fn is_idle(&self) -> bool {
        self.read_buf.is_empty() && self.incoming.is_none() && !self.message.is_streamed()
    }

    /// A message is being handed over in pieces.
    #[inline]
    pub(super) fn is_streaming(&self) -> bool {
        self.message.is_streamed()
    }

    /// Between messages: no frame and no message in progress.
    #[inline]
    pub(super) fn between_messages(&self) -> bool {
        !self.message.in_progress() && self.incoming.is_none()
    }

    /// Drops what arrives, once input is no longer processed: a peer that keeps sending then
    /// costs no memory.
    pub(super) fn discard_input(&mut self) {
        self.read_buf.clear();
        self.incoming = None;
    }

    /// The message in progress will never be finished (the connection ended).
    pub(super) fn abandon_message(&mut self) {
        self.message.abandon();
    }

    /// The transport is closed: lets go of the read buffer and everything in progress.
    pub(super) fn release_all(&mut self) {
        self.read_buf = BytesMut::new();
        self.incoming = None;
        self.message.release();
    }

    /// The hot case in one step: a whole short data message in one frame (FIN, no RSV bits, at
    /// most 125 bytes, so a two-byte length; masked exactly when the peer is a client, §5.1), fully
    /// buffered, with no message in progress (the front checks that the connection is open).
    /// Anything else — including text that is not UTF-8 — is left to the general path, which
    /// owns every error.
    #[inline]
    pub(super) fn poll_short_message(&mut self, config: &Config) -> Option<Message> {
        let &[first @ (0x81 | 0x82), second, ..] = &self.read_buf[..] else {
            return None;
        };
        let masked = self.peer_masks;
        let len = usize::from(second & 0x7F);
        let header_len = if masked { 6 } else { 2 };
        if (second & 0x80 != 0) != masked
            || len > 125
            || self.read_buf.len() < header_len + len
            || len > config.max_frame_size.min(config.max_message_size)
            || self.incoming.is_some()
            || self.message.in_progress()
        {
            return None;
        }
        let body = header_len..header_len + len;
        // One four-byte load, not four byte loads to assemble (the length check above covers it).
        let key = masked.then(|| <[u8; 4]>::try_from(&self.read_buf[2..6]).unwrap_or_default());
        if let Some(key) = key {
            apply_mask(&mut self.read_buf[body.clone()], key, 0);
        }
        if first == 0x81 && !crate::utf8::is_utf8(&self.read_buf[body.clone()]) {
            // Masking is its own inverse: restore the frame as it arrived for the general path.
            if let Some(key) = key {
                apply_mask(&mut self.read_buf[body], key, 0);
            }
            return None;
        }
        self.read_buf.advance(header_len);
        let payload = self.read_buf.split_to(len).freeze();
        self.shrink_read_buf();
        self.count_data_delivered();
        Some(if first == 0x81 {
            Message::Text(Utf8Bytes::from_validated(payload))
        } else {
            Message::Binary(payload)
        })
    }

    /// After the first small frame that follows large ones: move what follows to a buffer of its
    /// own, so the large one is freed with the last message that shares it.
    #[inline]
    fn shrink_read_buf(&mut self) {
        if std::mem::take(&mut self.read_buf_grown) {
            self.read_buf = BytesMut::from(&self.read_buf[..]);
        }
    }

    /// The receive path of both modes: whole messages come out as [`Part::Message`], streamed
    /// pieces as [`Part::Chunk`], pings and closes for the front to act on as [`Part::Ping`] and
    /// [`Part::Close`]; `None` when more bytes are needed.
    pub(super) fn poll_part(
        &mut self,
        streaming: bool,
        config: &Config,
        deflate: &mut Option<Box<PerMessageDeflate>>,
    ) -> Result<Option<Part>, ProtocolViolation> {
        loop {
            if streaming && let Some(gathered) = self.message.start_streaming(deflate) {
                return Ok(Some(Part::Chunk(gathered)));
            }
            let frame = match self.incoming.take() {
                Some(frame) => frame,
                None => match FrameHeader::parse(&self.read_buf)? {
                    None => return Ok(None),
                    Some((header, header_len)) => {
                        self.check_header(&header, config, deflate.is_some())?;
                        self.read_buf.advance(header_len);
                        // `check_header` bounded the length by the configured limits.
                        let len = header.payload_len as usize;
                        IncomingFrame {
                            header,
                            len,
                            offset: 0,
                            processed: 0,
                        }
                    }
                },
            };
            if streaming && !frame.header.opcode.is_control() {
                match self.stream_data(frame, config, deflate)? {
                    StreamStep::Chunk(chunk) => return Ok(Some(Part::Chunk(chunk))),
                    StreamStep::Wait => return Ok(None),
                    StreamStep::Continue => continue,
                }
            }
            let Some((header, payload)) = self.take_payload(frame, !streaming)? else {
                return Ok(None);
            };
            match header.opcode {
                OpCode::Ping => return Ok(Some(Part::Ping(payload))),
                OpCode::Pong => return Ok(Some(Part::Message(Message::Pong(payload)))),
                OpCode::Close => return Ok(Some(Part::Close(payload))),
                OpCode::Text | OpCode::Binary | OpCode::Continuation => {
                    if let Some(message) = self.message.on_data(header, payload, config, deflate)? {
                        return Ok(Some(Part::Message(message)));
                    }
                }
            }
        }
    }

    /// Unmasks (and, in uncompressed text, checks) the payload bytes of `frame` that have arrived,
    /// as [`take_payload`](Self::take_payload) does. On invalid UTF-8 the connection fails and the
    /// rest of the frame will be skipped.
    fn process_arrived(&mut self, frame: &mut IncomingFrame) -> Result<(), ProtocolViolation> {
        let available = self.read_buf.len().min(frame.len);
        if available > frame.processed {
            let fresh = &mut self.read_buf[frame.processed..available];
            if let Some(key) = frame.header.mask {
                apply_mask(fresh, key, frame.offset + frame.processed);
            }
            // Fail fast (§8.1): check text as it arrives, not when the message is complete.
            if !frame.header.opcode.is_control()
                && let Some(utf8) = self.message.raw_text_check()
                && utf8.feed(fresh).is_err()
            {
                // Stay in step with the peer's framing: skip the rest of this frame.
                frame.processed = 0;
                return Err(ProtocolViolation::InvalidUtf8);
            }
            frame.processed = available;
        }
        Ok(())
    }

    /// Streams a data frame: hands over what has arrived of it (inflated, if compressed).
    fn stream_data(
        &mut self,
        mut frame: IncomingFrame,
        config: &Config,
        deflate: &mut Option<Box<PerMessageDeflate>>,
    ) -> Result<StreamStep, ProtocolViolation> {
        if let Err(e) = self.process_arrived(&mut frame) {
            self.incoming = Some(frame);
            return Err(e);
        }
        self.message.stream_frame(frame.header.opcode);
        if self.message.is_compressed() {
            let Some(d) = deflate.as_mut() else {
                return Err(ProtocolViolation::ReservedBits(FrameHeader::RSV1));
            };
            return self.stream_compressed(frame, d, config.max_message_size);
        }
        let n = frame.processed;
        let frame_done = n == frame.len;
        if n == 0 && !frame_done {
            self.incoming = Some(frame);
            return Ok(StreamStep::Wait);
        }
        let data = self.read_buf.split_to(n).freeze();
        let message_done = frame_done && frame.header.fin;
        if !frame_done {
            frame.len -= n;
            frame.offset += n;
            frame.processed = 0;
            self.incoming = Some(frame);
        }
        self.streamed_piece(data, message_done)
    }

    /// Streams what has arrived of a compressed frame, inflated a bounded piece at a time
    /// (`limit`: the largest message accepted).
    fn stream_compressed(
        &mut self,
        mut frame: IncomingFrame,
        d: &mut PerMessageDeflate,
        limit: usize,
    ) -> Result<StreamStep, ProtocolViolation> {
        let so_far = self.message.size();
        let mut out = Vec::with_capacity(STREAM_INFLATE_PIECE);
        let message_done = d
            .inflate_some(&self.read_buf[..frame.processed], &mut out, so_far, limit)
            .and_then(|used| {
                self.read_buf.advance(used);
                frame.len -= used;
                frame.offset += used;
                frame.processed -= used;
                if frame.len == 0 && frame.header.fin && out.len() < out.capacity() {
                    d.inflate_finish(&mut out, so_far, limit)
                } else {
                    Ok(false)
                }
            })
            // Fail fast on text: check each piece as it is inflated.
            .and_then(|done| self.message.check_inflated(&out).map(|()| done))?;
        // A fragment's input is all in: the next frame continues the deflate stream (what the
        // inflater still holds comes out with it). The last frame stays until drained.
        let frame_over = frame.len == 0 && (!frame.header.fin || message_done);
        let waiting = !frame_over && out.is_empty() && frame.processed == 0;
        if !frame_over {
            self.incoming = Some(frame);
        }
        if waiting {
            return Ok(StreamStep::Wait);
        }
        if out.is_empty() && !message_done {
            return Ok(StreamStep::Continue);
        }
        self.streamed_piece(Bytes::from(out), message_done)
    }

    /// Hands over a streamed piece; the last one ends the message.
    fn streamed_piece(&mut self, data: Bytes, message_done: bool) -> Result<StreamStep, ProtocolViolation> {
        Ok(match self.message.streamed_piece(data, message_done)? {
            Some(chunk) => StreamStep::Chunk(chunk),
            None => StreamStep::Continue,
        })
    }

    /// Checks a header against the role, the negotiated extensions (`deflate`: permessage-deflate
    /// is on) and the message in progress.
    fn check_header(
        &mut self,
        h: &FrameHeader,
        config: &Config,
        deflate: bool,
    ) -> Result<(), ProtocolViolation> {
        // RFC 7692 §6: RSV1 marks the first frame of a compressed message, once negotiated.
        let compressed =
            h.rsv == FrameHeader::RSV1 && deflate && matches!(h.opcode, OpCode::Text | OpCode::Binary);
        if h.rsv != 0 && !compressed {
            return Err(ProtocolViolation::ReservedBits(h.rsv));
        }
        // §5.1: a server MUST close on an unmasked frame; a client MUST close on a masked one.
        match (self.peer_masks, h.mask.is_some()) {
            (true, false) => return Err(ProtocolViolation::UnmaskedFrame),
            (false, true) => return Err(ProtocolViolation::MaskedFrame),
            _ => {}
        }
        if h.payload_len > config.max_frame_size as u64 {
            let limit = config.max_frame_size;
            return Err(ProtocolViolation::MessageTooBig {
                size: h.payload_len,
                limit,
            });
        }
        self.message.check_header(h, config, compressed)
    }

    /// Unmasks (and, inside a text message, validates) the payload bytes that have arrived, and
    /// splits the payload off once it is complete. Returns `None`, keeping the frame, while waiting.
    ///
    /// `reserve`: make room for the whole frame in one allocation (whole-message mode), rather
    /// than growing the buffer read by read.
    fn take_payload(
        &mut self,
        mut frame: IncomingFrame,
        reserve: bool,
    ) -> Result<Option<(FrameHeader, Bytes)>, ProtocolViolation> {
        if let Err(e) = self.process_arrived(&mut frame) {
            self.incoming = Some(frame);
            return Err(e);
        }
        if self.read_buf.len() < frame.len {
            if reserve {
                // Up to a bound: the length is the peer's claim, and with the limits lifted it
                // may be anything up to 2^63.
                const MAX_UPFRONT: usize = 16 << 20;
                self.read_buf
                    .reserve((frame.len - self.read_buf.len()).min(MAX_UPFRONT));
            }
            self.incoming = Some(frame);
            return Ok(None);
        }
        let payload = self.read_buf.split_to(frame.len).freeze();
        if frame.len >= SHRINK_AFTER_FRAME {
            self.read_buf_grown = true;
        } else {
            self.shrink_read_buf();
        }
        Ok(Some((frame.header, payload)))
    }
}
