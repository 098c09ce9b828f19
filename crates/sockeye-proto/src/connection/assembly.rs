//! The data message being received (§5.4): its kind and its bytes so far, reassembled from
//! fragments (and inflated, RFC 7692) or handed over as pieces (streamed); the UTF-8 check of a
//! text message across frames and reads; whether its payload is deflated (RSV1 on its first
//! frame, RFC 7692 §6).
//!
//! Owned by the receiving room, which does the framing (bytes, headers, unmasking) and gives
//! this one each frame's payload, or each piece of it when streaming; this file knows nothing
//! of the read buffer.

use bytes::Bytes;

use crate::config::Config;
use crate::error::ProtocolViolation;
use crate::extension::deflate::PerMessageDeflate;
use crate::frame::{FrameHeader, OpCode};
use crate::message::{Incoming, Message, MessageChunk};
use crate::role::DataKind;
use crate::utf8::{Utf8Bytes, Utf8Validator};

/// A data message that is being reassembled from fragments or inflated, or streamed.
#[derive(Debug)]
struct Reassembly {
    kind: DataKind,
    /// The message bytes so far; empty when streamed, and when the message is compressed (the
    /// inflater keeps what it inflated to: see
    /// [`PerMessageDeflate::inflate_message`]).
    data: Vec<u8>,
    /// The message's size so far, for the limit: `data.len()`, or what was streamed.
    size: usize,
    /// Handed over in pieces ([`Connection::poll_chunk`](crate::Connection::poll_chunk)) rather
    /// than whole.
    streamed: bool,
    /// Streamed: the first piece went out.
    started: bool,
}

/// The kind of the data message a first frame of `opcode` starts.
#[inline]
fn kind_of(opcode: OpCode) -> DataKind {
    if opcode == OpCode::Text {
        DataKind::Text
    } else {
        DataKind::Binary
    }
}

/// The data message in progress, if any, and how its bytes are checked.
#[derive(Debug, Default)]
pub(super) struct Assembly {
    reassembly: Option<Reassembly>,
    /// Validates the text message being received, across frames and reads (after inflation,
    /// when compressed).
    utf8: Option<Utf8Validator>,
    /// The message being received has RSV1 set: its payload is deflated (RFC 7692 §6).
    message_compressed: bool,
}

impl Assembly {
    /// A message is in progress (some of its frames, or of its pieces, are in).
    #[inline]
    pub(super) fn in_progress(&self) -> bool {
        self.reassembly.is_some()
    }

    /// A message is being handed over in pieces.
    #[inline]
    pub(super) fn is_streamed(&self) -> bool {
        self.reassembly.as_ref().is_some_and(|r| r.streamed)
    }

    /// The message's payload is deflated.
    #[inline]
    pub(super) fn is_compressed(&self) -> bool {
        self.message_compressed
    }

    /// The UTF-8 check to feed raw payload bytes to as they arrive: a text message's, unless it
    /// is compressed (then what it inflates to is checked instead).
    #[inline]
    pub(super) fn raw_text_check(&mut self) -> Option<&mut Utf8Validator> {
        if self.message_compressed {
            return None;
        }
        self.utf8.as_mut()
    }

    /// The message will never be finished (the connection ended).
    pub(super) fn abandon(&mut self) {
        self.reassembly = None;
        self.utf8 = None;
    }

    /// The transport is closed: lets go of what was gathered.
    pub(super) fn release(&mut self) {
        self.reassembly = None;
    }

    /// Checks a data frame's header against the message in progress, and starts a message on
    /// its first frame (`compressed`: RSV1 is set, with permessage-deflate on).
    pub(super) fn check_header(
        &mut self,
        h: &FrameHeader,
        config: &Config,
        compressed: bool,
    ) -> Result<(), ProtocolViolation> {
        match h.opcode {
            OpCode::Continuation => {
                let Some(r) = &self.reassembly else {
                    return Err(ProtocolViolation::UnexpectedContinuation);
                };
                let size = r.size as u64 + h.payload_len;
                if size > config.max_message_size as u64 {
                    let limit = config.max_message_size;
                    return Err(ProtocolViolation::MessageTooBig { size, limit });
                }
            }
            OpCode::Text | OpCode::Binary => {
                if self.reassembly.is_some() {
                    return Err(ProtocolViolation::ExpectedContinuation);
                }
                if h.payload_len > config.max_message_size as u64 {
                    let limit = config.max_message_size;
                    return Err(ProtocolViolation::MessageTooBig {
                        size: h.payload_len,
                        limit,
                    });
                }
                self.utf8 = (h.opcode == OpCode::Text).then(Utf8Validator::new);
                self.message_compressed = compressed;
            }
            OpCode::Close | OpCode::Ping | OpCode::Pong => {}
        }
        Ok(())
    }

    /// Streaming takes over a message that `poll_message` began: returns what it gathered as the
    /// first piece (if anything), and from then on the message is streamed.
    pub(super) fn start_streaming(
        &mut self,
        deflate: &mut Option<Box<PerMessageDeflate>>,
    ) -> Option<MessageChunk> {
        let r = self.reassembly.as_mut().filter(|r| !r.streamed)?;
        r.streamed = true;
        let data = match deflate.as_mut() {
            Some(d) if self.message_compressed => d.take_inflated_so_far(),
            _ => std::mem::take(&mut r.data),
        };
        if data.is_empty() {
            return None;
        }
        r.started = true;
        Some(MessageChunk {
            kind: r.kind,
            data: Bytes::from(data),
            first: true,
            last: false,
        })
    }

