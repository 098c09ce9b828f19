//! [`TlsStream`]: TLS over a byte stream, driven through rustls's unbuffered API so that the
//! buffers are ours.
//!
//! rustls's buffered connection (what `tokio-rustls` drives) keeps a 4 KiB receive buffer for as
//! long as the connection lives: heaptrack on 2,000 idle `wss://` connections put it at 4,096 of
//! the 10,714 bytes each held, the largest single item. Here TLS records are read into a buffer
//! of ours, taken from a small per-thread pool when bytes arrive and given back whenever the
//! connection waits with no partial record in it, so an idle connection holds only rustls's own
//! state (its keys and handshake bookkeeping). Reads are larger too (the buffer grows to 32 KiB
//! under bulk traffic; rustls reads 4 KiB at a time), and each encrypted record is written from one
//! buffer instead of a queue of one allocation per record.
//!
//! How the parts meet (rustls's `process_tls_records` states, RFC 8446 §5 for records):
//! - bytes read from the socket go to `incoming[in_start..in_end]`; rustls decrypts records from
//!   its front and says how many bytes it has done with (`discard`);
//! - application data comes out a record at a time, copied straight into the reader's buffer;
//!   what does not fit, or arrives while a writer needs rustls (it only encrypts once every
//!   received record has been taken), waits in `plain`;
//! - records to send (handshake flights, session tickets, key updates, alerts, encrypted
//!   application data) are appended to `outgoing[out_start..out_end]` and written in order.

use std::fmt;
use std::io;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::pki_types::ServerName;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    AppDataRecord, ConnectionState, EncodeError, EncryptError, ReadEarlyData, UnbufferedConnectionCommon,
    UnbufferedStatus,
};
use rustls::{ClientConfig, CommonState, ProtocolVersion, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The first size of a receive or send buffer: a small message's records fit.
const FIRST_BUFFER: usize = 4 << 10;
/// A receive buffer grows (while reads fill it) up to this, so that bulk traffic is read a few
/// records per system call.
const BULK_BUFFER: usize = 32 << 10;
/// The largest receive buffer: a TLS record is at most 16 KiB + 2 KiB (RFC 5246 §6.2.3), but
/// rustls joins a handshake message of up to 64 KiB from several records in place.
const MAX_INCOMING: usize = 128 << 10;
/// The least room a read is made with (less, and the buffer is compacted or grown first).
const MIN_READ: usize = 2 << 10;
/// At most this much plaintext is encrypted per write: two full records.
const MAX_ENCRYPT: usize = 32 << 10;
/// A write waits for the socket while this much encrypted data is already queued.
const SEND_BACKLOG: usize = 16 << 10;

/// A TLS connection over `S` (usually a `TcpStream`): the client side is
/// [`ClientTlsStream`], the server side [`ServerTlsStream`]. Reads and writes are plaintext.
///
/// As with any buffered writer (and rustls's own streams), records a write queued may wait for
/// the socket until the next write or a flush: flush before waiting to read the answer to what
/// was written (an echo that only writes and reads can otherwise stall both ends). The WebSocket
/// layer flushes by itself.
pub struct TlsStream<S, C: TlsSide> {
    io: S,
    conn: C,
    /// TLS bytes read and not yet consumed by rustls: `incoming[in_start..in_end]`. Empty (no
    /// allocation) while the connection waits with nothing partial.
    incoming: Vec<u8>,
    in_start: usize,
    in_end: usize,
    /// Whether the last read filled all the room it was given (the next read gets more).
    read_filled: bool,
    /// How much of `incoming` has held bytes since it was taken: wiped before it goes back.
    dirty: usize,
    /// rustls has taken all it can from what was read and has nothing to hand out: until bytes
    /// arrive, a read goes straight to the socket (a pass over rustls's states costs ~200
    /// instructions, and a 64-byte echo made four).
    needs_input: bool,
    /// Decrypted application data not yet read: `plain[plain_start..]`.
    plain: Vec<u8>,
    plain_start: usize,
    /// Records to send: `outgoing[out_start..out_end]`.
    outgoing: Vec<u8>,
    out_start: usize,
    out_end: usize,
    /// The peer sent close_notify: after what is buffered, reads end cleanly.
    peer_closed: bool,
    /// The socket reached its end.
    io_eof: bool,
    /// A close_notify is queued (by `poll_shutdown`).
    close_notify_queued: bool,
    /// The error that ended the connection, given to every later call.
    failed: Option<rustls::Error>,
    /// Server side: the host name the client sent with SNI.
    sni: Option<Box<str>>,
    /// The last writer (write, flush, shutdown) that waited for the socket to take the queue.
    /// A read that fails tries the alert with its own waker, which then takes the socket's
    /// write wake-up from that writer (one slot per direction): the read wakes it instead.
    waiting_writer: Option<Waker>,
}

/// The client side of a TLS connection.
pub type ClientTlsStream<S> = TlsStream<S, UnbufferedClientConnection>;
/// The server side of a TLS connection.
pub type ServerTlsStream<S> = TlsStream<S, UnbufferedServerConnection>;

mod sealed {
    pub trait Sealed {}
    impl Sealed for rustls::client::UnbufferedClientConnection {}
    impl Sealed for rustls::server::UnbufferedServerConnection {}
}

/// The two sides of a rustls unbuffered connection (sealed).
pub trait TlsSide:
    sealed::Sealed + Unpin + std::ops::Deref<Target = UnbufferedConnectionCommon<Self::Data>>
{
    #[doc(hidden)]
    type Data;
    #[doc(hidden)]
    const IS_CLIENT: bool;
    #[doc(hidden)]
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data>;
    /// Moves 0-RTT data to `plain`; returns the bytes to discard.
    #[doc(hidden)]
    fn early_data(records: ReadEarlyData<'_, '_, Self::Data>, plain: &mut Vec<u8>) -> usize;
    /// Server side, during the handshake: the SNI host name seen by the last `process`.
    #[doc(hidden)]
    fn take_sni() -> Option<Box<str>> {
        None
    }
}

impl TlsSide for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    const IS_CLIENT: bool = true;
    #[inline]
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ClientConnectionData> {
        self.process_tls_records(incoming)
    }
    fn early_data(_: ReadEarlyData<'_, '_, ClientConnectionData>, _: &mut Vec<u8>) -> usize {
        0 // a server's state only
    }
}

