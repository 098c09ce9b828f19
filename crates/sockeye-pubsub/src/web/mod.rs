//! A web face for a node, on one port (feature `web`): the JSON protocol's WebSocket, the
//! JavaScript client and its demo page, an HTTP API for backends, and metrics, as one
//! [axum](https://docs.rs/axum) [`Router`](axum::Router).
//!
//! | path | what |
//! |---|---|
//! | `/` | the JSON protocol (`docs/pubsub-protocol.md`) over a WebSocket, HTTP/1.1 or HTTP/2; a plain `GET` answers 426 |
//! | `/client.js` | the JavaScript client (`clients/js`), an ES module |
//! | `/demo` | a live notifications page using it |
//! | `POST /publish/<topic>` | publishes the JSON body on the topic (bearer token) |
//! | `POST /publish` | publishes a batch `{"publications":[{"topic":T,"data":D},…]}` (bearer token) |
//! | `GET /history/<topic>?since=offset@epoch&limit=N` | what the topic's history holds after `since` (bearer token) |
//! | `/metrics` | Prometheus text format |
//! | `GET /healthz` | 200 while the node serves |
//! | `GET /readyz` | 200 while its backplane is connected, else 503 |
//!
//! Every error is answered with a JSON body, `{"error":{"code":…,"message":…}}`, axum's own
//! (405 for a method a path does not take) included. Each WebSocket session logs one line at
//! info (`tracing`) when it ends; no line is logged per HTTP request.
//!
//! ```no_run
//! use sockeye_pubsub::Hub;
//! use sockeye_pubsub::web::{Web, WebConfig};
//!
//! # async fn run() -> std::io::Result<()> {
//! let hub = Hub::in_process();
//! let web = Web::new(hub, WebConfig::default().api_token("s3cret"));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8008").await?;
//! let router = web.router();
//! let mut stop = std::pin::pin!(tokio::signal::ctrl_c());
//! loop {
//!     tokio::select! {
//!         _ = &mut stop => break,
//!         accepted = listener.accept() => {
//!             let (tcp, peer) = accepted?;
//!             // Over a connection cap: closed at once (and counted).
//!             let Ok(admitted) = web.admit(peer.ip()) else { continue };
//!             let io = hyper_util::rt::TokioIo::new(tcp);
//!             tokio::spawn(web.serve_admitted(io, router.clone(), admitted));
//!         }
//!     }
//! }
//! // Ctrl-C: every socket is closed with 1001, requests in progress finish; 5 s at most.
//! web.shutdown();
//! web.closed(std::time::Duration::from_secs(5)).await;
//! # Ok(())
//! # }
//! ```
//!
//! Hostile clients meet bounds, each a [`WebConfig`] setting: a header-read timeout and an
//! idle timeout per connection, caps on connections per node and per client address
//! ([`Web::admit`], for the accept loop), an Origin check of every socket, and a bound on
//! each socket's publication rate and on the topics it publishes on.
//!
//! Files: `config` ([`WebConfig`]), `auth` (who a client is), `jwt` (JSON Web Tokens), `grant` (what a check answers), `origin` (which pages may open
//! sockets), `caps` (the connection caps), `idle` (an idle connection's end), `publish_limit`
//! (a socket's bounds on publishing), `health` (`/healthz`, `/readyz`), `json_errors` (every
//! error a JSON body), `session_end` (a session's end: its reason, code and log line),
//! `shared` (what
//! every request shares), `socket` (the WebSocket at `/`), `api` (the backends' HTTP API),
//! `metrics`, `query` (a request's query string), `respond` (JSON answers). This file holds
//! [`Web`]: the router, the connections and the graceful shutdown.

mod api;
pub mod auth;
mod caps;
mod config;
mod grant;
mod health;
mod idle;
mod json_errors;
mod jwks;
pub mod jwt;
mod metrics;
mod origin;
mod publish_limit;
mod query;
mod refusal;
mod respond;
mod session_end;
mod shared;
mod socket;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::{any, get, post};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use sockeye::ShutdownHandle;
use tokio_util::task::TaskTracker;

use metrics::Metrics;
use shared::Shared;

use crate::hub::Hub;

