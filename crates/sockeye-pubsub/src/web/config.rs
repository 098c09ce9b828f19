//! [`WebConfig`]: a web face's settings (its sessions, the API token, who a client is, how
//! much one history read returns, the WebSockets' settings) and its bounds on hostile clients
//! (timeouts, connection caps, the pages that may open sockets).

use std::sync::Arc;
use std::time::Duration;

use super::auth::{Authorize, Grant, Refused};
use super::origin::{AllowedOrigins, BadOrigin, Origin};
#[cfg(doc)]
use crate::access::Access;
use crate::session::{OnGap, SessionConfig};

/// The web face's settings.
#[derive(Clone)]
pub struct WebConfig {
    pub(crate) session: SessionConfig,
    pub(crate) api_token: Option<Arc<str>>,
    pub(crate) authorize: Option<Authorize>,
    pub(crate) history_limit: usize,
    pub(crate) socket: sockeye::Config,
    pub(crate) header_read_timeout: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) origins: AllowedOrigins,
    pub(crate) tls: bool,
    pub(crate) max_connections: usize,
    pub(crate) max_connections_per_address: usize,
    pub(crate) max_publish_rate: Option<u32>,
    pub(crate) max_publish_topics: Option<usize>,
    pub(crate) client_js_cors: Option<http::HeaderValue>,
}

/// [`WebConfig::history_limit`]'s default.
pub const HISTORY_LIMIT: usize = 1000;
/// [`WebConfig::header_read_timeout`]'s default.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// [`WebConfig::idle_timeout`]'s default.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// [`WebConfig::max_connections`]'s default.
pub const MAX_CONNECTIONS: usize = 10_000;
/// [`WebConfig::max_connections_per_address`]'s default.
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 100;
/// [`WebConfig::max_publish_rate`]'s default.
pub const MAX_PUBLISH_RATE: u32 = 100;
/// [`WebConfig::max_publish_topics`]'s default.
pub const MAX_PUBLISH_TOPICS: usize = 100;

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("session", &self.session)
            .field("api_token", &self.api_token.as_ref().map(|_| "…"))
            .field("authorize", &self.authorize.is_some())
            .field("history_limit", &self.history_limit)
            .field("socket", &self.socket)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("origins", &self.origins)
            .field("tls", &self.tls)
            .field("max_connections", &self.max_connections)
            .field("max_connections_per_address", &self.max_connections_per_address)
            .field("max_publish_rate", &self.max_publish_rate)
            .field("max_publish_topics", &self.max_publish_topics)
            .finish()
    }
}