impl TlsSide for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    const IS_CLIENT: bool = false;
    #[inline]
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ServerConnectionData> {
        self.process_tls_records(incoming)
    }
    fn take_sni() -> Option<Box<str>> {
        sni::take()
    }
    /// 0-RTT data, only when the config allows it (`max_early_data_size`): application data
    /// like any other.
    fn early_data(mut records: ReadEarlyData<'_, '_, ServerConnectionData>, plain: &mut Vec<u8>) -> usize {
        let mut discard = 0;
        while let Some(Ok(AppDataRecord {
            discard: more,
            payload,
        })) = records.next_record()
        {
            discard += more;
            plain.extend_from_slice(payload);
        }
        discard
    }
}

/// What a pass over rustls is for.
enum Want<'a, 'b> {
    /// Only to advance (the handshake; queued records).
    Nothing,
    /// To fill the reader's buffer.
    Read(&'a mut ReadBuf<'b>),
    /// To encrypt this application data.
    Encrypt(&'a [u8]),
    /// To queue a close_notify alert.
    CloseNotify,
}

/// Where a pass over rustls stopped.
enum Driven {
    /// Application data went into the reader's buffer.
    Delivered,
    /// This much application data was encrypted (0 for a close_notify).
    Encrypted(usize),
    /// rustls needs more bytes from the socket.
    NeedInput,
    /// The connection is closed both ways (close_notify sent and received).
    Closed,
}

impl<S, C: TlsSide> TlsStream<S, C> {
    fn new(io: S, conn: C) -> Self {
        TlsStream {
            io,
            conn,
            incoming: Vec::new(),
            in_start: 0,
            in_end: 0,
            read_filled: false,
            dirty: 0,
            needs_input: false,
            plain: Vec::new(),
            plain_start: 0,
            outgoing: Vec::new(),
            out_start: 0,
            out_end: 0,
            peer_closed: false,
            io_eof: false,
            close_notify_queued: false,
            failed: None,
            sni: None,
            waiting_writer: None,
        }
    }

    /// The stream underneath.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The stream underneath, mutably (reading or writing it directly breaks the TLS session).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// The TLS session's state: the negotiated protocol version, cipher suite and ALPN
    /// protocol, the peer's certificates.
    pub fn tls_state(&self) -> &CommonState {
        &self.conn
    }

    /// The ALPN protocol agreed on in the handshake, if any.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    fn error(&self) -> Option<io::Error> {
        self.failed
            .as_ref()
            .map(|e| io::Error::new(io::ErrorKind::InvalidData, e.clone()))
    }

