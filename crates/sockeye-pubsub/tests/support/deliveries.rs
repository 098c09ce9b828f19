//! Reading what a subscriber received.
#![allow(dead_code)]

use sockeye_pubsub::Delivery;

/// The texts of the messages among `ds`.
pub(crate) fn texts(ds: &[Delivery]) -> Vec<String> {
    ds.iter()
        .filter_map(|d| match d {
            Delivery::Message(m) => Some(String::from_utf8_lossy(m.message().as_payload()).into_owned()),
            _ => None,
        })
        .collect()
}
