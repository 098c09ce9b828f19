//! [`TlsStream`]: the rustls connection and the buffers it works in, and `drive`, one pass of
//! rustls's states (`process_tls_records`) over what was read: application data out to the
//! reader or to `plain`, records to send into the queue. No socket here: the passes that need
//! one are in `socket`, `handshake` and `io`.

use std::fmt;
use std::io;
use std::task::Waker;

use rustls::CommonState;
use rustls::client::UnbufferedClientConnection;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{AppDataRecord, ConnectionState, UnbufferedStatus};
use tokio::io::ReadBuf;

use super::buffers::MAX_ENCRYPT;
use super::records::queue_record;
use super::side::TlsSide;

/// A TLS connection over `S` (usually a `TcpStream`): the client side is
/// [`ClientTlsStream`], the server side [`ServerTlsStream`]. Reads and writes are plaintext.
///
/// As with any buffered writer (and rustls's own streams), records a write queued may wait for
/// the socket until the next write or a flush: flush before waiting to read the answer to what
/// was written (an echo that only writes and reads can otherwise stall both ends). The WebSocket
/// layer flushes by itself.
pub struct TlsStream<S, C: TlsSide> {
    pub(super) io: S,
    pub(super) conn: C,
    /// TLS bytes read and not yet consumed by rustls: `incoming[in_start..in_end]`. Empty (no
    /// allocation) while the connection waits with nothing partial.
    pub(super) incoming: Vec<u8>,
    pub(super) in_start: usize,
    pub(super) in_end: usize,
    /// Whether the last read filled all the room it was given (the next read gets more).
    pub(super) read_filled: bool,
    /// How much of `incoming` has held bytes since it was taken: wiped before it goes back.
    pub(super) dirty: usize,
    /// rustls has taken all it can from what was read and has nothing to hand out: until bytes
    /// arrive, a read goes straight to the socket (a pass over rustls's states costs ~200
    /// instructions, and a 64-byte echo made four).
    pub(super) needs_input: bool,
    /// Decrypted application data not yet read: `plain[plain_start..]`.
    pub(super) plain: Vec<u8>,
    pub(super) plain_start: usize,
    /// Records to send: `outgoing[out_start..out_end]`.
    pub(super) outgoing: Vec<u8>,
    pub(super) out_start: usize,
    pub(super) out_end: usize,
    /// The peer sent close_notify: after what is buffered, reads end cleanly.
    pub(super) peer_closed: bool,
    /// The socket reached its end.
    pub(super) io_eof: bool,
    /// A close_notify is queued (by `poll_shutdown`).
    pub(super) close_notify_queued: bool,
    /// The error that ended the connection, given to every later call.
    pub(super) failed: Option<rustls::Error>,
    /// Server side: the host name the client sent with SNI.
    pub(super) sni: Option<Box<str>>,
    /// The last writer (write, flush, shutdown) that waited for the socket to take the queue.
    /// A read that fails tries the alert with its own waker, which then takes the socket's
    /// write wake-up from that writer (one slot per direction): the read wakes it instead.
    pub(super) waiting_writer: Option<Waker>,
}

/// The client side of a TLS connection.
pub type ClientTlsStream<S> = TlsStream<S, UnbufferedClientConnection>;
/// The server side of a TLS connection.
pub type ServerTlsStream<S> = TlsStream<S, UnbufferedServerConnection>;

/// What a pass over rustls is for.
pub(super) enum Want<'a, 'b> {
    /// Only to advance (the handshake; queued records).
    Nothing,
    /// To fill the reader's buffer.
    Read(&'a mut ReadBuf<'b>),
    /// To hand every record's application data, decrypted in place, to this function
    /// (`TlsSession`: no reader's buffer, no copy).
    Deliver(&'a mut dyn FnMut(&[u8])),
    /// To encrypt this application data.
    Encrypt(&'a [u8]),
    /// To queue a close_notify alert.
    CloseNotify,
}

/// Where a pass over rustls stopped.
pub(super) enum Driven {
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
    pub(super) fn new(io: S, conn: C) -> Self {
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

    pub(super) fn error(&self) -> Option<io::Error> {
        self.failed
            .as_ref()
            .map(|e| io::Error::new(io::ErrorKind::InvalidData, e.clone()))
    }

    /// Advances rustls over what has been read, as far as it goes without the socket, for
    /// `want`. Application data goes to the reader's buffer, or to `plain`; records to send go
    /// to `outgoing`.
    pub(super) fn drive(&mut self, mut want: Want<'_, '_>) -> io::Result<Driven> {
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
                                    Want::Deliver(deliver) if plain.is_empty() => {
                                        deliver(payload);
                                        delivered |= !payload.is_empty();
                                        &[]
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
                    Want::Read(_) | Want::Deliver(_) | Want::Nothing => Some(Ok(Driven::NeedInput)),
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
            if stop.is_none() && *peer_closed && matches!(want, Want::Read(_) | Want::Deliver(_)) {
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

impl<S> ServerTlsStream<S> {
    /// The host name the client sent with SNI, if it sent one.
    pub fn sni_hostname(&self) -> Option<&str> {
        self.sni.as_deref()
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
