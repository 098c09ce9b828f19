//! The WebSocket connection state machine, after the opening handshake (RFC 6455 §5–§7).
//!
//! This file does not know about sockets: bytes from the peer go in through
//! [`Connection::read_buffer`] (or [`Connection::receive`]), messages come out of
//! [`Connection::poll_message`], and frames to send pile up in [`Connection::transmit`] until the
//! I/O layer writes them.
//!
//! ```text
//!               send close / peer fails             peer's close arrives
//!   ┌──────┐ ─────────────────────────► ┌──────────┐ ──────────────────► ┌────────┐
//!   │ Open │                            │ Closing  │                     │ Closed │
//!   └──────┘ ─────────────────────────────────────────────────────────► └────────┘
//!                 peer's close arrives: we reply at once (§5.5.1)
//! ```
//! Once `Closed`, the server closes the TCP connection first; the client waits for it (§7.1.1).
//! What the transport should do is the engine's output too ([`Connection::transport`]), and so are
//! its deadlines: keepalive pings, the dead-peer deadline and the close deadline run on the time
//! the I/O layer passes in ([`Connection::handle_timeout`]); the engine never reads a clock.

//!
//! The engine is in rooms, one concern each, that know nothing of one another; [`Connection`]
//! is the front that owns them and ties them together where a step needs two (a ping received
//! is answered by the sending room; a protocol violation found by the receiving room fails the
//! connection, which the closing room records and the sending room announces):
//!
//! - [`receive`]: the read buffer, frame headers, unmasking, UTF-8, reassembly and streaming;
//! - [`send`]: the transmit queue, mask keys, fragmented and compressed sends, frame encoding;
//! - [`close`]: the closing handshake's stage, the transport's, and why the connection ended;
//! - [`timers`]: keepalive and the close deadline, on the time the I/O layer passes in.
//!
//! The permessage-deflate state is used by both directions, so the front keeps it and lends it
//! to the room that needs it. None of the rooms imports another, nor this file.

mod close;
mod receive;
mod send;
mod timers;

use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::config::Config;
use crate::error::{Error, ProtocolViolation};
use crate::extension::deflate::PerMessageDeflate;
use crate::frame::{CloseCode, CloseFrame, MAX_CONTROL_PAYLOAD, OpCode};
use crate::message::{Incoming, Message};
use crate::prepared::PreparedMessage;
use crate::role::{DataKind, MaskKeySource, Role};
use crate::transmit::Transmit;

pub use close::{CloseState, Transport};

use close::{Closing, after_close_handshake};
use receive::{Part, Receiver, whole_as_piece};
use send::Sender;
use timers::{KeepaliveDue, Timers};

/// A WebSocket connection after the handshake: a deterministic state machine with no I/O.
///
/// ```
/// use sockeye_proto::{Config, Connection, Message};
///
/// let mut server = Connection::server(Config::default());
/// // A masked "Hello" from a client (RFC 6455 §5.7).
/// server.receive(&[0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58]);
/// assert_eq!(server.poll_message().unwrap(), Some(Message::text("Hello")));
/// server.send(Message::text("Hello")).unwrap();
/// assert_eq!(server.transmit_bytes(), b"\x81\x05Hello");
/// ```
pub struct Connection {
    role: Role,
    config: Config,
    receiver: Receiver,
    sender: Sender,
    /// permessage-deflate's state, when negotiated: the sending side compresses with it, the
    /// receiving side inflates with it.
    deflate: Option<PerMessageDeflate>,
    closing: Closing,
    timers: Timers,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("role", &self.role)
            .field("state", &self.closing.state())
            .field("buffered", &self.receiver.buffered())
            .field("to_transmit", &self.sender.transmit_len())
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// The server's end of an open connection. Servers do not mask (§5.1).
    pub fn server(config: Config) -> Self {
        Self::with_role(Role::Server, config, None)
    }

