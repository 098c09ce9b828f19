//! Picking a backplane by URL: [`connect`] and [`check_url`] (`redis://`, `redis+cluster://`,
//! `nats://`, `memory:`), what an unknown or compiled-out scheme is told, and
//! [`Hub::connect`], a hub over the backplane a URL names. Here, not with the hub, so that the
//! hub knows only the [`Backplane`] trait (and the in-process default), and this file alone
//! every backplane.

use super::api::{Backplane, EVENT_QUEUE, EventSender};
use super::in_process::InProcess;
#[cfg(feature = "nats")]
use super::nats;
#[cfg(feature = "redis")]
use super::{redis, redis_cluster};
use tokio::sync::mpsc;

use crate::config::{HistoryConfig, HubConfig};
use crate::error::Error;
use crate::hub::Hub;

/// What [`connect`] accepts, for error messages.
pub const URL_FORMS: &str = "redis://HOST:PORT, redis+cluster://HOST:PORT,HOST:PORT,… (feature `redis`), \
                             nats://HOST:PORT[,HOST:PORT…] (feature `nats`) or memory:";

/// Checks a backplane URL without connecting (a command line can refuse a typo at once):
/// [`Error::InvalidUrl`] says what is wrong and what is accepted.
pub fn check_url(url: &str) -> Result<(), Error> {
    let scheme = url.split_once(':').map_or("", |(s, _)| s).to_ascii_lowercase();
    match scheme.as_str() {
        "memory" => Ok(()),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => redis::parse_url(url).map(drop),
        #[cfg(feature = "redis")]
        "redis+cluster" => redis_cluster::parse_url(url).map(drop),
        #[cfg(feature = "nats")]
        "nats" => nats::parse_url(url).map(drop),
        _ => Err(unsupported(url, &scheme)),
    }
}

/// The error for a scheme that is unknown or whose feature is off.
fn unsupported(url: &str, scheme: &str) -> Error {
    match scheme {
        "redis" | "rediss" | "redis+cluster" | "nats" => Error::InvalidUrl(format!(
            "{url}: this build has no {scheme} support (Cargo feature `{}` of sockeye-pubsub)",
            if scheme == "nats" { "nats" } else { "redis" }
        )),
        _ => Error::InvalidUrl(format!("{url:?}: expected {URL_FORMS}")),
    }
}

/// Connects to the backplane a URL names: `redis://HOST:PORT[/DB]`,
/// `redis+cluster://HOST:PORT,HOST:PORT,…` (a Redis Cluster, sharded pub/sub),
/// `nats://HOST:PORT[,HOST:PORT…]` (one NATS server or a cluster's), or
/// `memory:` (this process only). An unknown scheme, or one whose feature is not compiled in, is
/// [`Error::InvalidUrl`]; an unreachable server is [`Error::Backplane`] (retry: the server may
/// not be up yet).
pub async fn connect(
    url: &str,
    history: HistoryConfig,
    events: EventSender,
) -> Result<Box<dyn Backplane>, Error> {
    let scheme = url.split_once(':').map_or("", |(s, _)| s).to_ascii_lowercase();
    match scheme.as_str() {
        "memory" => Ok(Box::new(InProcess::new(events, history))),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => Ok(Box::new(redis::Redis::connect(url, history, events).await?)),
        #[cfg(feature = "redis")]
        "redis+cluster" => Ok(Box::new(
            redis_cluster::RedisCluster::connect(url, history, events).await?,
        )),
        #[cfg(feature = "nats")]
        "nats" => Ok(Box::new(nats::connect(url, history, events).await?)),
        _ => Err(unsupported(url, &scheme)),
    }
}

impl Hub {
    /// A hub over the backplane a URL names (see [`backplane::connect`](connect)):
    /// `redis://HOST:PORT`, `nats://HOST:PORT` or `memory:`.
    pub async fn connect(url: &str, config: HubConfig, history: HistoryConfig) -> Result<Hub, Error> {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let backplane = connect(url, history, tx).await?;
        Ok(Hub::start(config, backplane, rx))
    }
}