    /// Advances rustls over what has been read, as far as it goes without the socket, for
    /// `want`. Application data goes to the reader's buffer, or to `plain`; records to send go
    /// to `outgoing`.
    fn drive(&mut self, mut want: Want<'_, '_>) -> io::Result<Driven> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        let mut delivered = false;
        loop {
            let handshaking = self.conn.is_handshaking();
            let Self {
                conn,
                incoming,
                in_start,
                in_end,
                plain,
                outgoing,
                out_start,
                out_end,
                peer_closed,
                sni,
                needs_input,
                ..
            } = self;
            if handshaking {
                // Nothing left over from another connection on this thread.
                C::take_sni();
            }
            let UnbufferedStatus { mut discard, state } = conn.process(&mut incoming[*in_start..*in_end]);
            if handshaking {
                // The first ClientHello's name (a second one, after a HelloRetryRequest, repeats it).
                let seen = C::take_sni();
                if sni.is_none() {
                    *sni = seen;
                }
            }
            let state = match state {
                Ok(state) => state,
                Err(e) => {
                    *in_start += discard;
                    return self.failed_after(e, delivered);
                }
            };
            // What to do after `discard` is applied: `None` to carry on.
            let stop: Option<io::Result<Driven>> = match state {
                ConnectionState::ReadTraffic(mut records) => {
                    let mut failure = None;
                    while let Some(record) = records.next_record() {
                        match record {
                            Ok(AppDataRecord {
                                discard: more,
                                payload,
                            }) => {
                                discard += more;
                                let rest = match &mut want {
                                    // Behind what already waits in `plain` (0-RTT data), never
                                    // ahead of it.
                                    Want::Read(buf) if plain.is_empty() => {
                                        let n = buf.remaining().min(payload.len());
                                        buf.put_slice(&payload[..n]);
                                        delivered |= n > 0;
                                        &payload[n..]
                                    }
                                    _ => payload,
                                };
                                if !rest.is_empty() {
                                    plain.extend_from_slice(rest);
                                }
                            }
                            Err(e) => {
                                failure = Some(e);
                                break;
                            }
                        }
                    }
                    match failure {
                        Some(e) => {
                            *in_start += discard;
                            return self.failed_after(e, delivered);
                        }
                        // A full reader's buffer ends the pass; more records wait in rustls.
                        None => match &want {
                            Want::Read(buf) if buf.remaining() == 0 || !plain.is_empty() => {
                                Some(Ok(Driven::Delivered))
                            }
                            _ => None,
                        },
                    }
                }
                ConnectionState::ReadEarlyData(records) => {
                    discard += C::early_data(records, plain);
                    None
                }
                ConnectionState::EncodeTlsData(mut record) => {
                    queue_record(outgoing, out_start, out_end, |out| Ok(record.encode(out)?))
                        .err()
                        .map(Err)
                }
                // The records are in `outgoing`, written before anything queued after them.
                ConnectionState::TransmitTlsData(transmit) => {
                    transmit.done();
                    None
                }
                ConnectionState::BlockedHandshake => Some(Ok(Driven::NeedInput)),
                ConnectionState::WriteTraffic(mut writer) => match &want {
                    Want::Encrypt(data) => {
                        let data = &data[..data.len().min(MAX_ENCRYPT)];
                        let queued =
                            queue_record(outgoing, out_start, out_end, |out| Ok(writer.encrypt(data, out)?));
                        Some(queued.map(|()| Driven::Encrypted(data.len())))
                    }
                    Want::CloseNotify => {
                        let queued = queue_record(outgoing, out_start, out_end, |out| {
                            Ok(writer.queue_close_notify(out)?)
                        });
                        Some(queued.map(|()| Driven::Encrypted(0)))
                    }
                    Want::Read(_) | Want::Nothing => Some(Ok(Driven::NeedInput)),
                },
                ConnectionState::PeerClosed => {
                    *peer_closed = true;
                    None
                }
                ConnectionState::Closed => {
                    *peer_closed = true;
                    Some(Ok(Driven::Closed))
                }
                _ => Some(Err(io::Error::other(
                    "rustls: a TLS connection state this version does not handle",
                ))),
            };
            *in_start += discard;
            // The peer's close_notify ends reading: what came before it was delivered.
            if stop.is_none() && *peer_closed && matches!(want, Want::Read(_)) {
                return Ok(if delivered {
                    Driven::Delivered
                } else {
                    Driven::Closed
                });
            }
            match stop {
                // Every byte read was a record now delivered: nothing more to ask rustls for
                // (it hands a record's data out whole, and queues nothing for a data record).
                None if delivered && *in_start == *in_end => {
                    *needs_input = true;
                    return Ok(Driven::Delivered);
                }
                None => {}
                // rustls reached its traffic state: every complete record taken, nothing queued.
                Some(Ok(Driven::NeedInput)) => {
                    *needs_input = true;
                    return Ok(if delivered {
                        Driven::Delivered
                    } else {
                        Driven::NeedInput
                    });
                }
                Some(Ok(Driven::Encrypted(n))) => {
                    *needs_input = true;
                    return Ok(Driven::Encrypted(n));
                }
                Some(Ok(Driven::Closed)) if delivered => return Ok(Driven::Delivered),
                Some(result) => return result,
            }
        }
    }

    /// [`fail`](Self::fail), reported by the next call when this one delivered data: what was
    /// decrypted before the failure is the application's.
    fn failed_after(&mut self, e: rustls::Error, delivered: bool) -> io::Result<Driven> {
        let err = self.fail(e);
        if delivered {
            Ok(Driven::Delivered)
        } else {
            Err(err)
        }
    }

    /// Records rustls's error for every later call, and queues the alert that tells the peer
    /// about it (written by the caller's next write, if the socket takes it).
    fn fail(&mut self, e: rustls::Error) -> io::Error {
        self.failed = Some(e.clone());
        // rustls hands the alert out as a record to encode before anything else. Only while one
        // is queued: with none, rustls would parse the bad bytes again (and alert twice).
        while self.conn.wants_write() {
            // The same bytes as before: rustls keeps positions in them (a handshake message
            // being joined from several records).
            let UnbufferedStatus { discard, state } =
                self.conn.process(&mut self.incoming[self.in_start..self.in_end]);
            self.in_start += discard;
            match state {
                Ok(ConnectionState::EncodeTlsData(mut record)) => {
                    let (outgoing, out_start, out_end) =
                        (&mut self.outgoing, &mut self.out_start, &mut self.out_end);
                    // Best effort: the error being reported is rustls's.
                    let _ = queue_record(outgoing, out_start, out_end, |out| Ok(record.encode(out)?));
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => transmit.done(),
                _ => break,
            }
        }
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// The error of a read or write before the handshake's end.
fn not_handshaken() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "TLS: read or write before the handshake finished (await `handshake()` first)",
    )
}

/// The error of a write after our close_notify.
fn shut_for_writing() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the TLS connection was shut down for writing (close_notify sent)",
    )
}

/// Why rustls did not write a record into the room it was given.
enum NoRecord {
    /// It needs this many bytes.
    Room(usize),
    /// It cannot (the record was encoded already, the keys are exhausted).
    Failed(io::Error),
}

impl From<EncodeError> for NoRecord {
    fn from(e: EncodeError) -> Self {
        match e {
            EncodeError::InsufficientSize(need) => NoRecord::Room(need.required_size),
            EncodeError::AlreadyEncoded => {
                NoRecord::Failed(io::Error::other("rustls: TLS record encoded twice"))
            }
        }
    }
}

impl From<EncryptError> for NoRecord {
    fn from(e: EncryptError) -> Self {
        match e {
            EncryptError::InsufficientSize(need) => NoRecord::Room(need.required_size),
            e => NoRecord::Failed(io::Error::other(format!("TLS: {e}"))),
        }
    }
}

/// Appends a record to the send queue `outgoing[out_start..out_end]`: `write` puts it into the
/// room after `out_end` (an encode, an encryption, a close_notify), tried again with more room
/// while rustls says it needs more.
fn queue_record(
    outgoing: &mut Vec<u8>,
    out_start: &mut usize,
    out_end: &mut usize,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, NoRecord>,
) -> io::Result<()> {
    loop {
        match write(&mut outgoing[*out_end..]) {
            Ok(n) => {
                *out_end += n;
                return Ok(());
            }
            Err(NoRecord::Room(need)) => make_room(outgoing, out_start, out_end, need),
            Err(NoRecord::Failed(e)) => return Err(e),
        }
    }
}