    /// The client's end of an open connection, masking every frame it sends with a key from
    /// `mask_keys`. RFC 6455 §10.3 requires keys an attacker cannot predict: pass the operating
    /// system's random source (the `sockeye` crate passes `rand::random`), or, in tests only,
    /// [`frame::insecure_mask_keys_for_tests`](crate::frame::insecure_mask_keys_for_tests).
    ///
    /// There is no client without a key source: the engine has no randomness of its own, and a
    /// default generator would be a predictable one (issue 13: `Connection::new` used to mask
    /// with a fixed seed).
    ///
    /// ```compile_fail
    /// let client = sockeye_proto::Connection::new(sockeye_proto::Role::Client, Default::default());
    /// ```
    pub fn client(config: Config, mask_keys: MaskKeySource) -> Self {
        Self::with_role(Role::Client, config, Some(mask_keys))
    }

    fn with_role(role: Role, config: Config, mask_keys: Option<MaskKeySource>) -> Self {
        Connection {
            role,
            timers: Timers::new(&config),
            config,
            receiver: Receiver::default(),
            sender: Sender::new(mask_keys),
            deflate: None,
            closing: Closing::new(),
        }
    }

    /// Turns on permessage-deflate with the state the handshake negotiated
    /// (see [`extension::deflate`](crate::extension::deflate)). Call it before any data flows.
    pub fn set_deflate(&mut self, deflate: Option<PerMessageDeflate>) {
        self.deflate = deflate;
    }

    /// Whether permessage-deflate is in use.
    pub fn is_deflate_enabled(&self) -> bool {
        self.deflate.is_some()
    }

    /// This end's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where the closing handshake stands.
    pub fn close_state(&self) -> CloseState {
        self.closing.state()
    }

    /// Whether the closing handshake has finished, or the connection failed or timed out: no
    /// more messages flow. See [`transport`](Self::transport) for what to do with the transport.
    pub fn is_closed(&self) -> bool {
        self.closing.is_closed()
    }

    // ------------------------------------------------------------------------ time and transport

    /// What the I/O layer should do with the transport now (RFC 6455 §7.1.1). Look at it after
    /// every call into the engine; it changes only through them.
    pub fn transport(&self) -> Transport {
        self.closing.transport()
    }

    /// The I/O layer shut down the writing side, as [`Transport::ShutdownWrite`] asked.
    pub fn write_shut_down(&mut self) {
        self.closing.write_shut_down();
    }

    /// The transport is closed (as asked, or because it failed): the connection is over.
    pub fn transport_closed(&mut self) {
        self.closing.transport_closed();
        self.timers.stop();
        self.receiver.release_all();
    }

