//! UTF-8 for text messages (RFC 6455 §5.6, §8.1): an incremental validator that fails at the first
//! invalid byte, even when a code point is split across reads or frames, and [`Utf8Bytes`], a cheaply
//! cloneable byte buffer that is known to hold UTF-8.

use bytes::Bytes;

/// Validates a stream of bytes as UTF-8, piece by piece.
///
/// §8.1 says an endpoint MUST fail the connection when a text message is not valid UTF-8; failing as
/// soon as the first bad byte arrives (rather than when the message completes) saves memory and time
/// and is what the Autobahn|Testsuite 6.4.x cases check. A piece may end in the middle of a code
/// point; the validator keeps those (at most 3) bytes and checks them with the next piece.
#[derive(Debug, Default, Clone)]
pub struct Utf8Validator {
    partial: [u8; 4],
    partial_len: u8,
}

/// The input is not UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidUtf8;

/// Whether `data` is short and all ASCII: the common small text message, checked in a few word
/// compares where the SIMD validator would set up for a block and fall back to the scalar one.
#[inline]
pub(crate) fn is_short_ascii(data: &[u8]) -> bool {
    data.len() < 64 && data.is_ascii()
}

/// Whether `data` is valid UTF-8 (a whole message).
pub(crate) fn is_utf8(data: &[u8]) -> bool {
    is_short_ascii(data) || simdutf8::basic::from_utf8(data).is_ok()
}

impl Utf8Validator {
    /// A validator at the start of a message.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks the next piece of the stream. `Err` as soon as the bytes so far can no longer be the
    /// prefix of valid UTF-8.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), InvalidUtf8> {
        if self.partial_len > 0 {
            let have = usize::from(self.partial_len);
            let want = sequence_len(self.partial[0]);
            // `have < want`: a complete sequence is never kept. Saturating all the same, so that a
            // broken invariant ends in InvalidUtf8 below rather than an overflow.
            let take = want.saturating_sub(have).min(data.len());
            self.partial[have..have + take].copy_from_slice(&data[..take]);
            match simdutf8::compat::from_utf8(&self.partial[..have + take]) {
                Ok(_) => self.partial_len = 0,
                Err(e) if e.error_len().is_none() => {
                    // Still a valid prefix, and `data` is used up.
                    self.partial_len = (have + take) as u8;
                    return Ok(());
                }
                Err(_) => return Err(InvalidUtf8),
            }
            data = &data[take..];
        }
        if is_short_ascii(data) {
            return Ok(());
        }
        match simdutf8::compat::from_utf8(data) {
            Ok(_) => Ok(()),
            // `error_len() == None` means the input ended inside a code point that can still be valid.
            Err(e) if e.error_len().is_none() => {
                let tail = &data[e.valid_up_to()..];
                self.partial[..tail.len()].copy_from_slice(tail);
                self.partial_len = tail.len() as u8;
                Ok(())
            }
            Err(_) => Err(InvalidUtf8),
        }
    }

    /// Whether the stream may end here: no code point was left unfinished.
    pub fn is_complete(&self) -> bool {
        self.partial_len == 0
    }
}

