//! [`WebConfig`]: a web face's settings (its sessions, the API token, who a client is, how
//! much one history read returns, the WebSockets' settings).

use std::sync::Arc;

use super::auth::{Authorize, Refused};
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
    /// [`auth`](super::auth) for a shared token and for JWTs.
    pub fn authorize(
        mut self,
        check: impl Fn(Option<&str>) -> Result<Access, Refused> + Send + Sync + 'static,
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
