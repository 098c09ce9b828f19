//! `/metrics`: the node's counters in the OpenMetrics text format (which Prometheus reads), with `prometheus-client`. What
//! the web face and its sessions see is counted as it happens (relaxed atomic adds); what the
//! hub knows (topics, the backplane's state and round trip) is read at each scrape.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::response::Response;
use http::StatusCode;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};

use super::respond;
use crate::hub::Hub;

type Labels = Vec<(&'static str, &'static str)>;

/// Why the node refused a client or one of its requests: the `kind` label of
/// `sockeye_pubsub_refusals_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefusedBy {
    /// A connection over the node's cap (`max_connections`).
    CapNode,
    /// A connection over its address's cap (`max_connections_per_address`).
    CapAddress,
    /// A socket of a page whose origin is not allowed.
    Origin,
    /// A socket refused by the token check (401, 403).
    Token,
    /// A publication over the socket's rate (`max_publish_rate`).
    PublishRate,
    /// A publication on one topic too many (`max_publish_topics`).
    PublishTopics,
    /// A subscription over the socket's bound (`max_subscriptions`).
    Subscriptions,
}

impl RefusedBy {
    fn label(self) -> &'static str {
        match self {
            RefusedBy::CapNode => "cap_node",
            RefusedBy::CapAddress => "cap_address",
            RefusedBy::Origin => "origin",
            RefusedBy::Token => "token",
            RefusedBy::PublishRate => "publish_rate",
            RefusedBy::PublishTopics => "publish_topics",
            RefusedBy::Subscriptions => "subscriptions",
        }
    }
}

/// The node's metrics; clones share them.
#[derive(Clone)]
pub(crate) struct Metrics {
    registry: Arc<Registry>,
    pub(crate) connections: Gauge,
    refused_connections: Counter,
    refused_origins: Counter,
    refused_publications: Counter,
    capped: Family<Labels, Counter>,
    refusals: Family<Labels, Counter>,
    closes: Family<Vec<(&'static str, String)>, Counter>,
    pub(crate) subscriptions: Gauge,
    topics: Gauge,
    publications: Family<Labels, Counter>,
    pub(crate) published_by_socket: Counter,
    pub(crate) deliveries: Counter,
    pub(crate) dropped: Counter,
    pub(crate) gaps: Counter,
    pub(crate) slow_closes: Counter,
    backplane_up: Gauge,
    backplane_rtt: Gauge<f64, AtomicU64>,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("sockeye_pubsub");
        let connections: Gauge = add(&mut registry, "connections", "WebSocket clients connected now");
        let refused_connections: Counter = add(
            &mut registry,
            "refused_connections",
            "WebSocket clients refused by the token check (401, 403)",
        );
        let refused_origins: Counter = add(
            &mut registry,
            "refused_origins",
            "WebSocket clients refused for the page that opened them (Origin not allowed, 403)",
        );
        let refused_publications: Counter = add(
            &mut registry,
            "refused_publications",
            "Publications of WebSocket clients refused by their bounds (max_publish_rate, max_publish_topics)",
        );
        let capped: Family<Labels, Counter> = add(
            &mut registry,
            "capped_connections",
            "Connections closed at once because the node (cap=node) or their address (cap=address) held as many as allowed",
        );
        let refusals: Family<Labels, Counter> = add(
            &mut registry,
            "refusals",
            "Clients and requests refused, by kind (cap_node, cap_address, origin, token, publish_rate, publish_topics, subscriptions)",
        );
        let closes: Family<Vec<(&'static str, String)>, Counter> = add(
            &mut registry,
            "closes",
            "WebSocket sessions ended, by reason (client, shutdown, too_slow, not_published, gap, refused, hub_stopped) and the close code the node sent (none when the client closed first or dropped)",
        );
        let subscriptions: Gauge = add(
            &mut registry,
            "subscriptions",
            "Topics subscribed to, summed over connected clients",
        );
        let topics: Gauge = add(
            &mut registry,
            "topics",
            "Topics with at least one subscriber on this node",
        );
        let publications: Family<Labels, Counter> = add(
            &mut registry,
            "publications",
            "Publications made on this node, by where they came from (socket: a WebSocket client, http: the HTTP API)",
        );
        let published_by_socket = publications.get_or_create(&vec![("source", "socket")]).clone();
        let deliveries: Counter = add(&mut registry, "deliveries", "Messages sent to WebSocket clients");
        let dropped: Counter = add(
            &mut registry,
            "dropped",
            "Messages dropped for clients too slow to read them (SlowPolicy::Drop)",
        );
        let gaps: Counter = add(
            &mut registry,
            "gaps",
            "Gap notices sent to clients: messages missed that no history held",
        );
        let slow_closes: Counter = add(
            &mut registry,
            "slow_closes",
            "Clients closed with 1008 because they did not read fast enough",
        );
        let backplane_up: Gauge = add(
            &mut registry,
            "backplane_up",
            "1 while the backplane is connected to its server, else 0",
        );
        let backplane_rtt: Gauge<f64, AtomicU64> = add(
            &mut registry,
            "backplane_publish_round_trip_seconds",
            "How long the last publication took the backplane to acknowledge (0 before the first)",
        );
        Metrics {
            registry: Arc::new(registry),
            connections,
            refused_connections,
            refused_origins,
            refused_publications,
            capped,
            refusals,
            closes,
            subscriptions,
            topics,
            publications,
            published_by_socket,
            deliveries,
            dropped,
            gaps,
            slow_closes,
            backplane_up,
            backplane_rtt,
        }
    }

