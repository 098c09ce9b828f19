//! The NATS backplane's subjects and message format: a topic's subject, and a publication's
//! body (an 18-byte header, then the payload; see "Message format" in the [module
//! documentation](super)).

use bytes::{BufMut, Bytes, BytesMut};
use sockeye::DataKind;

use crate::backplane::position::{Origin, Position, Publication};
use crate::topic::Topic;

/// Subjects of topics: this, then the topic's name in hex.
pub(super) const SUBJECT_PREFIX: &str = "sockeye.t.";

/// The message header's length.
const HEADER_LEN: usize = 18;

/// The message format's version.
const VERSION: u8 = 1;

pub(super) fn subject(topic: &Topic) -> String {
    format!("{SUBJECT_PREFIX}{}", topic.to_hex())
}

/// The message body of a publication (see "Message format" in the [NATS backplane's documentation](super)).
pub(super) fn encode(p: &Publication) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN + p.payload.len());
    b.put_u8(VERSION);
    b.put_u8(match p.kind {
        DataKind::Text => 1,
        DataKind::Binary => 2,
    });
    b.put_u64(p.origin.node);
    b.put_u64(p.origin.publisher);
    b.put_slice(&p.payload);
    b.freeze()
}

/// The publication in a message body, or why not.
pub(super) fn decode(topic: &Topic, body: &Bytes, position: Option<Position>) -> Result<Publication, String> {
    if body.len() < HEADER_LEN {
        return Err(format!("{} bytes, shorter than the header", body.len()));
    }
    if body[0] != VERSION {
        return Err(format!("format version {}, expected {VERSION}", body[0]));
    }
    let kind = match body[1] {
        1 => DataKind::Text,
        2 => DataKind::Binary,
        k => return Err(format!("unknown kind {k}")),
    };
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&body[i..i + 8]);
        u64::from_be_bytes(a)
    };
    Ok(Publication {
        topic: topic.clone(),
        position,
        origin: Origin {
            node: u64_at(2),
            publisher: u64_at(10),
        },
        kind,
        payload: body.slice(HEADER_LEN..),
    })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use sockeye::DataKind;

    use super::*;
    use crate::backplane::position::Origin;

    #[test]
    fn body_round_trips_and_bad_bodies_are_refused() {
        let topic = Topic::new("a.b").unwrap_or_else(|e| panic!("{e}"));
        let p = Publication {
            topic: topic.clone(),
            position: None,
            origin: Origin {
                node: 7,
                publisher: 9,
            },
            kind: DataKind::Text,
            payload: Bytes::from_static(b"hi"),
        };
        let body = encode(&p);
        assert_eq!(body.len(), HEADER_LEN + 2);
        assert_eq!(decode(&topic, &body, None).ok(), Some(p));
        assert!(decode(&topic, &Bytes::from_static(b"short"), None).is_err());
        let mut v = body.to_vec();
        v[0] = 2;
        assert!(decode(&topic, &Bytes::from(v.clone()), None).is_err());
        v[0] = 1;
        v[1] = 9;
        assert!(decode(&topic, &Bytes::from(v), None).is_err());
    }
}
