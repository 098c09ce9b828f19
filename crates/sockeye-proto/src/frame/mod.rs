//! Base framing protocol, RFC 6455 §5: the frame header, opcodes, masking and close codes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-------+-+-------------+-------------------------------+
//! |F|R|R|R| opcode|M| Payload len |    Extended payload length    |
//! |I|S|S|S|  (4)  |A|     (7)     |             (16/64)           |
//! |N|V|V|V|       |S|             |   (if payload len==126/127)   |
//! | |1|2|3|       |K|             |                               |
//! +-+-+-+-+-------+-+-------------+ - - - - - - - - - - - - - - - +
//! |     Extended payload length continued, if payload len == 127  |
//! + - - - - - - - - - - - - - - - +-------------------------------+
//! |                               |Masking-key, if MASK set to 1  |
//! +-------------------------------+-------------------------------+
//! ```

mod close;
pub(crate) mod close_code;
mod mask;

pub use close::CloseFrame;
pub use close_code::CloseCode;
pub use mask::{apply_mask, insecure_mask_keys_for_tests};

use crate::error::ProtocolViolation;

/// The longest a header can be: 2 fixed bytes, 8 bytes of extended length, 4 bytes of mask key.
pub const MAX_HEADER_LEN: usize = 14;

/// The largest payload a control frame may carry (RFC 6455 §5.5).
pub const MAX_CONTROL_PAYLOAD: usize = 125;

/// A frame's opcode (RFC 6455 §5.2, §11.8). Reserved opcodes are rejected when parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpCode {
    /// 0x0: a continuation of a fragmented message.
    Continuation,
    /// 0x1: the first frame of a text message.
    Text,
    /// 0x2: the first frame of a binary message.
    Binary,
    /// 0x8: connection close.
    Close,
    /// 0x9: ping.
    Ping,
    /// 0xA: pong.
    Pong,
}

impl OpCode {
    /// Decodes the low four bits of the first header byte; `None` for the reserved values.
    pub fn from_u8(bits: u8) -> Option<Self> {
        Some(match bits {
            0x0 => Self::Continuation,
            0x1 => Self::Text,
            0x2 => Self::Binary,
            0x8 => Self::Close,
            0x9 => Self::Ping,
            0xA => Self::Pong,
            _ => return None,
        })
    }

    /// The four-bit wire value.
    pub fn as_u8(self) -> u8 {
        match self {
            Self::Continuation => 0x0,
            Self::Text => 0x1,
            Self::Binary => 0x2,
            Self::Close => 0x8,
            Self::Ping => 0x9,
            Self::Pong => 0xA,
        }
    }

    /// Control frames are those with the high opcode bit set (RFC 6455 §5.5).
    pub fn is_control(self) -> bool {
        self.as_u8() & 0x8 != 0
    }
}

/// A parsed or to-be-encoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// FIN: this is the final fragment of a message.
    pub fin: bool,
    /// RSV1 (used by permessage-deflate), RSV2 and RSV3, as bits 0x4, 0x2 and 0x1.
    pub rsv: u8,
    /// The opcode.
    pub opcode: OpCode,
    /// The masking key, present on every client-to-server frame (RFC 6455 §5.3).
    pub mask: Option<[u8; 4]>,
    /// The payload length in bytes.
    pub payload_len: u64,
}

impl FrameHeader {
    /// RSV1, the bit permessage-deflate uses to mark a compressed message (RFC 7692 §6).
    pub const RSV1: u8 = 0x4;

