//! The tokio layer's one error type.

use std::fmt;
use std::io;

use sockeye_proto::{CloseCode, HandshakeError, ProtocolViolation};

/// An error from a Sockeye connection, sorted by who is at fault.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The socket failed (connection refused, reset, broken pipe...).
    Io(io::Error),
    /// The peer violated the WebSocket protocol. The connection was closed with
    /// [`Error::close_code`] before this error was returned.
    Protocol(ProtocolViolation),
    /// The opening handshake failed: a bad request or response, or a refusal (`Rejected`).
    Handshake(HandshakeError),
    /// The TLS handshake failed: unknown issuer, wrong host name, expired certificate, an alert
    /// from the peer, or a bad local certificate or key.
    #[cfg(feature = "tls")]
    Tls(crate::tls::TlsError),
    /// The proxy refused or failed the tunnel, or its URL is invalid.
    Proxy(crate::proxy::ProxyError),
    /// The peer closed the TCP connection without a close frame (reported as 1006, §7.1.5).
    AbnormalClosure,
    /// The connection is closing or closed: nothing more can be sent.
    Closed,
    /// The application asked for something the protocol cannot carry.
    InvalidInput(&'static str),
    /// A deadline passed: `"handshake"`, `"close"`, or `"keepalive"` (the peer did not answer a
    /// keepalive ping in time: it is gone or stuck).
    Timeout(&'static str),
    /// [`WebSocket::try_send`](crate::WebSocket::try_send) found the write buffer at its high-water
    /// mark: the message was not queued. Wait with `send`/`feed`, or drop the message.
    WriteBufferFull,
}

impl Error {
    /// The close code that describes this error (sent to the peer for protocol violations).
    pub fn close_code(&self) -> Option<CloseCode> {
        match self {
            Error::Protocol(v) => Some(v.close_code()),
            Error::AbnormalClosure => Some(CloseCode::ABNORMAL),
            _ => None,
        }
    }

    /// Whether the peer is at fault: a protocol violation, a closure without a close frame, or a
    /// handshake the other side got wrong or refused — not a bad URL or an HTTP/2 requirement the
    /// server does not meet ([`HandshakeError::is_peer_fault`]).
    pub fn is_peer_fault(&self) -> bool {
        match self {
            Error::Protocol(_) | Error::AbnormalClosure => true,
            Error::Handshake(h) => h.is_peer_fault(),
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Protocol(v) if v.is_local_limit() => write!(f, "{v}"),
            Error::Protocol(v) => write!(f, "peer violated the WebSocket protocol: {v}"),
            Error::Handshake(h) => write!(f, "WebSocket handshake failed: {h}"),
            #[cfg(feature = "tls")]
            Error::Tls(t) => write!(f, "TLS failed: {t}"),
            Error::Proxy(p) => write!(f, "proxy: {p}"),
            Error::AbnormalClosure => f.write_str("peer closed the connection without a close frame (1006)"),
            Error::Closed => f.write_str("the connection is closed; no more messages can be sent"),
            Error::InvalidInput(what) => write!(f, "invalid input: {what}"),
            Error::Timeout(what) => write!(f, "timed out waiting for the {what}"),
            Error::WriteBufferFull => {
                f.write_str("the write buffer is full (the peer reads slowly); the message was not queued")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Handshake(h) => Some(h),
            Error::Proxy(p) => Some(p),
            #[cfg(feature = "tls")]
            Error::Tls(t) => Some(t),
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
            return Error::Tls(crate::tls::TlsError::from_rustls(tls));
        }
        Error::Io(e)
    }
}

impl From<crate::proxy::ProxyError> for Error {
    fn from(p: crate::proxy::ProxyError) -> Self {
        Error::Proxy(p)
    }
}

impl From<HandshakeError> for Error {
    fn from(h: HandshakeError) -> Self {
        Error::Handshake(h)
    }
}

impl From<sockeye_proto::Error> for Error {
    fn from(e: sockeye_proto::Error) -> Self {
        match e {
            sockeye_proto::Error::Protocol(v) => Error::Protocol(v),
            sockeye_proto::Error::Handshake(h) => Error::Handshake(h),
            sockeye_proto::Error::Closed => Error::Closed,
            sockeye_proto::Error::InvalidInput(what) => Error::InvalidInput(what),
        }
    }
}