impl Default for WebConfig {
    /// Sessions with [`OnGap::Deliver`] (the client is told of a gap with a `gap` frame), no
    /// API token (the HTTP API answers 403), no client authentication (every client may
    /// subscribe to and publish on every topic), at most 1,000 messages per history read,
    /// `sockeye::Config::default()` for the WebSockets; the bounds on hostile clients of each
    /// setting below (a 10 s header-read timeout, a 60 s idle timeout, sockets from pages of
    /// the node's own host only, 10,000 connections, 100 per client address, 100 publications
    /// a second per socket on at most 100 topics).
    fn default() -> Self {
        WebConfig {
            session: SessionConfig::default().on_gap(OnGap::Deliver),
            api_token: None,
            authorize: None,
            history_limit: HISTORY_LIMIT,
            socket: socket_config(),
            header_read_timeout: Some(HEADER_READ_TIMEOUT),
            idle_timeout: Some(IDLE_TIMEOUT),
            origins: AllowedOrigins::default(),
            tls: false,
            max_connections: MAX_CONNECTIONS,
            max_connections_per_address: MAX_CONNECTIONS_PER_ADDRESS,
            max_publish_rate: Some(MAX_PUBLISH_RATE),
            max_publish_topics: Some(MAX_PUBLISH_TOPICS),
            client_js_cors: Some(http::HeaderValue::from_static("*")),
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
    /// [`auth`](super::auth) for a shared token and for JWTs.
    ///
    /// The callback returns an [`Access`] or a [`Grant`] (an access with an expiry): a socket
    /// whose grant expires is closed with 4002 (`token_expired`) then, unless the client sends a
    /// `refresh` request with a token that the callback grants the same access (the same user)
    /// first; it is answered `refreshed` with the new expiry, or an `error` `unauthorized`.
    pub fn authorize<G: Into<Grant>>(
        mut self,
        check: impl Fn(Option<&str>) -> Result<G, Refused> + Send + Sync + 'static,
    ) -> Self {
        self.authorize = Some(Arc::new(move |token| check(token).map(Into::into)));
        self
    }

    /// The WebSockets' settings (compression, timeouts, buffers). Its
    /// `protocol.max_message_size` is replaced by what fits the hub's largest publication in a
    /// frame (a larger frame is closed with 1009). Default: [`socket_config`].
    pub fn socket(mut self, config: sockeye::Config) -> Self {
        self.socket = config;
        self
    }

    /// The most messages one `GET /history` returns (`limit` is capped to it). Default 1,000.
    pub fn history_limit(mut self, messages: usize) -> Self {
        self.history_limit = messages;
        self
    }

    /// How long an HTTP/1.1 client has to send a request's head (its line and headers) once
    /// it starts one, and once a keep-alive connection goes idle after an answer: past it the
    /// connection is closed (a client that opens connections and sends half a request holds
    /// nothing for long). `None`: no limit. Default 10 s: a browser sends its head at once, and
    /// 10 s covers a slow mobile link's round trips many times over.
    pub fn header_read_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.header_read_timeout = timeout.into();
        self
    }

    /// How long a connection may pass with no byte either way before it is closed: an HTTP/2
    /// one is sent GOAWAY (its streams may finish) and dropped if it stays quiet as long
    /// again; one that has not yet said which HTTP it speaks is closed. An idle HTTP/1.1
    /// connection is waiting for a request head and is closed by the
    /// [`header_read_timeout`](Self::header_read_timeout) first. `None`: no limit. Default
    /// 60 s: a browser reuses a connection within seconds or not at all, and a WebSocket
    /// carried by an HTTP/2 connection is pinged every 30 s (`sockeye::Config`'s keepalive), so
    /// a connection quiet for 60 s carries none that is alive.
    pub fn idle_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.idle_timeout = timeout.into();
        self
    }

    /// Allows pages of `origin` (`scheme://host[:port]`, as a browser sends in `Origin`) to
    /// open sockets too; `*` allows every page. Repeatable. A page's origin compares by
    /// scheme, host and port (RFC 6454). Default: only the pages of the origin the request is
    /// addressed to (its `Host` or `:authority`, with the scheme it is served with: see
    /// [`tls`](Self::tls)), as Centrifugo's `allowed_origins`: a
    /// page of another site cannot use the cookies or single sign-on of this one (cross-site
    /// WebSocket hijacking). A request without `Origin` is not from a browser and is not
    /// checked. Behind a proxy that rewrites `Host`, list the site's origin. A refused page's
    /// socket is upgraded and closed with 4004 (`origin_not_allowed`, see `RefusalKind`).
    pub fn allowed_origin(mut self, origin: &str) -> Result<Self, BadOrigin> {
        if origin.trim() == "*" {
            self.origins.any = true;
        } else {
            let parsed = Origin::parse(origin).ok_or_else(|| BadOrigin(origin.to_owned()))?;
            self.origins.listed.push(parsed);
        }
        Ok(self)
    }

    /// Which pages of other sites may import `/client.js` (its `Access-Control-Allow-Origin`):
    /// `Some("*")` every page (the default: the script is public code and is fetched without
    /// credentials, so a page of another site gains nothing it could not download itself),
    /// `Some(origin)` one (`scheme://host[:port]`), `None` none but the node's own pages (no
    /// header). Opening a socket is the Origin check's business
    /// ([`allowed_origin`](Self::allowed_origin)), not this.
    pub fn client_js_cors(mut self, origin: Option<&str>) -> Result<Self, BadOrigin> {
        self.client_js_cors = match origin.map(str::trim) {
            None => None,
            Some("*") => Some(http::HeaderValue::from_static("*")),
            Some(origin) => {
                let bad = || BadOrigin(origin.to_owned());
                Origin::parse(origin).ok_or_else(bad)?;
                Some(http::HeaderValue::from_str(origin).map_err(|_| bad())?)
            }
        };
        Ok(self)
    }

