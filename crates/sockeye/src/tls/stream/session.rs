//! [`TlsSession`]: a TLS connection without a socket, for a loop that moves the bytes itself
//! (`sockeye-loop`'s server). Bytes read go in; application data comes out decrypted in place;
//! records to send are taken out. The state and the pass over rustls (`drive`) are
//! [`TlsStream`]'s, so the two cannot drift apart.

use std::fmt;
use std::io;
use std::sync::Arc;

use rustls::server::UnbufferedServerConnection;
use rustls::{CommonState, ServerConfig};
use tokio_rustls::TlsAcceptor;

use super::buffers;
use super::connection::{Driven, TlsStream, Want};
use super::side::TlsSide;

/// TLS over bytes the caller reads and writes: the sans-I/O form of [`TlsStream`], with the
/// same buffers (given back to a per-thread pool while the connection waits).
///
/// ```
/// # fn demo(config: std::sync::Arc<rustls::ServerConfig>, read: &[u8]) -> std::io::Result<()> {
/// use sockeye::tls::ServerTlsSession;
///
/// let mut tls = ServerTlsSession::new(config).map_err(std::io::Error::other)?;
/// let mut request = Vec::new();
/// // Bytes from the socket; application data, decrypted, for the WebSocket layer.
/// tls.receive(read, &mut |plain| request.extend_from_slice(plain))?;
/// // What to write to the socket: handshake flights, alerts, encrypted data.
/// let mut to_write = Vec::new();
/// tls.take_outgoing(&mut to_write);
/// # Ok(()) }
/// ```
pub struct TlsSession<C: TlsSide>(TlsStream<(), C>);

/// The server side of a [`TlsSession`].
pub type ServerTlsSession = TlsSession<UnbufferedServerConnection>;

impl ServerTlsSession {
    /// A server session, before the client's first byte. Use a config from
    /// [`ServerTlsSession::config`] to learn the SNI host name and keep HTTP/2 out of ALPN.
    pub fn new(config: Arc<ServerConfig>) -> Result<Self, rustls::Error> {
        Ok(TlsSession(TlsStream::new(
            (),
            UnbufferedServerConnection::new(config)?,
        )))
    }

    /// The config to make server sessions with, from `acceptor`'s (for instance
    /// [`ServerTls::acceptor`](crate::tls::ServerTls::acceptor)): ALPN without `h2` (a
    /// session carries HTTP/1.1 only), the SNI host name noted for
    /// [`sni_hostname`](Self::sni_hostname), no 0-RTT data. Made once per server: certificate
    /// reloads through `ServerTls` still reach it.
    pub fn config(acceptor: &TlsAcceptor) -> Arc<ServerConfig> {
        crate::tls::server::server_config(acceptor, false)
    }

    /// The host name the client sent with SNI, if it sent one.
    pub fn sni_hostname(&self) -> Option<&str> {
        self.0.sni.as_deref()
    }
}

impl<C: TlsSide> TlsSession<C> {
    /// Bytes read from the peer. Each record's application data is handed to `deliver`, in
    /// order, once whole; handshake answers and alerts are queued to send
    /// ([`take_outgoing`](Self::take_outgoing)). A partial record waits for the next call.
    ///
    /// An error ends the session (a bad record, a failed handshake, a record or handshake
    /// message over 128 KiB): the alert that tells the peer is queued, and every later call
    /// returns the same error. Data before the failure was delivered.
    pub fn receive(&mut self, mut bytes: &[u8], deliver: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        let tls = &mut self.0;
        loop {
            // 0-RTT data, when a config allows it, waits here until the handshake reads on.
            if tls.plain_start < tls.plain.len() {
                deliver(&tls.plain[tls.plain_start..]);
                tls.plain = Vec::new();
                tls.plain_start = 0;
            }
            if bytes.is_empty() || tls.peer_closed {
                return match tls.error() {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
            }
            tls.make_read_room()?;
            let room = &mut tls.incoming[tls.in_end..];
            let (n, capacity) = (room.len().min(bytes.len()), room.len());
            room[..n].copy_from_slice(&bytes[..n]);
            tls.note_read(n, capacity);
            bytes = &bytes[n..];
            match tls.drive(Want::Deliver(deliver))? {
                Driven::Closed => tls.peer_closed = true,
                Driven::Delivered | Driven::NeedInput | Driven::Encrypted(_) => {}
            }
        }
    }

    /// Encrypts application data into records to send: how much was taken, all of it once the
    /// handshake is done, nothing before.
    pub fn encrypt(&mut self, mut plain: &[u8]) -> io::Result<usize> {
        let mut taken = 0;
        while !plain.is_empty() && !self.0.close_notify_queued {
            match self.0.drive(Want::Encrypt(plain))? {
                Driven::Encrypted(n) if n > 0 => {
                    taken += n;
                    plain = &plain[n..];
                }
                _ => break,
            }
        }
        Ok(taken)
    }

    /// Queues the close_notify alert (RFC 8446 §6.1): nothing is encrypted after it. `false`
    /// while the handshake runs (nothing is queued then) or once the session failed.
    pub fn close_notify(&mut self) -> bool {
        if !self.0.close_notify_queued {
            self.0.close_notify_queued = matches!(self.0.drive(Want::CloseNotify), Ok(Driven::Encrypted(_)));
        }
        self.0.close_notify_queued
    }

    /// Appends the records queued to send to `out`, and empties the queue.
    pub fn take_outgoing(&mut self, out: &mut Vec<u8>) {
        let tls = &mut self.0;
        out.extend_from_slice(&tls.outgoing[tls.out_start..tls.out_end]);
        tls.out_start = 0;
        tls.out_end = 0;
    }

    /// How many bytes of records wait in the queue.
    pub fn outgoing_len(&self) -> usize {
        self.0.out_end - self.0.out_start
    }

    /// The connection waits: the receive buffer goes back to the thread's pool unless a
    /// partial record is in it, the send buffer too once empty.
    pub fn idle(&mut self) {
        let tls = &mut self.0;
        tls.release_idle_incoming();
        if tls.out_start == tls.out_end && !tls.outgoing.is_empty() {
            buffers::put(std::mem::take(&mut tls.outgoing));
            tls.out_start = 0;
            tls.out_end = 0;
        }
    }

    /// Whether the handshake is still running.
    pub fn is_handshaking(&self) -> bool {
        self.0.conn.is_handshaking()
    }

    /// Whether the peer sent its close_notify (nothing more will be delivered).
    pub fn peer_closed(&self) -> bool {
        self.0.peer_closed
    }

    /// Whether the session failed (the error every call now returns).
    pub fn is_failed(&self) -> bool {
        self.0.failed.is_some()
    }

    /// The TLS session's state: the negotiated version, cipher suite and ALPN protocol, the
    /// peer's certificates.
    pub fn tls_state(&self) -> &CommonState {
        &self.0.conn
    }
}

impl<C: TlsSide> fmt::Debug for TlsSession<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TlsSession").field(&self.0).finish()
    }
}
