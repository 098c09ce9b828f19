//! How a [`ReconnectingClient`](crate::reconnect::ReconnectingClient) reconnects:
//! [`ReconnectConfig`] (backoff, healthy uptime, attempts, the offline queue) and which
//! disconnections are final refusals.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sockeye_proto::HandshakeError;

use super::events::Disconnect;
use crate::backoff::{Backoff, Jitter};

/// What happens to messages sent while no connection is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Offline {
    /// Keep them, in order, and send them on the next connection (after the
    /// [`on_connect`](crate::reconnect::Builder::on_connect) hook). Past either bound, a send fails
    /// with [`SendError::QueueFull`](crate::reconnect::SendError::QueueFull) (the message is handed
    /// back, never dropped silently).
    Queue {
        /// The most messages kept.
        max_messages: usize,
        /// The most payload bytes kept.
        max_bytes: usize,
    },
    /// Refuse them: a send fails with [`SendError::NotConnected`](crate::reconnect::SendError::NotConnected).
    Refuse,
}

impl Default for Offline {
    /// `Queue` with at most 1,000 messages and 1 MiB.
    fn default() -> Self {
        Offline::Queue {
            max_messages: 1000,
            max_bytes: 1 << 20,
        }
    }
}

/// Whether a disconnection is a refusal that would only repeat (then the client gives up).
pub type FinalRefusal = Arc<dyn Fn(&Disconnect) -> bool + Send + Sync>;

/// How a [`ReconnectingClient`](crate::reconnect::ReconnectingClient) reconnects. Build with the
/// setters from the default:
///
/// ```
/// use std::time::Duration;
/// use sockeye::reconnect::{Offline, ReconnectConfig};
/// let config = ReconnectConfig::default()
///     .max_delay(Duration::from_secs(5))
///     .offline(Offline::Refuse);
/// assert_eq!(config.backoff.delay_range(0), (Duration::from_millis(50), Duration::from_millis(100)));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ReconnectConfig {
    /// The wait before each reconnection: the nominal wait starts at 100 ms and doubles up to
    /// 30 s, and the actual one is drawn in `[d/2, d]` (the [`Backoff`] default). Retry `n` is
    /// the `n`th reconnection since the last healthy connection.
    pub backoff: Backoff,
    /// A connection that stayed up this long was healthy: the next wait starts again from
    /// the backoff's first (default 10 s). A connection that drops sooner keeps the backoff growing,
    /// so that a server accepting and dropping at once is not hammered.
    pub healthy_after: Duration,
    /// Give up after this many connection attempts in a row failed (`None`, the default:
    /// never). A connection that opens resets the count.
    pub max_attempts: Option<u32>,
    /// Messages sent while disconnected: queued (default, 1,000 messages / 1 MiB) or refused.
    pub offline: Offline,
    /// Which disconnections are final refusals (default [`default_final_refusal`]).
    pub final_refusal: FinalRefusal,
}

impl fmt::Debug for ReconnectConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReconnectConfig")
            .field("backoff", &self.backoff)
            .field("healthy_after", &self.healthy_after)
            .field("max_attempts", &self.max_attempts)
            .field("offline", &self.offline)
            .finish_non_exhaustive()
    }
}

impl Default for ReconnectConfig {
    fn default() -> Self {
        ReconnectConfig {
            backoff: Backoff::default(),
            healthy_after: Duration::from_secs(10),
            max_attempts: None,
            offline: Offline::default(),
            final_refusal: Arc::new(default_final_refusal),
        }
    }
}

impl ReconnectConfig {
    /// The whole backoff.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The nominal wait before the first reconnection ([`Backoff::first`]).
    #[must_use]
    pub fn first_delay(mut self, delay: Duration) -> Self {
        self.backoff = self.backoff.first(delay);
        self
    }

    /// The growth of the nominal wait per reconnection ([`Backoff::multiplier`]; values below
    /// 1 are taken as 1).
    #[must_use]
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        self.backoff = self.backoff.multiplier(multiplier);
        self
    }

    /// The cap on the nominal wait ([`Backoff::max`]).
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.backoff = self.backoff.max(delay);
        self
    }

    /// The jitter ([`Backoff::jitter`]).
    #[must_use]
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.backoff = self.backoff.jitter(jitter);
        self
    }

    /// How long a connection must stay up to reset the backoff.
    #[must_use]
    pub fn healthy_after(mut self, uptime: Duration) -> Self {
        self.healthy_after = uptime;
        self
    }

    /// Give up after this many failed attempts in a row (`None`: never).
    #[must_use]
    pub fn max_attempts(mut self, attempts: impl Into<Option<u32>>) -> Self {
        self.max_attempts = attempts.into();
        self
    }

    /// Queue or refuse messages sent while disconnected.
    #[must_use]
    pub fn offline(mut self, offline: Offline) -> Self {
        self.offline = offline;
        self
    }

    /// Which disconnections end the client instead of a reconnection, for example:
    ///
    /// ```
    /// use sockeye::reconnect::{default_final_refusal, Disconnect, ReconnectConfig};
    /// // Also give up when the server closes with 1013 (try again later) — and never retry a
    /// // refusal of the opening handshake, whatever its status.
    /// let config = ReconnectConfig::default().final_refusal(|d| match d {
    ///     Disconnect::Closed { frame: Some(f), .. } if f.code.0 == 1013 => true,
    ///     Disconnect::Failed { error, .. } if error.handshake_error().is_some() => true,
    ///     _ => default_final_refusal(d),
    /// });
    /// ```
    #[must_use]
    pub fn final_refusal(mut self, is_final: impl Fn(&Disconnect) -> bool + Send + Sync + 'static) -> Self {
        self.final_refusal = Arc::new(is_final);
        self
    }

    /// Whether this configuration takes `disconnect` for a final refusal.
    pub fn is_final(&self, disconnect: &Disconnect) -> bool {
        (self.final_refusal)(disconnect)
    }
}

/// The default final refusals, those the `ws` tool stops at: an opening handshake refused with
/// an HTTP 4xx status other than 408 (timeout) and 429 (too many requests) — unauthorized,
/// forbidden, no such path —, an invalid URL, and a close from the server with 1002 (protocol
/// error), 1003 (unsupported data), 1007–1010 (invalid data, policy, too big, extension) or an
/// application code 4000–4999 (where servers put their own refusals: 4001 unauthorized, 4003
/// forbidden...). Retrying those would only be refused again.
pub fn default_final_refusal(disconnect: &Disconnect) -> bool {
    match disconnect {
        Disconnect::Failed { error, .. } => match error.handshake_error() {
            Some(HandshakeError::Rejected { status, .. }) => {
                (400..500).contains(status) && *status != 408 && *status != 429
            }
            Some(HandshakeError::InvalidUrl(_)) => true,
            _ => false,
        },
        Disconnect::Closed {
            frame: Some(frame), ..
        } => {
            matches!(frame.code.0, 1002 | 1003 | 1007..=1010 | 4000..=4999)
        }
        _ => false,
    }
}
