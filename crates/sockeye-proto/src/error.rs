//! The engine's one error type, sorted by who is at fault, and the single place where peer errors
//! become close codes (RFC 6455 §7.4.1).

use std::fmt;

use crate::frame::close_code::CloseCode;

/// An error from the engine.
///
/// - [`Error::Protocol`]: the peer broke RFC 6455; the connection has queued a close frame with
///   [`Error::close_code`] and waits for the peer's reply. Keep driving it until it is closed.
/// - [`Error::Handshake`]: the opening handshake failed (a bad request, a bad or refusing response).
/// - [`Error::Closed`] and [`Error::InvalidInput`]: the local application asked for something that
///   cannot be done; the connection is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The peer violated the protocol.
    Protocol(ProtocolViolation),
    /// The transport ended without a closing handshake (reported as 1006, §7.1.5).
    AbnormalClosure,
    /// A deadline passed: `"close"` (the closing handshake took longer than
    /// [`Config::close_timeout`](crate::Config::close_timeout)), `"keepalive"` (the peer did not
    /// answer a keepalive ping in time: it is gone or stuck), or, in the I/O layer, `"handshake"`.
    Timeout(&'static str),
    /// Compressing an outgoing message failed; the connection cannot go on.
    Compression(String),
    /// The opening handshake failed.
    Handshake(HandshakeError),
    /// The connection is closing or closed: no more messages may be sent.
    Closed,
    /// The application passed something the protocol cannot carry (e.g. a 126-byte ping).
    InvalidInput(&'static str),
}

impl Error {
    /// The close code that reports this error to the peer, when the peer is at fault.
    pub fn close_code(&self) -> Option<CloseCode> {
        match self {
            Error::Protocol(v) => Some(v.close_code()),
            Error::AbnormalClosure => Some(CloseCode::ABNORMAL),
            Error::Compression(_) => Some(CloseCode::INTERNAL_ERROR),
            _ => None,
        }
    }

    /// Whether the peer is at fault: a protocol violation, or a handshake the other side got wrong
    /// or refused (see [`HandshakeError::is_peer_fault`]).
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
            Error::Protocol(v) if v.is_local_limit() => write!(f, "{v}"),
            Error::Protocol(v) => write!(f, "peer violated the WebSocket protocol: {v}"),
            Error::Handshake(h) => write!(f, "WebSocket handshake failed: {h}"),
            Error::AbnormalClosure => f.write_str("peer closed the connection without a close frame (1006)"),
            Error::Timeout(what) => write!(f, "timed out waiting for the {what}"),
            Error::Compression(why) => write!(f, "compressing a message failed: {why}"),
            Error::Closed => f.write_str("the connection is closed; no more messages can be sent"),

            Error::InvalidInput(what) => write!(f, "invalid input: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ProtocolViolation> for Error {
    fn from(v: ProtocolViolation) -> Self {
        Error::Protocol(v)
    }
}

impl From<HandshakeError> for Error {
    fn from(h: HandshakeError) -> Self {
        Error::Handshake(h)
    }
}

/// What the peer did that RFC 6455 forbids. More may come (a match needs a `_` arm).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolViolation {
    /// An opcode reserved for future use (§5.2).
    ReservedOpCode(u8),
    /// RSV bits set that no negotiated extension defines (§5.2).
    ReservedBits(u8),
    /// A 64-bit length with its most significant bit set (§5.2).
    LengthTooLarge,
    /// A control frame without FIN (§5.5).
    FragmentedControlFrame,
    /// A control frame with more than 125 bytes of payload (§5.5).
    ControlFrameTooLong,
    /// A client sent an unmasked frame (§5.1).
    UnmaskedFrame,
    /// A server sent a masked frame (§5.1).
    MaskedFrame,
    /// A continuation frame with no message in progress (§5.4).
    UnexpectedContinuation,
    /// A new text or binary frame while a fragmented message was in progress (§5.4).
    ExpectedContinuation,
    /// A text message, or a close reason, that is not valid UTF-8 (§8.1).
    InvalidUtf8,
    /// A close frame with a one-byte payload (§5.5.1).
    CloseFrameTooShort,
    /// A close frame with a status code that may not be sent (§7.4).
    InvalidCloseCode(u16),
    /// A frame or message larger than the configured limit.
    MessageTooBig {
        /// The size the peer announced or reached.
        size: u64,
        /// The configured limit.
        limit: usize,
    },
    /// A compressed message that could not be decompressed (RFC 7692 §6.2).
    Decompression(String),
}

impl ProtocolViolation {
    /// The close code that reports this violation (§7.4.1): 1007 for bad UTF-8 and undecodable
    /// compressed data, 1009 for size limits, 1002 for everything else.
    pub fn close_code(&self) -> CloseCode {
        match self {
            ProtocolViolation::InvalidUtf8 | ProtocolViolation::Decompression(_) => {
                CloseCode::INVALID_PAYLOAD
            }
            ProtocolViolation::MessageTooBig { .. } => CloseCode::MESSAGE_TOO_BIG,
            _ => CloseCode::PROTOCOL_ERROR,
        }
    }
}

impl ProtocolViolation {
    /// Whether the peer went past a limit of this endpoint's configuration
    /// ([`MessageTooBig`](Self::MessageTooBig)) rather than against a rule of RFC 6455: the message
    /// names the limit and how to raise it, and says nothing of a protocol violation.
    pub fn is_local_limit(&self) -> bool {
        matches!(self, Self::MessageTooBig { .. })
    }
}

impl fmt::Display for ProtocolViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReservedOpCode(op) => write!(f, "reserved opcode {op:#x}"),
            Self::ReservedBits(bits) => write!(f, "reserved bits {bits:#05b} set without an extension"),
            Self::LengthTooLarge => f.write_str("64-bit payload length with the high bit set"),
            Self::FragmentedControlFrame => f.write_str("fragmented control frame"),
            Self::ControlFrameTooLong => f.write_str("control frame payload over 125 bytes"),
            Self::UnmaskedFrame => f.write_str("unmasked frame from a client"),
            Self::MaskedFrame => f.write_str("masked frame from a server"),
            Self::UnexpectedContinuation => f.write_str("continuation frame with no message in progress"),
            Self::ExpectedContinuation => f.write_str("new message started inside a fragmented message"),
            Self::InvalidUtf8 => f.write_str("invalid UTF-8 in a text message or close reason"),
            Self::CloseFrameTooShort => f.write_str("close frame with a one-byte payload"),
            Self::InvalidCloseCode(c) => write!(f, "close code {c} may not be sent"),
            // The same variant reports max_frame_size (one frame) and max_message_size.
            Self::MessageTooBig { size, limit } => write!(
                f,
                "message of {size} bytes exceeds this endpoint's limit of {limit} bytes \
                 (max_message_size, or max_frame_size for one frame: raise it in the Config to accept it)"
            ),
            Self::Decompression(why) => write!(f, "compressed message could not be inflated: {why}"),
        }
    }
}