pub use auth::{Grant, Refused as AuthRefused};
pub use caps::{Admitted, OverCap};
pub use config::{
    HEADER_READ_TIMEOUT, HISTORY_LIMIT, IDLE_TIMEOUT, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS,
    MAX_PUBLISH_RATE, MAX_PUBLISH_TOPICS, SOCKET_WRITE_HIGH_WATER, WebConfig, socket_config,
};
pub use origin::BadOrigin;
pub use refusal::RefusalKind;

/// The JavaScript client, served at `/client.js`: `assets/client.js`, a symbolic link to
/// `clients/js/src/index.js` that `cargo package` stores as a file, so the published crate has it.
const CLIENT_JS: &str = include_str!("../../assets/client.js");
/// The demo page, served at `/demo`; it imports `./client.js`, which resolves to `/client.js`.
const DEMO_HTML: &str = include_str!("../../assets/demo.html");

/// What a JSON frame may add around a publication's data: its type, topic, position and id.
const JSON_HEADROOM: usize = 4096;

/// The streams one HTTP/2 connection may have open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`;
/// hyper's default is 200): RFC 9113 §6.5.2 recommends no fewer than 100, enough for a page's
/// requests and sockets. Each WebSocket stream of a connection
/// [`admitted`](Web::serve_admitted) counts under the connection caps besides.
pub const MAX_CONCURRENT_STREAMS: u32 = 100;

/// A node's web face: its [`router`](Self::router), and the graceful shutdown of its sockets.
#[derive(Clone)]
pub struct Web {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Web {
    /// The web face of `hub`.
    pub fn new(hub: Hub, config: WebConfig) -> Web {
        let mut socket = config.socket.clone();
        socket.protocol.max_message_size = hub.max_payload().saturating_add(JSON_HEADROOM);
        let gate = caps::Gate::new(config.max_connections, config.max_connections_per_address);
        Web {
            shared: Arc::new(Shared {
                gate,
                hub,
                config,
                metrics: Metrics::new(),
                shutdown: ShutdownHandle::new(),
                sockets: TaskTracker::new(),
                http: TaskTracker::new(),
                socket,
            }),
        }
    }

    /// The routes (see the [module docs](self)).
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            // `any`: over HTTP/2 the socket arrives as a CONNECT, not a GET.
            .route("/", any(socket::serve))
            .route(
                "/client.js",
                get(|State(shared): State<Arc<Shared>>| async move {
                    let mut response = respond::text("text/javascript; charset=utf-8", CLIENT_JS);
                    // A page of another site imports it as a module: a CORS fetch.
                    if let Some(allowed) = &shared.config.client_js_cors {
                        response
                            .headers_mut()
                            .insert(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, allowed.clone());
                    }
                    response
                }),
            )
            .route(
                "/demo",
                get(|| async { respond::text("text/html; charset=utf-8", DEMO_HTML) }),
            )
            .route("/publish", post(api::publish_batch))
            // `/publish/` too: an empty topic is refused as one (400), not an unknown path.
            .route("/publish/", post(api::publish_one))
            .route("/publish/{*topic}", post(api::publish_one))
            .route("/history/{*topic}", get(api::history))
            .route(
                "/metrics",
                get(|State(shared): State<Arc<Shared>>| async move { shared.metrics.scrape(&shared.hub) }),
            )
            .route("/healthz", get(health::alive))
            .route("/readyz", get(health::ready))
            .fallback(socket::elsewhere)
            // Last: over every route and the fallback, so that axum's own answers are JSON too.
            .layer(axum::middleware::from_fn(json_errors::ensure_json))
            .with_state(Arc::clone(&self.shared))
    }

    /// Serves one connection with `router` (this face's [`router`](Self::router), or an app
    /// that merges it): HTTP/1.1 or HTTP/2 (by ALPN after TLS, or the h2c preface), whichever
    /// the client speaks, with WebSocket upgrades and HTTP/2 extended CONNECT (RFC 8441)
    /// allowed. Ends when the connection does. On [`shutdown`](Self::shutdown) the connection
    /// finishes the requests in progress and closes (an HTTP/2 one sends GOAWAY and keeps its
    /// WebSocket streams until they close); [`closed`](Self::closed) waits for it. An
    /// HTTP/1.1 request head must arrive within the
    /// [`header_read_timeout`](WebConfig::header_read_timeout), and a connection with no byte
    /// either way for the [`idle_timeout`](WebConfig::idle_timeout) is closed gracefully. Call
    /// [`admit`](Self::admit) and [`serve_admitted`](Self::serve_admitted) to cap the
    /// connections.
    pub fn serve_connection<I>(
        &self,
        io: I,
        router: axum::Router,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        self.serve(io, router, None)
    }

