//! One connection as both loops drive it, whatever moves its bytes: TLS if the server has it
//! (`tls`), the HTTP/1.1 upgrade (RFC 6455 §4.2), then the engine, with the handler called for
//! each event. A loop hands it bytes, end of input and the time; it hands back bytes to write
//! (the handshake's response, then the engine's queue, sealed into records under TLS) and what
//! to do with the transport (the engine's [`Transport`]).

use std::net::SocketAddr;
use std::time::Instant;

use bytes::BytesMut;
use http::Response;
use sockeye_proto::handshake::{ClientHello, parse_request, reject_response, write_response};
use sockeye_proto::{CloseCode, CloseFrame, Connection, Message, PreparedMessage, Transmit, Transport};

use crate::handler::{Closed, Facing, Handler, Socket};
use crate::membership::Offered;
use crate::shared::Shared;
#[cfg(feature = "tls")]
use crate::tls::Tls;
use crate::topics::{self, SocketId};

/// A connection of a loop thread.
#[derive(Debug)]
pub(crate) struct Conn<D> {
    /// Who it is, its topics and what waits for it, backpressure: the handler's to see.
    facing: Facing,
    phase: Phase,
    data: D,
    /// Bytes to write before the engine's queue: the handshake's response (or refusal).
    head: Vec<u8>,
    /// `wss://`: what is read is decrypted, and what is written sealed, here.
    #[cfg(feature = "tls")]
    tls: Option<Box<Tls>>,
    /// TLS failed: only its alert is written, then the transport is closed.
    broken: bool,
    peer_close: Option<CloseFrame>,
    /// Why the connection ended badly, for `Handler::close` (the engine's error, or the loop's).
    error: Option<String>,
    /// The deadline the loop's timer list holds for this connection, if any (see `timers`).
    pub(crate) armed: Option<Instant>,
}

#[derive(Debug)]
enum Phase {
    /// Reading the upgrade request, until the handshake deadline.
    Handshake { request: BytesMut, deadline: Instant },
    /// Upgraded: the engine runs the connection.
    Open(Box<Connection>),
    /// The request was refused: the refusal in `head` is written, the writing side shut down
    /// (`shut`), and what the client still sends read and dropped until its FIN or `linger`:
    /// closing with unread input would reset the connection, and the reset can destroy the
    /// refusal before the client reads it.
    Refused { linger: Instant, shut: bool },
    /// The transport is closed.
    Over,
}

impl<D: Default> Conn<D> {
    /// A connection just accepted into slot `key` of its loop. The TLS handshake, if any, and
    /// the upgrade must be done by `handshake_timeout`.
    pub(crate) fn new(key: usize, peer: SocketAddr, now: Instant, shared: &Shared) -> Self {
        #[allow(unused_mut)]
        let mut conn = Self::in_phase(
            topics::with(|t| t.new_id(key)),
            peer,
            Phase::Handshake {
                request: BytesMut::new(),
                deadline: now + shared.config.handshake_timeout.min(YEARS),
            },
        );
        #[cfg(feature = "tls")]
        if let Some(config) = &shared.tls {
            match Tls::new(config) {
                Ok(tls) => conn.tls = Some(Box::new(tls)),
                Err(e) => {
                    conn.error = Some(format!("TLS: {e}"));
                    conn.phase = Phase::Over;
                }
            }
        }
        conn
    }

    /// What is left of a connection the loop ended, while the kernel finishes with its socket.
    pub(crate) fn ended(id: SocketId) -> Self {
        Self::in_phase(id, SocketAddr::from(([0, 0, 0, 0], 0)), Phase::Over)
    }

    fn in_phase(id: SocketId, peer: SocketAddr, phase: Phase) -> Self {
        Conn {
            facing: Facing::new(id, peer),
            phase,
            data: D::default(),
            head: Vec::new(),
            #[cfg(feature = "tls")]
            tls: None,
            broken: false,
            peer_close: None,
            error: None,
            armed: None,
        }
    }
}