    /// A frame of `opcode` is being streamed: it starts a streamed message, unless it continues
    /// the one in progress.
    pub(super) fn stream_frame(&mut self, opcode: OpCode) {
        if opcode != OpCode::Continuation && self.reassembly.is_none() {
            self.reassembly = Some(Reassembly {
                kind: kind_of(opcode),
                data: Vec::new(),
                size: 0,
                streamed: true,
                started: false,
            });
        }
    }

    /// The size of the message so far.
    pub(super) fn size(&self) -> usize {
        self.reassembly.as_ref().map_or(0, |r| r.size)
    }

    /// Checks what a compressed text message inflated to.
    pub(super) fn check_inflated(&mut self, inflated: &[u8]) -> Result<(), ProtocolViolation> {
        match &mut self.utf8 {
            Some(utf8) => utf8.feed(inflated).map_err(|_| ProtocolViolation::InvalidUtf8),
            None => Ok(()),
        }
    }

    /// Hands over a streamed piece; the last one ends the message. `None`: nothing to hand over.
    pub(super) fn streamed_piece(
        &mut self,
        data: Bytes,
        message_done: bool,
    ) -> Result<Option<MessageChunk>, ProtocolViolation> {
        let Some(r) = self.reassembly.as_mut() else {
            return Err(ProtocolViolation::UnexpectedContinuation);
        };
        r.size += data.len();
        if data.is_empty() && !message_done {
            return Ok(None);
        }
        let first = !std::mem::replace(&mut r.started, true);
        let kind = r.kind;
        if message_done {
            self.reassembly = None;
            self.message_compressed = false;
            self.finish_text()?;
        }
        Ok(Some(MessageChunk {
            kind,
            data,
            first,
            last: message_done,
        }))
    }

    /// A data frame: hand over a whole uncompressed message without a copy, else append the
    /// (inflated) payload to the message being reassembled.
    #[inline]
    pub(super) fn on_data(
        &mut self,
        header: FrameHeader,
        payload: Bytes,
        config: &Config,
        deflate: &mut Option<Box<PerMessageDeflate>>,
    ) -> Result<Option<Message>, ProtocolViolation> {
        let first = header.opcode != OpCode::Continuation;
        if first && header.fin && !self.message_compressed {
            if header.opcode == OpCode::Text {
                self.finish_text()?;
                return Ok(Some(Message::Text(Utf8Bytes::from_validated(payload))));
            }
            return Ok(Some(Message::Binary(payload)));
        }
        if first {
            self.reassembly = Some(Reassembly {
                kind: kind_of(header.opcode),
                data: Vec::new(),
                size: 0,
                streamed: false,
                started: false,
            });
        }
        // `check_header` made sure a continuation has a message to continue.
        let Some(r) = self.reassembly.as_mut() else {
            return Err(ProtocolViolation::UnexpectedContinuation);
        };
        let data = if self.message_compressed {
            let Some(d) = deflate.as_mut() else {
                return Err(ProtocolViolation::ReservedBits(FrameHeader::RSV1));
            };
            let before = r.size;
            let message = d.inflate_message(&payload, first, header.fin, config.max_message_size)?;
            let so_far = message.as_deref().unwrap_or(d.inflated_so_far());
            r.size = so_far.len();
            // Fail fast on text: check what each frame inflates to.
            if let Some(utf8) = &mut self.utf8 {
                utf8.feed(&so_far[before..])
                    .map_err(|_| ProtocolViolation::InvalidUtf8)?;
            }
            message
        } else {
            r.data.extend_from_slice(&payload);
            r.size = r.data.len();
            header.fin.then(|| Bytes::from(std::mem::take(&mut r.data)))
        };
        let Some(data) = data else {
            return Ok(None);
        };
        let Some(r) = self.reassembly.take() else {
            return Ok(None);
        };
        self.message_compressed = false;
        match r.kind {
            DataKind::Binary => Ok(Some(Message::Binary(data))),
            DataKind::Text => {
                self.finish_text()?;
                Ok(Some(Message::Text(Utf8Bytes::from_validated(data))))
            }
        }
    }

    /// At the end of a text message: no code point may be left unfinished.
    fn finish_text(&mut self) -> Result<(), ProtocolViolation> {
        match self.utf8.take() {
            Some(v) if !v.is_complete() => Err(ProtocolViolation::InvalidUtf8),
            _ => Ok(()),
        }
    }
}

/// A whole data message as the one piece of its message, for
/// [`Connection::poll_chunk`](crate::Connection::poll_chunk); control frames stay whole.
pub(super) fn whole_as_piece(message: Message) -> Incoming {
    let (kind, data) = match message {
        Message::Text(text) => (DataKind::Text, text.into_bytes()),
        Message::Binary(data) => (DataKind::Binary, data),
        control => return Incoming::Control(control),
    };
    Incoming::Chunk(MessageChunk {
        kind,
        data,
        first: true,
        last: true,
    })
}