    /// Whether the web face is served over TLS (by [`Web::serve_connection`](super::Web::serve_connection)
    /// over a TLS stream, or by a proxy in front of it that ends TLS): the scheme of the
    /// node's own origin, `https`, for the Origin check (see
    /// [`allowed_origin`](Self::allowed_origin)); over HTTP/2 a request's `:scheme` says it
    /// too. A page of `http://` the same host is another origin (anyone on its path may have
    /// rewritten it) and may not open sockets with the user's cookies. Default: `false`.
    pub fn tls(mut self, served_over_tls: bool) -> Self {
        self.tls = served_over_tls;
        self
    }

    /// The most connections [`Web::admit`](super::Web::admit) lets the node serve at once.
    /// Default 10,000: each costs a file descriptor and buffers, and a node's descriptor
    /// limit is often not much higher; raise both together.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections;
        self
    }

    /// The most connections [`Web::admit`](super::Web::admit) lets one client address hold
    /// at once (an IPv6 client counts by its /64). Default 100: a browser opens 6 or so per
    /// site, so 100 is some 15 browsers behind one NAT address (raise it for a larger office or
    /// a carrier's NAT); one address cannot take the node's
    /// [`max_connections`](Self::max_connections) for itself. Behind a reverse proxy every
    /// client has the proxy's address: raise it to the node's cap there.
    pub fn max_connections_per_address(mut self, connections: usize) -> Self {
        self.max_connections_per_address = connections;
        self
    }

    /// The most publications one WebSocket makes a second (a bucket holding a second's worth:
    /// a burst of that many, then that rate); one more is refused with an `error` frame
    /// (`unavailable`, nothing published, retry later) and the socket stays up. `None`: no
    /// bound. Default 100: a page publishes on its user's actions, a game loop at 60 Hz stays
    /// under it, and one socket cannot make the backplane carry more than 100 a second.
    pub fn max_publish_rate(mut self, per_second: impl Into<Option<u32>>) -> Self {
        self.max_publish_rate = per_second.into();
        self
    }

    /// The most distinct topics one WebSocket publishes on over its life; a publication on
    /// one more is refused with an `error` frame (`not_allowed`) and the socket stays up. Each
    /// topic published on may be created in the backplane and kept there (a Redis stream and
    /// its history live a day): a socket cannot leave keys without end. `None`: no bound.
    /// Default 100, as many as a socket may subscribe to
    /// ([`SubscriberConfig::max_subscriptions`](crate::SubscriberConfig)).
    pub fn max_publish_topics(mut self, topics: impl Into<Option<usize>>) -> Self {
        self.max_publish_topics = topics.into();
        self
    }
}

/// A socket's write buffer, past which its session stops taking deliveries from its queue.
/// Default 64 KiB, not the library's 1 MiB: what a session has moved into its socket is outside
/// the queue's bounds (its own and the node's, `HubConfig::max_queued_bytes_total`), so with
/// 1,000 slow readers 1 MiB each was 1 GiB the bounds did not see; the kernel's socket buffer
/// keeps a fast reader's pipe full all the same. (One message always fits, whatever its size.)
pub const SOCKET_WRITE_HIGH_WATER: usize = 64 << 10;

/// The web face's default WebSocket settings: `sockeye::Config::default()` with a write buffer
/// of [`SOCKET_WRITE_HIGH_WATER`]. Start from it to change one setting.
pub fn socket_config() -> sockeye::Config {
    sockeye::Config::builder()
        .write_buffer_high_water(SOCKET_WRITE_HIGH_WATER)
        .build()
}
