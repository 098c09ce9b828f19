//! The sending half of [`Connection`]'s API: messages, prepared messages and fragments in, bytes
//! to write out, and the closing handshake from our side. The sending room encodes; the front
//! checks with the closing room that sending is allowed, and fails the connection (1011) when
//! the compressor does.

use bytes::Bytes;

use crate::error::Error;
use crate::frame::{CloseCode, CloseFrame, MAX_CONTROL_PAYLOAD, OpCode};
use crate::message::Message;
use crate::prepared::PreparedMessage;
use crate::role::{DataKind, Role};
use crate::transmit::Transmit;

use super::close::after_close_handshake;
use super::front::Connection;
use super::send::{self, Sender};

impl Connection {
    /// Queues a message. Pings and pongs must carry at most 125 bytes; `Message::Close` starts the
    /// closing handshake like [`close`](Self::close).
    pub fn send(&mut self, message: Message) -> Result<(), Error> {
        // The hot case, in one place rather than through the general encoder: a short data
        // message from a server (unmasked, not compressed) on an open connection.
        if self.closing.sendable() && self.sender.push_short_message(&message, self.deflate.as_deref()) {
            return Ok(());
        }
        let (opcode, payload) = match message {
            Message::Close(frame) => return self.close(frame),
            _ if !self.closing.sendable() => return Err(Error::Closed),
            Message::Ping(p) | Message::Pong(p) if p.len() > MAX_CONTROL_PAYLOAD => {
                return Err(Error::InvalidInput("control frame payload longer than 125 bytes"));
            }
            _ if self.sender.is_sending_fragmented() && message.is_data() => {
                return Err(Error::InvalidInput(
                    "a fragmented message is being sent; finish it first",
                ));
            }
            Message::Text(t) => (OpCode::Text, t.into_bytes()),
            Message::Binary(b) => (OpCode::Binary, b),
            Message::Ping(p) => {
                self.sender.encode_frame(OpCode::Ping, true, &p);
                return Ok(());
            }
            Message::Pong(p) => {
                self.sender.encode_frame(OpCode::Pong, true, &p);
                return Ok(());
            }
        };
        let (sender, cx) = self.sending();
        let sent = sender.encode_message(cx, opcode, payload);
        self.sent(sent)
    }

    /// Queues a [`PreparedMessage`](crate::PreparedMessage): the same as
    /// [`send`](Self::send)ing its message, except that with permessage-deflate and no context
    /// takeover on our side the compressed payload is computed once for every connection that
    /// shares the (level, window) and then shared.
    pub fn send_prepared(&mut self, prepared: &PreparedMessage) -> Result<(), Error> {
        if self.closing.sendable() {
            let (sender, cx) = self.sending();
            match sender.send_prepared(prepared, cx) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return self.sent(Err(e)),
            }
        }
        self.send(prepared.message().clone())
    }

    /// Queues one fragment of a message (§5.4): the first call starts a message of `kind`, later
    /// calls continue it (their `kind` must match), and `fin` ends it. Control messages may be sent
    /// between fragments. A text message's fragments may split code points; the whole must be UTF-8.
    ///
    /// With permessage-deflate, the message is compressed when its first fragment would be as a
    /// whole message (non-empty, at least
    /// [`min_compress_size`](crate::extension::deflate::DeflateConfig::min_compress_size)): each
    /// fragment is then compressed as it comes and sync-flushed, so the peer can inflate it at
    /// once (RFC 7692 §7.2.1; a flush costs a few bytes per fragment), and the compressor is held
    /// until the last fragment.
    #[inline]
    pub fn send_fragment(&mut self, kind: DataKind, payload: Bytes, fin: bool) -> Result<(), Error> {
        if !self.closing.sendable() {
            return Err(Error::Closed);
        }
        let (sender, cx) = self.sending();
        let sent = sender.send_fragment(kind, payload, fin, cx);
        self.sent(sent)
    }

    /// Starts the closing handshake (§7.1.2): queues a close frame and waits for the peer's. `None`
    /// sends a close frame without a status code. Calling it again while closing does nothing.
    /// With [`Config::auto_close_reply`](crate::Config::auto_close_reply) off and the peer's
    /// close received, this is the answer that completes the handshake.
    pub fn close(&mut self, frame: Option<CloseFrame>) -> Result<(), Error> {
        if let Some(f) = &frame {
            if !f.code.is_sendable() {
                return Err(Error::InvalidInput("close code may not be sent (RFC 6455 §7.4)"));
            }
            if f.reason.len() > CloseFrame::MAX_REASON_LEN {
                return Err(Error::InvalidInput("close reason longer than 123 bytes"));
            }
        }
        if self.closing.take_reply_owed().is_some() {
            // The answer to the peer's close: the handshake is done.
            self.sender.encode_close(frame.as_ref());
            self.end(after_close_handshake(self.role));
        } else if self.closing.is_open() {
            self.sender.encode_close(frame.as_ref());
            self.closing.close_sent();
            self.sender.abandon_fragmented_send(self.deflate.as_deref_mut());
            self.timers.start_close_deadline(self.config.close_timeout);
        }
        Ok(())
    }

    /// The bytes waiting to be written, as a [`bytes::Buf`]: write them, then
    /// [`advance`](bytes::Buf::advance) by what was written.
    pub fn transmit(&mut self) -> &mut Transmit {
        self.sender.transmit()
    }

    /// How many bytes wait in [`transmit`](Self::transmit).
    pub fn transmit_len(&self) -> usize {
        self.sender.transmit_len()
    }

    /// How many of the bytes waiting in [`transmit`](Self::transmit) may be pongs the engine
    /// queued by itself (§5.5.2): those queued since the queue was last empty, an upper bound.
    /// An I/O layer stops reading while these pile up unwritten — a peer that sends pings and
    /// reads no pongs must not grow our memory — but not merely because the application's own
    /// output is stuck: a peer that echoes as it reads waits for us to read in turn, and
    /// neither would ever move again.
    pub fn queued_auto_replies(&self) -> usize {
        self.sender.queued_auto_replies()
    }

    /// Takes everything waiting to be written as one contiguous buffer (a convenience for tests and
    /// simple I/O layers; [`transmit`](Self::transmit) avoids the copy).
    pub fn transmit_bytes(&mut self) -> Vec<u8> {
        self.sender.transmit_bytes()
    }

    /// The sending room, with what it borrows from the front to send data.
    #[inline]
    fn sending(&mut self) -> (&mut Sender, send::Context<'_>) {
        let cx = send::Context {
            deflate: self.deflate.as_deref_mut(),
            zero_copy_from: match self.role {
                Role::Server => self.config.zero_copy_threshold,
                Role::Client => usize::MAX,
            },
        };
        (&mut self.sender, cx)
    }

    /// A send's outcome: a compressor that failed has lost its state, and the connection cannot
    /// go on (1011).
    #[inline]
    fn sent(&mut self, sent: Result<(), Error>) -> Result<(), Error> {
        match sent {
            Err(error @ Error::Compression(_)) => Err(self.fail_with(CloseCode::INTERNAL_ERROR, error)),
            sent => sent,
        }
    }
}
