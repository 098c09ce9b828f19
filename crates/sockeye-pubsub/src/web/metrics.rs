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

/// The node's metrics; clones share them.
#[derive(Clone)]
pub(crate) struct Metrics {
    registry: Arc<Registry>,
    pub(crate) connections: Gauge,
    pub(crate) refused_connections: Counter,
    pub(crate) refused_origins: Counter,
    pub(crate) refused_publications: Counter,
    capped: Family<Labels, Counter>,
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

    /// A connection refused by a cap: `cap` is `node` or `address`.
    pub(crate) fn capped(&self, cap: &'static str) {
        self.capped.get_or_create(&vec![("cap", cap)]).inc();
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