/// Why an opening handshake (RFC 6455 §4) failed. More may come (a match needs a `_` arm).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The request or response is not valid HTTP/1.1.
    MalformedHttp(String),
    /// The request or response head is larger than the configured limit.
    HeadTooLarge {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// The request or response has more headers than the configured limit.
    TooManyHeaders {
        /// The configured limit.
        limit: usize,
    },
    /// The request method is not GET (§4.2.1).
    MethodNotGet,
    /// An HTTP/2 request that is not an extended CONNECT (RFC 8441 §4).
    MethodNotConnect,
    /// The request is not HTTP/1.1 or later.
    UnsupportedHttpVersion,
    /// A required header is missing or does not have the required value.
    MissingHeader(&'static str),
    /// A header has a value that is not allowed.
    InvalidHeader(&'static str),
    /// The client asked for a WebSocket version other than 13 (§4.4).
    UnsupportedVersion,
    /// The server answered with a status other than 101.
    Rejected {
        /// The HTTP status code.
        status: u16,
        /// The reason phrase, if any.
        reason: String,
    },
    /// The server's Sec-WebSocket-Accept does not match the key we sent (§4.1).
    AcceptMismatch,
    /// The server chose a subprotocol the client did not offer (§4.1).
    UnexpectedSubprotocol(String),
    /// The server answered with an extension the client did not offer or cannot accept (§4.1, §9.1).
    UnexpectedExtension(String),
    /// The server's answer to an extension offer breaks the extension's rules (e.g. RFC 7692 §7.1).
    ExtensionRejected(String),
    /// The URL cannot be used for a WebSocket connection.
    InvalidUrl(String),
    /// HTTP/2 was required but the server does not offer WebSockets over it (no ALPN `h2`, or no
    /// `SETTINGS_ENABLE_CONNECT_PROTOCOL`, RFC 8441 §3). The text says which.
    Http2Unavailable(&'static str),
}

impl HandshakeError {
    /// The HTTP status a server answers a failed request with (§4.2.1, §4.4).
    pub fn status(&self) -> u16 {
        match self {
            // RFC 6585 §5: 431 Request Header Fields Too Large.
            HandshakeError::HeadTooLarge { .. } | HandshakeError::TooManyHeaders { .. } => 431,
            HandshakeError::MethodNotGet | HandshakeError::MethodNotConnect => 405,
            HandshakeError::UnsupportedHttpVersion => 505,
            // §4.4: 426 Upgrade Required, with the versions we support.
            HandshakeError::UnsupportedVersion => 426,
            _ => 400,
        }
    }
}

impl HandshakeError {
    /// Whether the other side is at fault. Not for [`InvalidUrl`](Self::InvalidUrl), the caller's
    /// mistake, nor for [`Http2Unavailable`](Self::Http2Unavailable): RFC 8441 is optional, and a
    /// server that does not offer it is within its rights; requiring it is this endpoint's
    /// configuration (`HttpVersion::Http2Only`). Every other handshake error comes from what the
    /// peer sent, or its refusal.
    pub fn is_peer_fault(&self) -> bool {
        !matches!(self, Self::InvalidUrl(_) | Self::Http2Unavailable(_))
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MalformedHttp(why) => write!(f, "malformed HTTP: {why}"),
            Self::HeadTooLarge { limit } => write!(f, "HTTP head larger than {limit} bytes"),
            Self::TooManyHeaders { limit } => write!(f, "more than {limit} HTTP headers"),
            Self::MethodNotGet => f.write_str("the method must be GET"),
            Self::MethodNotConnect => {
                f.write_str("over HTTP/2 a WebSocket is opened with an extended CONNECT (RFC 8441)")
            }
            Self::UnsupportedHttpVersion => f.write_str("HTTP/1.1 or later is required"),
            Self::MissingHeader(h) => write!(f, "missing or wrong header {h}"),
            Self::InvalidHeader(h) => write!(f, "invalid value for header {h}"),
            Self::UnsupportedVersion => f.write_str("unsupported Sec-WebSocket-Version (13 is supported)"),
            Self::Rejected { status, reason } => write!(f, "server answered {status} {reason}"),
            Self::AcceptMismatch => f.write_str("Sec-WebSocket-Accept does not match the key"),
            Self::UnexpectedSubprotocol(p) => {
                write!(f, "server chose subprotocol {p:?}, which was not offered")
            }
            Self::UnexpectedExtension(e) => {
                write!(f, "server answered with extension {e:?}, which was not offered")
            }
            Self::ExtensionRejected(why) => write!(f, "unacceptable extension response: {why}"),
            Self::InvalidUrl(why) => write!(f, "invalid URL: {why}"),
            Self::Http2Unavailable(why) => {
                write!(
                    f,
                    "{why}; connect over HTTP/1.1 or let HTTP/2 fall back (HttpVersion::Http2Preferred)"
                )
            }
        }
    }
}

impl std::error::Error for HandshakeError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 13): every handshake error counted as the peer's fault, a bad URL too.
    #[test]
    fn local_mistakes_are_not_the_peers_fault() {
        for local in [
            HandshakeError::InvalidUrl("ws://h:99999/: port 99999 is out of range".into()),
            HandshakeError::Http2Unavailable("the server did not choose h2 by ALPN"),
        ] {
            assert!(!local.is_peer_fault(), "{local:?}");
            assert!(!Error::Handshake(local).is_peer_fault());
        }
        for peer in [
            HandshakeError::AcceptMismatch,
            HandshakeError::MissingHeader("Host"),
            HandshakeError::Rejected {
                status: 403,
                reason: "Forbidden".into(),
            },
        ] {
            assert!(Error::Handshake(peer).is_peer_fault());
        }
        assert!(Error::Protocol(ProtocolViolation::InvalidUtf8).is_peer_fault());
        assert!(!Error::Closed.is_peer_fault() && !Error::InvalidInput("x").is_peer_fault());
    }

    /// Regression (issue 13): a message over our own limit read "peer violated the WebSocket
    /// protocol: message of N bytes exceeds the L-byte limit".
    #[test]
    fn a_message_over_our_limit_names_the_limit_not_a_violation() {
        let too_big = ProtocolViolation::MessageTooBig {
            size: 2_000_000,
            limit: 1 << 20,
        };
        assert!(too_big.is_local_limit() && !ProtocolViolation::InvalidUtf8.is_local_limit());
        assert_eq!(
            Error::Protocol(too_big).to_string(),
            "message of 2000000 bytes exceeds this endpoint's limit of 1048576 bytes \
             (max_message_size, or max_frame_size for one frame: raise it in the Config to accept it)"
        );
        assert_eq!(
            Error::Protocol(ProtocolViolation::InvalidUtf8).to_string(),
            "peer violated the WebSocket protocol: invalid UTF-8 in a text message or close reason"
        );
    }
}
