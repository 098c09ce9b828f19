//! `wss://` on the loop: a connection's TLS session ([`sockeye::tls::ServerTlsSession`], the
//! tokio layer's TLS state and rustls pass without a socket) between the socket and the
//! connection. Bytes read are decrypted in place and handed on; what the connection queues (the
//! handshake's response, then the engine's frames) is sealed into records here, small frames
//! gathered into one record, and the records are what the loop writes.

use std::cell::RefCell;
use std::io;
use std::sync::Arc;

use bytes::Buf;
use sockeye::tls::ServerTlsSession;
use sockeye::tls::rustls::ServerConfig;
use sockeye_proto::Transmit;

/// Records sealed ahead of the socket, at most: the rest waits in the engine's queue, counted
/// against its high water mark as it is. Two full records, as the tokio stream encrypts per
/// write: the peer starts decrypting while the next records are sealed. (1 MiB echo over wss,
/// io_uring, against the tokio server in the same run: 256 KiB ahead 0.75×, 64 KiB 0.89×, 32 KiB
/// 0.93×.)
const SEALED_AHEAD: usize = 32 << 10;
/// A piece of the engine's queue this large is encrypted where it is; smaller ones are gathered
/// (a frame's header and a small payload are two pieces: one record, not two).
const GATHER_BELOW: usize = 4 << 10;
/// Gathered plaintext is encrypted once it reaches this (a full record: RFC 8446 §5.1).
const RECORD: usize = 16 << 10;

thread_local! {
    /// Where a loop thread gathers small pieces before encrypting them together.
    static GATHERED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A connection's TLS: the session and the records sealed for the socket.
#[derive(Debug)]
pub(crate) struct Tls {
    session: ServerTlsSession,
    /// Records to write, in order: the loop writes from this and drains it.
    pub(crate) sealed: Vec<u8>,
    /// close_notify was queued, or cannot be any more.
    notified: bool,
}

impl Tls {
    /// The server name the client asked for (SNI), once the handshake has it.
    pub(crate) fn sni_hostname(&self) -> Option<&str> {
        self.session.sni_hostname()
    }

    pub(crate) fn new(config: &Arc<ServerConfig>) -> io::Result<Self> {
        let session = ServerTlsSession::new(config.clone()).map_err(io::Error::other)?;
        Ok(Tls {
            session,
            sealed: Vec::new(),
            notified: false,
        })
    }

    /// Bytes read: application data to `deliver`, records rustls answers with to `sealed`.
    pub(crate) fn receive(&mut self, bytes: &[u8], deliver: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        let received = self.session.receive(bytes, deliver);
        self.session.take_outgoing(&mut self.sealed);
        received
    }

    pub(crate) fn is_handshaking(&self) -> bool {
        self.session.is_handshaking()
    }

    /// The peer sent close_notify: nothing more comes.
    pub(crate) fn peer_closed(&self) -> bool {
        self.session.peer_closed()
    }

    /// Whether close_notify is still to be sent.
    pub(crate) fn owes_close_notify(&self) -> bool {
        !self.notified
    }

    /// Seals `head` (written whole, then cleared) and then the engine's queue, up to
    /// `SEALED_AHEAD` bytes of records waiting.
    pub(crate) fn seal(&mut self, head: &mut Vec<u8>, transmit: Option<&mut Transmit>) -> io::Result<()> {
        GATHERED.with_borrow_mut(|gathered| {
            let result = self.seal_gathering(head, transmit, gathered);
            gathered.clear();
            result
        })
    }

    fn seal_gathering(
        &mut self,
        head: &mut Vec<u8>,
        transmit: Option<&mut Transmit>,
        gathered: &mut Vec<u8>,
    ) -> io::Result<()> {
        gathered.append(head);
        if let Some(transmit) = transmit {
            while transmit.has_remaining() && self.sealed.len() < SEALED_AHEAD {
                let chunk = transmit.chunk();
                if chunk.len() < GATHER_BELOW {
                    gathered.extend_from_slice(chunk);
                    transmit.advance(chunk.len());
                    if gathered.len() >= RECORD {
                        self.flush(gathered)?;
                    }
                } else {
                    self.flush(gathered)?;
                    let n = chunk.len().min(SEALED_AHEAD);
                    self.encrypt(&transmit.chunk()[..n])?;
                    transmit.advance(n);
                }
            }
        }
        self.flush(gathered)
    }

    /// Encrypts what was gathered into `sealed`, and empties it.
    fn flush(&mut self, gathered: &mut Vec<u8>) -> io::Result<()> {
        self.encrypt(gathered)?;
        gathered.clear();
        Ok(())
    }

    /// Encrypts all of `plain` into `sealed`.
    fn encrypt(&mut self, plain: &[u8]) -> io::Result<()> {
        if !plain.is_empty() {
            let taken = self.session.encrypt(plain)?;
            if taken < plain.len() {
                // Only while the handshake runs, and nothing is sealed before it ends.
                return Err(io::Error::other(
                    "TLS: application data queued before the handshake ended",
                ));
            }
            self.session.take_outgoing(&mut self.sealed);
        }
        Ok(())
    }

    /// Queues close_notify (RFC 8446 §6.1) before the transport's writing side is shut down.
    pub(crate) fn close_notify(&mut self) {
        self.notified = true;
        if self.session.close_notify() {
            self.session.take_outgoing(&mut self.sealed);
        }
    }

    /// The connection failed (TLS or the engine): no close_notify is owed any more.
    pub(crate) fn give_up(&mut self) {
        self.notified = true;
    }

    /// The connection waits: buffers go back to the thread's pool.
    pub(crate) fn idle(&mut self) {
        self.session.idle();
        if self.sealed.is_empty() {
            self.sealed = Vec::new();
        }
    }
}
