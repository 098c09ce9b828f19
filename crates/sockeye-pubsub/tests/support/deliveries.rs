//! Reading what a subscriber received.
#![allow(dead_code)]

use std::time::Duration;

use sockeye_pubsub::{Delivery, Subscriber};
use tokio::time::{Instant, timeout};

/// The texts of the messages among `ds`.
pub(crate) fn texts(ds: &[Delivery]) -> Vec<String> {
    ds.iter()
        .filter_map(|d| match d {
            Delivery::Message(m) => Some(String::from_utf8_lossy(m.message().as_payload()).into_owned()),
            _ => None,
        })
        .collect()
}

/// What `sub` gets, at most `max` (and for 30 s at most): at least `expected` deliveries, each
/// awaited up to 20 s (a node coming back from a restart may be a backoff step behind the
/// other), then whatever else comes until `quiet` passes without one, so that anything extra is
/// seen and fails the caller's check. A subscriber that ends or fails is a test failure.
pub(crate) async fn drain(
    sub: &mut Subscriber,
    expected: usize,
    quiet: Duration,
    max: usize,
) -> Vec<Delivery> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < max && Instant::now() < deadline {
        let wait = if out.len() < expected {
            Duration::from_secs(20)
        } else {
            quiet
        };
        match timeout(wait, sub.recv()).await {
            Ok(Some(Ok(d))) => out.push(d),
            Ok(other) => panic!("subscriber {}: {other:?}", sub.id()),
            Err(_) => break,
        }
    }
    out
}
