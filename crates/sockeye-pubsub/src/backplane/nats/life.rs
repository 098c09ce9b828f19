//! Which life of the NATS server stored a JetStream publication, and the epoch that follows.
//!
//! A single nats-server gets a new `server_id` at every start. The node names it (hashed) in a
//! header of every publication it stores, and the publication's epoch is the stream's creation
//! time and that life, `<created>.<life>`: a restart, which may have lost the store's
//! un-synced tail, starts a new epoch, as a Redis server's `run_id` does for the Redis
//! backplane. A publication without the header (stored in a cluster, or by an older version)
//! has the epoch `<created>`. See "A stream that went back" in the [NATS
//! backplane's documentation](super).

use std::sync::Arc;

use async_nats::HeaderMap;

/// The header naming the life of the server that stored a publication.
pub(super) const HEADER: &str = "Sockeye-Life";

/// A server's life, from its `server_id`: 16 hex digits of its FNV-1a hash (64 bits), short
/// enough for a position kept in a URL, and the same whatever the node's version or platform
/// (the standard library's hasher promises neither).
pub(super) fn of_server(server_id: &str) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = server_id
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    format!("{hash:016x}")
}

/// The life a stored publication names; `None` without the header.
pub(super) fn of_message(headers: Option<&HeaderMap>) -> Option<&str> {
    headers?.get(HEADER).map(|v| v.as_str())
}

/// The epoch of the publications stored in the stream created at `created` (hex nanoseconds) in
/// `life`.
pub(super) fn epoch(created: &str, life: Option<&str>) -> Arc<str> {
    match life {
        Some(life) => format!("{created}.{life}").into(),
        None => created.into(),
    }
}

/// An epoch's parts: the stream's creation time and the life (`None`: the form without one).
/// The creation time is hex, without a `.`: the first `.` ends it.
pub(super) fn split(epoch: &str) -> (&str, Option<&str>) {
    match epoch.split_once('.') {
        Some((created, life)) => (created, Some(life)),
        None => (epoch, None),
    }
}

/// The epochs of one stream, the last one kept: a topic's publications are of one life for a
/// long run, so that its epoch is built once per run, not once per publication.
pub(super) struct Epochs {
    created: String,
    last: Option<(Option<String>, Arc<str>)>,
}

impl Epochs {
    /// The epochs of the stream created at `created`.
    pub(super) fn new(created: String) -> Epochs {
        Epochs { created, last: None }
    }

    /// The epoch of a publication of `life`.
    pub(super) fn of(&mut self, life: Option<&str>) -> Arc<str> {
        match &self.last {
            Some((l, e)) if l.as_deref() == life => Arc::clone(e),
            _ => {
                let e = epoch(&self.created, life);
                self.last = Some((life.map(str::to_owned), Arc::clone(&e)));
                e
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_round_trip() {
        let life = of_server("NDIQ6GJ7CHKHRVEAOTPOCNBZHLOJ3VHB5J3BOV3TWHTO7BZBOOR4CQ5W");
        assert_eq!(life.len(), 16);
        assert_ne!(
            life,
            of_server("NDIQ6GJ7CHKHRVEAOTPOCNBZHLOJ3VHB5J3BOV3TWHTO7BZBOOR4CQ5X")
        );
        // FNV-1a's published value for "a": stable across versions.
        assert_eq!(of_server("a"), "af63dc4c8601ec8c");
        let e = epoch("18ee6136f1ff1dc9", Some(&life));
        assert_eq!(split(&e), ("18ee6136f1ff1dc9", Some(life.as_str())));
        assert_eq!(split("18ee6136f1ff1dc9"), ("18ee6136f1ff1dc9", None));
        let mut epochs = Epochs::new("c".into());
        assert_eq!(&*epochs.of(None), "c");
        assert_eq!(&*epochs.of(Some("l")), "c.l");
        assert_eq!(&*epochs.of(Some("l")), "c.l");
        let mut headers = HeaderMap::new();
        assert_eq!(of_message(Some(&headers)), None);
        headers.insert(HEADER, "l");
        assert_eq!(of_message(Some(&headers)), Some("l"));
        assert_eq!(of_message(None), None);
    }
}
