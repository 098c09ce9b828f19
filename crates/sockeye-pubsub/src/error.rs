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
    /// A setting cannot be used: a [`HistoryConfig::copies`](crate::HistoryConfig::copies) out
    /// of range. The caller's fault; the message names the setting, what is accepted and what
    /// to do.
    InvalidConfig(String),
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
    /// The node's subscriber queues together held more than
    /// [`HubConfig::max_queued_bytes_total`](crate::HubConfig::max_queued_bytes_total), and this
    /// subscriber's was among the largest: it receives nothing more, so that the others keep
    /// theirs. Not this caller's fault alone: a WebSocket carrying it should close with 1013 (try
    /// again later); its client reconnects and resumes from history.
    NodeQueuesFull {
        /// Bytes its queue held when it was stopped.
        queued: usize,
        /// The node's bound.
        max: usize,
    },
    /// A subscriber asked for one topic more than
    /// [`SubscriberConfig::max_subscriptions`](crate::SubscriberConfig) allows. The caller's
    /// fault (a client following too many topics): unsubscribe from one first, or raise the
    /// setting. A WebSocket server refusing a client's subscription for this should close with
    /// 1008 (policy violation): retrying the same request will not succeed.
    TooManySubscriptions {
        /// The limit.
        max: usize,
    },
    /// The node already follows [`HubConfig::max_topics`](crate::HubConfig) topics and a
    /// subscription asked for one more. Not this caller's fault: the node is full. A WebSocket
    /// server should close with 1013 (try again later) so that the client reconnects, later
    /// or to another node; the operator raises the setting or adds nodes.
    TooManyTopics {
        /// The limit.
        max: usize,
    },
    /// A position to resume from (`offset@epoch`, as [`Position`](crate::Position) prints) that
    /// cannot be read. The caller's fault (a client sent it): the message says what is wrong.
    InvalidPosition(String),
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
            Error::InvalidTopic(_)
                | Error::InvalidUrl(_)
                | Error::InvalidConfig(_)
                | Error::PayloadTooLarge { .. }
                | Error::NotData
                | Error::TooManySubscriptions { .. }
                | Error::InvalidPosition(_)
        )
    }

    /// The close code a WebSocket carrying the subscriber or the publisher that got this error
    /// should be closed with, if it has to be closed: the one place that maps them.
    ///
    /// - 1008 (policy violation) when the client broke a rule of the server that retrying will
    ///   not fix: [`TooSlow`](Error::TooSlow), [`TooManySubscriptions`](Error::TooManySubscriptions),
    ///   [`InvalidTopic`](Error::InvalidTopic), [`InvalidPosition`](Error::InvalidPosition),
    ///   [`NotData`](Error::NotData);
    /// - 1009 (message too big): [`PayloadTooLarge`](Error::PayloadTooLarge);
    /// - 1013 (try again later) when the node or its backplane cannot serve it now and a
    ///   reconnect (later, or to another node) may succeed: [`TooManyTopics`](Error::TooManyTopics),
    ///   [`NodeQueuesFull`](Error::NodeQueuesFull),
    ///   [`Backplane`](Error::Backplane), [`PartlyPublished`](Error::PartlyPublished),
    ///   [`Closed`](Error::Closed), [`InvalidUrl`](Error::InvalidUrl) and
    ///   [`InvalidConfig`](Error::InvalidConfig) (a node's own setting).
    pub fn close_code(&self) -> CloseCode {
        match self {
            Error::TooSlow { .. }
            | Error::TooManySubscriptions { .. }
            | Error::InvalidTopic(_)
            | Error::InvalidPosition(_)
            | Error::NotData => CloseCode::POLICY_VIOLATION,
            Error::PayloadTooLarge { .. } => CloseCode::MESSAGE_TOO_BIG,
            Error::TooManyTopics { .. }
            | Error::NodeQueuesFull { .. }
            | Error::Backplane { .. }
            | Error::PartlyPublished { .. }
            | Error::Closed
            | Error::InvalidUrl(_)
            | Error::InvalidConfig(_) => CloseCode::TRY_AGAIN_LATER,
        }
    }

    /// The close frame for a WebSocket whose publication or subscription failed with this
    /// error: [`close_code`](Self::close_code), with a reason that says what happened.
    pub fn close_frame(&self) -> CloseFrame {
        let reason = match self {
            Error::Backplane { .. } | Error::PartlyPublished { .. } | Error::Closed => {
                "pub/sub backplane unavailable"
            }
            Error::TooSlow { .. } => "too slow: messages were dropped",
            Error::NodeQueuesFull { .. } => {
                "too far behind while the node is short of queue memory: resume later"
            }
            Error::PayloadTooLarge { .. } => "publication too large",
            Error::InvalidTopic(_) => "invalid topic",
            Error::InvalidPosition(_) => "invalid position",
            Error::TooManySubscriptions { .. } => "too many subscriptions",
            Error::TooManyTopics { .. } => "this node has too many topics: try later or another node",
            Error::InvalidUrl(_) | Error::InvalidConfig(_) | Error::NotData => "refused by the pub/sub hub",
        };
        CloseFrame::new(self.close_code(), reason)
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
            Error::InvalidConfig(why) => write!(f, "invalid configuration: {why}"),
            Error::PayloadTooLarge { len, max } => write!(
                f,
                "publication of {len} bytes is over the limit of {max} bytes (HubConfig::max_payload; ws pubsub_server --max-message-size)"
            ),
            Error::NotData => f.write_str("only text and binary messages can be published"),
            Error::Backplane {
                what,
                source: Some(e),
            } => write!(f, "backplane: {what}: {e}"),
            Error::Backplane { what, source: None } => write!(f, "backplane: {what}"),
            Error::TooSlow { queued, max } => write!(
                f,
                "subscriber too slow: {queued} bytes queued, over its bound of {max} (SubscriberConfig::max_queued_bytes; ws pubsub_server --max-queued-bytes)"
            ),
            Error::NodeQueuesFull { queued, max } => write!(
                f,
                "subscriber stopped with {queued} bytes queued: the node's queues together passed their bound of {max} bytes (HubConfig::max_queued_bytes_total) and its was among the largest"
            ),
            Error::TooManySubscriptions { max } => write!(
                f,
                "a subscriber may follow at most {max} topics (SubscriberConfig::max_subscriptions; \
                 ws pubsub_server --max-subscriptions): \
                 unsubscribe from one first"
            ),
            Error::TooManyTopics { max } => write!(
                f,
                "this node already follows its limit of {max} topics (HubConfig::max_topics; \
                 ws pubsub_server --max-topics): \
                 try again later or on another node"
            ),
            Error::InvalidPosition(why) => write!(f, "invalid position: {why}"),
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
