//! What every request of a node's web face shares: its hub, settings, metrics, shutdown and
//! the connections it tracks (axum's state).

use std::sync::Arc;

use sockeye::ShutdownHandle;
use tokio_util::task::TaskTracker;

use super::caps::{Admitted, Gate, OverCap};
use super::config::WebConfig;
use super::metrics::{Metrics, RefusedBy};
use crate::hub::Hub;

/// What every request of a node's web face shares.
pub(crate) struct Shared {
    pub(crate) hub: Hub,
    pub(crate) config: WebConfig,
    pub(crate) metrics: Metrics,
    pub(crate) shutdown: ShutdownHandle,
    /// Every WebSocket from the moment its upgrade is answered (before its task first runs, so
    /// that a shutdown that comes between the two still waits for it) until its session ends.
    pub(crate) sockets: TaskTracker,
    /// Every HTTP connection served by [`Web::serve_connection`](super::Web::serve_connection), until it ends.
    pub(crate) http: TaskTracker,
    /// The WebSocket's settings: a message may carry the largest publication and its frame.
    pub(crate) socket: sockeye::Config,
    /// The connection caps.
    pub(crate) gate: Arc<Gate>,
}

impl Shared {
    /// Counts a connection (or a WebSocket over HTTP/2) from `peer` against the caps, or
    /// refuses it, counted in the metrics.
    pub(crate) fn admit(&self, peer: std::net::IpAddr) -> Result<Admitted, OverCap> {
        let admitted = self.gate.admit(peer);
        if let Err(cap) = &admitted {
            self.metrics.refused(match cap {
                OverCap::Address(_) => RefusedBy::CapAddress,
                _ => RefusedBy::CapNode,
            });
        }
        admitted
    }
}