    /// Parses a header from the start of `buf`.
    ///
    /// Returns `Ok(None)` when `buf` does not yet hold the whole header, and otherwise the header and
    /// its length in bytes. Validates what can be checked from the header alone: reserved opcodes, a
    /// 64-bit length with the high bit set (§5.2), fragmented or oversized control frames (§5.5).
    /// RSV bits and masking direction depend on the negotiation and role; the connection checks them.
    pub fn parse(buf: &[u8]) -> Result<Option<(FrameHeader, usize)>, ProtocolViolation> {
        let Some(raw) = RawHeader::parse(buf) else {
            return Ok(None);
        };
        let opcode = OpCode::from_u8(raw.opcode).ok_or(ProtocolViolation::ReservedOpCode(raw.opcode))?;
        // §5.2: "the most significant bit MUST be 0".
        if raw.payload_len >> 63 != 0 {
            return Err(ProtocolViolation::LengthTooLarge);
        }
        if opcode.is_control() {
            // §5.5: "All control frames MUST have a payload length of 125 bytes or less and MUST
            // NOT be fragmented."
            if !raw.fin {
                return Err(ProtocolViolation::FragmentedControlFrame);
            }
            if raw.payload_len > MAX_CONTROL_PAYLOAD as u64 {
                return Err(ProtocolViolation::ControlFrameTooLong);
            }
        }
        let header = FrameHeader {
            fin: raw.fin,
            rsv: raw.rsv,
            opcode,
            mask: raw.mask,
            payload_len: raw.payload_len,
        };
        Ok(Some((header, raw.header_len)))
    }

    /// The first header byte (§5.2): FIN, RSV1–3, opcode.
    #[inline]
    pub(crate) fn first_byte(fin: bool, rsv: u8, opcode: OpCode) -> u8 {
        (u8::from(fin) << 7) | ((rsv & 0x7) << 4) | opcode.as_u8()
    }

    /// The number of bytes [`encode`](Self::encode) writes.
    pub fn encoded_len(&self) -> usize {
        let len = match self.payload_len {
            0..=125 => 2,
            126..=0xFFFF => 4,
            _ => 10,
        };
        len + if self.mask.is_some() { 4 } else { 0 }
    }

    /// Writes the header into `out`, which must hold at least [`encoded_len`](Self::encoded_len) bytes,
    /// and returns the length written. Uses the minimal length encoding (§5.2).
    pub fn encode(&self, out: &mut [u8; MAX_HEADER_LEN]) -> usize {
        out[0] = Self::first_byte(self.fin, self.rsv, self.opcode);
        let mask_bit = if self.mask.is_some() { 0x80 } else { 0 };
        let mut len = match self.payload_len {
            n @ 0..=125 => {
                out[1] = mask_bit | n as u8;
                2
            }
            n @ 126..=0xFFFF => {
                out[1] = mask_bit | 126;
                out[2..4].copy_from_slice(&(n as u16).to_be_bytes());
                4
            }
            n => {
                out[1] = mask_bit | 127;
                out[2..10].copy_from_slice(&n.to_be_bytes());
                10
            }
        };
        if let Some(key) = self.mask {
            out[len..len + 4].copy_from_slice(&key);
            len += 4;
        }
        len
    }
}

/// A header read by its bit layout alone, with nothing validated. After the connection has failed,
/// the engine uses it to skip the peer's frames, whatever they hold, until its close frame arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawHeader {
    pub(crate) fin: bool,
    pub(crate) rsv: u8,
    pub(crate) opcode: u8,
    pub(crate) mask: Option<[u8; 4]>,
    pub(crate) payload_len: u64,
    pub(crate) header_len: usize,
}