    /// Why the connection ended, if it did not end cleanly: the protocol violation that failed it
    /// (also returned by [`poll_message`](Self::poll_message) when it happened), 1006 when the
    /// peer closed the transport without a close frame, or a timeout. An I/O layer reports it
    /// once the transport is closed. Takes it: a second call returns `None`.
    pub fn take_error(&mut self) -> Option<Error> {
        self.closing.take_error()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next, or `None` when no timer
    /// runs. The instant may be in the past: call it at once then.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if matches!(self.closing.transport(), Transport::Abort | Transport::Closed) {
            return None;
        }
        self.timers.poll_timeout(self.closing.is_open())
    }

    /// Passes the time: starts the timers begun since the last call (the engine learns the time
    /// only here) and acts on those that are due — sends a keepalive ping, gives up on a peer that
    /// did not answer one, or on a closing handshake that took too long. Call it once when the
    /// connection starts and whenever the instant of [`poll_timeout`](Self::poll_timeout) has
    /// passed; then write what is queued and look at [`transport`](Self::transport).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.timers.close_deadline_passed(now) && self.closing.transport() != Transport::Closed {
            if let Some(echo) = self.closing.take_reply_owed() {
                // The application kept the peer waiting too long: answer for it, and give
                // the transport a close deadline of its own.
                self.sender.encode_close(echo.as_ref());
                self.timers.restart_close_deadline(self.config.close_timeout);
                self.end(after_close_handshake(self.role));
                return;
            }
            // A finished handshake whose peer never closed the transport is no error.
            if !self.closing.is_closed() {
                self.closing.keep_error(|| Error::Timeout("close"));
            }
            self.end(Transport::Abort);
            return;
        }
        if !self.closing.is_open() {
            return;
        }
        match self.timers.keepalive_due(now) {
            KeepaliveDue::Nothing => {}
            KeepaliveDue::Dead => {
                // §7.1.7 allows dropping a connection that cannot be closed cleanly: the peer is
                // not reading, so a close frame would only wait behind the unanswered ping.
                self.closing.keep_error(|| Error::Timeout("keepalive"));
                self.end(Transport::Abort);
            }
            // §5.5.2: any payload; the peer's pong (or anything else) proves it alive.
            KeepaliveDue::Ping => self.sender.encode_frame(OpCode::Ping, true, b"sockeye keepalive"),
        }
    }

    /// Tells the engine that input arrived through [`read_buffer`](Self::read_buffer) (which
    /// [`receive`](Self::receive) does itself): the peer is alive, for keepalive.
    #[inline]
    pub fn note_input(&mut self) {
        self.timers.note_input();
    }

    /// Moves to `Closed` and asks the transport for `transport`; the message being received, and
    /// the one being sent in fragments, can no longer be finished.
    fn end(&mut self, transport: Transport) {
        self.closing.end(transport);
        self.receiver.abandon_message();
        self.sender.abandon_fragmented_send(self.deflate.as_mut());
    }

    /// Fails the connection (§7.1.7): queues a close frame with the violation's code (unless one
    /// was sent already), stops processing input and asks for the writing side to be shut down
    /// once the close frame is out. Returns the error to hand to the application.
    fn fail(&mut self, violation: ProtocolViolation) -> Error {
        self.fail_with(violation.close_code(), Error::Protocol(violation))
    }

    fn fail_with(&mut self, code: CloseCode, error: Error) -> Error {
        if self.closing.is_open() || self.closing.take_reply_owed().is_some() {
            self.sender.encode_close(Some(&CloseFrame::new(code, "")));
        }
        if !self.closing.is_closed() {
            self.timers.start_close_deadline(self.config.close_timeout);
            self.end(Transport::ShutdownWrite);
        }
        self.closing.keep_error(|| error.clone());
        error
    }

    // ---------------------------------------------------------------------------------- input

    /// Appends bytes received from the peer. Then call [`poll_message`](Self::poll_message) until it
    /// returns `Ok(None)`.
    pub fn receive(&mut self, bytes: &[u8]) {
        self.receiver.receive(bytes);
        self.note_input();
    }

    /// The buffer that received bytes are appended to: an I/O layer can read from the socket straight
    /// into it instead of calling [`receive`](Self::receive). Only append to it, then call
    /// [`note_input`](Self::note_input).
    pub fn read_buffer(&mut self) -> &mut BytesMut {
        self.receiver.read_buffer()
    }

    /// How many bytes of the frame being received have yet to arrive (0 between frames). A
    /// frame received whole gets room for all of it in the read buffer up front; an I/O layer
    /// that reads into [`read_buffer`](Self::read_buffer) should fill that room rather than
    /// reserve more, which would copy the frame into a larger allocation.
    pub fn frame_bytes_missing(&self) -> usize {
        self.receiver.frame_bytes_missing()
    }

    /// Gives up the read buffer and the outbound batch buffer when they are empty, so that a
    /// connection waiting for input holds no buffer memory; the next read or send allocates
    /// again. An I/O layer calls it when the connection goes idle: with thousands of mostly quiet
    /// connections, memory then follows the busy ones, not every connection's largest message.
    ///
    /// Returns the read buffer, empty, when it has room for `reuse` bytes, taking back the room
    /// of messages already let go if it must: the I/O layer may keep it for the next read of any
    /// connection (a pool), so that a busy connection pays no allocation per wait. A buffer
    /// without that room is simply let go. Room is taken back only when it runs short, not at
    /// every wait (~50 instructions of a 64-byte echo, callgrind).
    pub fn release_idle_buffers(&mut self, reuse: usize) -> Option<BytesMut> {
        self.release_idle_write_buffer();
        self.receiver.release_read_buffer(reuse)
    }

    /// Gives up the outbound batch buffer when it is empty and grew for a large batch, and the
    /// queue of shared frames when it is empty: the half of
    /// [`release_idle_buffers`](Self::release_idle_buffers) for an I/O layer that keeps the read
    /// buffer through a wait.
    #[inline]
    pub fn release_idle_write_buffer(&mut self) {
        self.sender.transmit().release_if_empty();
    }

    /// How many received bytes are buffered and not yet turned into messages.
    pub fn buffered(&self) -> usize {
        self.receiver.buffered()
    }

    /// The peer closed the transport (TCP FIN). Returns the close code to report: `None` when the
    /// closing handshake had finished, else 1006, "closed abnormally" (§7.1.5), also kept as
    /// [`Error::AbnormalClosure`]. Either way the transport is to be closed now
    /// ([`Transport::Finish`]).
    pub fn receive_eof(&mut self) -> Option<CloseCode> {
        if self.closing.transport() == Transport::Closed {
            return None;
        }
        // A peer that closed first and then the transport, before our answer, closed cleanly.
        let abnormal = !self.closing.is_closed() && self.closing.take_reply_owed().is_none();
        if abnormal {
            self.closing.keep_error(|| Error::AbnormalClosure);
        }
        // Anything queued (a close frame) may still reach a peer that only half-closed; the close
        // deadline bounds the wait.
        self.timers.start_close_deadline(self.config.close_timeout);
        self.end(Transport::Finish);
        abnormal.then_some(CloseCode::ABNORMAL)
    }

    /// Parses buffered bytes and returns the next message, or `Ok(None)` when more bytes are needed
    /// (or the connection is closed).
    ///
    /// On `Err(Error::Protocol(_))` the peer broke the protocol and the connection has failed
    /// (§7.1.7): a close frame with the matching code has been queued, nothing more from the peer
    /// is processed, and [`transport`](Self::transport) asks to shut down writing once the close
    /// frame is written. The error is kept for [`take_error`](Self::take_error) too.
    #[inline]
    pub fn poll_message(&mut self) -> Result<Option<Message>, Error> {
        if self.receiver.is_idle() {
            // Nothing to parse (an I/O layer asks before every wait, and again once woken):
            // what `poll_part` would find, checked inline in the caller, before the parser's
            // own set-up (~80 instructions of a 64-byte echo, then ~40 more, callgrind).
            return Ok(None);
        }
        self.poll_buffered_message()
    }

    /// [`poll_message`](Self::poll_message) with bytes to parse.
    fn poll_buffered_message(&mut self) -> Result<Option<Message>, Error> {
        if let Some(message) = self.poll_short_message() {
            return Ok(Some(message));
        }
        if self.receiver.is_streaming() {
            return Err(Error::InvalidInput(
                "a message is being received in pieces: take the rest with poll_chunk",
            ));
        }
        match self.poll_part(false)? {
            Some(Incoming::Control(message)) => Ok(Some(message)),
            // Whole-message mode hands over data messages as `Control(Message::Text|Binary)`
            // (see `poll_part`); it never cuts pieces.
            Some(Incoming::Chunk(_)) | None => Ok(None),
        }
    }

    /// Parses buffered bytes and returns what comes next, a data message as pieces: a piece as
    /// soon as any of its bytes have arrived (see [`MessageChunk`]), or a control frame whole.
    /// `Ok(None)` when more bytes are needed (or the connection is closed). Memory stays bounded
    /// whatever the message size: the read buffer holds at most what the I/O layer read, and a
    /// compressed message is inflated 64 KiB at a time. Errors as for
    /// [`poll_message`](Self::poll_message).
    ///
    /// The two may be mixed between messages; a message begun with `poll_message` (fragments
    /// gathered so far) continues here, the gathered part as its first piece; one begun here must
    /// be finished here (`poll_message` refuses with [`Error::InvalidInput`] until then).
    ///
    /// ```
    /// use sockeye_proto::{Config, Connection, Incoming};
    ///
    /// let mut server = Connection::server(Config::default());
    /// // The first half of a masked "Hello" (RFC 6455 §5.7), then the rest.
    /// let frame = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58];
    /// server.receive(&frame[..8]);
    /// let Some(Incoming::Chunk(first)) = server.poll_chunk().unwrap() else { panic!() };
    /// assert_eq!((&first.data[..], first.first, first.last), (&b"He"[..], true, false));
    /// assert_eq!(server.poll_chunk().unwrap(), None);
    /// server.receive(&frame[8..]);
    /// let Some(Incoming::Chunk(rest)) = server.poll_chunk().unwrap() else { panic!() };
    /// assert_eq!((&rest.data[..], rest.first, rest.last), (&b"llo"[..], false, true));
    /// ```
    pub fn poll_chunk(&mut self) -> Result<Option<Incoming>, Error> {
        if self.receiver.between_messages()
            && let Some(message) = self.poll_short_message()
        {
            return Ok(Some(whole_as_piece(message)));
        }
        Ok(self.poll_part(true)?.map(|part| match part {
            Incoming::Control(message) => whole_as_piece(message),
            chunk => chunk,
        }))
    }

    /// The hot case of both modes in one step (see [`Receiver::poll_short_message`]).
    #[inline]
    fn poll_short_message(&mut self) -> Option<Message> {
        let open = self.closing.is_open();
        self.receiver.poll_short_message(self.role, &self.config, open)
    }

    /// The receive path of both modes: whole messages come out as `Control(Message)` (of any
    /// kind), streamed pieces as `Chunk`.
    fn poll_part(&mut self, streaming: bool) -> Result<Option<Incoming>, Error> {
        if !self.closing.reads_input() {
            // §7.1.7: after failing, and after the closing handshake, input is not processed
            // (nor after the peer's close, which nothing may follow, §5.5.1).
            // Drop it as it arrives, so that a peer that keeps sending costs no memory.
            self.receiver.discard_input();
            return Ok(None);
        }
        let part = self
            .receiver
            .poll_part(streaming, self.role, &self.config, &mut self.deflate);
        Ok(match part.map_err(|v| self.fail(v))? {
            None => None,
            Some(Part::Message(message)) => Some(Incoming::Control(message)),
            Some(Part::Chunk(chunk)) => Some(Incoming::Chunk(chunk)),
            Some(Part::Ping(payload)) => Some(Incoming::Control(self.on_ping(payload))),
            Some(Part::Close(payload)) => Some(Incoming::Control(self.on_close(payload)?)),
        })
    }

    /// A ping arrived.
    fn on_ping(&mut self, payload: Bytes) -> Message {
        // §5.5.2: answer with a pong carrying the same data, unless we already sent a close.
        if self.config.auto_pong && self.closing.is_open() {
            self.sender.queue_auto_pong(&payload);
        }
        Message::Ping(payload)
    }

    /// The peer's close frame arrived.
    fn on_close(&mut self, payload: Bytes) -> Result<Message, Error> {
        // A malformed close fails the connection: our close carries the error's code.
        let frame = CloseFrame::parse(payload).map_err(|v| self.fail(v))?;
        let was_open = self.closing.is_open();
        // §5.5.1: reply with a close frame, echoing the status code.
        let echo = frame.as_ref().map(|f| CloseFrame::new(f.code, ""));
        self.timers.start_close_deadline(self.config.close_timeout);
        if was_open && !self.config.auto_close_reply {
            // The application answers (or the close deadline does).
            self.closing.owe_reply(echo);
            return Ok(Message::Close(frame));
        }
        if was_open {
            self.sender.encode_close(echo.as_ref());
        }
        self.end(after_close_handshake(self.role));
        Ok(Message::Close(frame))
    }

    // --------------------------------------------------------------------------------- output

    /// Queues a message. Pings and pongs must carry at most 125 bytes; `Message::Close` starts the
    /// closing handshake like [`close`](Self::close).
    pub fn send(&mut self, message: Message) -> Result<(), Error> {
        // The hot case, in one place rather than through the general encoder: a short data
        // message from a server (unmasked, not compressed) on an open connection.
        if self.closing.sendable() && self.sender.push_short_message(&message, self.deflate.as_ref()) {
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
    /// With [`Config::auto_close_reply`] off and the peer's close received, this is the answer
    /// that completes the handshake.
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
            self.sender.abandon_fragmented_send(self.deflate.as_mut());
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
            deflate: self.deflate.as_mut(),
            role: self.role,
            config: &self.config,
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
