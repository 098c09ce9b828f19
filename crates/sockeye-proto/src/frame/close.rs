//! The close frame payload, RFC 6455 §5.5.1 and §7.4: a close code and a UTF-8 reason.

use bytes::Bytes;

use super::close_code::CloseCode;
use crate::error::ProtocolViolation;
use crate::utf8::Utf8Bytes;

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

    /// Writes the wire payload into `out`, the code in network byte order, then the reason, and
    /// returns its length; `None` (nothing written) when the reason is longer than a close frame
    /// can carry (§5.5).
    pub(crate) fn encode_to(&self, out: &mut [u8; 2 + Self::MAX_REASON_LEN]) -> Option<usize> {
        let reason = self.reason.as_bytes();
        let len = 2 + reason.len();
        let slot = out.get_mut(..len)?;
        slot[..2].copy_from_slice(&self.code.0.to_be_bytes());
        slot[2..].copy_from_slice(reason);
        Some(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_a_reason_that_fits_and_refuses_one_that_does_not() {
        let mut out = [0u8; 125];
        let fits = CloseFrame::new(CloseCode(1000), "r".repeat(CloseFrame::MAX_REASON_LEN));
        assert_eq!(fits.encode_to(&mut out), Some(125));
        assert_eq!(&out[..3], b"\x03\xe8r");
        let too_long = CloseFrame::new(CloseCode(1000), "r".repeat(CloseFrame::MAX_REASON_LEN + 1));
        assert_eq!(too_long.encode_to(&mut out), None);
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