impl<D> Conn<D> {
    /// Bytes from the peer: under TLS, records, decrypted into what follows; the upgrade
    /// request, or frames for the engine, whose messages go to the handler (its replies are
    /// queued, not written: the loop writes once per turn).
    pub(crate) fn input<H: Handler<Data = D>>(
        &mut self,
        bytes: &[u8],
        shared: &Shared,
        handler: &mut H,
        pool: &mut Vec<BytesMut>,
    ) {
        #[cfg(feature = "tls")]
        if let Some(mut tls) = self.tls.take() {
            if !self.broken {
                // Before the upgrade, the request is only gathered while the records are read:
                // it is answered after, once the session is out of reach no more, so that the
                // handler sees the server name the handshake asked for (SNI).
                let mut requested = false;
                let received = tls.receive(bytes, &mut |plain| match &mut self.phase {
                    Phase::Handshake { request, .. } => {
                        request.extend_from_slice(plain);
                        requested = true;
                    }
                    _ => self.input_plain(plain, shared, handler, pool),
                });
                if requested && matches!(self.phase, Phase::Handshake { .. }) {
                    // The TLS handshake is done once application data came: its name is known.
                    self.facing.sni_hostname = tls.sni_hostname().map(Box::from);
                    self.handshake(shared, handler);
                }
                match received {
                    Err(e) => self.tls_failed(&mut tls, e),
                    // close_notify: the end of the peer's data, as a FIN is without TLS.
                    Ok(()) if tls.peer_closed() => self.eof(),
                    Ok(()) => {}
                }
            }
            self.tls = Some(tls);
            return;
        }
        self.input_plain(bytes, shared, handler, pool);
    }

    /// TLS failed (a bad record, a refused handshake): its alert is written, then the transport
    /// closed; the engine, if the connection was upgraded, learns that the transport closed.
    #[cfg(feature = "tls")]
    fn tls_failed(&mut self, tls: &mut Tls, e: std::io::Error) {
        tls.give_up();
        self.broken = true;
        if self.error.is_none() {
            self.error = Some(format!("TLS: {e}"));
        }
        if let Phase::Handshake { .. } = self.phase {
            // The alert is written, then the client's input dropped until it leaves.
            self.phase = refused();
        }
    }

    /// Plaintext from the peer (see [`input`](Self::input)). A connection without a read buffer
    /// (it gave its own back when it last waited) takes one from the loop's `pool`, rather than
    /// allocating.
    fn input_plain<H: Handler<Data = D>>(
        &mut self,
        bytes: &[u8],
        shared: &Shared,
        handler: &mut H,
        pool: &mut Vec<BytesMut>,
    ) {
        match &mut self.phase {
            Phase::Handshake { request, .. } => {
                request.extend_from_slice(bytes);
                self.handshake(shared, handler);
            }
            Phase::Open(engine) => {
                let buffer = engine.read_buffer();
                if buffer.capacity() == 0
                    && let Some(pooled) = pool.pop()
                {
                    // Empty, as the engine gave it back: nothing of the stream is in it.
                    *buffer = pooled;
                }
                engine.receive(bytes);
                self.deliver(shared, handler);
            }
            Phase::Refused { .. } | Phase::Over => {}
        }
    }

