//! [`TransportStream`]: what a connection made by [`connect`](crate::connect) or served by
//! [`Server`](crate::Server) runs over — TCP, TLS over TCP, or a stream of an HTTP/2 connection.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The stream under a connection made by [`connect`](crate::connect) or served by
/// [`Server`](crate::Server): plain TCP for `ws://`, TLS for `wss://`, or one stream of an HTTP/2
/// connection (RFC 8441) over either. Formerly `MaybeTlsStream`, a name that said nothing of
/// HTTP/2.
#[derive(Debug)]
pub enum TransportStream<S = TcpStream> {
    /// Plain TCP.
    Plain(S),
    /// TLS, client side. Boxed, as is `ServerTls`: a rustls connection is ~1 KiB, and unboxed
    /// it would size every plain `ws://` connection's state too. A TLS read or write pays one
    /// pointer chase beside the record's cryptography.
    #[cfg(feature = "tls")]
    ClientTls(Box<crate::tls::stream::connection::ClientTlsStream<S>>),
    /// TLS, server side.
    #[cfg(feature = "tls")]
    ServerTls(Box<crate::tls::stream::connection::ServerTlsStream<S>>),
    /// A stream of an HTTP/2 connection (RFC 8441), over TLS or cleartext TCP.
    #[cfg(feature = "http2")]
    Http2(crate::http2::h2_stream::H2Stream),
}

/// The former name of [`TransportStream`], kept so that code written for it still compiles.
#[deprecated(note = "renamed to TransportStream")]
pub type MaybeTlsStream<S = TcpStream> = TransportStream<S>;

impl TransportStream<TcpStream> {
    /// The TCP stream underneath (for `nodelay`, addresses, socket options). `None` for an
    /// HTTP/2 stream: its TCP connection is shared with other streams and owned by the HTTP/2
    /// connection's task.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            TransportStream::Plain(s) => Some(s),
            #[cfg(feature = "tls")]
            TransportStream::ClientTls(s) => Some(s.get_ref()),
            #[cfg(feature = "tls")]
            TransportStream::ServerTls(s) => Some(s.get_ref()),
            #[cfg(feature = "http2")]
            TransportStream::Http2(_) => None,
        }
    }
}

impl<S> TransportStream<S> {
    /// On a server TLS stream, the host name the client sent with SNI.
    pub fn sni_hostname(&self) -> Option<&str> {
        match self {
            #[cfg(feature = "tls")]
            TransportStream::ServerTls(s) => s.sni_hostname(),
            _ => None,
        }
    }

    /// Whether the stream is encrypted.
    pub fn is_tls(&self) -> bool {
        match self {
            TransportStream::Plain(_) => false,
            #[cfg(feature = "http2")]
            TransportStream::Http2(s) => s.is_tls(),
            #[cfg(feature = "tls")]
            _ => true,
        }
    }

    /// Whether this is a WebSocket over HTTP/2 (RFC 8441) rather than its own connection.
    pub fn is_http2(&self) -> bool {
        #[cfg(feature = "http2")]
        if let TransportStream::Http2(_) = self {
            return true;
        }
        false
    }
}

/// Forwards a call to whichever stream is inside.
macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            TransportStream::Plain($s) => $e,
            #[cfg(feature = "tls")]
            TransportStream::ClientTls($s) => $e,
            #[cfg(feature = "tls")]
            TransportStream::ServerTls($s) => $e,
            #[cfg(feature = "http2")]
            TransportStream::Http2($s) => $e,
        }
    };
}

// The dispatchers are inlined (`always`: a hint alone is lost whenever the code around them
// changes): a read, a write and a flush per message pass through them (callgrind: ~75
// instructions of a 64-byte echo when they are calls).
impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TransportStream<S> {
    #[inline(always)]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        each!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TransportStream<S> {
    #[inline(always)]
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            TransportStream::Plain(s) => s.is_write_vectored(),
            #[cfg(feature = "tls")]
            TransportStream::ClientTls(s) => s.is_write_vectored(),
            #[cfg(feature = "tls")]
            TransportStream::ServerTls(s) => s.is_write_vectored(),
            #[cfg(feature = "http2")]
            TransportStream::Http2(s) => s.is_write_vectored(),
        }
    }

    #[inline(always)]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}
