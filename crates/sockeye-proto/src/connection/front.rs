//! The front: [`Connection`] owns the rooms (receiving, sending, closing, timers) and the state
//! two of them share (the role, the configuration, permessage-deflate's state). Here are its
//! constructors and accessors, the transport and time half of its API, and the two steps every
//! room takes part in: ending the connection ([`Connection::end`]) and failing it
//! ([`Connection::fail`], §7.1.7). The receiving and sending halves of the API are in `input` and
//! `output`.

use std::time::Instant;

use crate::config::Config;
use crate::error::{Error, ProtocolViolation};
use crate::extension::deflate::PerMessageDeflate;
use crate::frame::{CloseCode, CloseFrame, OpCode};
use crate::role::{MaskKeySource, Role};

use super::close::{CloseState, Closing, Transport, after_close_handshake};
use super::receive::Receiver;
use super::send::Sender;
use super::timers::{KeepaliveDue, Timers};

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
///
/// # Waits: the I/O layer's duty
///
/// The engine does not know when its connection waits; the I/O layer driving it does, and must
/// say so by calling [`release_idle_buffers`](Self::release_idle_buffers) (or its parts,
/// [`release_idle_write_buffer`](Self::release_idle_write_buffer) and
/// [`release_idle_deflate`](Self::release_idle_deflate), when it keeps the read buffer) **every
/// time it is about to wait**: for input (a read would block), for the transport to take output
/// (a write would block), and once it has written everything queued with nothing buffered to
/// read (an application that only sends may go quiet there for good). Input arriving makes the
/// connection busy ([`receive`](Self::receive), or [`note_input`](Self::note_input) after
/// filling [`read_buffer`](Self::read_buffer)).
///
/// What it gives back: the empty read and batch buffers, and the permessage-deflate compressor
/// and decompressor borrowed from a
/// [`DeflatePool`](crate::extension::deflate::DeflatePool) (the default). A busy connection keeps
/// them from one wait to the next, so that its messages pay no pool round trip, reset or priming
/// (issue 31). A wait for input through which the I/O layer runs the timer
/// ([`poll_timeout`](Self::poll_timeout) / [`handle_timeout`](Self::handle_timeout)) may call
/// [`linger_deflate`](Self::linger_deflate) instead of giving the deflate states back: they then
/// go back at a `handle_timeout` after a linger without input. **What leaks otherwise**: a connection that received input and is never told of a
/// wait keeps its states — about 300 KiB for the compressor and 40 KiB for the decompressor — and
/// its largest read buffer until it is dropped or [`transport_closed`](Self::transport_closed)
/// is called, and the pool makes new states for the others meanwhile. A connection that was
/// never told of input holds nothing between messages: it starts waiting, and each message it
/// sends or inflates then gives its state back when it ends.
///
/// ```
/// # #[cfg(feature = "deflate")] { // (the deflate-off build has no DeflateConfig)
/// use sockeye_proto::extension::deflate::{DeflateConfig, DeflatePool};
/// use sockeye_proto::handshake::{ClientHandshake, ClientHello, encode_response};
/// use sockeye_proto::{Config, Connection, Message};
///
/// // A server and a client that negotiated permessage-deflate in their opening handshake (run
/// // here in memory), the server's states pooled.
/// let pool = DeflatePool::new(8);
/// let mut server_config = Config::default();
/// server_config.deflate = Some(DeflateConfig::default().pool(Some(pool.clone())));
/// let client_config = Config::default();
/// let request = http::Request::get("ws://example.com/").body(()).unwrap();
/// let handshake = ClientHandshake::new(request, [7; 16], &client_config).unwrap();
/// let hello = ClientHello::from_request(handshake.request()).unwrap();
/// let (response, extensions) = hello.accept_with(&server_config);
/// let (accepted, _) = handshake
///     .parse_response(&encode_response(&response), &client_config)
///     .unwrap()
///     .unwrap();
/// let mut client = Connection::client(
///     client_config,
///     sockeye_proto::frame::insecure_mask_keys_for_tests(1),
/// );
/// client.set_deflate(accepted.deflate);
/// let mut server = Connection::server(server_config);
/// server.set_deflate(extensions.kept_by(&response));
///
/// let text = "a message long enough to be compressed, ".repeat(4);
/// client.send(Message::text(text.clone())).unwrap();
/// // Bytes read from the socket: the server is busy while it answers.
/// server.receive(&client.transmit_bytes());
/// let message = server.poll_message().unwrap().unwrap();
/// server.send(message).unwrap();
/// assert_eq!(pool.held(), (1, 1), "a compressor and a decompressor out of the pool");
/// // The reply is written out and the next read would block: about to wait, say so.
/// let _written = server.transmit_bytes();
/// let _read_buffer = server.release_idle_buffers(0);
/// assert_eq!(pool.held(), (0, 0), "a waiting connection holds no zlib state");
/// # }
/// ```
pub struct Connection {
    pub(super) role: Role,
    pub(super) config: Config,
    pub(super) receiver: Receiver,
    pub(super) sender: Sender,
    /// permessage-deflate's state, when negotiated: the sending side compresses with it, the
    /// receiving side inflates with it. Boxed: inline it was 520 of a plain connection's 1,192
    /// bytes, held by every idle connection whether it negotiated compression or not.
    pub(super) deflate: Option<Box<PerMessageDeflate>>,
    pub(super) closing: Closing,
    pub(super) timers: Timers,
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
            receiver: Receiver::new(role),
            sender: Sender::new(mask_keys),
            deflate: None,
            closing: Closing::new(),
        }
    }

    /// Turns on permessage-deflate with the state the handshake negotiated
    /// (see [`extension::deflate`](crate::extension::deflate)). Call it before any data flows.
    pub fn set_deflate(&mut self, deflate: Option<PerMessageDeflate>) {
        self.deflate = deflate.map(Box::new);
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
    #[inline]
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
        if let Some(d) = &mut self.deflate {
            d.release_all();
        }
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
        self.timers.poll_timeout(|| self.closing.is_open())
    }

    /// Passes the time: starts the timers begun since the last call (the engine learns the time
    /// only here) and acts on those that are due — sends a keepalive ping, gives up on a peer that
    /// did not answer one, or on a closing handshake that took too long. Call it once when the
    /// connection starts and whenever the instant of [`poll_timeout`](Self::poll_timeout) has
    /// passed; then write what is queued and look at [`transport`](Self::transport).
    pub fn handle_timeout(&mut self, now: Instant) {
        let close_deadline_passed = self.timers.close_deadline_passed(now);
        if self.timers.linger_over(now)
            && let Some(d) = &mut self.deflate
        {
            d.release_idle();
        }
        if close_deadline_passed && self.closing.transport() != Transport::Closed {
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
    /// [`receive`](Self::receive) does itself): the peer is alive, for keepalive, and the
    /// connection is busy: it keeps its pooled permessage-deflate states until it next waits
    /// ([`release_idle_buffers`](Self::release_idle_buffers)).
    #[inline]
    pub fn note_input(&mut self) {
        self.timers.note_input();
        if let Some(d) = &mut self.deflate {
            d.note_input();
        }
    }

    /// Moves to `Closed` and asks the transport for `transport`; the message being received, and
    /// the one being sent in fragments, can no longer be finished.
    pub(super) fn end(&mut self, transport: Transport) {
        self.closing.end(transport);
        self.receiver.abandon_message();
        if let Some(d) = self.deflate.as_deref_mut() {
            d.abandon_receive();
        }
        self.sender.abandon_fragmented_send(self.deflate.as_deref_mut());
    }

    /// Fails the connection (§7.1.7): queues a close frame with the violation's code (unless one
    /// was sent already), stops processing input and asks for the writing side to be shut down
    /// once the close frame is out. Returns the error to hand to the application.
    pub(super) fn fail(&mut self, violation: ProtocolViolation) -> Error {
        self.fail_with(violation.close_code(), Error::Protocol(violation))
    }

    pub(super) fn fail_with(&mut self, code: CloseCode, error: Error) -> Error {
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
}
