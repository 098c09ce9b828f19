//! The Redis backplane's state and its two connections to the server: the command connection
//! (publish, history), which reads the server's life (`run_id`) before anything is sent over
//! it and is made again after a failure, and the pub/sub connection's halves. How long each may
//! take, and how reconnections back off.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use redis::{AsyncConnectionConfig, Client, RedisError, Script};
use sockeye::backoff::Backoff;
use tokio::sync::Mutex;

use super::wire::server_life;
use crate::backplane::api::EventSender;
use crate::config::HistoryConfig;
use crate::error::Error;
use crate::topic::Topic;

/// How long [`Redis::connect`](super::Redis::connect) waits for the server at start.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a command waits for its reply before failing with
/// [`Error::Backplane`](crate::Error::Backplane) (and a reconnection on the next one).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a subscription is checked (one server: a PING on the pub/sub connection; a cluster:
/// a PING to every primary, on the connections its shard channels are subscribed on): a server
/// that hangs without closing its connections is otherwise never noticed by a node that only
/// subscribes.
pub(crate) const HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// Whether a health check's `ping` answered within [`RESPONSE_TIMEOUT`].
pub(crate) async fn answers<T>(ping: impl Future<Output = Result<T, RedisError>>) -> bool {
    matches!(tokio::time::timeout(RESPONSE_TIMEOUT, ping).await, Ok(Ok(_)))
}

/// Reconnection backoff (one server and a cluster alike): the nominal wait starts at 100 ms and
/// doubles up to 3 s, each wait drawn in [d/2, d] so that many nodes do not reconnect in step
/// (50–100 ms first, 1.5–3 s at most).
pub(crate) const BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(3));

/// What the backplane, its pub/sub reader and its publishing and history reads share.
pub(super) struct Shared {
    pub(super) client: Client,
    /// `host:port`, for messages (never the password).
    pub(super) addr: String,
    pub(super) history: HistoryConfig,
    pub(super) events: EventSender,
    /// Commands: publish and history. `None` after a failure: the next command reconnects.
    pub(super) commands: Mutex<Option<Commands>>,
    /// The pub/sub connection's command half and the topics subscribed to. One lock, so that a
    /// reconnection and a subscription cannot miss each other.
    pub(super) subs: Mutex<Subs>,
    pub(super) publish: Script,
}

/// A command connection and the life of the server at its other end.
#[derive(Clone)]
pub(super) struct Commands {
    pub(super) conn: MultiplexedConnection,
    /// The server's `run_id` (`INFO server`), new with every start of a Redis process and
    /// different on every server: whenever it differs from the one that gave a topic's last
    /// offset, those offsets may have been lost, and the topic starts a new epoch. Empty when
    /// the server does not tell (`INFO` renamed away): then a rollback is not detected here.
    pub(super) life: Arc<str>,
}

pub(super) struct Subs {
    /// `None` while reconnecting.
    pub(super) sink: Option<PubSubSink>,
    pub(super) topics: HashSet<Topic>,
}

impl Shared {
    /// An error of this server's `command`.
    pub(super) fn error(
        &self,
        command: &str,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::backplane(format!("redis {}: {command}", self.addr), e)
    }

    pub(super) async fn connect_commands(&self, timeout: Duration) -> Result<Commands, Error> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let connect = async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            // The server's life, read on this connection before anything is published over it.
            let life = match redis::cmd("INFO")
                .arg("server")
                .query_async::<String>(&mut conn)
                .await
            {
                Ok(info) => server_life(&info).unwrap_or_default(),
                Err(e)
                    if matches!(
                        e.kind(),
                        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
                    ) =>
                {
                    tracing::warn!(
                        "pub/sub backplane: redis {}: INFO refused ({e}): a server restarted from \
                         older data will not be noticed by its run_id",
                        self.addr
                    );
                    String::new()
                }
                Err(e) => return Err(e),
            };
            Ok::<_, RedisError>(Commands {
                conn,
                life: life.into(),
            })
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(commands)) => Ok(commands),
            Ok(Err(e)) => Err(self.error("connect", e)),
            Err(_) => Err(self.error("connect", format!("no answer within {timeout:?}"))),
        }
    }

    /// A new pub/sub connection subscribed to `topics`.
    pub(super) async fn connect_pubsub(
        &self,
        timeout: Duration,
        topics: &[String],
    ) -> Result<(PubSubSink, PubSubStream), Error> {
        let connect = async {
            let (mut sink, stream) = self.client.get_async_pubsub().await?.split();
            if !topics.is_empty() {
                sink.subscribe(topics).await?;
            }
            Ok::<_, RedisError>((sink, stream))
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(pair)) => Ok(pair),
            Ok(Err(e)) => Err(self.error("connect (pub/sub)", e)),
            Err(_) => Err(self.error("connect (pub/sub)", format!("no answer within {timeout:?}"))),
        }
    }

    /// The command connection, connected again if it failed.
    pub(super) async fn commands(&self) -> Result<Commands, Error> {
        let mut slot = self.commands.lock().await;
        if let Some(conn) = &*slot {
            return Ok(conn.clone());
        }
        let conn = self.connect_commands(RESPONSE_TIMEOUT).await?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the command connection after a failure (the next command reconnects).
    pub(super) async fn reset_commands(&self) {
        *self.commands.lock().await = None;
    }
}

/// Unsubscribes with `unsubscribe` (UNSUBSCRIBE on one server, SUNSUBSCRIBE in a cluster),
/// waiting at most [`RESPONSE_TIMEOUT`]: done, or as good as done when the connection is going
/// or hangs (the next connection does not subscribe to the topic); the server's refusal
/// otherwise.
pub(crate) async fn unsubscribe_within(
    unsubscribe: impl Future<Output = Result<(), RedisError>>,
) -> Result<(), RedisError> {
    match tokio::time::timeout(RESPONSE_TIMEOUT, unsubscribe).await {
        Ok(Err(e)) if !(e.is_connection_dropped() || e.is_io_error()) => Err(e),
        _ => Ok(()),
    }
}
