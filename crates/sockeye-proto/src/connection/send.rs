//! The sending side: frames are encoded into the transmit queue ([`Transmit`]), masked with a
//! fresh key each when this end is a client (§5.1, §10.3), compressed when permessage-deflate is
//! on (RFC 7692), and a fragmented message in progress is tracked so that its frames stay in
//! order (§5.4).
//!
//! This room owns the queue, the mask keys and the fragmented send's state. Whether anything may
//! be sent at all is the closing room's to say, and a compressor that fails ends the connection,
//! so the front checks the one before and acts on the other after; the shared compression state
//! (used by the receiving side too) and the configuration are passed in.

use bytes::{BufMut, Bytes};

use crate::error::Error;
use crate::extension::deflate::PerMessageDeflate;
use crate::frame::{CloseFrame, FrameHeader, MAX_HEADER_LEN, OpCode, apply_mask};
use crate::message::Message;
use crate::prepared::PreparedMessage;
use crate::role::{DataKind, MaskKeySource};
use crate::transmit::Transmit;

/// The opcode of a data message's first frame.
#[inline]
fn data_opcode(kind: DataKind) -> OpCode {
    match kind {
        DataKind::Text => OpCode::Text,
        DataKind::Binary => OpCode::Binary,
    }
}

/// What sending a data frame needs from outside this room: the compression state (shared with the
/// receiving side) and the size from which a payload is queued without a copy.
pub(super) struct Context<'a> {
    pub(super) deflate: Option<&'a mut PerMessageDeflate>,
    /// [`Config::zero_copy_threshold`](crate::Config::zero_copy_threshold) for a server; never
    /// (`usize::MAX`) for a client, which must copy to mask.
    pub(super) zero_copy_from: usize,
}

/// The transmit queue and what encoding frames into it needs.
pub(super) struct Sender {
    transmit: Transmit,
    mask_keys: Option<MaskKeySource>,
    /// The kind of the fragmented message being sent, if one is in progress.
    sending_fragmented: Option<DataKind>,
    /// The fragmented message being sent is compressed (RSV1 on its first frame).
    sending_compressed: bool,
    /// Bytes of pongs the engine queued by itself since the transmit queue was last seen empty.
    auto_replies: usize,
}

impl Sender {
    pub(super) fn new(mask_keys: Option<MaskKeySource>) -> Self {
        Sender {
            transmit: Transmit::default(),
            mask_keys,
            sending_fragmented: None,
            sending_compressed: false,
            auto_replies: 0,
        }
    }

    /// The queue of bytes waiting to be written.
    #[inline]
    pub(super) fn transmit(&mut self) -> &mut Transmit {
        &mut self.transmit
    }

    /// How many bytes wait to be written.
    #[inline]
    pub(super) fn transmit_len(&self) -> usize {
        self.transmit.len()
    }

    /// See [`Connection::queued_auto_replies`](crate::Connection::queued_auto_replies).
    #[inline]
    pub(super) fn queued_auto_replies(&self) -> usize {
        if self.transmit.is_empty() {
            0
        } else {
            self.auto_replies
        }
    }