    /// Whether a buffer of received bytes can become this connection's read buffer as it is
    /// ([`input_buffer`](Self::input_buffer)): upgraded, without TLS (records are decrypted
    /// into a buffer anyway), and nothing of the stream buffered (the bytes would go after it).
    pub(crate) fn takes_buffer(&self) -> bool {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return false;
        }
        matches!(&self.phase, Phase::Open(engine) if engine.buffered() == 0)
    }

    /// Bytes from the peer in a buffer the loop gives away, when [`takes_buffer`](Self::takes_buffer)
    /// said so: it becomes the engine's read buffer, unmasked in place, and the messages split
    /// from it share it (no copy; the kernel's copy into it is the only one).
    pub(crate) fn input_buffer<H: Handler<Data = D>>(
        &mut self,
        bytes: Vec<u8>,
        shared: &Shared,
        handler: &mut H,
    ) {
        let Phase::Open(engine) = &mut self.phase else {
            return;
        };
        debug_assert_eq!(engine.buffered(), 0);
        // Replacing an empty buffer is appending to it (`read_buffer`'s contract). Through
        // `Bytes`: its conversions keep the vector's allocation (`BytesMut` has no `From<Vec>`).
        *engine.read_buffer() = BytesMut::from(bytes::Bytes::from(bytes));
        engine.note_input();
        self.deliver(shared, handler);
    }

    /// The peer closed its side (TCP FIN).
    pub(crate) fn eof(&mut self) {
        match &mut self.phase {
            Phase::Open(engine) => {
                engine.receive_eof();
            }
            Phase::Handshake { .. } | Phase::Refused { .. } => self.phase = Phase::Over,
            Phase::Over => {}
        }
    }

    /// The time passed this connection's deadline (see [`deadline`](Self::deadline)).
    pub(crate) fn timeout(&mut self, now: Instant) {
        match &mut self.phase {
            Phase::Open(engine) => {
                if self.facing.membership.deadline().is_some_and(|at| at <= now) {
                    // Dropped as too slow, and it did not even take what its socket held.
                    engine.transport_closed();
                } else {
                    engine.handle_timeout(now);
                }
            }
            Phase::Handshake { deadline, .. } if *deadline <= now => {
                // A client that dribbles its request (slowloris) is cut off, unanswered.
                self.error = Some("the opening handshake took longer than the handshake timeout".into());
                self.phase = Phase::Over;
            }
            Phase::Refused { linger, .. } if *linger <= now => self.phase = Phase::Over,
            _ => {}
        }
    }

    /// When [`timeout`](Self::timeout) is due next.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Open(engine) => [engine.poll_timeout(), self.facing.membership.deadline()]
                .into_iter()
                .flatten()
                .min(),
            Phase::Handshake { deadline, .. } => Some(*deadline),
            Phase::Refused { linger, .. } => Some(*linger),
            Phase::Over => None,
        }
    }

    /// The server is shutting down: an open connection starts its closing handshake with 1001,
    /// one still in its handshake is dropped.
    pub(crate) fn go_away(&mut self) {
        match &mut self.phase {
            Phase::Open(engine) => {
                let _ = engine.close(Some(CloseFrame::new(
                    CloseCode::GOING_AWAY,
                    "server shutting down",
                )));
            }
            Phase::Handshake { .. } => self.phase = Phase::Over,
            Phase::Refused { .. } | Phase::Over => {}
        }
    }

    /// What to do with the transport now.
    pub(crate) fn transport(&self) -> Transport {
        match &self.phase {
            Phase::Refused { shut: false, .. } => Transport::ShutdownWrite,
            Phase::Refused { shut: true, .. } => Transport::Open,
            Phase::Over => Transport::Abort,
            _ if self.broken => Transport::Finish,
            Phase::Handshake { .. } => Transport::Open,
            Phase::Open(engine) => engine.transport(),
        }
    }

    /// Whether anything waits to be written (under TLS, close_notify before the transport's
    /// writing side is shut down too).
    pub(crate) fn has_output(&self) -> bool {
        self.output_len() > 0 || self.owes_close_notify()
    }

    /// How many bytes wait to be written (under TLS, plaintext not yet sealed counts as its
    /// length).
    pub(crate) fn output_len(&self) -> usize {
        let plain = self.plain_len();
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return tls.sealed.len() + if self.broken { 0 } else { plain };
        }
        plain
    }

    /// The handshake's response and the engine's queue, before any TLS.
    fn plain_len(&self) -> usize {
        self.head.len()
            + if let Phase::Open(engine) = &self.phase {
                engine.transmit_len()
            } else {
                0
            }
    }

    /// The bytes waiting to be written, in order: the handshake's response, then the engine's
    /// queue (under TLS, the records sealed from them, a part at a time). The loop writes from
    /// them and advances them (the head as a `Vec` it drains).
    pub(crate) fn output(&mut self) -> (&mut Vec<u8>, Option<&mut Transmit>) {
        #[cfg(feature = "tls")]
        if let Some(mut tls) = self.tls.take() {
            self.seal(&mut tls);
            let tls = self.tls.insert(tls);
            return (&mut tls.sealed, None);
        }
        let transmit = match &mut self.phase {
            Phase::Open(engine) => Some(engine.transmit()),
            _ => None,
        };
        (&mut self.head, transmit)
    }

    /// Seals what is queued into TLS records, once the TLS handshake is over; close_notify
    /// after the last of it when the engine is done with the transport.
    #[cfg(feature = "tls")]
    fn seal(&mut self, tls: &mut Tls) {
        if self.broken || tls.is_handshaking() {
            return;
        }
        let transmit = match &mut self.phase {
            Phase::Open(engine) => Some(engine.transmit()),
            _ => None,
        };
        if let Err(e) = tls.seal(&mut self.head, transmit) {
            return self.tls_failed(tls, e);
        }
        if self.owes_close_notify_with(tls) {
            tls.close_notify();
        }
    }

    /// Whether close_notify is due and not yet queued (see `owes_close_notify_with`).
    fn owes_close_notify(&self) -> bool {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return self.owes_close_notify_with(tls);
        }
        false
    }

    /// Under TLS, a transport the engine is done writing to (the closing handshake's end, a
    /// refusal written) gets close_notify first, so that the peer can tell the end from a
    /// truncation (RFC 8446 §6.1).
    #[cfg(feature = "tls")]
    fn owes_close_notify_with(&self, tls: &Tls) -> bool {
        !self.broken
            && tls.owes_close_notify()
            && !tls.is_handshaking()
            && self.plain_len() == 0
            && matches!(self.transport(), Transport::ShutdownWrite | Transport::Finish)
    }

    /// The loop wrote what it could: `drain` is called if a backlog went below the high water
    /// mark.
    pub(crate) fn written<H: Handler<Data = D>>(&mut self, shared: &Shared, handler: &mut H) {
        let Phase::Open(engine) = &mut self.phase else {
            return;
        };
        self.facing
            .membership
            .feed(engine, shared.config.write_buffer_high_water);
        // The same measure `Socket::send` reported backpressure by: backlog included.
        if self.facing.backpressured
            && self.facing.membership.queued(engine) <= shared.config.write_buffer_high_water
        {
            self.facing.backpressured = false;
            let mut socket = Socket {
                engine,
                data: &mut self.data,
                facing: &mut self.facing,
                shared,
            };
            handler.drain(&mut socket);
        }
    }

    /// The connection waits for input: its idle read buffer goes to the loop's pool, its deflate
    /// states back to theirs after the linger (the engine's timer gives them back).
    pub(crate) fn idle(&mut self, pool: &mut Vec<BytesMut>, chunk: usize) {
        #[cfg(feature = "tls")]
        if let Some(tls) = &mut self.tls {
            tls.idle();
        }
        if let Phase::Open(engine) = &mut self.phase {
            engine.linger_deflate();
            if engine.transmit_len() == 0 {
                engine.release_idle_write_buffer();
            }
            if let Some(buffer) = engine.release_idle_read_buffer(chunk)
                && pool.len() < POOLED_READ_BUFFERS
            {
                pool.push(buffer);
            }
        }
    }

    /// Its id (what a `ServerHandle` sends to).
    pub(crate) fn id(&self) -> SocketId {
        self.facing.id
    }

    /// A publication to a topic it is subscribed to (see `membership`: a subscriber more than
    /// `max_backlog` behind is dropped with 1008, not held in memory without end).
    pub(crate) fn publication(&mut self, message: &PreparedMessage, shared: &Shared) {
        if let Phase::Open(engine) = &mut self.phase {
            let high_water = shared.config.write_buffer_high_water;
            let offered = self
                .facing
                .membership
                .publish(engine, message, high_water, shared.max_backlog);
            self.note_offered(offered, shared);
        }
    }

    /// A message sent through a `ServerHandle` (from outside the loop), held to the same bound.
    pub(crate) fn send_from_outside(&mut self, message: Message, shared: &Shared) {
        if let Phase::Open(engine) = &mut self.phase {
            let offered = self.facing.membership.send(engine, message, shared.max_backlog);
            self.note_offered(offered, shared);
        }
    }

    fn note_offered(&mut self, offered: Offered, shared: &Shared) {
        if offered == Offered::Dropped && self.facing.membership.is_dropped() && self.error.is_none() {
            self.error = Some(format!(
                "{}: more than {} bytes waited for it (the server's max_backlog)",
                crate::membership::TOO_SLOW,
                shared.max_backlog
            ));
        }
    }

    /// The deadline `at`, armed for this connection in the loop's timers, passed: `true` if it is
    /// still this connection's (not one it armed before an earlier one), and the engine was told.
    pub(crate) fn fire(&mut self, at: Instant, now: Instant) -> bool {
        if self.armed != Some(at) {
            return false;
        }
        self.armed = None;
        self.timeout(now);
        true
    }

    /// Everything queued is written: carries out what the engine asks of the transport, with
    /// `shutdown_write` shutting down its writing side. `false`: close the transport now.
    pub(crate) fn carry_out(&mut self, shutdown_write: impl FnOnce()) -> bool {
        match self.transport() {
            Transport::ShutdownWrite => {
                // Reading goes on until the peer's FIN (closing with unread input would reset
                // the connection, and could destroy the close frame in flight).
                shutdown_write();
                match &mut self.phase {
                    Phase::Open(engine) => engine.write_shut_down(),
                    Phase::Refused { shut, .. } => *shut = true,
                    _ => {}
                }
                true
            }
            Transport::Finish | Transport::Abort | Transport::Closed => {
                shutdown_write();
                false
            }
            _ => true,
        }
    }

    /// The transport is closed (`io_error`: because writing or reading failed): the handler is
    /// told, and the connection's data handed to it.
    pub(crate) fn closed<H: Handler<Data = D>>(mut self, io_error: Option<std::io::Error>, handler: &mut H) {
        // Out of its thread's topics before its slot can be taken by another connection.
        if !self.facing.membership.subscriptions.is_empty() {
            let key = self.facing.id.key;
            topics::with(|t| {
                for topic in &self.facing.membership.subscriptions {
                    t.unsubscribe(topic, key);
                }
            });
        }
        let upgraded = match &mut self.phase {
            Phase::Open(engine) => {
                engine.transport_closed();
                // The first cause stays (a backlog or TLS failure, before the timeout it led to).
                if let Some(e) = engine.take_error()
                    && self.error.is_none()
                {
                    self.error = Some(e.to_string());
                }
                true
            }
            _ => false,
        };
        if let Some(e) = io_error
            && self.error.is_none()
        {
            self.error = Some(e.to_string());
        }
        if upgraded {
            handler.close(
                self.data,
                Closed {
                    frame: self.peer_close,
                    error: self.error,
                    peer: self.facing.peer,
                },
            );
        } else if let Some(error) = self.error {
            tracing::debug!(peer = %self.facing.peer, "handshake failed: {error}");
        }
    }

    /// Reads the upgrade request once whole; answers it (`101`, or a refusal) into `head`.
    fn handshake<H: Handler<Data = D>>(&mut self, shared: &Shared, handler: &mut H) {
        let Phase::Handshake { request: buf, .. } = &mut self.phase else {
            return;
        };
        if buf.starts_with(HTTP2_PREFACE_START) {
            // An HTTP/2 client with prior knowledge (h2c): told in its own protocol that this
            // server speaks HTTP/1.1 only, rather than with an HTTP/1.1 response it cannot read.
            self.head.extend_from_slice(&HTTP_1_1_REQUIRED);
            self.error = Some("an HTTP/2 client: the own loop serves HTTP/1.1 only".into());
            self.phase = refused();
            return;
        }
        let parsed = parse_request(buf, &shared.config.protocol).and_then(|parsed| match parsed {
            Some((request, used)) => {
                ClientHello::from_request(&request).map(|hello| Some((request, used, hello)))
            }
            // Incomplete; `parse_request` refuses a head over the size limit already.
            None => Ok(None),
        });
        let (request, used, hello) = match parsed {
            Ok(Some(parsed)) => parsed,
            Ok(None) => return,
            Err(e) => return self.refuse(reject_response(&e), e.to_string()),
        };
        let leftover = buf.split_off(used);
        let (response, extensions) = hello.accept_with(&shared.config.protocol);
        let response = match handler.upgrade(&request, response) {
            Ok((response, data)) => {
                self.data = data;
                response
            }
            Err(refusal) => {
                let why = format!("refused by the application: {}", refusal.status());
                return self.refuse(refusal, why);
            }
        };
        write_response(&response, &mut self.head);
        let mut engine = Box::new(Connection::server(shared.config.protocol.clone()));
        engine.set_deflate(extensions.kept_by(&response));
        // The engine's clock starts now (keepalive), with the first input.
        engine.handle_timeout(Instant::now());
        self.phase = Phase::Open(engine);
        let Phase::Open(engine) = &mut self.phase else {
            unreachable!()
        };
        let mut socket = Socket {
            engine,
            data: &mut self.data,
            facing: &mut self.facing,
            shared,
        };
        handler.open(&mut socket);
        if !leftover.is_empty() {
            engine.receive(&leftover);
            self.deliver(shared, handler);
        }
    }

    fn refuse(&mut self, response: Response<String>, why: String) {
        write_response(&response, &mut self.head);
        self.error = Some(why);
        self.phase = refused();
    }

    /// Hands every whole message received to the handler.
    fn deliver<H: Handler<Data = D>>(&mut self, shared: &Shared, handler: &mut H) {
        let Phase::Open(engine) = &mut self.phase else {
            return;
        };
        loop {
            match engine.poll_message() {
                Ok(Some(message)) if message.is_data() => {
                    let mut socket = Socket {
                        engine,
                        data: &mut self.data,
                        facing: &mut self.facing,
                        shared,
                    };
                    handler.message(&mut socket, message);
                }
                Ok(Some(Message::Close(frame))) => self.peer_close = frame,
                // Pings are answered by the engine; pongs only prove the peer alive.
                Ok(Some(_)) => {}
                // The engine failed the connection and queued its close frame; the error is
                // kept for `closed`.
                Ok(None) | Err(_) => return,
            }
        }
    }
}