/// Makes room for `need` more bytes after `outgoing[..out_end]`: the buffer moves its live bytes
/// to the front or grows (a new buffer comes from the pool).
fn make_room(outgoing: &mut Vec<u8>, out_start: &mut usize, out_end: &mut usize, need: usize) {
    if *out_start == *out_end {
        *out_start = 0;
        *out_end = 0;
    }
    if outgoing.is_empty() {
        *outgoing = pool::take();
    }
    if outgoing.len() - *out_end >= need {
        return;
    }
    if *out_start > 0 {
        outgoing.copy_within(*out_start..*out_end, 0);
        *out_end -= *out_start;
        *out_start = 0;
    }
    let wanted = *out_end + need;
    if outgoing.len() < wanted {
        outgoing.resize(wanted.max(FIRST_BUFFER).next_power_of_two(), 0);
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> TlsStream<S, C> {
    /// Reads from the socket into `incoming`. `Ready(Ok(0))` at its end. While it waits with
    /// nothing partial, the receive buffer goes back to the pool.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.in_start == self.in_end {
            self.in_start = 0;
            self.in_end = 0;
        }
        if self.incoming.is_empty() {
            self.incoming = pool::take();
        }
        let room = self.incoming.len() - self.in_end;
        if room < MIN_READ || (self.read_filled && self.incoming.len() < BULK_BUFFER) {
            if self.in_start > 0 {
                // (`dirty` stays: the bytes moved from are still there.)
                self.incoming.copy_within(self.in_start..self.in_end, 0);
                self.in_end -= self.in_start;
                self.in_start = 0;
            }
            let room = self.incoming.len() - self.in_end;
            if room < MIN_READ || (self.read_filled && self.incoming.len() < BULK_BUFFER) {
                let grown = (self.incoming.len() * 2).max(FIRST_BUFFER);
                if grown > MAX_INCOMING {
                    if room == 0 {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "TLS: a record or handshake message larger than 128 KiB",
                        )));
                    }
                } else {
                    self.incoming.resize(grown, 0);
                }
            }
        }
        let mut buf = ReadBuf::new(&mut self.incoming[self.in_end..]);
        match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len();
                self.read_filled = n == buf.capacity();
                self.in_end += n;
                self.dirty = self.dirty.max(self.in_end);
                self.needs_input &= n == 0;
                if n == 0 {
                    self.io_eof = true;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                self.release_idle_incoming();
                Poll::Pending
            }
        }
    }

    /// Gives the receive buffer back to the pool when nothing partial is left in it, wiped of
    /// the records decrypted in place there (the next connection's stream reads into it as
    /// initialized memory).
    fn release_idle_incoming(&mut self) {
        if self.in_start == self.in_end && !self.incoming.is_empty() {
            let mut buffer = std::mem::take(&mut self.incoming);
            buffer[..self.dirty].fill(0);
            pool::put(buffer);
            self.in_start = 0;
            self.in_end = 0;
            self.dirty = 0;
            self.read_filled = false;
        }
    }

    /// Writes every queued record. The send buffer goes back to the pool once empty.
    fn poll_send_queued(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out_start < self.out_end {
            let n =
                ready!(Pin::new(&mut self.io).poll_write(cx, &self.outgoing[self.out_start..self.out_end]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out_start += n;
        }
        self.out_start = 0;
        self.out_end = 0;
        if !self.outgoing.is_empty() {
            pool::put(std::mem::take(&mut self.outgoing));
        }
        Poll::Ready(Ok(()))
    }

    /// [`poll_send_queued`](Self::poll_send_queued) for a writer: one left waiting is noted,
    /// so that a failing read can wake it (see `waiting_writer`).
    fn poll_send_for_writer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let sent = self.poll_send_queued(cx);
        if sent.is_pending() {
            match &mut self.waiting_writer {
                Some(waker) => waker.clone_from(cx.waker()),
                None => self.waiting_writer = Some(cx.waker().clone()),
            }
        }
        sent
    }

    /// The end of the socket: a clean end only after the peer's close_notify (RFC 8446 §6.1: a
    /// TCP close alone could be an attacker's truncation).
    fn at_eof(&self) -> io::Result<()> {
        if self.in_start < self.in_end {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection in the middle of a TLS record",
            ))
        } else if self.peer_closed {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed connection without sending TLS close_notify",
            ))
        }
    }

    /// Runs the handshake to its end (both Finished messages).
    /// Sending and receiving go on together: a side that insisted on sending its whole flight
    /// before reading would wait forever on a peer doing the same (the client's
    /// ChangeCipherSpec against the server's certificate flight, through a pipe that holds less
    /// than either).
    pub(crate) fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if let Err(e) = self.drive(Want::Nothing) {
                // The alert, if the socket takes it now.
                let _ = self.poll_send_queued(cx);
                return Poll::Ready(Err(e));
            }
            let sent = self.poll_send_queued(cx)?;
            let handshaking = self.conn.is_handshaking();
            if !handshaking {
                // The last flight is written before the handshake ends when the peer waits for
                // it: a client's Finished; a TLS 1.2 server's ChangeCipherSpec and Finished. A
                // TLS 1.3 server's is session tickets, no one's wait: they go out with the next
                // write or flush. Nothing more is read meanwhile.
                let peer_waits =
                    C::IS_CLIENT || self.conn.protocol_version() != Some(ProtocolVersion::TLSv1_3);
                if sent.is_pending() && peer_waits {
                    return Poll::Pending;
                }
                self.release_idle_incoming();
                return Poll::Ready(Ok(()));
            }
            if self.io_eof {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection during the TLS handshake",
                )));
            }
            ready!(self.poll_fill(cx))?;
        }
    }

    /// Encrypts (some of) `data` into the send queue; `Pending` while the queue is full and
    /// the socket takes nothing.
    fn poll_encrypt(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(e) = self.error() {
            return Poll::Ready(Err(e));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if self.conn.is_handshaking() {
            return Poll::Ready(Err(not_handshaken()));
        }
        if self.close_notify_queued {
            return Poll::Ready(Err(shut_for_writing()));
        }
        if self.out_end - self.out_start >= SEND_BACKLOG {
            ready!(self.poll_send_for_writer(cx))?;
        }
        let n = match self.drive(Want::Encrypt(data)) {
            Ok(Driven::Encrypted(n)) => n,
            Ok(Driven::Closed) => return Poll::Ready(Err(shut_for_writing())),
            Ok(_) => return Poll::Ready(Err(not_handshaken())),
            Err(e) => {
                let _ = self.poll_send_queued(cx);
                return Poll::Ready(Err(e));
            }
        };
        // Out now if the socket takes it; else the next write or flush waits for it.
        if let Poll::Ready(Err(e)) = self.poll_send_queued(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> ClientTlsStream<S> {
    /// Starts a client connection to `name` (the handshake runs in
    /// [`handshake`](Self::handshake)).
    pub fn client(
        io: S,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> Result<Self, rustls::Error> {
        Ok(TlsStream::new(io, UnbufferedClientConnection::new(config, name)?))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> ServerTlsStream<S> {
    /// Starts a server connection (the handshake runs in [`handshake`](Self::handshake)).
    /// [`sni_hostname`](ServerTlsStream::sni_hostname) is known on the connections a
    /// [`Server`](crate::Server) accepts, which wraps the config's certificate resolver to learn
    /// it; here it stays `None` unless `config` came from one.
    pub fn server(io: S, config: Arc<ServerConfig>) -> Result<Self, rustls::Error> {
        Ok(TlsStream::new(io, UnbufferedServerConnection::new(config)?))
    }
}

impl<S> ServerTlsStream<S> {
    /// The host name the client sent with SNI, if it sent one.
    pub fn sni_hostname(&self) -> Option<&str> {
        self.sni.as_deref()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> TlsStream<S, C> {
    /// Runs the TLS handshake.
    pub async fn handshake(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_handshake(cx)).await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> AsyncRead for TlsStream<S, C> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.plain_start < this.plain.len() {
                let n = buf.remaining().min(this.plain.len() - this.plain_start);
                buf.put_slice(&this.plain[this.plain_start..this.plain_start + n]);
                this.plain_start += n;
                if this.plain_start == this.plain.len() {
                    this.plain = Vec::new();
                    this.plain_start = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.peer_closed {
                return Poll::Ready(Ok(()));
            }
            if let Some(e) = this.error() {
                return Poll::Ready(Err(e));
            }
            if this.conn.is_handshaking() {
                return Poll::Ready(Err(not_handshaken()));
            }
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let before = buf.filled().len();
            let driven = if this.needs_input {
                Ok(Driven::NeedInput)
            } else {
                this.drive(Want::Read(buf))
            };
            // What rustls queues as it reads (a session ticket, a key update) goes out with the
            // next write or flush, as with rustls's own streams: a read that wrote would take
            // the socket's write wake-up from a writer waiting in another task. Only the alert
            // that ends a failed connection is tried at once, and the writer it may have taken
            // the wake-up from is woken: its next call returns the same error.
            match driven {
                Ok(Driven::Delivered) if buf.filled().len() > before => {
                    this.release_idle_incoming();
                    return Poll::Ready(Ok(()));
                }
                // Into `plain` only (behind 0-RTT data): taken from there at the top.
                Ok(Driven::Delivered) => continue,
                Ok(Driven::Closed) => return Poll::Ready(Ok(())),
                Ok(Driven::NeedInput | Driven::Encrypted(_)) => {}
                Err(e) => {
                    let _ = this.poll_send_queued(cx);
                    if let Some(writer) = this.waiting_writer.take() {
                        writer.wake();
                    }
                    return Poll::Ready(Err(e));
                }
            }
            if this.io_eof {
                return Poll::Ready(this.at_eof());
            }
            if ready!(this.poll_fill(cx))? == 0 {
                return Poll::Ready(this.at_eof());
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> AsyncWrite for TlsStream<S, C> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_encrypt(cx, buf)
    }

    /// Several pieces (a frame's header and its payload) go into the same records: the small
    /// ones are gathered first (a record per piece would add 22 bytes and a seal to each).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut pieces = bufs.iter().filter(|b| !b.is_empty());
        let Some(first) = pieces.next() else {
            return Poll::Ready(Ok(0));
        };
        if first.len() >= MAX_ENCRYPT || bufs.iter().filter(|b| !b.is_empty()).count() == 1 {
            return self.poll_encrypt(cx, first);
        }
        let mut gathered = Vec::with_capacity(MAX_ENCRYPT.min(bufs.iter().map(|b| b.len()).sum()));
        for piece in bufs {
            let n = piece.len().min(MAX_ENCRYPT - gathered.len());
            gathered.extend_from_slice(&piece[..n]);
            if gathered.len() == MAX_ENCRYPT {
                break;
            }
        }
        self.poll_encrypt(cx, &gathered)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_send_for_writer(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Not after a failure or before the handshake's end: there is no session to close.
        if !self.close_notify_queued && self.failed.is_none() && !self.conn.is_handshaking() {
            self.close_notify_queued = matches!(self.drive(Want::CloseNotify), Ok(Driven::Encrypted(_)));
        }
        ready!(self.poll_send_for_writer(cx))?;
        match ready!(Pin::new(&mut self.io).poll_shutdown(cx)) {
            // Not connected any more: shut down already.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            other => Poll::Ready(other),
        }
    }
}

impl<S: fmt::Debug, C: TlsSide> fmt::Debug for TlsStream<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsStream")
            .field("io", &self.io)
            .field("protocol_version", &self.conn.protocol_version())
            .field(
                "alpn_protocol",
                &self.conn.alpn_protocol().map(String::from_utf8_lossy),
            )
            .field("sni", &self.sni)
            .field("buffered_in", &(self.in_end - self.in_start))
            .field("queued_out", &(self.out_end - self.out_start))
            .finish()
    }
}

/// The SNI host name, seen by the certificate resolver (rustls's unbuffered server connection
/// does not tell it otherwise). The resolver runs inside `process_tls_records`, on the thread
/// that called it, so a thread-local carries the name from one to the other.
pub(crate) mod sni {
    use std::cell::RefCell;
    use std::sync::Arc;

    use rustls::server::{ClientHello, ResolvesServerCert};
    use rustls::sign::CertifiedKey;

    thread_local! {
        static SEEN: RefCell<Option<Box<str>>> = const { RefCell::new(None) };
    }

    /// The name the last ClientHello on this thread carried, taken.
    pub(super) fn take() -> Option<Box<str>> {
        SEEN.try_with(|seen| seen.borrow_mut().take()).ok().flatten()
    }

    /// A certificate resolver that notes the SNI host name, then asks the one it wraps.
    #[derive(Debug)]
    pub(crate) struct NoteSni(pub(crate) Arc<dyn ResolvesServerCert>);

    impl ResolvesServerCert for NoteSni {
        fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
            let name = hello.server_name().map(Box::from);
            let _ = SEEN.try_with(|seen| *seen.borrow_mut() = name);
            self.0.resolve(hello)
        }

        fn only_raw_public_keys(&self) -> bool {
            self.0.only_raw_public_keys()
        }
    }
}

/// Buffers for records, kept per thread between a connection's reads (every TLS connection gives
/// its receive buffer back whenever it waits, and takes one when bytes arrive): zeroed once, when
/// made, not at every take.
mod pool {
    use std::cell::RefCell;

    use super::{BULK_BUFFER, FIRST_BUFFER};

    /// Enough for the connections one thread has between two waits.
    const MAX_POOLED: usize = 8;

    thread_local! {
        static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    /// A buffer of at least 4 KiB.
    pub(super) fn take() -> Vec<u8> {
        crate::thread_buffers::pop(&POOL).unwrap_or_else(|| vec![0; FIRST_BUFFER])
    }

    /// Keeps `buffer` for the next take, unless the pool is full or the buffer grew past bulk
    /// size (for a large handshake message).
    pub(super) fn put(buffer: Vec<u8>) {
        if (FIRST_BUFFER..=2 * BULK_BUFFER).contains(&buffer.len()) {
            crate::thread_buffers::push(&POOL, buffer, MAX_POOLED);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use rustls::{ClientConfig, RootCertStore, ServerConfig};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

    use super::{ClientTlsStream, ServerTlsStream};

    /// A client and a server config for "localhost" (a certificate with `extra_names` more
    /// names: hundreds make a Certificate message of several records, joined by rustls in our
    /// buffer), with the server's resolver wrapped as a `Server` wraps it.
    fn configs(extra_names: usize) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
        configs_with(extra_names, None)
    }

    /// [`configs`], the server accepting only `server_group` for the key exchange when given:
    /// one the client does not guess first makes the server ask again (HelloRetryRequest).
    fn configs_with(
        extra_names: usize,
        server_group: Option<&'static dyn rustls::crypto::SupportedKxGroup>,
    ) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
        let names: Vec<String> = std::iter::once("localhost".to_string())
            .chain((0..extra_names).map(|i| format!("name-{i}.example.com")))
            .collect();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut server_provider = (*provider).clone();
        if let Some(group) = server_group {
            server_provider.kx_groups = vec![group];
        }
        let mut server = ServerConfig::builder_with_provider(Arc::new(server_provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
            )
            .unwrap();
        server.cert_resolver = Arc::new(super::sni::NoteSni(server.cert_resolver.clone()));
        (Arc::new(client), Arc::new(server))
    }

    fn localhost() -> ServerName<'static> {
        ServerName::try_from("localhost").unwrap()
    }

    /// A handshaken pair over an in-memory pipe that holds at most `chunk` bytes each way, so
    /// that every read and write is cut at arbitrary points of the records.
    async fn pair(
        chunk: usize,
        extra_names: usize,
    ) -> (ClientTlsStream<DuplexStream>, ServerTlsStream<DuplexStream>) {
        let (client_config, server_config) = configs(extra_names);
        let (a, b) = duplex(chunk);
        let mut client = ClientTlsStream::client(a, client_config, localhost()).unwrap();
        let mut server = ServerTlsStream::server(b, server_config).unwrap();
        let (c, s) = tokio::join!(client.handshake(), server.handshake());
        c.unwrap();
        s.unwrap();
        (client, server)
    }

    /// Deterministic bytes, different for each message.
    fn message(seed: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(7919)) as u8)
            .collect()
    }

    /// Sends the messages and reads their echo at the same time (a client that only wrote would
    /// stall a server whose echo fills the pipe), the server echoing concurrently. The client's
    /// halves share the stream: a write drives rustls over records its reads have not taken.
    async fn echo_all(
        client: &mut ClientTlsStream<DuplexStream>,
        server: &mut ServerTlsStream<DuplexStream>,
        sizes: &[usize],
    ) {
        let total: usize = sizes.iter().sum();
        let echo = async {
            let mut buf = vec![0u8; 3000];
            let mut echoed = 0;
            while echoed < total {
                let n = server.read(&mut buf).await.unwrap();
                assert_ne!(n, 0, "the server saw the end after {echoed} of {total} bytes");
                server.write_all(&buf[..n]).await.unwrap();
                server.flush().await.unwrap();
                echoed += n;
            }
        };
        let (mut reader, mut writer) = tokio::io::split(client);
        let send = async {
            for (i, &len) in sizes.iter().enumerate() {
                writer.write_all(&message(i, len)).await.unwrap();
                writer.flush().await.unwrap();
            }
        };
        let receive = async {
            for (i, &len) in sizes.iter().enumerate() {
                let mut back = vec![0u8; len];
                reader.read_exact(&mut back).await.unwrap();
                assert!(
                    back == message(i, len),
                    "message {i} ({len} bytes) came back different"
                );
            }
        };
        tokio::join!(echo, send, receive);
    }

    #[tokio::test]
    async fn data_survives_every_cut_of_the_records() {
        for (chunk, extra_names, sizes) in [
            (1, 0, &[0, 1, 2, 100, 700][..]),
            (5, 1_500, &[1, 300, 2_000][..]),
            (17, 0, &[16_383, 16_384, 16_385][..]),
            (100, 1_500, &[5, 20_000][..]),
            (1_000, 0, &[1, 40_000, 3][..]),
            (4_096, 1_500, &[65_536, 100_000][..]),
            (16_389, 0, &[16_384, 200_000, 7][..]),
            (65_536, 1_500, &[1, 300_000][..]),
        ] {
            let (mut client, mut server) = pair(chunk, extra_names).await;
            assert_eq!(server.sni_hostname(), Some("localhost"), "chunk {chunk}");
            echo_all(&mut client, &mut server, sizes).await;
            // A clean close each way: close_notify, then the end of reading (together: the pipe
            // may hold less than the alert's record).
            let mut rest = Vec::new();
            let (closed, read) = tokio::join!(client.shutdown(), server.read_to_end(&mut rest));
            closed.unwrap();
            assert_eq!(read.unwrap(), 0, "chunk {chunk}");
            let late = client.write(b"after the close").await.unwrap_err();
            assert_eq!(late.kind(), std::io::ErrorKind::BrokenPipe, "{late}");
            let (closed, read) = tokio::join!(server.shutdown(), client.read_to_end(&mut rest));
            closed.unwrap();
            assert_eq!(read.unwrap(), 0, "chunk {chunk}");
        }
    }

    #[tokio::test]
    async fn an_end_without_close_notify_is_an_error() {
        let (mut client, mut server) = pair(4096, 0).await;
        echo_all(&mut client, &mut server, &[10]).await;
        // The TCP-level end only: a truncation attack looks the same (RFC 8446 §6.1).
        client.get_mut().shutdown().await.unwrap();
        let err = server.read(&mut [0u8; 10]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
        assert!(err.to_string().contains("close_notify"), "{err}");
    }

    /// A reader and a writer in two tasks (`tokio::io::split`), the writer waiting for a full
    /// socket; a bad record fails the read, whose alert finds the socket full too. The writer
    /// must still hear of it: before, the alert's attempt left the reader's waker in the
    /// socket's one write slot and the writer slept forever once the socket drained.
    #[tokio::test]
    async fn a_failed_read_does_not_steal_a_waiting_writers_wake_up() {
        let (mut client, server) = pair(1024, 0).await;
        let (mut reader, mut writer) = tokio::io::split(server);
        let writing = tokio::spawn(async move {
            let block = [7u8; 4096];
            for _ in 0..10_000 {
                writer.write_all(&block).await?;
            }
            Ok::<(), std::io::Error>(())
        });
        // The client reads nothing: the writer fills the pipe and waits.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!writing.is_finished());
        // An application-data record that cannot decrypt (RFC 8446 §5.2: bad_record_mac).
        let mut record = vec![23, 3, 3, 0, 32];
        record.extend_from_slice(&[0x5a; 32]);
        client.get_mut().write_all(&record).await.unwrap();
        let err = reader.read(&mut [0u8; 64]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        // The peer drains the socket, as a live peer would.
        let drain = tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok(Ok(n)) = tokio::time::timeout(
                std::time::Duration::from_millis(500),
                client.get_mut().read(&mut buf),
            )
            .await
            {
                if n == 0 {
                    break;
                }
            }
        });
        let written = tokio::time::timeout(std::time::Duration::from_secs(5), writing)
            .await
            .expect("the writer was never woken after the read failed")
            .unwrap();
        let late = written.unwrap_err();
        assert_eq!(late.to_string(), err.to_string());
        drain.await.unwrap();
    }

    #[tokio::test]
    async fn bad_bytes_fail_the_handshake_and_the_peer_gets_an_alert() {
        let (_, server_config) = configs(0);
        let (mut raw, b) = duplex(4096);
        let mut server = ServerTlsStream::server(b, server_config).unwrap();
        raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let err = server.handshake().await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        assert!(
            err.get_ref().unwrap().downcast_ref::<rustls::Error>().is_some(),
            "{err:?}"
        );
        let mut alert = [0u8; 7];
        raw.read_exact(&mut alert).await.unwrap();
        assert_eq!(alert[0], 21, "an alert record (RFC 8446 §6): {alert:?}");
        // Every later call reports the same failure.
        let again = server.read(&mut [0u8; 4]).await.unwrap_err();
        assert_eq!(again.to_string(), err.to_string());
    }

    #[tokio::test]
    async fn an_idle_stream_gives_its_buffers_back() {
        let (mut client, mut server) = pair(65_536, 0).await;
        echo_all(&mut client, &mut server, &[100, 50_000]).await;
        // A read that took every byte there was gives the buffer back at once: a connection
        // that stops reading (a sender) holds none.
        assert_eq!(client.incoming.capacity(), 0);
        // The server waits for more: nothing partial, so no buffer of ours is held.
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(20), server.read(&mut [0u8; 64])).await;
        assert!(waited.is_err(), "nothing was sent");
        assert_eq!(
            (
                server.incoming.capacity(),
                server.outgoing.capacity(),
                server.plain.capacity()
            ),
            (0, 0, 0)
        );
        // And takes one again when bytes arrive.
        echo_all(&mut client, &mut server, &[3]).await;
    }

    /// rustls's buffered connection (through tokio-rustls) on the other end, which asks for new
    /// keys both ways in the middle of the traffic (TLS 1.3 KeyUpdate, RFC 8446 §4.6.3): our
    /// side must take the new keys and answer with its own.
    #[tokio::test]
    async fn key_updates_from_a_buffered_peer_are_followed() {
        let (client_config, server_config) = configs(0);
        let (a, b) = duplex(8192);
        let connector = tokio_rustls::TlsConnector::from(client_config);
        let mut server = ServerTlsStream::server(b, server_config).unwrap();
        let (client, s) = tokio::join!(connector.connect(localhost(), a), server.handshake());
        let mut client = client.unwrap();
        s.unwrap();
        let echo = async {
            let mut buf = vec![0u8; 5000];
            loop {
                let n = server.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                server.write_all(&buf[..n]).await.unwrap();
                server.flush().await.unwrap();
            }
            server.shutdown().await.unwrap();
        };
        let talk = async {
            for i in 0..6 {
                if i % 2 == 1 {
                    client.get_mut().1.refresh_traffic_keys().unwrap();
                }
                let (mut reader, mut writer) = tokio::io::split(client);
                let send = async {
                    writer.write_all(&message(i, 30_000)).await.unwrap();
                    writer.flush().await.unwrap();
                };
                let receive = async {
                    let mut back = vec![0u8; 30_000];
                    reader.read_exact(&mut back).await.unwrap();
                    assert!(back == message(i, 30_000), "message {i}");
                };
                tokio::join!(send, receive);
                client = reader.unsplit(writer);
            }
            client.shutdown().await.unwrap();
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
        };
        tokio::join!(echo, talk);
    }

    /// A reader in one task and a writer in another (`tokio::io::split`): a read must not take
    /// the socket's write wake-up from the writer (tokio keeps one waker per direction), or the
    /// writer, waiting for room, is never woken. Here the server reads everything before it
    /// answers, so the client's reader waits all along while its writer fills the pipe.
    #[tokio::test]
    async fn a_reader_does_not_take_the_writers_wake_up() {
        let (client, mut server) = pair(64, 0).await;
        let (mut reader, mut writer) = tokio::io::split(client);
        const TOTAL: usize = 200_000;
        let write = tokio::spawn(async move {
            writer.write_all(&message(1, TOTAL)).await.unwrap();
            writer.flush().await.unwrap();
            writer
        });
        let read = tokio::spawn(async move {
            let mut answer = [0u8; 4];
            reader.read_exact(&mut answer).await.unwrap();
            assert_eq!(&answer, b"done");
        });
        let serve = tokio::spawn(async move {
            let mut got = vec![0u8; TOTAL];
            server.read_exact(&mut got).await.unwrap();
            assert!(got == message(1, TOTAL));
            server.write_all(b"done").await.unwrap();
            server.flush().await.unwrap();
            server
        });
        let all = async {
            let _writer = write.await.unwrap();
            read.await.unwrap();
            let _server = serve.await.unwrap();
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), all)
            .await
            .expect("the writer was never woken");
    }

    /// A HelloRetryRequest makes rustls ask the certificate resolver twice: the second name
    /// must not be left for the next connection on the thread, which sent none.
    #[tokio::test]
    async fn the_sni_host_name_is_each_connections_own() {
        let group = rustls::crypto::aws_lc_rs::kx_group::SECP384R1;
        let (client_config, server_config) = configs_with(0, Some(group));
        let (a, b) = duplex(65_536);
        let mut client = ClientTlsStream::client(a, client_config.clone(), localhost()).unwrap();
        let mut server = ServerTlsStream::server(b, server_config.clone()).unwrap();
        let (c, s) = tokio::join!(client.handshake(), server.handshake());
        c.unwrap();
        s.unwrap();
        assert_eq!(server.sni_hostname(), Some("localhost"));
        assert_eq!(
            server.tls_state().handshake_kind(),
            Some(rustls::HandshakeKind::FullWithHelloRetryRequest)
        );
        // The next client sends no SNI.
        let mut no_sni = (*client_config).clone();
        no_sni.enable_sni = false;
        let (a, b) = duplex(65_536);
        let mut client = ClientTlsStream::client(a, Arc::new(no_sni), localhost()).unwrap();
        let mut server = ServerTlsStream::server(b, server_config).unwrap();
        let (c, s) = tokio::join!(client.handshake(), server.handshake());
        c.unwrap();
        s.unwrap();
        assert_eq!(server.sni_hostname(), None);
    }

    #[tokio::test]
    async fn reading_or_writing_before_the_handshake_says_what_to_do() {
        let (client_config, _) = configs(0);
        let (a, _b) = duplex(4096);
        let mut client = ClientTlsStream::client(a, client_config, localhost()).unwrap();
        let read = client.read(&mut [0u8; 8]).await.unwrap_err();
        let write = client.write(b"early").await.unwrap_err();
        for e in [read, write] {
            assert_eq!(e.kind(), std::io::ErrorKind::NotConnected, "{e}");
            assert!(e.to_string().contains("handshake()"), "{e}");
        }
    }
}