    /// [`serve_connection`](Self::serve_connection) for a connection [`admit`](Self::admit)
    /// let in: its place under the caps is held until it ends, or, if it became a WebSocket,
    /// until the socket does. Over HTTP/2 (at most [`MAX_CONCURRENT_STREAMS`] streams at once)
    /// each WebSocket stream takes a place of its own under the caps too, for its life, as one
    /// more connection of the same address; over a cap it is answered 503 before the upgrade
    /// (counted as a connection over the cap is).
    pub fn serve_admitted<I>(
        &self,
        io: I,
        router: axum::Router,
        admitted: Admitted,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        self.serve(io, router, Some(admitted))
    }

    fn serve<I>(
        &self,
        io: I,
        router: axum::Router,
        admitted: Option<Admitted>,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        // Counted from now, not from the first poll: a connection accepted just before a
        // shutdown is still waited for.
        let tracked = self.shared.http.token();
        let stop = self.shared.shutdown.requested();
        let (header_read_timeout, idle_timeout) = (
            self.shared.config.header_read_timeout,
            self.shared.config.idle_timeout,
        );
        // The connection's address, for the WebSockets over HTTP/2 to be admitted by.
        let router = match admitted.as_ref().map(Admitted::address) {
            Some(peer) => router.layer(axum::Extension(caps::Peer(peer))),
            None => router,
        };
        async move {
            let _tracked = tracked;
            let (io, moved) = idle::Activity::new(io, admitted);
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            builder
                .http2()
                .timer(TokioTimer::new())
                .enable_connect_protocol()
                .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
            let connection = builder.serve_connection_with_upgrades(io, TowerToHyperService::new(router));
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = stop => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
                () = idle::quiet_for(&moved, idle_timeout) => {
                    tracing::debug!("closing an idle HTTP connection");
                    connection.as_mut().graceful_shutdown();
                    // HTTP/2's graceful close waits for the client to answer a ping: one that
                    // stays quiet meanwhile is dropped.
                    tokio::select! {
                        result = connection.as_mut() => result,
                        () = idle::quiet_for(&moved, idle_timeout) => Ok(()),
                    }
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, "HTTP connection ended with an error");
            }
        }
    }

    /// Counts a new connection from `peer` against the caps
    /// ([`max_connections`](WebConfig::max_connections),
    /// [`max_connections_per_address`](WebConfig::max_connections_per_address)) until the
    /// [`Admitted`] is dropped (give it to [`serve_admitted`](Self::serve_admitted)); over one,
    /// refuses it (counted in the metrics): close it.
    pub fn admit(&self, peer: std::net::IpAddr) -> Result<Admitted, OverCap> {
        self.shared.admit(peer)
    }

    /// Begins the graceful shutdown: every WebSocket is sent close 1001 (going away) at its
    /// next receive or send, new ones are closed as soon as they open, and the connections of
    /// [`serve_connection`](Self::serve_connection) finish their requests and close. Stop
    /// accepting connections yourself; then [`closed`](Self::closed) waits for all of them.
    pub fn shutdown(&self) {
        self.shared.shutdown.shutdown();
    }

    /// The WebSockets open now: counted from the moment the upgrade is answered (`101`, or
    /// `200` over HTTP/2) until the session ends.
    pub fn connections(&self) -> usize {
        self.shared.sockets.len()
    }

    /// Waits until every WebSocket has closed and every connection of
    /// [`serve_connection`](Self::serve_connection) has ended, or `timeout` has passed; returns
    /// whether they all did. A socket whose upgrade was answered but whose task has not run
    /// yet is waited for too.
    pub async fn closed(&self, timeout: Duration) -> bool {
        let (sockets, http) = (&self.shared.sockets, &self.shared.http);
        // A closed tracker's `wait` ends once it is empty; tracking goes on after `close`.
        sockets.close();
        http.close();
        let all = async {
            sockets.wait().await;
            http.wait().await;
        };
        tokio::time::timeout(timeout, all).await.is_ok()
    }
}
