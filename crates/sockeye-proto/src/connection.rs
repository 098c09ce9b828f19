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

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::config::Config;
use crate::error::{Error, ProtocolViolation};
use crate::extension::deflate::PerMessageDeflate;
use crate::frame::{
    CloseCode, CloseFrame, FrameHeader, MAX_CONTROL_PAYLOAD, MAX_HEADER_LEN, OpCode, apply_mask,
};
use crate::message::{Incoming, Message, MessageChunk};
use crate::role::{DataKind, MaskKeySource, Role};
use crate::transmit::Transmit;
use crate::utf8::{Utf8Bytes, Utf8Validator};

/// Where the connection is in the closing handshake (§7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseState {
    /// Messages flow both ways.
    Open,
    /// We sent a close frame and wait for the peer's.
    Closing,
    /// Both close frames have been sent, or the connection failed (§7.1.7) or timed out: nothing
    /// more is read or sent; what still arrives is discarded unread.
    Closed,
}

/// What the I/O layer does with the transport (RFC 6455 §7.1.1), as the engine asks through
/// [`Connection::transport`]. The engine decides; the I/O layer only carries it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// Read, and write whatever is queued.
    Open,
    /// Write what is queued, shut down the writing side (TCP FIN, TLS close_notify) and call
    /// [`Connection::write_shut_down`]; keep reading until the peer's FIN: the engine discards
    /// what arrives. Asked after failing the connection (§7.1.7), so that the close frame reaches
    /// the peer before the socket closes (closing with unread input would reset the connection
    /// and could destroy the close frame in flight).
    ShutdownWrite,
    /// Write what is queued, shut down the writing side and close the transport, then call
    /// [`Connection::transport_closed`]. The server's move once the closing handshake is done
    /// (it closes TCP first, §7.1.1), and anyone's once the peer has closed.
    Finish,
    /// Close the transport at once, writing nothing more, then call
    /// [`Connection::transport_closed`]: a deadline passed (the peer stopped answering), or the
    /// writing side is already shut down.
    Abort,
    /// The transport is closed: the connection is over.
    Closed,
}

/// A deadline that starts at the next [`Connection::handle_timeout`] (the engine learns the time
/// only there) or is set at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
    Unarmed(Duration),
    At(Instant),
}

impl Deadline {
    fn arm(&mut self, now: Instant) {
        if let Deadline::Unarmed(after) = *self {
            *self = Deadline::At(now + after);
        }
    }

    /// When it is due; an unarmed deadline is due at once, so that the I/O layer passes the time.
    fn instant(self, now: Option<Instant>) -> Option<Instant> {
        match self {
            Deadline::At(at) => Some(at),
            Deadline::Unarmed(_) => now,
        }
    }
}

/// Keepalive (see [`Config::keepalive_interval`]): input of any kind proves the peer alive.
#[derive(Debug)]
struct Keepalive {
    interval: Duration,
    timeout: Duration,
    /// When to look at the connection next: send a ping if nothing arrived since the last look.
    next_check: Deadline,
    /// Something arrived since the last look.
    input_seen: bool,
    /// A keepalive ping is out: the peer must send something by then.
    answer_due: Option<Instant>,
}

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

/// A data message that is being reassembled from fragments or inflated, or streamed.
#[derive(Debug)]
struct Reassembly {
    kind: DataKind,
    /// The message bytes so far (inflated, if the message is compressed); empty when streamed.
    data: Vec<u8>,
    /// The message's size so far, for the limit: `data.len()`, or what was streamed.
    size: usize,
    /// Handed over in pieces ([`Connection::poll_chunk`]) rather than whole.
    streamed: bool,
    /// Streamed: the first piece went out.
    started: bool,
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
    state: CloseState,
    /// The peer closed first and, with `auto_close_reply` off, the application has yet to answer:
    /// the echo the engine sends if the close deadline passes first. Data may still be sent.
    reply_owed: Option<Option<CloseFrame>>,
    read_buf: BytesMut,
    /// `read_buf` grew for a large frame (see [`SHRINK_AFTER_FRAME`]).
    read_buf_grown: bool,
    incoming: Option<IncomingFrame>,
    reassembly: Option<Reassembly>,
    /// Validates the text message being received, across frames and reads (after inflation,
    /// when compressed).
    utf8: Option<Utf8Validator>,
    /// The message being received has RSV1 set: its payload is deflated (RFC 7692 §6).
    message_compressed: bool,
    deflate: Option<PerMessageDeflate>,
    /// The kind of the fragmented message being sent, if one is in progress.
    sending_fragmented: Option<DataKind>,
    /// The fragmented message being sent is compressed (RSV1 on its first frame).
    sending_compressed: bool,
    /// Bytes of pongs the engine queued by itself since the transmit queue was last seen empty.
    auto_replies: usize,
    transmit: Transmit,
    mask_keys: Option<MaskKeySource>,
    transport: Transport,
    /// The writing side of the transport is shut down.
    write_shut: bool,
    /// Why the connection ended, kept to be reported once the transport is closed.
    error: Option<Error>,
    /// The latest time the I/O layer passed in.
    now: Option<Instant>,
    keepalive: Option<Keepalive>,
    /// Set when the closing handshake starts: the transport must be closed by then.
    close_deadline: Option<Deadline>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("role", &self.role)
            .field("state", &self.state)
            .field("buffered", &self.read_buf.len())
            .field("to_transmit", &self.transmit.len())
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
        let keepalive = config.keepalive_interval.map(|interval| Keepalive {
            interval,
            timeout: config.keepalive_timeout,
            next_check: Deadline::Unarmed(interval),
            input_seen: false,
            answer_due: None,
        });
        Connection {
            role,
            config,
            state: CloseState::Open,
            reply_owed: None,
            read_buf: BytesMut::new(),
            read_buf_grown: false,
            incoming: None,
            reassembly: None,
            utf8: None,
            message_compressed: false,
            deflate: None,
            sending_fragmented: None,
            sending_compressed: false,
            auto_replies: 0,
            transmit: Transmit::default(),
            mask_keys,
            transport: Transport::Open,
            write_shut: false,
            error: None,
            now: None,
            keepalive,
            close_deadline: None,
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
        self.state
    }

