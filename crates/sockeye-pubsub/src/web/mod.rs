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
//!             let (tcp, _) = accepted?;
//!             tokio::spawn(web.serve_connection(hyper_util::rt::TokioIo::new(tcp), router.clone()));
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
//! Files: `auth` (who a client is), `socket` (the WebSocket at `/`), `api` (the backends' HTTP
//! API), `metrics`, `respond` (JSON answers). This file holds the configuration and the router.

mod api;
pub mod auth;
mod metrics;
mod respond;
mod socket;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::{any, get, post};
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use sockeye::ShutdownHandle;
use tokio_util::task::TaskTracker;

use crate::hub::Hub;
use crate::session::{OnGap, SessionConfig};
use auth::{Authorize, Refused};
use metrics::Metrics;

pub use auth::Refused as AuthRefused;

/// The JavaScript client, served at `/client.js`. Read from the repository at build time:
/// packaging this crate on its own needs a copy of `clients/js/src/index.js` inside it.
const CLIENT_JS: &str = include_str!("../../../../clients/js/src/index.js");
/// The demo page, served at `/demo`; it imports `./client.js`, which resolves to `/client.js`.
const DEMO_HTML: &str = include_str!("../../../../clients/js/demo.html");

/// What a JSON frame may add around a publication's data: its type, topic, position and id.
const JSON_HEADROOM: usize = 4096;

/// The web face's settings.
#[derive(Clone)]
pub struct WebConfig {
    pub(crate) session: SessionConfig,
    pub(crate) api_token: Option<Arc<str>>,
    pub(crate) authorize: Option<Authorize>,
    pub(crate) history_limit: usize,
    pub(crate) socket: sockeye::Config,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("session", &self.session)
            .field("api_token", &self.api_token.as_ref().map(|_| "…"))
            .field("authorize", &self.authorize.is_some())
            .field("history_limit", &self.history_limit)
            .field("socket", &self.socket)
            .finish()
    }
}

impl Default for WebConfig {
    /// Sessions with [`OnGap::Deliver`] (the client is told of a gap with a `gap` frame), no
    /// API token (the HTTP API answers 403), no client authentication (every client may
    /// subscribe to and publish on every topic), at most 1,000 messages per history read,
    /// `sockeye::Config::default()` for the WebSockets.
    fn default() -> Self {
        WebConfig {
            session: SessionConfig::default().on_gap(OnGap::Deliver),
            api_token: None,
            authorize: None,
            history_limit: 1000,
            socket: sockeye::Config::default(),
        }
    }
}

impl WebConfig {
    /// The settings of each WebSocket's [`Session`](crate::Session). Default:
    /// `SessionConfig::default().on_gap(OnGap::Deliver)`.
    pub fn session(mut self, config: SessionConfig) -> Self {
        self.session = config;
        self
    }

    /// The bearer token backends send (`Authorization: Bearer TOKEN`) to use the HTTP API.
    /// Default: none, and the API answers every request with 403 saying how to turn it on.
    pub fn api_token(mut self, token: impl Into<String>) -> Self {
        self.api_token = Some(Arc::from(token.into()));
        self
    }

    /// Decides, from the `token` in a WebSocket's query string (`/?token=…`, what
    /// `clients/js` sends; `None` without one), what the connection may do, or refuses it
    /// (401 or 403, before the upgrade). Default: none, every client may do everything. See
    /// [`auth`] for a shared token and for JWTs.
    pub fn authorize(
        mut self,
        check: impl Fn(Option<&str>) -> Result<crate::access::Access, Refused> + Send + Sync + 'static,
    ) -> Self {
        self.authorize = Some(Arc::new(check));
        self
    }

    /// The WebSockets' settings (compression, timeouts, buffers). Its
    /// `protocol.max_message_size` is replaced by what fits the hub's largest publication in a
    /// frame (a larger frame is closed with 1009). Default: `sockeye::Config::default()`.
    pub fn socket(mut self, config: sockeye::Config) -> Self {
        self.socket = config;
        self
    }

    /// The most messages one `GET /history` returns (`limit` is capped to it). Default 1,000.
    pub fn history_limit(mut self, messages: usize) -> Self {
        self.history_limit = messages;
        self
    }
}

/// What every request of a node's web face shares.
pub(crate) struct Shared {
    pub(crate) hub: Hub,
    pub(crate) config: WebConfig,
    pub(crate) metrics: Metrics,
    pub(crate) shutdown: ShutdownHandle,
    /// Every WebSocket from the moment its upgrade is answered (before its task first runs, so
    /// that a shutdown that comes between the two still waits for it) until its session ends.
    pub(crate) sockets: TaskTracker,
    /// Every HTTP connection served by [`Web::serve_connection`], until it ends.
    pub(crate) http: TaskTracker,
    /// The WebSocket's settings: a message may carry the largest publication and its frame.
    pub(crate) socket: sockeye::Config,
}

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
        Web {
            shared: Arc::new(Shared {
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
                get(|| async { respond::text("text/javascript; charset=utf-8", CLIENT_JS) }),
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
            .fallback(socket::elsewhere)
            .with_state(Arc::clone(&self.shared))
    }

    /// Serves one connection with `router` (this face's [`router`](Self::router), or an app
    /// that merges it): HTTP/1.1 or HTTP/2 (by ALPN after TLS, or the h2c preface), whichever
    /// the client speaks, with WebSocket upgrades and HTTP/2 extended CONNECT (RFC 8441)
    /// allowed. Ends when the connection does. On [`shutdown`](Self::shutdown) the connection
    /// finishes the requests in progress and closes (an HTTP/2 one sends GOAWAY and keeps its
    /// WebSocket streams until they close); [`closed`](Self::closed) waits for it.
    pub fn serve_connection<I>(
        &self,
        io: I,
        router: axum::Router,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        // Counted from now, not from the first poll: a connection accepted just before a
        // shutdown is still waited for.
        let tracked = self.shared.http.token();
        let stop = self.shared.shutdown.requested();
        async move {
            let _tracked = tracked;
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http2().enable_connect_protocol();
            let connection = builder.serve_connection_with_upgrades(io, TowerToHyperService::new(router));
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = stop => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, "HTTP connection ended with an error");
            }
        }
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

/// The percent-decoded value of `name` in `uri`'s query string (`+` is a space, as forms send).
pub(crate) fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| decode(&value.replace('+', " ")))
    })
}

/// Percent-decoded (RFC 3986 §2.1), invalid UTF-8 replaced.
pub(crate) fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}
