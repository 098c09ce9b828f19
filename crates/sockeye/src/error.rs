//! The tokio layer's one error type: what the engine reports, plus what only the I/O layer can
//! see (the socket, TLS, the proxy, the write buffer). The engine's errors are carried, not
//! mirrored: their text, close codes and fault are the engine's.

use std::fmt;
use std::io;

use sockeye_proto::{CloseCode, HandshakeError, ProtocolViolation};

use crate::proxy::error::ProxyError;
#[cfg(feature = "tls")]
use crate::tls::error::TlsError;

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
    /// handshake, a connection closed without a close frame (1006), a send on a closed
    /// connection, input the protocol cannot carry. (Its timeouts are [`Error::Timeout`].)
    WebSocket(sockeye_proto::Error),
    /// A deadline passed; the cause says which, and which setting bounds it.
    Timeout(TimeoutCause),
    /// The stream or reader a message was being sent from failed
    /// ([`WebSocket::send_stream`](crate::WebSocket::send_stream),
    /// [`send_reader`](crate::WebSocket::send_reader)). If part of the message had gone out,
    /// the connection is being closed with 1011: a message cannot be abandoned halfway.
    Source(Box<dyn std::error::Error + Send + Sync>),
}

/// Which deadline passed, in an [`Error::Timeout`]. More may come (a match needs a `_` arm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeoutCause {
    /// The opening handshake (connecting, through a proxy if any, TLS, the HTTP/1.1 upgrade or
    /// the HTTP/2 preface) did not finish within [`Config::handshake_timeout`](crate::Config).
    Handshake,
    /// The closing handshake did not finish within
    /// [`ProtocolConfig::close_timeout`](crate::ProtocolConfig::close_timeout): the peer did not
    /// answer our close frame, or did not close the connection after it.
    Close,
    /// The peer did not answer a keepalive ping within
    /// [`ProtocolConfig::keepalive_timeout`](crate::ProtocolConfig::keepalive_timeout): it is gone
    /// or stuck.
    Keepalive,
}

impl TimeoutCause {
    /// The engine's name for a deadline (`sockeye_proto::Error::Timeout`'s text), and the one
    /// this layer gives the handshake's.
    fn from_name(name: &str) -> Option<TimeoutCause> {
        match name {
            "handshake" => Some(TimeoutCause::Handshake),
            "close" => Some(TimeoutCause::Close),
            "keepalive" => Some(TimeoutCause::Keepalive),
            _ => None,
        }
    }
}

impl fmt::Display for TimeoutCause {
    /// What was awaited, and what to change if the wait was too short.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutCause::Handshake => {
                "timed out waiting for the handshake (Config::handshake_timeout sets the limit)"
            }
            TimeoutCause::Close => {
                "timed out waiting for the close: the peer did not finish the closing handshake \
                 (ProtocolConfig::close_timeout sets the limit)"
            }
            TimeoutCause::Keepalive => {
                "timed out waiting for the keepalive: the peer did not answer a ping, so it is gone \
                 or stuck (ProtocolConfig::keepalive_timeout sets the limit)"
            }
        })
    }
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
    /// An error of the protocol engine that this version of Sockeye does not sort into the other
    /// kinds (one added to the engine after it): see the error's text and
    /// [`Error::WebSocket`]'s value. Never [`InvalidInput`](Self::InvalidInput), which is only for
    /// the application's own mistakes.
    Other,
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
            Error::Timeout(_) => ErrorKind::Timeout,
            // Each of the engine's errors by name: one it adds later is `Other` until sorted
            // here, never taken for the application's mistake.
            Error::WebSocket(e) => match e {
                sockeye_proto::Error::Protocol(_) => ErrorKind::Protocol,
                sockeye_proto::Error::Handshake(_) => ErrorKind::Handshake,
                sockeye_proto::Error::AbnormalClosure => ErrorKind::AbnormalClosure,
                sockeye_proto::Error::Timeout(_) => ErrorKind::Timeout,
                sockeye_proto::Error::Closed => ErrorKind::Closed,
                sockeye_proto::Error::Compression(_) => ErrorKind::Compression,
                sockeye_proto::Error::InvalidInput(_) => ErrorKind::InvalidInput,
                _ => ErrorKind::Other,
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

    /// Which deadline passed, for an [`Error::Timeout`].
    pub fn timeout(&self) -> Option<TimeoutCause> {
        match self {
            Error::Timeout(cause) => Some(*cause),
            _ => None,
        }
    }

    pub(crate) fn timed_out(cause: TimeoutCause) -> Self {
        Error::Timeout(cause)
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
            Error::Timeout(cause) => cause.fmt(f),
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
    /// The engine's timeouts (named by a string there) become [`Error::Timeout`].
    #[inline]
    fn from(e: sockeye_proto::Error) -> Self {
        match e {
            sockeye_proto::Error::Timeout(name) => Error::engine_timeout(name),
            e => Error::WebSocket(e),
        }
    }
}

impl Error {
    /// An engine's timeout, by its name. Out of line and cold: it keeps the conversion that
    /// every `?` on an engine call inlines as small as the move it was (inline, the receive
    /// path's code grew with it: +34 instructions per 64-byte echo, client and server together,
    /// callgrind).
    #[cold]
    #[inline(never)]
    fn engine_timeout(name: &'static str) -> Error {
        match TimeoutCause::from_name(name) {
            Some(cause) => Error::Timeout(cause),
            None => Error::WebSocket(sockeye_proto::Error::Timeout(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_timeouts_name_their_cause_and_the_setting() {
        for (name, cause, setting) in [
            ("close", TimeoutCause::Close, "close_timeout"),
            ("keepalive", TimeoutCause::Keepalive, "keepalive_timeout"),
            ("handshake", TimeoutCause::Handshake, "handshake_timeout"),
        ] {
            let e = Error::from(sockeye_proto::Error::Timeout(name));
            assert!(matches!(e, Error::Timeout(c) if c == cause), "{e:?}");
            assert_eq!(e.timeout(), Some(cause));
            assert_eq!(e.kind(), ErrorKind::Timeout);
            assert!(e.to_string().contains(setting), "{e}");
            assert!(!e.is_peer_fault() && e.close_code().is_none());
        }
        // A deadline the engine may add later is still a timeout, carried as it came.
        let unknown = Error::from(sockeye_proto::Error::Timeout("something new"));
        assert_eq!(unknown.kind(), ErrorKind::Timeout);
        assert_eq!(unknown.timeout(), None);
    }

    #[test]
    fn only_the_applications_mistakes_are_invalid_input() {
        let kind = |e: sockeye_proto::Error| Error::from(e).kind();
        assert_eq!(
            kind(sockeye_proto::Error::InvalidInput("x")),
            ErrorKind::InvalidInput
        );
        assert_eq!(kind(sockeye_proto::Error::Closed), ErrorKind::Closed);
        assert_eq!(
            kind(sockeye_proto::Error::AbnormalClosure),
            ErrorKind::AbnormalClosure
        );
        assert_eq!(
            kind(sockeye_proto::Error::Compression("x".into())),
            ErrorKind::Compression
        );
        assert_eq!(
            kind(sockeye_proto::Error::Protocol(ProtocolViolation::InvalidUtf8)),
            ErrorKind::Protocol
        );
        assert_eq!(
            kind(sockeye_proto::Error::Handshake(HandshakeError::AcceptMismatch)),
            ErrorKind::Handshake
        );
    }
}