    pub(crate) fn connected(&self) {
        self.connections.inc();
    }

    /// A client left with `subscriptions` topics subscribed; `too_slow` if it was closed for it.
    pub(crate) fn disconnected(&self, subscriptions: usize, too_slow: bool) {
        self.connections.dec();
        self.subscriptions
            .dec_by(i64::try_from(subscriptions).unwrap_or(i64::MAX));
        if too_slow {
            self.slow_closes.inc();
        }
    }

    /// A client or a request refused: counted by kind, and in the older counter of its kind.
    pub(crate) fn refused(&self, kind: RefusedBy) {
        self.refusals.get_or_create(&vec![("kind", kind.label())]).inc();
        match kind {
            RefusedBy::CapNode => {
                self.capped.get_or_create(&vec![("cap", "node")]).inc();
            }
            RefusedBy::CapAddress => {
                self.capped.get_or_create(&vec![("cap", "address")]).inc();
            }
            RefusedBy::Origin => {
                self.refused_origins.inc();
            }
            RefusedBy::Token => {
                self.refused_connections.inc();
            }
            RefusedBy::PublishRate | RefusedBy::PublishTopics => {
                self.refused_publications.inc();
            }
            RefusedBy::Subscriptions => {}
        }
    }

    /// A session ended for `reason`, the node having sent `code` (`None`: the client closed
    /// first or dropped).
    pub(crate) fn closed(&self, reason: &'static str, code: Option<u16>) {
        // The node's own codes only (the client's are not seen): a handful of label values.
        let code = code.map_or_else(|| "none".to_owned(), |c| c.to_string());
        self.closes
            .get_or_create(&vec![("reason", reason.to_owned()), ("code", code)])
            .inc();
    }

    pub(crate) fn published_by_http(&self, count: usize) {
        self.publications
            .get_or_create(&vec![("source", "http")])
            .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }
}

/// A new metric, registered.
fn add<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    /// `GET /metrics`: the counters, and what `hub` knows now.
    pub(crate) fn scrape(&self, hub: &Hub) -> Response {
        let metrics = self;
        metrics
            .topics
            .set(i64::try_from(hub.topic_count()).unwrap_or(i64::MAX));
        metrics.backplane_up.set(i64::from(hub.backplane_connected()));
        metrics
            .backplane_rtt
            .set(hub.last_publish_round_trip().map_or(0.0, |d| d.as_secs_f64()));
        let mut text = String::new();
        if let Err(e) = encode(&mut text, &metrics.registry) {
            return respond::error(StatusCode::INTERNAL_SERVER_ERROR, "metrics", &e.to_string());
        }
        let mut response = respond::json(StatusCode::OK, text);
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        );
        response
    }
}
