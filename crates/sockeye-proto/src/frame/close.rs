//! Close codes and the close frame payload, RFC 6455 §5.5.1 and §7.4.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::ProtocolViolation;
use crate::utf8::Utf8Bytes;

/// A status code in a close frame (RFC 6455 §7.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CloseCode(pub u16);

impl CloseCode {
    /// 1000: normal closure.
    pub const NORMAL: CloseCode = CloseCode(1000);
    /// 1001: the endpoint is going away (server shutting down, browser leaving the page).
    pub const GOING_AWAY: CloseCode = CloseCode(1001);
    /// 1002: protocol error.
    pub const PROTOCOL_ERROR: CloseCode = CloseCode(1002);
    /// 1003: a data type the endpoint cannot accept.
    pub const UNSUPPORTED_DATA: CloseCode = CloseCode(1003);
    /// 1005: no status code was present. Reported locally, never sent (§7.4.1).
    pub const NO_STATUS: CloseCode = CloseCode(1005);
    /// 1006: the connection closed without a close frame. Reported locally, never sent (§7.4.1).
    pub const ABNORMAL: CloseCode = CloseCode(1006);
    /// 1007: a text message was not valid UTF-8.
    pub const INVALID_PAYLOAD: CloseCode = CloseCode(1007);
    /// 1008: a message violated the endpoint's policy.
    pub const POLICY_VIOLATION: CloseCode = CloseCode(1008);
    /// 1009: a message was too big to process.
    pub const MESSAGE_TOO_BIG: CloseCode = CloseCode(1009);
    /// 1010: the client expected an extension the server did not negotiate.
    pub const MANDATORY_EXTENSION: CloseCode = CloseCode(1010);
    /// 1011: the server hit an unexpected condition.
    pub const INTERNAL_ERROR: CloseCode = CloseCode(1011);
    /// 1012: the server is restarting; reconnect (IANA registry).
    pub const SERVICE_RESTART: CloseCode = CloseCode(1012);
    /// 1013: the server is overloaded or a service it needs is unavailable; try again later
    /// (IANA registry).
    pub const TRY_AGAIN_LATER: CloseCode = CloseCode(1013);
    /// 1015: the TLS handshake failed. Reported locally, never sent (§7.4.1).
    pub const TLS_HANDSHAKE: CloseCode = CloseCode(1015);

    /// Whether this code may appear in a close frame on the wire (§7.4.1, §7.4.2): the defined codes
    /// 1000–1003 and 1007–1011, 1012–1014 (registered with IANA since), and 3000–4999 for libraries
    /// and applications. 1004–1006, 1015, 0–999, 1016–2999 and 5000+ are not allowed.
    pub fn is_sendable(self) -> bool {
        matches!(self.0, 1000..=1003 | 1007..=1014 | 3000..=4999)
    }
}

impl From<u16> for CloseCode {
    fn from(code: u16) -> Self {
        CloseCode(code)
    }
}

impl std::fmt::Display for CloseCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The body of a close frame: a status code and a UTF-8 reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseFrame {
    /// The status code.
    pub code: CloseCode,
    /// Why, for humans; at most 123 bytes so that the frame fits in 125 (§5.5).
    pub reason: Utf8Bytes,
}

impl CloseFrame {
    /// The longest reason that fits in a control frame next to the two-byte code.
    pub const MAX_REASON_LEN: usize = 123;

    /// A close frame with this code and reason.
    pub fn new(code: CloseCode, reason: impl Into<Utf8Bytes>) -> Self {
        CloseFrame {
            code,
            reason: reason.into(),
        }
    }

    /// Parses a received close payload (§5.5.1). An empty payload means "no status" (`Ok(None)`); one
    /// byte, a code that may not be sent, or a reason that is not UTF-8 is a protocol violation.
    pub fn parse(payload: Bytes) -> Result<Option<CloseFrame>, ProtocolViolation> {
        match payload.len() {
            0 => Ok(None),
            1 => Err(ProtocolViolation::CloseFrameTooShort),
            _ => {
                let code = CloseCode(u16::from_be_bytes([payload[0], payload[1]]));
                if !code.is_sendable() {
                    return Err(ProtocolViolation::InvalidCloseCode(code.0));
                }
                let reason =
                    Utf8Bytes::try_from(payload.slice(2..)).map_err(|_| ProtocolViolation::InvalidUtf8)?;
                Ok(Some(CloseFrame { code, reason }))
            }
        }
    }

    /// Appends the wire payload: the code in network byte order, then the reason.
    pub(crate) fn encode_into(&self, out: &mut BytesMut) {
        out.put_u16(self.code.0);
        out.put_slice(self.reason.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sendable_codes_follow_section_7_4() {
        for code in [
            1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999,
        ] {
            assert!(CloseCode(code).is_sendable(), "{code}");
        }
        for code in [
            0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
        ] {
            assert!(!CloseCode(code).is_sendable(), "{code}");
        }
    }

    #[test]
    fn parses_and_validates_close_payloads() {
        assert_eq!(CloseFrame::parse(Bytes::new()), Ok(None));
        assert_eq!(
            CloseFrame::parse(Bytes::from_static(&[3])),
            Err(ProtocolViolation::CloseFrameTooShort)
        );
        assert_eq!(
            CloseFrame::parse(Bytes::from_static(&[0x03, 0xED])),
            Err(ProtocolViolation::InvalidCloseCode(1005))
        );
        assert_eq!(
            CloseFrame::parse(Bytes::from_static(&[0x03, 0xE8, 0xff])),
            Err(ProtocolViolation::InvalidUtf8)
        );
        let ok = CloseFrame::parse(Bytes::from_static(b"\x03\xe8bye"))
            .unwrap()
            .unwrap();
        assert_eq!((ok.code, ok.reason.as_str()), (CloseCode::NORMAL, "bye"));
    }
}