impl RawHeader {
    /// `None` until `buf` holds the whole header.
    pub(crate) fn parse(buf: &[u8]) -> Option<RawHeader> {
        let [b0, b1, ..] = *buf else { return None };
        let (payload_len, mut header_len) = match b1 & 0x7F {
            126 => {
                let b = buf.get(2..4)?;
                (u64::from(u16::from_be_bytes([b[0], b[1]])), 4)
            }
            127 => {
                let mut word = [0u8; 8];
                word.copy_from_slice(buf.get(2..10)?);
                (u64::from_be_bytes(word), 10)
            }
            n => (u64::from(n), 2),
        };
        let mask = if b1 & 0x80 != 0 {
            let k = buf.get(header_len..header_len + 4)?;
            header_len += 4;
            Some([k[0], k[1], k[2], k[3]])
        } else {
            None
        };
        Some(RawHeader {
            fin: b0 & 0x80 != 0,
            rsv: (b0 >> 4) & 0x7,
            opcode: b0 & 0x0F,
            mask,
            payload_len,
            header_len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(bytes: &[u8]) -> Result<Option<(FrameHeader, usize)>, ProtocolViolation> {
        FrameHeader::parse(bytes)
    }

    #[test]
    fn parses_rfc_examples() {
        // RFC 6455 §5.7: a single-frame unmasked text message "Hello".
        let (h, n) = parse_all(&[0x81, 0x05, 0x48, 0x65]).unwrap().unwrap();
        assert_eq!(
            (h.fin, h.opcode, h.mask, h.payload_len, n),
            (true, OpCode::Text, None, 5, 2)
        );
        // A single-frame masked text message.
        let (h, n) = parse_all(&[0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d]).unwrap().unwrap();
        assert_eq!((h.mask, n), (Some([0x37, 0xfa, 0x21, 0x3d]), 6));
        // 256 bytes binary message in a single unmasked frame.
        let (h, n) = parse_all(&[0x82, 0x7E, 0x01, 0x00]).unwrap().unwrap();
        assert_eq!((h.payload_len, n), (256, 4));
        // 64 KiB.
        let (h, n) = parse_all(&[0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0]).unwrap().unwrap();
        assert_eq!((h.payload_len, n), (65536, 10));
    }

    #[test]
    fn incomplete_headers_ask_for_more() {
        for bytes in [
            &[][..],
            &[0x81],
            &[0x82, 0x7E, 0x01],
            &[0x82, 0x7F, 0, 0, 0],
            &[0x81, 0x85, 1, 2, 3],
        ] {
            assert_eq!(parse_all(bytes), Ok(None), "{bytes:?}");
        }
    }

    #[test]
    fn rejects_what_the_header_alone_forbids() {
        assert_eq!(
            parse_all(&[0x83, 0x00]),
            Err(ProtocolViolation::ReservedOpCode(3))
        );
        assert_eq!(
            parse_all(&[0x8B, 0x00]),
            Err(ProtocolViolation::ReservedOpCode(0xB))
        );
        assert_eq!(
            parse_all(&[0x09, 0x00]),
            Err(ProtocolViolation::FragmentedControlFrame)
        );
        assert_eq!(
            parse_all(&[0x89, 0x7E, 0, 126]),
            Err(ProtocolViolation::ControlFrameTooLong)
        );
        assert_eq!(
            parse_all(&[0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0]),
            Err(ProtocolViolation::LengthTooLarge)
        );
    }

    fn any_header() -> impl Strategy<Value = FrameHeader> {
        let opcode = prop_oneof![
            Just(OpCode::Continuation),
            Just(OpCode::Text),
            Just(OpCode::Binary),
            Just(OpCode::Close),
            Just(OpCode::Ping),
            Just(OpCode::Pong),
        ];
        (
            any::<bool>(),
            0u8..8,
            opcode,
            any::<Option<[u8; 4]>>(),
            0u64..(1 << 63),
        )
            .prop_map(|(fin, rsv, opcode, mask, len)| {
                let (fin, payload_len) = if opcode.is_control() {
                    (true, len % 126)
                } else {
                    (fin, len >> (len % 63))
                };
                FrameHeader {
                    fin,
                    rsv,
                    opcode,
                    mask,
                    payload_len,
                }
            })
    }

    proptest! {
        #[test]
        fn encode_then_parse_round_trips(h in any_header()) {
            let mut out = [0u8; MAX_HEADER_LEN];
            let n = h.encode(&mut out);
            prop_assert_eq!(n, h.encoded_len());
            prop_assert_eq!(FrameHeader::parse(&out[..n]), Ok(Some((h, n))));
            // Every strict prefix is incomplete, never an error or a different header.
            for cut in 0..n {
                prop_assert_eq!(FrameHeader::parse(&out[..cut]), Ok(None));
            }
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..20)) {
            let _ = FrameHeader::parse(&bytes);
        }
    }
}
