//! The tokio layer's one error type: what the engine reports, plus what only the I/O layer can
//! see (the socket, TLS, the proxy, the write buffer). The engine's errors are carried, not
//! mirrored: their text, close codes and fault are the engine's.

use std::fmt;
use std::io;

use sockeye_proto::{CloseCode, HandshakeError, ProtocolViolation};

use crate::proxy_error::ProxyError;
#[cfg(feature = "tls")]
use crate::tls_error::TlsError;

/// An error from a Sockeye connection.
///
/// Match on [`kind`](Self::kind) for the broad class, or on the variants for the details:
///
/// ```
/// # fn report(e: &sockeye::Error) -> &'static str {
/// use sockeye::ErrorKind;
/// match e.kind() {
///     ErrorKind::Timeout => "the peer stopped answering",
///     ErrorKind::Protocol | ErrorKind::AbnormalClosure => "the peer misbehaved",
///     _ if e.is_peer_fault() => "the peer's fault",
///     _ => "ours, or the network's",
/// }
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The socket failed (connection refused, reset, broken pipe...). Errors while connecting
    /// name the address (and the proxy) that was tried.
    Io(io::Error),
    /// The TLS handshake failed: unknown issuer, wrong host name, expired certificate, an alert
    /// from the peer, or a bad local certificate or key.
    #[cfg(feature = "tls")]
    Tls(TlsError),
    /// The proxy refused or failed the tunnel, or its URL is invalid.
    Proxy(ProxyError),
    /// [`WebSocket::try_send`](crate::WebSocket::try_send) found the write buffer at its high-water
    /// mark: the message was not queued. Wait with `send`/`feed`, or drop the message.
    WriteBufferFull,
    /// What the protocol engine reports: a protocol violation by the peer, a failed opening
    /// handshake, a connection closed without a close frame (1006), a timeout (`"handshake"`,
    /// `"close"`, `"keepalive"`), a send on a closed connection, input the protocol cannot carry.
    WebSocket(sockeye_proto::Error),
    /// The stream or reader a message was being sent from failed
    /// ([`WebSocket::send_stream`](crate::WebSocket::send_stream),
    /// [`send_reader`](crate::WebSocket::send_reader)). If part of the message had gone out,
    /// the connection is being closed with 1011: a message cannot be abandoned halfway.
    Source(Box<dyn std::error::Error + Send + Sync>),
}

/// The broad class of an [`Error`], for matching without the details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The socket failed.
    Io,
    /// TLS failed.
    Tls,
    /// The proxy failed.
    Proxy,
    /// The peer broke the WebSocket protocol (RFC 6455); the connection was failed with the
    /// matching close code.
    Protocol,
    /// The opening handshake failed, or the URL is invalid.
    Handshake,
    /// The peer closed the connection without a close frame (1006).
    AbnormalClosure,
    /// A deadline passed.
    Timeout,
    /// The connection is closing or closed: nothing more can be sent.
    Closed,
    /// The application asked for something the protocol cannot carry.
    InvalidInput,
    /// The write buffer is at its high-water mark.
    WriteBufferFull,
    /// Compressing a message failed.
    Compression,
    /// The source a message was being sent from failed.
    Source,
}

impl Error {
    /// The broad class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io(_) => ErrorKind::Io,
            #[cfg(feature = "tls")]
            Error::Tls(_) => ErrorKind::Tls,
            Error::Proxy(_) => ErrorKind::Proxy,
            Error::WriteBufferFull => ErrorKind::WriteBufferFull,
            Error::Source(_) => ErrorKind::Source,
            Error::WebSocket(e) => match e {
                sockeye_proto::Error::Protocol(_) => ErrorKind::Protocol,
                sockeye_proto::Error::Handshake(_) => ErrorKind::Handshake,
                sockeye_proto::Error::AbnormalClosure => ErrorKind::AbnormalClosure,
                sockeye_proto::Error::Timeout(_) => ErrorKind::Timeout,
                sockeye_proto::Error::Closed => ErrorKind::Closed,
                sockeye_proto::Error::Compression(_) => ErrorKind::Compression,
                _ => ErrorKind::InvalidInput,
            },
        }
    }

    /// The close code that describes this error (sent to the peer for protocol violations).
    pub fn close_code(&self) -> Option<CloseCode> {
        match self {
            Error::WebSocket(e) => e.close_code(),
            _ => None,
        }
    }

    /// Whether the peer is at fault: a protocol violation, a bad handshake answer, a connection
    /// dropped without a close frame. Not the network's failures, ours, or a timeout.
    pub fn is_peer_fault(&self) -> bool {
        match self {
            Error::WebSocket(e) => e.is_peer_fault(),
            _ => false,
        }
    }

    /// The protocol violation, when the peer broke RFC 6455.
    pub fn protocol_violation(&self) -> Option<&ProtocolViolation> {
        match self {
            Error::WebSocket(sockeye_proto::Error::Protocol(v)) => Some(v),
            _ => None,
        }
    }

    /// Why the opening handshake failed, when it did.
    pub fn handshake_error(&self) -> Option<&HandshakeError> {
        match self {
            Error::WebSocket(sockeye_proto::Error::Handshake(h)) => Some(h),
            _ => None,
        }
    }

    /// Which deadline passed: `"handshake"`, `"close"` or `"keepalive"`.
    pub fn timeout(&self) -> Option<&'static str> {
        match self {
            Error::WebSocket(sockeye_proto::Error::Timeout(what)) => Some(what),
            _ => None,
        }
    }

    pub(crate) fn timed_out(what: &'static str) -> Self {
        Error::WebSocket(sockeye_proto::Error::Timeout(what))
    }

    pub(crate) fn closed() -> Self {
        Error::WebSocket(sockeye_proto::Error::Closed)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {e}"),
            #[cfg(feature = "tls")]
            Error::Tls(t) => write!(f, "TLS failed: {t}"),
            Error::Proxy(p) => write!(f, "proxy: {p}"),
            Error::WriteBufferFull => {
                f.write_str("the write buffer is full (the peer reads slowly); the message was not queued")
            }
            Error::WebSocket(e) => e.fmt(f),
            Error::Source(e) => write!(f, "the message's source failed: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Proxy(p) => Some(p),
            #[cfg(feature = "tls")]
            Error::Tls(t) => Some(t),
            Error::WebSocket(sockeye_proto::Error::Handshake(h)) => Some(h),
            Error::Source(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    /// TLS failures reach us as I/O errors wrapping a `rustls::Error` (also after the handshake:
    /// with TLS 1.3 a server refuses a client certificate after the client has finished); they
    /// become [`Error::Tls`] so that callers can tell what went wrong.
    fn from(e: io::Error) -> Self {
        #[cfg(feature = "tls")]
        if let Some(tls) = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Error::Tls(TlsError::from_rustls(tls));
        }
        Error::Io(e)
    }
}

impl From<ProxyError> for Error {
    fn from(p: ProxyError) -> Self {
        Error::Proxy(p)
    }
}

#[cfg(feature = "tls")]
impl From<TlsError> for Error {
    fn from(t: TlsError) -> Self {
        Error::Tls(t)
    }
}

impl From<HandshakeError> for Error {
    fn from(h: HandshakeError) -> Self {
        Error::WebSocket(sockeye_proto::Error::Handshake(h))
    }
}

impl From<ProtocolViolation> for Error {
    fn from(v: ProtocolViolation) -> Self {
        Error::WebSocket(sockeye_proto::Error::Protocol(v))
    }
}

impl From<sockeye_proto::Error> for Error {
    fn from(e: sockeye_proto::Error) -> Self {
        Error::WebSocket(e)
    }
}
