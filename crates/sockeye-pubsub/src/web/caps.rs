//! The connection caps: how many connections a node serves at once, and how many one client
//! address may hold (an IPv6 client by its /64, what one host is usually given).
//! [`Web::admit`](super::Web::admit) counts a connection against them until its [`Admitted`]
//! is dropped; a WebSocket over HTTP/2 (a stream of a connection) is counted as one more
//! connection of its own, for its life (see [`Peer`]).

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Connections open now, in all and by address.
#[derive(Default)]
struct Counts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// The caps and what they count.
pub(crate) struct Gate {
    max_total: usize,
    max_per_address: usize,
    counts: Mutex<Counts>,
}

/// Why a connection is refused by the caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OverCap {
    /// The node serves [`WebConfig::max_connections`](super::WebConfig::max_connections).
    Node(usize),
    /// Its address holds [`WebConfig::max_connections_per_address`](super::WebConfig::max_connections_per_address).
    Address(usize),
}

impl fmt::Display for OverCap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverCap::Node(max) => write!(
                f,
                "the node serves {max} connections (WebConfig::max_connections; ws pubsub_server --max-connections)"
            ),
            OverCap::Address(max) => write!(
                f,
                "the client's address holds {max} connections (WebConfig::max_connections_per_address; ws pubsub_server --max-connections-per-address)"
            ),
        }
    }
}

impl std::error::Error for OverCap {}

/// A connection counted against the caps, until dropped.
pub struct Admitted {
    gate: Arc<Gate>,
    address: IpAddr,
}

impl fmt::Debug for Admitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admitted")
            .field("address", &self.address)
            .finish()
    }
}

impl Admitted {
    /// The address it is counted for.
    pub(crate) fn address(&self) -> IpAddr {
        self.address
    }
}

/// The client address of an admitted connection, in each of its requests' extensions: a
/// WebSocket over HTTP/2 is one stream among many of its connection (up to
/// [`MAX_CONCURRENT_STREAMS`](super::MAX_CONCURRENT_STREAMS)), so it is admitted under the caps
/// itself, as one more connection of this address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub(crate) IpAddr);

impl Gate {
    pub(crate) fn new(max_total: usize, max_per_address: usize) -> Arc<Gate> {
        Arc::new(Gate {
            max_total,
            max_per_address,
            counts: Mutex::default(),
        })
    }

    /// Counts a connection from `peer`, or refuses it if a cap is reached.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, OverCap> {
        let address = client(peer);
        let mut counts = crate::lock::lock(&self.counts);
        if counts.total >= self.max_total {
            return Err(OverCap::Node(self.max_total));
        }
        // Looked up before an entry is made: a refused address (every one, with a cap of 0)
        // must leave nothing behind in the map.
        if counts.by_address.get(&address).copied().unwrap_or(0) >= self.max_per_address {
            return Err(OverCap::Address(self.max_per_address));
        }
        *counts.by_address.entry(address).or_insert(0) += 1;
        counts.total += 1;
        Ok(Admitted {
            gate: Arc::clone(self),
            address,
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = crate::lock::lock(&self.gate.counts);
        counts.total = counts.total.saturating_sub(1);
        if let Some(held) = counts.by_address.get_mut(&self.address) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                counts.by_address.remove(&self.address);
            }
        }
    }
}

/// Whom `peer` is counted as: an IPv4 address itself (an IPv4-mapped IPv6 one too), an IPv6
/// one by its /64.
fn client(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn caps_per_address_and_in_all_give_back_on_drop() {
        let gate = Gate::new(3, 2);
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let first = gate.admit(a).unwrap();
        let _second = gate.admit(a).unwrap();
        assert_eq!(gate.admit(a).unwrap_err(), OverCap::Address(2));
        let _third = gate.admit(b).unwrap();
        assert_eq!(gate.admit(b).unwrap_err(), OverCap::Node(3));
        drop(first);
        let _again = gate.admit(b).unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(client(v6), "2001:db8::".parse::<IpAddr>().unwrap());
    }
}
