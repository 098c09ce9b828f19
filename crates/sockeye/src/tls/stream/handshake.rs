//! Starting a TLS stream (client or server side) and running its handshake: both directions at
//! once, until both Finished messages (RFC 8446 §4.4.4).

use std::io;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::ServerName;
use rustls::server::UnbufferedServerConnection;
use rustls::{ClientConfig, ProtocolVersion, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};

use super::connection::{ClientTlsStream, ServerTlsStream, TlsStream, Want};
use super::side::TlsSide;

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> TlsStream<S, C> {
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

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> TlsStream<S, C> {
    /// Runs the TLS handshake.
    pub async fn handshake(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_handshake(cx)).await
    }
}