/// The length of the sequence that starts with `lead`, which is known to be a valid lead byte.
fn sequence_len(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

/// Bytes that hold valid UTF-8: the payload of a text message, shared without copying.
///
/// Construction checks the bytes once. [`as_str`](Self::as_str) checks them again with a SIMD
/// validator (several GB/s) instead of trusting the invariant through `unsafe`, which keeps this
/// crate free of `unsafe` code.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Utf8Bytes(Bytes);

impl Utf8Bytes {
    /// An empty string.
    pub const fn new() -> Self {
        Utf8Bytes(Bytes::new())
    }

    /// A `'static` string, without copying.
    pub const fn from_static(s: &'static str) -> Self {
        Utf8Bytes(Bytes::from_static(s.as_bytes()))
    }

    /// Wraps bytes that a [`Utf8Validator`] has already accepted whole. Not public: the invariant
    /// is the caller's. Breaking it cannot cause undefined behaviour, since `as_str` checks again.
    pub(crate) fn from_validated(bytes: Bytes) -> Self {
        debug_assert!(std::str::from_utf8(&bytes).is_ok());
        Utf8Bytes(bytes)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match simdutf8::basic::from_utf8(&self.0) {
            Ok(s) => s,
            // Every constructor validates, and `Bytes` is immutable.
            Err(_) => unreachable!("Utf8Bytes holds UTF-8 by construction"),
        }
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The underlying buffer.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl TryFrom<Bytes> for Utf8Bytes {
    type Error = InvalidUtf8;
    fn try_from(bytes: Bytes) -> Result<Self, InvalidUtf8> {
        if !is_utf8(&bytes) {
            return Err(InvalidUtf8);
        }
        Ok(Utf8Bytes(bytes))
    }
}

impl TryFrom<Vec<u8>> for Utf8Bytes {
    type Error = InvalidUtf8;
    fn try_from(bytes: Vec<u8>) -> Result<Self, InvalidUtf8> {
        Utf8Bytes::try_from(Bytes::from(bytes))
    }
}

impl From<String> for Utf8Bytes {
    fn from(s: String) -> Self {
        Utf8Bytes(Bytes::from(s))
    }
}

impl From<&str> for Utf8Bytes {
    fn from(s: &str) -> Self {
        Utf8Bytes(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<Utf8Bytes> for Bytes {
    fn from(s: Utf8Bytes) -> Self {
        s.0
    }
}

impl std::ops::Deref for Utf8Bytes {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for Utf8Bytes {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for Utf8Bytes {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl std::fmt::Debug for Utf8Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Utf8Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn feed_pieces(pieces: &[&[u8]]) -> Result<bool, InvalidUtf8> {
        let mut v = Utf8Validator::new();
        for p in pieces {
            v.feed(p)?;
        }
        Ok(v.is_complete())
    }

    #[test]
    fn fails_at_the_first_bad_byte_not_at_the_end() {
        // "κόσμε" then an invalid 0xF4 0x90 (above U+10FFFF), then more valid text that never matters.
        let mut v = Utf8Validator::new();
        v.feed("κόσμε".as_bytes()).unwrap();
        assert_eq!(v.feed(&[0xF4]), Ok(()));
        assert_eq!(v.feed(&[0x90]), Err(InvalidUtf8));
    }

    #[test]
    fn code_points_split_across_pieces() {
        let euro = "€".as_bytes(); // E2 82 AC
        assert_eq!(feed_pieces(&[&euro[..1], &euro[1..2], &euro[2..]]), Ok(true));
        assert_eq!(feed_pieces(&[&euro[..2]]), Ok(false));
        assert_eq!(feed_pieces(&[&euro[..1], &[0x41]]), Err(InvalidUtf8));
        // Surrogates (ED A0 80) are invalid at the second byte.
        assert_eq!(feed_pieces(&[&[0xED], &[0xA0]]), Err(InvalidUtf8));
        // Overlong encodings are invalid at the lead byte or the first continuation.
        assert_eq!(feed_pieces(&[&[0xC0]]), Err(InvalidUtf8));
        assert_eq!(feed_pieces(&[&[0xE0], &[0x80]]), Err(InvalidUtf8));
        assert_eq!(feed_pieces(&[&[0xF0, 0x90], &[], &[0x80], &[0x80]]), Ok(true));
    }

    proptest! {
        #[test]
        fn any_split_agrees_with_std(bytes in proptest::collection::vec(any::<u8>(), 0..40), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4)) {
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.sort();
            let mut v = Utf8Validator::new();
            let mut prev = 0;
            let mut failed_at = None;
            for &p in points.iter().chain(std::iter::once(&bytes.len())) {
                if v.feed(&bytes[prev..p]).is_err() {
                    failed_at = Some(p);
                    break;
                }
                prev = p;
            }
            match std::str::from_utf8(&bytes) {
                Ok(_) => prop_assert!(failed_at.is_none() && v.is_complete()),
                Err(e) => match e.error_len() {
                    // Truncated at the end: valid so far, but not complete.
                    None => prop_assert!(failed_at.is_none() && !v.is_complete()),
                    // Fail fast: the failing piece is the one holding the first bad byte.
                    Some(_) => {
                        let at = failed_at.expect("invalid input must fail");
                        prop_assert!(at > e.valid_up_to());
                    }
                },
            }
        }

        #[test]
        fn valid_text_in_random_pieces(s in "\\PC{0,30}", cut in any::<prop::sample::Index>()) {
            let b = s.as_bytes();
            let c = cut.index(b.len() + 1);
            prop_assert_eq!(feed_pieces(&[&b[..c], &b[c..]]), Ok(true));
        }
    }
}