    /// Whether the closing handshake has finished, or the connection failed or timed out: no
    /// more messages flow. See [`transport`](Self::transport) for what to do with the transport.
    pub fn is_closed(&self) -> bool {
        self.state == CloseState::Closed
    }

    // ------------------------------------------------------------------------ time and transport

    /// What the I/O layer should do with the transport now (RFC 6455 §7.1.1). Look at it after
    /// every call into the engine; it changes only through them.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The I/O layer shut down the writing side, as [`Transport::ShutdownWrite`] asked.
    pub fn write_shut_down(&mut self) {
        self.write_shut = true;
        if self.transport == Transport::ShutdownWrite {
            self.transport = Transport::Open;
        }
    }

    /// The transport is closed (as asked, or because it failed): the connection is over.
    pub fn transport_closed(&mut self) {
        self.transport = Transport::Closed;
        self.state = CloseState::Closed;
        self.reply_owed = None;
        self.close_deadline = None;
        self.keepalive = None;
        self.read_buf = BytesMut::new();
        self.incoming = None;
        self.reassembly = None;
    }

    /// Why the connection ended, if it did not end cleanly: the protocol violation that failed it
    /// (also returned by [`poll_message`](Self::poll_message) when it happened), 1006 when the
    /// peer closed the transport without a close frame, or a timeout. An I/O layer reports it
    /// once the transport is closed. Takes it: a second call returns `None`.
    pub fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next, or `None` when no timer
    /// runs. The instant may be in the past: call it at once then.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if matches!(self.transport, Transport::Abort | Transport::Closed) {
            return None;
        }
        let close = self.close_deadline.and_then(|d| d.instant(self.now));
        let keepalive = match &self.keepalive {
            Some(k) if self.state == CloseState::Open => match k.answer_due {
                Some(due) => Some(due),
                None => k.next_check.instant(self.now),
            },
            _ => None,
        };
        match (close, keepalive) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Passes the time: starts the timers begun since the last call (the engine learns the time
    /// only here) and acts on those that are due — sends a keepalive ping, gives up on a peer that
    /// did not answer one, or on a closing handshake that took too long. Call it once when the
    /// connection starts and whenever the instant of [`poll_timeout`](Self::poll_timeout) has
    /// passed; then write what is queued and look at [`transport`](Self::transport).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = Some(now);
        if let Some(deadline) = &mut self.close_deadline {
            deadline.arm(now);
            if matches!(*deadline, Deadline::At(at) if at <= now) && self.transport != Transport::Closed {
                if let Some(echo) = self.reply_owed.take() {
                    // The application kept the peer waiting too long: answer for it, and give
                    // the transport a close deadline of its own.
                    self.encode_close(echo.as_ref());
                    self.close_deadline = None;
                    self.start_close_deadline();
                    self.end(self.after_close_handshake());
                    return;
                }
                // A finished handshake whose peer never closed the transport is no error.
                if self.state != CloseState::Closed {
                    self.error.get_or_insert(Error::Timeout("close"));
                }
                self.end(Transport::Abort);
                return;
            }
        }
        if self.state != CloseState::Open {
            return;
        }
        let Some(k) = &mut self.keepalive else {
            return;
        };
        k.next_check.arm(now);
        if let Some(due) = k.answer_due {
            if now >= due {
                // §7.1.7 allows dropping a connection that cannot be closed cleanly: the peer is
                // not reading, so a close frame would only wait behind the unanswered ping.
                self.error.get_or_insert(Error::Timeout("keepalive"));
                self.end(Transport::Abort);
            }
            return;
        }
        if matches!(k.next_check, Deadline::At(at) if at > now) {
            return;
        }
        if std::mem::take(&mut k.input_seen) {
            k.next_check = Deadline::At(now + k.interval);
            return;
        }
        k.answer_due = Some(now + k.timeout);
        // §5.5.2: any payload; the peer's pong (or anything else) proves it alive.
        self.encode_frame(OpCode::Ping, true, b"sockeye keepalive");
    }

    /// Tells the engine that input arrived through [`read_buffer`](Self::read_buffer) (which
    /// [`receive`](Self::receive) does itself): the peer is alive, for keepalive.
    #[inline]
    pub fn note_input(&mut self) {
        if let Some(k) = &mut self.keepalive {
            if k.answer_due.take().is_some() {
                // Answered: start the next interval from now, at the next `handle_timeout`.
                k.next_check = Deadline::Unarmed(k.interval);
            } else {
                k.input_seen = true;
            }
        }
    }

    /// §7.1.1: once both close frames are sent, the server closes the transport first, the
    /// client waits (up to the close deadline) for it to.
    fn after_close_handshake(&self) -> Transport {
        match self.role {
            Role::Server => Transport::Finish,
            Role::Client => Transport::Open,
        }
    }

    /// Whether data may be sent: the connection is open, or the peer closed first and the
    /// application has yet to answer.
    #[inline]
    fn sendable(&self) -> bool {
        self.state == CloseState::Open || self.reply_owed.is_some()
    }

    /// Moves to `Closed` and asks the transport for `transport`.
    fn end(&mut self, transport: Transport) {
        self.state = CloseState::Closed;
        self.transport = match transport {
            Transport::ShutdownWrite | Transport::Finish if self.write_shut => Transport::Abort,
            t => t,
        };
        self.reassembly = None;
        self.utf8 = None;
        self.abandon_fragmented_send();
    }

    /// A fragmented message being sent can no longer be finished (the connection ended, or we
    /// sent our close): the compressor it holds — maybe borrowed from a pool shared by many
    /// connections, ~300 KiB — is let go now, not when the connection is dropped.
    fn abandon_fragmented_send(&mut self) {
        if self.sending_fragmented.take().is_some()
            && std::mem::take(&mut self.sending_compressed)
            && let Some(d) = &mut self.deflate
        {
            d.abandon_message();
        }
    }

    /// Starts the close deadline, unless it runs already.
    fn start_close_deadline(&mut self) {
        let timeout = self.config.close_timeout;
        self.close_deadline.get_or_insert(Deadline::Unarmed(timeout));
    }

    // ---------------------------------------------------------------------------------- input

    /// Appends bytes received from the peer. Then call [`poll_message`](Self::poll_message) until it
    /// returns `Ok(None)`.
    pub fn receive(&mut self, bytes: &[u8]) {
        self.read_buf.extend_from_slice(bytes);
        self.note_input();
    }

    /// The buffer that received bytes are appended to: an I/O layer can read from the socket straight
    /// into it instead of calling [`receive`](Self::receive). Only append to it, then call
    /// [`note_input`](Self::note_input).
    pub fn read_buffer(&mut self) -> &mut BytesMut {
        &mut self.read_buf
    }

    /// How many bytes of the frame being received have yet to arrive (0 between frames). A
    /// frame received whole gets room for all of it in the read buffer up front; an I/O layer
    /// that reads into [`read_buffer`](Self::read_buffer) should fill that room rather than
    /// reserve more, which would copy the frame into a larger allocation.
    pub fn frame_bytes_missing(&self) -> usize {
        self.incoming
            .as_ref()
            .map_or(0, |f| f.len.saturating_sub(self.read_buf.len()))
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
        if !self.read_buf.is_empty() || self.read_buf.capacity() == 0 {
            return None;
        }
        let mut buffer = std::mem::take(&mut self.read_buf);
        (reuse > 0 && buffer.try_reclaim(reuse)).then_some(buffer)
    }

    /// Gives up the outbound batch buffer when it is empty and grew for a large batch, and the
    /// queue of shared frames when it is empty: the half of
    /// [`release_idle_buffers`](Self::release_idle_buffers) for an I/O layer that keeps the read
    /// buffer through a wait.
    #[inline]
    pub fn release_idle_write_buffer(&mut self) {
        self.transmit.release_if_empty();
    }

    /// How many received bytes are buffered and not yet turned into messages.
    pub fn buffered(&self) -> usize {
        self.read_buf.len()
    }

    /// The peer closed the transport (TCP FIN). Returns the close code to report: `None` when the
    /// closing handshake had finished, else 1006, "closed abnormally" (§7.1.5), also kept as
    /// [`Error::AbnormalClosure`]. Either way the transport is to be closed now
    /// ([`Transport::Finish`]).
    pub fn receive_eof(&mut self) -> Option<CloseCode> {
        if self.transport == Transport::Closed {
            return None;
        }
        // A peer that closed first and then the transport, before our answer, closed cleanly.
        let abnormal = self.state != CloseState::Closed && self.reply_owed.take().is_none();
        if abnormal {
            self.error.get_or_insert(Error::AbnormalClosure);
        }
        // Anything queued (a close frame) may still reach a peer that only half-closed; the close
        // deadline bounds the wait.
        self.start_close_deadline();
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
        if self.read_buf.is_empty()
            && self.incoming.is_none()
            && !self.reassembly.as_ref().is_some_and(|r| r.streamed)
        {
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
        if self.reassembly.as_ref().is_some_and(|r| r.streamed) {
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
        if self.reassembly.is_none()
            && self.incoming.is_none()
            && let Some(message) = self.poll_short_message()
        {
            return Ok(Some(whole_as_piece(message)));
        }
        Ok(self.poll_part(true)?.map(|part| match part {
            Incoming::Control(message) => whole_as_piece(message),
            chunk => chunk,
        }))
    }

    /// The receive path of both modes: whole messages come out as `Control(Message)` (of any
    /// kind), streamed pieces as `Chunk`.
    fn poll_part(&mut self, streaming: bool) -> Result<Option<Incoming>, Error> {
        loop {
            if self.state == CloseState::Closed || self.reply_owed.is_some() {
                // §7.1.7: after failing, and after the closing handshake, input is not processed
                // (nor after the peer's close, which nothing may follow, §5.5.1).
                // Drop it as it arrives, so that a peer that keeps sending costs no memory.
                self.read_buf.clear();
                self.incoming = None;
                return Ok(None);
            }
            if streaming && let Some(gathered) = self.start_streaming() {
                return Ok(Some(Incoming::Chunk(gathered)));
            }
            let frame = match self.incoming.take() {
                Some(frame) => frame,
                None => match FrameHeader::parse(&self.read_buf) {
                    Ok(None) => return Ok(None),
                    Ok(Some((header, header_len))) => {
                        self.check_header(&header)?;
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
                    Err(v) => return Err(self.fail(v)),
                },
            };
            if streaming && !frame.header.opcode.is_control() {
                match self.stream_data(frame)? {
                    StreamStep::Chunk(chunk) => return Ok(Some(Incoming::Chunk(chunk))),
                    StreamStep::Wait => return Ok(None),
                    StreamStep::Continue => continue,
                }
            }
            let Some(payload) = self.take_payload(frame, !streaming)? else {
                return Ok(None);
            };
            if let Some(message) = self.on_frame(payload.0, payload.1)? {
                return Ok(Some(Incoming::Control(message)));
            }
        }
    }

    /// Streaming takes over a message that `poll_message` began: returns what it gathered as the
    /// first piece (if anything), and from then on the message is streamed.
    fn start_streaming(&mut self) -> Option<MessageChunk> {
        let r = self.reassembly.as_mut().filter(|r| !r.streamed)?;
        r.streamed = true;
        if r.data.is_empty() {
            return None;
        }
        r.started = true;
        Some(MessageChunk {
            kind: r.kind,
            data: Bytes::from(std::mem::take(&mut r.data)),
            first: true,
            last: false,
        })
    }

    /// Unmasks (and, in uncompressed text, checks) the payload bytes of `frame` that have arrived,
    /// as [`take_payload`](Self::take_payload) does. On invalid UTF-8 the connection fails and the
    /// rest of the frame will be skipped.
    fn process_arrived(&mut self, frame: &mut IncomingFrame) -> Result<(), Error> {
        let available = self.read_buf.len().min(frame.len);
        if available > frame.processed {
            let fresh = &mut self.read_buf[frame.processed..available];
            if let Some(key) = frame.header.mask {
                apply_mask(fresh, key, frame.offset + frame.processed);
            }
            // Fail fast (§8.1): check text as it arrives, not when the message is complete.
            if !frame.header.opcode.is_control()
                && !self.message_compressed
                && let Some(utf8) = &mut self.utf8
                && utf8.feed(fresh).is_err()
            {
                let error = self.fail(ProtocolViolation::InvalidUtf8);
                // Stay in step with the peer's framing: skip the rest of this frame.
                frame.processed = 0;
                return Err(error);
            }
            frame.processed = available;
        }
        Ok(())
    }

    /// Streams a data frame: hands over what has arrived of it (inflated, if compressed).
    fn stream_data(&mut self, mut frame: IncomingFrame) -> Result<StreamStep, Error> {
        if let Err(e) = self.process_arrived(&mut frame) {
            self.incoming = Some(frame);
            return Err(e);
        }
        if frame.header.opcode != OpCode::Continuation && self.reassembly.is_none() {
            self.reassembly = Some(Reassembly {
                kind: if frame.header.opcode == OpCode::Text {
                    DataKind::Text
                } else {
                    DataKind::Binary
                },
                data: Vec::new(),
                size: 0,
                streamed: true,
                started: false,
            });
        }
        if self.message_compressed {
            return self.stream_compressed(frame);
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

    /// Streams what has arrived of a compressed frame, inflated a bounded piece at a time.
    fn stream_compressed(&mut self, mut frame: IncomingFrame) -> Result<StreamStep, Error> {
        let limit = self.config.max_message_size;
        let so_far = self.reassembly.as_ref().map_or(0, |r| r.size);
        let mut out = Vec::with_capacity(STREAM_INFLATE_PIECE);
        let Some(d) = self.deflate.as_mut() else {
            return Err(self.fail(ProtocolViolation::ReservedBits(FrameHeader::RSV1)));
        };
        let inflated = d
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
            .and_then(|done| match &mut self.utf8 {
                // Fail fast on text: check each piece as it is inflated.
                Some(utf8) => utf8
                    .feed(&out)
                    .map(|()| done)
                    .map_err(|_| ProtocolViolation::InvalidUtf8),
                None => Ok(done),
            });
        let message_done = match inflated {
            Ok(done) => done,
            Err(v) => return Err(self.fail(v)),
        };
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
    fn streamed_piece(&mut self, data: Bytes, message_done: bool) -> Result<StreamStep, Error> {
        let Some(r) = self.reassembly.as_mut() else {
            return Err(self.fail(ProtocolViolation::UnexpectedContinuation));
        };
        r.size += data.len();
        if data.is_empty() && !message_done {
            return Ok(StreamStep::Continue);
        }
        let first = !std::mem::replace(&mut r.started, true);
        let kind = r.kind;
        if message_done {
            self.reassembly = None;
            self.message_compressed = false;
            self.finish_text()?;
        }
        Ok(StreamStep::Chunk(MessageChunk {
            kind,
            data,
            first,
            last: message_done,
        }))
    }

    /// The hot case in one step: a whole short data message in one frame (FIN, no RSV bits, at
    /// most 125 bytes, so a two-byte length; masked exactly when the peer is a client, §5.1), fully
    /// buffered, with no message in progress. Anything else — including text that is not UTF-8 —
    /// is left to the general path, which owns every error.
    #[inline]
    fn poll_short_message(&mut self) -> Option<Message> {
        let &[first @ (0x81 | 0x82), second, ..] = &self.read_buf[..] else {
            return None;
        };
        let masked = self.role == Role::Server;
        let len = usize::from(second & 0x7F);
        let header_len = if masked { 6 } else { 2 };
        if (second & 0x80 != 0) != masked
            || len > 125
            || self.read_buf.len() < header_len + len
            || len > self.config.max_frame_size.min(self.config.max_message_size)
            || self.state != CloseState::Open
            || self.incoming.is_some()
            || self.reassembly.is_some()
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

    /// Checks a header against the role, the negotiated extensions and the message in progress.
    fn check_header(&mut self, h: &FrameHeader) -> Result<(), Error> {
        // RFC 7692 §6: RSV1 marks the first frame of a compressed message, once negotiated.
        let compressed = h.rsv == FrameHeader::RSV1
            && self.deflate.is_some()
            && matches!(h.opcode, OpCode::Text | OpCode::Binary);
        if h.rsv != 0 && !compressed {
            return Err(self.fail(ProtocolViolation::ReservedBits(h.rsv)));
        }
        // §5.1: a server MUST close on an unmasked frame; a client MUST close on a masked one.
        match (self.role, h.mask.is_some()) {
            (Role::Server, false) => return Err(self.fail(ProtocolViolation::UnmaskedFrame)),
            (Role::Client, true) => return Err(self.fail(ProtocolViolation::MaskedFrame)),
            _ => {}
        }
        if h.payload_len > self.config.max_frame_size as u64 {
            let limit = self.config.max_frame_size;
            return Err(self.fail(ProtocolViolation::MessageTooBig {
                size: h.payload_len,
                limit,
            }));
        }
        match h.opcode {
            OpCode::Continuation => {
                let Some(r) = &self.reassembly else {
                    return Err(self.fail(ProtocolViolation::UnexpectedContinuation));
                };
                let size = r.size as u64 + h.payload_len;
                if size > self.config.max_message_size as u64 {
                    let limit = self.config.max_message_size;
                    return Err(self.fail(ProtocolViolation::MessageTooBig { size, limit }));
                }
            }
            OpCode::Text | OpCode::Binary => {
                if self.reassembly.is_some() {
                    return Err(self.fail(ProtocolViolation::ExpectedContinuation));
                }
                if h.payload_len > self.config.max_message_size as u64 {
                    let limit = self.config.max_message_size;
                    return Err(self.fail(ProtocolViolation::MessageTooBig {
                        size: h.payload_len,
                        limit,
                    }));
                }
                self.utf8 = (h.opcode == OpCode::Text).then(Utf8Validator::new);
                self.message_compressed = compressed;
            }
            OpCode::Close | OpCode::Ping | OpCode::Pong => {}
        }
        Ok(())
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
    ) -> Result<Option<(FrameHeader, Bytes)>, Error> {
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

    /// Acts on a complete frame; returns the message it completes, if any.
    fn on_frame(&mut self, header: FrameHeader, payload: Bytes) -> Result<Option<Message>, Error> {
        match header.opcode {
            OpCode::Ping => {
                // §5.5.2: answer with a pong carrying the same data, unless we already sent a close.
                if self.config.auto_pong && self.state == CloseState::Open {
                    if self.transmit.is_empty() {
                        self.auto_replies = 0;
                    }
                    let before = self.transmit.len();
                    self.encode_frame(OpCode::Pong, true, &payload);
                    self.auto_replies += self.transmit.len() - before;
                }
                Ok(Some(Message::Ping(payload)))
            }
            OpCode::Pong => Ok(Some(Message::Pong(payload))),
            OpCode::Close => {
                // A malformed close fails the connection: our close carries the error's code.
                let frame = CloseFrame::parse(payload).map_err(|v| self.fail(v))?;
                let was = self.state;
                // §5.5.1: reply with a close frame, echoing the status code.
                let echo = frame.as_ref().map(|f| CloseFrame::new(f.code, ""));
                self.start_close_deadline();
                if was == CloseState::Open && !self.config.auto_close_reply {
                    // The application answers (or the close deadline does).
                    self.state = CloseState::Closing;
                    self.reply_owed = Some(echo);
                    return Ok(Some(Message::Close(frame)));
                }
                if was == CloseState::Open {
                    self.encode_close(echo.as_ref());
                }
                self.end(self.after_close_handshake());
                Ok(Some(Message::Close(frame)))
            }
            OpCode::Text | OpCode::Binary | OpCode::Continuation => self.on_data(header, payload),
        }
    }

    /// A data frame: hand over a whole uncompressed message without a copy, else append the
    /// (inflated) payload to the message being reassembled.
    fn on_data(&mut self, header: FrameHeader, payload: Bytes) -> Result<Option<Message>, Error> {
        let first = header.opcode != OpCode::Continuation;
        if first && header.fin && !self.message_compressed {
            if header.opcode == OpCode::Text {
                self.finish_text()?;
                return Ok(Some(Message::Text(Utf8Bytes::from_validated(payload))));
            }
            return Ok(Some(Message::Binary(payload)));
        }
        if first {
            let kind = if header.opcode == OpCode::Text {
                DataKind::Text
            } else {
                DataKind::Binary
            };
            self.reassembly = Some(Reassembly {
                kind,
                data: Vec::new(),
                size: 0,
                streamed: false,
                started: false,
            });
        }
        // `check_header` made sure a continuation has a message to continue.
        let Some(r) = self.reassembly.as_mut() else {
            return Err(self.fail(ProtocolViolation::UnexpectedContinuation));
        };
        if self.message_compressed {
            let before = r.data.len();
            let limit = self.config.max_message_size;
            let inflated = match self.deflate.as_mut() {
                Some(d) => d.inflate(&payload, header.fin, &mut r.data, limit),
                None => Err(ProtocolViolation::ReservedBits(FrameHeader::RSV1)),
            };
            // Fail fast on text: check what each frame inflates to.
            let checked = inflated.and_then(|()| match &mut self.utf8 {
                Some(utf8) => utf8
                    .feed(&r.data[before..])
                    .map_err(|_| ProtocolViolation::InvalidUtf8),
                None => Ok(()),
            });
            if let Err(v) = checked {
                return Err(self.fail(v));
            }
        } else {
            r.data.extend_from_slice(&payload);
        }
        r.size = r.data.len();
        if !header.fin {
            return Ok(None);
        }
        let Some(r) = self.reassembly.take() else {
            return Ok(None);
        };
        self.message_compressed = false;
        let data = Bytes::from(r.data);
        match r.kind {
            DataKind::Binary => Ok(Some(Message::Binary(data))),
            DataKind::Text => {
                self.finish_text()?;
                Ok(Some(Message::Text(Utf8Bytes::from_validated(data))))
            }
        }
    }

    /// At the end of a text message: no code point may be left unfinished.
    fn finish_text(&mut self) -> Result<(), Error> {
        match self.utf8.take() {
            Some(v) if !v.is_complete() => Err(self.fail(ProtocolViolation::InvalidUtf8)),
            _ => Ok(()),
        }
    }

    /// Fails the connection (§7.1.7): queues a close frame with the violation's code (unless one
    /// was sent already), stops processing input and asks for the writing side to be shut down
    /// once the close frame is out. Returns the error to hand to the application.
    fn fail(&mut self, violation: ProtocolViolation) -> Error {
        self.fail_with(violation.close_code(), Error::Protocol(violation))
    }

    fn fail_with(&mut self, code: CloseCode, error: Error) -> Error {
        if self.state == CloseState::Open || self.reply_owed.take().is_some() {
            self.encode_close(Some(&CloseFrame::new(code, "")));
        }
        if self.state != CloseState::Closed {
            self.start_close_deadline();
            self.end(Transport::ShutdownWrite);
        }
        self.error.get_or_insert_with(|| error.clone());
        error
    }

    // --------------------------------------------------------------------------------- output

    /// Queues a message. Pings and pongs must carry at most 125 bytes; `Message::Close` starts the
    /// closing handshake like [`close`](Self::close).
    pub fn send(&mut self, message: Message) -> Result<(), Error> {
        // The hot case, in one place rather than through the general encoder: a short data
        // message from a server (unmasked, not compressed) on an open connection.
        if let Message::Text(_) | Message::Binary(_) = &message
            && self.mask_keys.is_none()
            && self.sendable()
            && self.sending_fragmented.is_none()
        {
            let payload = message.as_payload();
            if payload.len() <= 125
                && self
                    .deflate
                    .as_ref()
                    .is_none_or(|d| !d.should_compress(payload.len()))
            {
                let opcode = if let Message::Text(_) = message {
                    OpCode::Text
                } else {
                    OpCode::Binary
                };
                self.transmit
                    .push_short_frame(FrameHeader::first_byte(true, 0, opcode), payload);
                return Ok(());
            }
        }
        match message {
            Message::Close(frame) => return self.close(frame),
            _ if !self.sendable() => return Err(Error::Closed),
            Message::Ping(p) | Message::Pong(p) if p.len() > MAX_CONTROL_PAYLOAD => {
                return Err(Error::InvalidInput("control frame payload longer than 125 bytes"));
            }
            _ if self.sending_fragmented.is_some() && message.is_data() => {
                return Err(Error::InvalidInput(
                    "a fragmented message is being sent; finish it first",
                ));
            }
            Message::Text(t) => self.encode_message(OpCode::Text, t.into_bytes())?,
            Message::Binary(b) => self.encode_message(OpCode::Binary, b)?,
            Message::Ping(p) => self.encode_frame(OpCode::Ping, true, &p),
            Message::Pong(p) => self.encode_frame(OpCode::Pong, true, &p),
        }
        Ok(())
    }

    /// Queues a [`PreparedMessage`](crate::PreparedMessage): the same as
    /// [`send`](Self::send)ing its message, except that with permessage-deflate and no context
    /// takeover on our side the compressed payload is computed once for every connection that
    /// shares the (level, window) and then shared.
    pub fn send_prepared(&mut self, prepared: &crate::PreparedMessage) -> Result<(), Error> {
        let open = self.sendable() && self.sending_fragmented.is_none();
        if open
            && let Some(d) = &mut self.deflate
            && d.should_compress(prepared.payload().len())
            && let Some((level, bits)) = d.shared_key()
        {
            let compressed = match prepared.compressed_with(level, bits, |p| d.compress(p)) {
                Ok(c) => c,
                Err(e) => return Err(self.fail_with(CloseCode::INTERNAL_ERROR, Error::Compression(e))),
            };
            let opcode = match prepared.kind() {
                DataKind::Text => OpCode::Text,
                DataKind::Binary => OpCode::Binary,
            };
            self.encode_data(opcode, true, FrameHeader::RSV1, compressed);
            return Ok(());
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
        if !self.sendable() {
            return Err(Error::Closed);
        }
        let opcode = match self.sending_fragmented {
            None => {
                self.sending_compressed = self
                    .deflate
                    .as_ref()
                    .is_some_and(|d| d.should_compress(payload.len()));
                match kind {
                    DataKind::Text => OpCode::Text,
                    DataKind::Binary => OpCode::Binary,
                }
            }
            Some(k) if k == kind => OpCode::Continuation,
            Some(_) => return Err(Error::InvalidInput("fragment kind differs from the message's")),
        };
        self.sending_fragmented = if fin { None } else { Some(kind) };
        self.encode_data_frame(opcode, fin, self.sending_compressed, payload)
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
        if self.reply_owed.take().is_some() {
            // The answer to the peer's close: the handshake is done.
            self.encode_close(frame.as_ref());
            self.end(self.after_close_handshake());
        } else if self.state == CloseState::Open {
            self.encode_close(frame.as_ref());
            self.state = CloseState::Closing;
            self.abandon_fragmented_send();
            self.start_close_deadline();
        }
        Ok(())
    }

    /// The bytes waiting to be written, as a [`bytes::Buf`]: write them, then
    /// [`advance`](bytes::Buf::advance) by what was written.
    pub fn transmit(&mut self) -> &mut Transmit {
        &mut self.transmit
    }

    /// How many bytes wait in [`transmit`](Self::transmit).
    pub fn transmit_len(&self) -> usize {
        self.transmit.len()
    }

    /// How many of the bytes waiting in [`transmit`](Self::transmit) may be pongs the engine
    /// queued by itself (§5.5.2): those queued since the queue was last empty, an upper bound.
    /// An I/O layer stops reading while these pile up unwritten — a peer that sends pings and
    /// reads no pongs must not grow our memory — but not merely because the application's own
    /// output is stuck: a peer that echoes as it reads waits for us to read in turn, and
    /// neither would ever move again.
    pub fn queued_auto_replies(&self) -> usize {
        if self.transmit.is_empty() {
            0
        } else {
            self.auto_replies
        }
    }

    /// Takes everything waiting to be written as one contiguous buffer (a convenience for tests and
    /// simple I/O layers; [`transmit`](Self::transmit) avoids the copy).
    pub fn transmit_bytes(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.transmit.len());
        out.put(&mut self.transmit);
        out
    }

    fn encode_close(&mut self, frame: Option<&CloseFrame>) {
        let mut payload = BytesMut::with_capacity(2 + frame.map_or(0, |f| f.reason.len()));
        if let Some(f) = frame {
            f.encode_into(&mut payload);
        }
        self.encode_frame(OpCode::Close, true, &payload);
    }

    /// Queues a whole message as one frame, compressed when permessage-deflate is on and the
    /// message is large enough.
    fn encode_message(&mut self, opcode: OpCode, payload: Bytes) -> Result<(), Error> {
        let compressed = self
            .deflate
            .as_ref()
            .is_some_and(|d| d.should_compress(payload.len()));
        self.encode_data_frame(opcode, true, compressed, payload)
    }

    /// Queues one frame of a data message — a whole message, or a fragment (`opcode`
    /// `Continuation` after the first) — deflated when the message is `compressed`, with RSV1 on
    /// a compressed message's first frame only (RFC 7692 §6).
    fn encode_data_frame(
        &mut self,
        opcode: OpCode,
        fin: bool,
        compressed: bool,
        payload: Bytes,
    ) -> Result<(), Error> {
        match &mut self.deflate {
            Some(d) if compressed => {
                let deflated = match d.compress_fragment(&payload, fin) {
                    Ok(deflated) => deflated,
                    // The compressor's state is lost: the connection cannot go on (1011).
                    Err(e) => return Err(self.fail_with(CloseCode::INTERNAL_ERROR, Error::Compression(e))),
                };
                let rsv = if opcode == OpCode::Continuation {
                    0
                } else {
                    FrameHeader::RSV1
                };
                self.encode_data(opcode, fin, rsv, Bytes::from(deflated));
            }
            _ => self.encode_data(opcode, fin, 0, payload),
        }
        Ok(())
    }

    /// Queues a data frame; a large payload is queued without a copy where the role allows it.
    fn encode_data(&mut self, opcode: OpCode, fin: bool, rsv: u8, payload: Bytes) {
        if self.role == Role::Server && payload.len() >= self.config.zero_copy_threshold {
            self.encode_header(opcode, fin, rsv, payload.len(), None);
            self.transmit.push(payload);
        } else {
            self.encode_frame_rsv(opcode, fin, rsv, &payload);
        }
    }

    /// Queues a frame by copying (and, for a client, masking) its payload into the batch buffer.
    fn encode_frame(&mut self, opcode: OpCode, fin: bool, payload: &[u8]) {
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

/// A whole data message as the one piece of its message, for [`Connection::poll_chunk`]; control
/// frames stay whole.
fn whole_as_piece(message: Message) -> Incoming {
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
