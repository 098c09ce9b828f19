//! The crate's one error type.

use std::fmt;

use sockeye::{CloseCode, CloseFrame};

/// An error from a hub, a subscriber or a backplane.
///
/// [`is_caller_fault`](Self::is_caller_fault) tells input to fix from a backplane to wait for.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The topic name is empty, too long or has control characters. The caller's fault.
    InvalidTopic(String),
    /// The backplane URL cannot be used: unknown scheme, no host, a feature not compiled in.
    /// The caller's fault; the message says what is accepted.
    InvalidUrl(String),
    /// A publication over the hub's size limit
    /// ([`HubConfig::max_payload`](crate::HubConfig)). The caller's fault.
    PayloadTooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Only text and binary messages can be published (not ping, pong or close). The caller's
    /// fault.
    NotData,
    /// The backplane's server cannot be reached or refused a command. Publications fail while it
    /// is down (nothing is queued behind the caller's back); subscriptions come back by
    /// themselves. `what` names the server and the command.
    Backplane {
        /// What failed, with the server's address.
        what: String,
        /// The client library's error, when there is one.
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The subscriber fell further behind than its bound and its policy is
    /// [`SlowPolicy::Close`](crate::SlowPolicy): it receives nothing more. A WebSocket carrying
    /// it should close with 1008 (policy violation).
    TooSlow {
        /// Bytes queued when the bound was passed.
        queued: usize,
        /// The bound.
        max: usize,
    },
    /// The hub has stopped (every handle to it was dropped, or its backplane ended).
    Closed,
    /// A batch ([`Hub::publish_many`](crate::Hub::publish_many),
    /// [`Backplane::publish_many`](crate::backplane::Backplane::publish_many)) failed after some
    /// of it had been handed to the backplane's server: its first `published` publications were
    /// published, the ones from there up to `sent` may or may not have been, and the rest (from
    /// `sent` on) were not. Retrying from `sent` keeps the order and duplicates nothing; retrying
    /// from `published` may duplicate what lies between.
    ///
    /// A batch that fails before anything of it was sent fails with the plain error instead
    /// ([`Error::Backplane`], say): none of it was published, and it may be retried whole.
    PartlyPublished {
        /// Publications at the start of the batch known to be published.
        published: usize,
        /// Publications at the start of the batch that may have been published (at least
        /// `published`).
        sent: usize,
        /// Why the batch failed.
        source: Box<Error>,
    },
}

impl Error {
    /// Whether the caller should change what it does (a bad topic, URL or payload), as opposed to
    /// waiting for a backplane or a peer.
    pub fn is_caller_fault(&self) -> bool {
        matches!(
            self,
            Error::InvalidTopic(_) | Error::InvalidUrl(_) | Error::PayloadTooLarge { .. } | Error::NotData
        )
    }

    /// The close frame for a WebSocket whose publication or subscription failed with this
    /// error, the code mapped here once: the backplane (unreachable, stopped, a batch cut short)
    /// is 1013, try again later (RFC 6455 §7.4.1: the client reconnects, and resumes from its
    /// last position); a subscriber [too slow](Error::TooSlow) is 1008, as is a caller's fault
    /// (a bad topic, something that is not data), except a publication over the size limit:
    /// 1009, message too big.
    pub fn close_frame(&self) -> CloseFrame {
        let (code, reason) = match self {
            Error::Backplane { .. } | Error::PartlyPublished { .. } | Error::Closed => {
                (CloseCode::TRY_AGAIN_LATER, "pub/sub backplane unavailable")
            }
            Error::TooSlow { .. } => (CloseCode::POLICY_VIOLATION, "too slow: messages were dropped"),
            Error::PayloadTooLarge { .. } => (CloseCode::MESSAGE_TOO_BIG, "publication too large"),
            Error::InvalidTopic(_) => (CloseCode::POLICY_VIOLATION, "invalid topic"),
            Error::InvalidUrl(_) | Error::NotData => {
                (CloseCode::POLICY_VIOLATION, "refused by the pub/sub hub")
            }
        };
        CloseFrame::new(code, reason)
    }

    /// A backplane failure, with the client library's error.
    #[cfg(any(feature = "redis", feature = "nats"))]
    pub(crate) fn backplane(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::Backplane {
            what: what.into(),
            source: Some(source.into()),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidTopic(why) => write!(f, "invalid topic: {why}"),
            Error::InvalidUrl(why) => write!(f, "invalid backplane URL: {why}"),
            Error::PayloadTooLarge { len, max } => write!(
                f,
                "publication of {len} bytes is over the limit of {max} bytes (HubConfig::max_payload)"
            ),
            Error::NotData => f.write_str("only text and binary messages can be published"),
            Error::Backplane {
                what,
                source: Some(e),
            } => write!(f, "backplane: {what}: {e}"),
            Error::Backplane { what, source: None } => write!(f, "backplane: {what}"),
            Error::TooSlow { queued, max } => write!(
                f,
                "subscriber too slow: {queued} bytes queued, over its bound of {max} (SubscriberConfig::max_queued_bytes)"
            ),
            Error::Closed => f.write_str("the hub has stopped"),
            Error::PartlyPublished {
                published,
                sent,
                source,
            } if published == sent => write!(
                f,
                "{source} (the batch's first {published} publications were published, the rest were not)"
            ),
            Error::PartlyPublished {
                published,
                sent,
                source,
            } => write!(
                f,
                "{source} (the batch's first {published} publications were published, the next {} may or may not have been, the rest were not)",
                sent.saturating_sub(*published)
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Backplane { source: Some(e), .. } => Some(&**e),
            Error::PartlyPublished { source, .. } => Some(&**source),
            _ => None,
        }
    }
}
