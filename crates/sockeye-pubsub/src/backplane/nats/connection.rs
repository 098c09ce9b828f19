//! The NATS backplane's state, shared by its tasks: the client and its connection to the
//! server (how long connecting and requests may take, how reconnections back off), the
//! stream, the followed topics; and the life of the server connected to, which publications
//! name.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sockeye::backoff::Backoff;
use tokio::sync::{Mutex, mpsc};

use super::follow::Follow;
use super::life;
use super::stream::Js;
use crate::backplane::api::EventSender;
use crate::error::Error;
use crate::topic::Topic;

/// How long connecting may take at start.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a publication may wait for its acknowledgement (JetStream) or flush (core), and a
/// JetStream request for its answer.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the client PINGs its server (async-nats's default is 60 s): after two unanswered,
/// it drops the connection and reconnects, which the backplane reports ([`Event::Lost`], then
/// [`Event::Restored`]). A server that hangs with the connection open (its host died) otherwise
/// left a core subscriber deaf for minutes.
///
/// [`Event::Lost`]: crate::backplane::Event::Lost
/// [`Event::Restored`]: crate::backplane::Event::Restored
pub(super) const PING_INTERVAL: Duration = Duration::from_secs(5);

/// The client's reconnection backoff: 100 ms doubling to 2 s, each wait drawn in [d/2, d] so
/// that the nodes that lost one server do not all come back at the same instant.
pub(super) const BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));

/// What the backplane, its supervisor and its publishing and history reads share.
pub(super) struct Shared {
    /// `nats://HOST:PORT`, for messages.
    pub(super) server: String,
    /// The subject of this backplane's own responder, which proves the connection alive.
    pub(super) ping: String,
    pub(super) client: async_nats::Client,
    /// `None`: core NATS only.
    pub(super) js: Option<Js>,
    pub(super) events: EventSender,
    /// The topics subscribed to, each with the task delivering it.
    pub(super) topics: Mutex<HashMap<Topic, Follow>>,
    /// A topic's task that found its consumer stalled sends the topic here, and ends; the
    /// supervisor then restores every consumer.
    pub(super) stalls: mpsc::UnboundedSender<Topic>,
    /// The span the backplane was connected in: each topic's task runs in it, whichever
    /// caller's subscription started it (the lines say which node they are of).
    pub(super) span: tracing::Span,
}

impl Shared {
    /// The life of the server this node is connected to, which the publications it stores now
    /// name (see [`life`]); `None` in a cluster (the server connected to is not the one
    /// storing, and changes between nodes: the replicas' quorum is the guarantee there) and
    /// while the server is not known.
    pub(super) fn life(&self, js: &Js) -> Option<String> {
        let info = self.client.server_info();
        let clustered =
            info.cluster.as_deref().is_some_and(|c| !c.is_empty()) || js.replicas.load(Ordering::Relaxed) > 1;
        (!clustered && !info.server_id.is_empty()).then(|| life::of_server(&info.server_id))
    }

    /// How many connections the client has made so far: a count that changed across a batch of
    /// requests means some went out on another connection (maybe to another life of the
    /// server) than the others.
    pub(super) fn connects(&self) -> u64 {
        self.client.statistics().connects.load(Ordering::Relaxed)
    }

    /// A round trip through the server, to the backplane's own responder: once it is answered,
    /// the server has processed everything this client sent before it (a server handles a
    /// connection's messages in order). `Client::flush` only writes the client's buffer to the
    /// socket. `what` names the operation for the error.
    pub(super) async fn round_trip(&self, what: &str) -> Result<(), Error> {
        match tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.client.request(self.ping.clone(), bytes::Bytes::new()),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.failed(format_args!("{what}: server check"), e)),
            Err(_) => Err(Error::Backplane {
                what: format!(
                    "{}: {what}: server check: no answer within {REQUEST_TIMEOUT:?}",
                    self.server
                ),
                source: None,
            }),
        }
    }

    /// An error of this backplane's server, saying what failed.
    pub(super) fn failed(
        &self,
        what: impl fmt::Display,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::backplane(format!("{}: {what}", self.server), e)
    }
}
