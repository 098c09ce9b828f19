//! Topic names: what a publication is addressed to and what a subscriber asks for.

use std::fmt;
use std::sync::Arc;

use crate::error::Error;

/// A topic name: 1 to [`Topic::MAX_LEN`] bytes of UTF-8 without control characters.
///
/// Cheap to clone (shared). Every backplane maps it to its own key space (a Redis channel and
/// stream key, a NATS subject) without restrictions of its own leaking to the user: a topic may
/// contain `.`, `*`, `>`, `{`, spaces.
///
/// ```
/// use sockeye_pubsub::Topic;
/// let room = Topic::new("rooms/lobby")?;
/// assert_eq!(room.as_str(), "rooms/lobby");
/// assert!(Topic::new("").is_err());
/// # Ok::<(), sockeye_pubsub::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic(Arc<str>);

impl Topic {
    /// The longest topic name, in bytes. Long enough for paths and ids, short enough that a
    /// per-topic key in Redis or a NATS subject stays small.
    pub const MAX_LEN: usize = 256;

    /// Checks and wraps a name.
    pub fn new(name: &str) -> Result<Topic, Error> {
        if name.is_empty() {
            return Err(Error::InvalidTopic("a topic name may not be empty".into()));
        }
        if name.len() > Self::MAX_LEN {
            return Err(Error::InvalidTopic(format!(
                "a topic name is at most {} bytes; this one has {}",
                Self::MAX_LEN,
                name.len()
            )));
        }
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(Error::InvalidTopic(format!(
                "a topic name may not contain control characters (found {c:?})"
            )));
        }
        Ok(Topic(name.into()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as lowercase hex: a token any key space accepts (NATS subjects may not contain
    /// spaces, and `.`, `*` and `>` have meanings there).
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(self.0.len() * 2);
        for b in self.0.bytes() {
            s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        s
    }

    /// The inverse of [`to_hex`](Self::to_hex).
    pub fn from_hex(hex: &str) -> Result<Topic, Error> {
        let bad = || Error::InvalidTopic(format!("not a hex-encoded topic name: {hex:?}"));
        if !hex.len().is_multiple_of(2) {
            return Err(bad());
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
            .collect::<Result<Vec<u8>, Error>>()?;
        Topic::new(std::str::from_utf8(&bytes).map_err(|_| bad())?)
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<&str> for Topic {
    type Error = Error;
    fn try_from(name: &str) -> Result<Topic, Error> {
        Topic::new(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(Topic::new("a").is_ok());
        assert!(Topic::new(&"x".repeat(Topic::MAX_LEN)).is_ok());
        assert!(Topic::new(&"x".repeat(Topic::MAX_LEN + 1)).is_err());
        assert!(Topic::new("").is_err());
        assert!(Topic::new("a\nb").is_err());
        assert!(Topic::new("rooms.* >{x} é").is_ok());
    }

    #[test]
    fn hex_round_trips() {
        let t = Topic::new("rooms.* >{x} é").unwrap();
        assert_eq!(Topic::from_hex(&t.to_hex()).unwrap(), t);
        assert!(Topic::from_hex("0").is_err());
        assert!(Topic::from_hex("zz").is_err());
        assert!(Topic::from_hex("").is_err());
        assert!(Topic::from_hex("ff").is_err());
    }
}