    /// Takes everything waiting to be written as one contiguous buffer.
    pub(super) fn transmit_bytes(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.transmit.len());
        out.put(&mut self.transmit);
        out
    }

    /// Whether a fragmented message is being sent.
    #[inline]
    pub(super) fn is_sending_fragmented(&self) -> bool {
        self.sending_fragmented.is_some()
    }

    /// The hot case, in one place rather than through the general encoder: a short data
    /// message from a server (unmasked, not compressed), queued if it is one. The caller checked
    /// that the connection is open for it.
    #[inline]
    pub(super) fn push_short_message(
        &mut self,
        message: &Message,
        deflate: Option<&PerMessageDeflate>,
    ) -> bool {
        let opcode = match message {
            Message::Text(_) => OpCode::Text,
            Message::Binary(_) => OpCode::Binary,
            _ => return false,
        };
        if self.mask_keys.is_some() || self.sending_fragmented.is_some() {
            return false;
        }
        let payload = message.as_payload();
        if payload.len() > 125 || deflate.is_some_and(|d| d.should_compress(payload.len())) {
            return false;
        }
        self.transmit
            .push_short_frame(FrameHeader::first_byte(true, 0, opcode), payload);
        true
    }

    /// Queues the pong the engine answers a ping with by itself (§5.5.2), counted for
    /// [`queued_auto_replies`](Self::queued_auto_replies).
    pub(super) fn queue_auto_pong(&mut self, payload: &[u8]) {
        if self.transmit.is_empty() {
            self.auto_replies = 0;
        }
        let before = self.transmit.len();
        self.encode_frame(OpCode::Pong, true, payload);
        self.auto_replies += self.transmit.len() - before;
    }

    /// Queues [`PreparedMessage`]'s shared compressed payload when this connection can use it
    /// (see [`Connection::send_prepared`](crate::Connection::send_prepared)); `Ok(false)` when it
    /// cannot, and the message is to be sent as any other.
    pub(super) fn send_prepared(
        &mut self,
        prepared: &PreparedMessage,
        cx: Context<'_>,
    ) -> Result<bool, Error> {
        if self.sending_fragmented.is_none()
            && let Some(d) = cx.deflate
            && d.should_compress(prepared.payload().len())
            && let Some((level, bits)) = d.shared_key()
        {
            let compressed = prepared
                .compressed_with(level, bits, |p| d.compress(p))
                .map_err(Error::Compression)?;
            let opcode = data_opcode(prepared.kind());
            self.encode_data(cx.zero_copy_from, opcode, true, FrameHeader::RSV1, compressed);
            return Ok(true);
        }
        Ok(false)
    }

    /// One fragment of a message (see [`Connection::send_fragment`](crate::Connection::send_fragment)).
    pub(super) fn send_fragment(
        &mut self,
        kind: DataKind,
        payload: Bytes,
        fin: bool,
        cx: Context<'_>,
    ) -> Result<(), Error> {
        let opcode = match self.sending_fragmented {
            None => {
                self.sending_compressed = cx
                    .deflate
                    .as_ref()
                    .is_some_and(|d| d.should_compress(payload.len()));
                data_opcode(kind)
            }
            Some(k) if k == kind => OpCode::Continuation,
            Some(_) => return Err(Error::InvalidInput("fragment kind differs from the message's")),
        };
        self.sending_fragmented = if fin { None } else { Some(kind) };
        let compressed = self.sending_compressed;
        self.encode_data_frame(cx, opcode, fin, compressed, payload)
    }

    /// A fragmented message being sent can no longer be finished (the connection ended, or we
    /// sent our close): the compressor it holds — maybe borrowed from a pool shared by many
    /// connections, ~300 KiB — is let go now, not when the connection is dropped.
    pub(super) fn abandon_fragmented_send(&mut self, deflate: Option<&mut PerMessageDeflate>) {
        if self.sending_fragmented.take().is_some()
            && std::mem::take(&mut self.sending_compressed)
            && let Some(d) = deflate
        {
            d.abandon_message();
        }
    }

    pub(super) fn encode_close(&mut self, frame: Option<&CloseFrame>) {
        // On the stack: a close payload is at most 125 bytes (§5.5), where a buffer of its own
        // was an allocation per connection. A reason too long for it (the fields are public)
        // is encoded as it is, as before.
        let mut payload = [0u8; 2 + CloseFrame::MAX_REASON_LEN];
        match frame {
            None => self.encode_frame(OpCode::Close, true, &[]),
            Some(f) => match f.encode_to(&mut payload) {
                Some(len) => self.encode_frame(OpCode::Close, true, &payload[..len]),
                None => self.encode_frame(
                    OpCode::Close,
                    true,
                    &[&f.code.0.to_be_bytes()[..], f.reason.as_bytes()].concat(),
                ),
            },
        }
    }

    /// Queues a whole message as one frame, compressed when permessage-deflate is on and the
    /// message is large enough.
    pub(super) fn encode_message(
        &mut self,
        cx: Context<'_>,
        opcode: OpCode,
        payload: Bytes,
    ) -> Result<(), Error> {
        let compressed = cx
            .deflate
            .as_ref()
            .is_some_and(|d| d.should_compress(payload.len()));
        self.encode_data_frame(cx, opcode, true, compressed, payload)
    }

    /// Queues one frame of a data message — a whole message, or a fragment (`opcode`
    /// `Continuation` after the first) — deflated when the message is `compressed`, with RSV1 on
    /// a compressed message's first frame only (RFC 7692 §6). A compressor that fails returns
    /// [`Error::Compression`]: its state is lost, and the connection cannot go on.
    fn encode_data_frame(
        &mut self,
        cx: Context<'_>,
        opcode: OpCode,
        fin: bool,
        compressed: bool,
        payload: Bytes,
    ) -> Result<(), Error> {
        match cx.deflate {
            Some(d) if compressed => {
                // The compressor's state is lost: the connection cannot go on (1011).
                let deflated = d.compress_fragment(&payload, fin).map_err(Error::Compression)?;
                let rsv = if opcode == OpCode::Continuation {
                    0
                } else {
                    FrameHeader::RSV1
                };
                if deflated.len() >= cx.zero_copy_from {
                    self.encode_data(cx.zero_copy_from, opcode, fin, rsv, Bytes::from(deflated));
                } else {
                    // Copied into the batch: the buffer serves the next message.
                    self.encode_frame_rsv(opcode, fin, rsv, &deflated);
                    d.reuse_deflated(deflated);
                }
            }
            _ => self.encode_data(cx.zero_copy_from, opcode, fin, 0, payload),
        }
        Ok(())
    }

    /// Queues a data frame; a large payload is queued without a copy where the role allows it
    /// (`zero_copy_from`, see [`Context`]).
    fn encode_data(&mut self, zero_copy_from: usize, opcode: OpCode, fin: bool, rsv: u8, payload: Bytes) {
        if payload.len() >= zero_copy_from {
            self.encode_header(opcode, fin, rsv, payload.len(), None);
            self.transmit.push(payload);
        } else {
            self.encode_frame_rsv(opcode, fin, rsv, &payload);
        }
    }

    /// Queues a frame by copying (and, for a client, masking) its payload into the batch buffer.
    pub(super) fn encode_frame(&mut self, opcode: OpCode, fin: bool, payload: &[u8]) {
        self.encode_frame_rsv(opcode, fin, 0, payload);
    }

    fn encode_frame_rsv(&mut self, opcode: OpCode, fin: bool, rsv: u8, payload: &[u8]) {
        if self.mask_keys.is_none() && payload.len() <= 125 {
            self.transmit
                .push_short_frame(FrameHeader::first_byte(fin, rsv, opcode), payload);
            return;
        }
        let mask = self.mask_keys.as_mut().map(|next| next());
        self.encode_header(opcode, fin, rsv, payload.len(), mask);
        let tail = self.transmit.tail();
        let start = tail.len();
        tail.extend_from_slice(payload);
        if let Some(key) = mask {
            apply_mask(&mut tail[start..], key, 0);
        }
        self.transmit.commit(payload.len());
    }

    fn encode_header(&mut self, opcode: OpCode, fin: bool, rsv: u8, len: usize, mask: Option<[u8; 4]>) {
        let header = FrameHeader {
            fin,
            rsv,
            opcode,
            mask,
            payload_len: len as u64,
        };
        let mut buf = [0u8; MAX_HEADER_LEN];
        let n = header.encode(&mut buf);
        let tail = self.transmit.tail();
        tail.reserve(n + if mask.is_some() { len } else { 0 });
        tail.extend_from_slice(&buf[..n]);
        self.transmit.commit(n);
    }
}