/// How long a refused client's input is read and dropped, at most, after the refusal is written.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

fn refused() -> Phase {
    Phase::Refused {
        linger: Instant::now() + LINGER,
        shut: false,
    }
}

/// The start of HTTP/2's connection preface (RFC 9113 §3.4), enough to tell it from HTTP/1.1.
const HTTP2_PREFACE_START: &[u8] = b"PRI * HTTP/2.0";

/// An HTTP/2 server's answer that it wants HTTP/1.1 (RFC 9113 §3.4, §6.8): its preface (an empty
/// SETTINGS frame), then GOAWAY with last stream 0 and the error HTTP_1_1_REQUIRED (0xd).
const HTTP_1_1_REQUIRED: [u8; 26] = [
    0, 0, 0, 0x4, 0, 0, 0, 0, 0, // SETTINGS, empty, stream 0
    0, 0, 8, 0x7, 0, 0, 0, 0, 0, // GOAWAY, 8 bytes, stream 0
    0, 0, 0, 0, // last stream id
    0, 0, 0, 0xd, // HTTP_1_1_REQUIRED
];

/// Read buffers a loop keeps for its next reading connection.
const POOLED_READ_BUFFERS: usize = 8;

/// A deadline past what an `Instant` can hold means never: about 30 years ahead.
const YEARS: std::time::Duration = std::time::Duration::from_secs(30 * 365 * 24 * 3600);
