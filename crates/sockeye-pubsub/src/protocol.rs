//! What a [`Session`](crate::Session)'s messages mean: the [`Protocol`] that turns a client's
//! message into a [`Request`] and a [`Delivery`] into what is sent ([`Outgoing`]), and
//! [`Relay`], the default. A leaf: it knows the hub's types, not the session's loop (how a
//! protocol for many topics on one socket plugs in is in the session's module docs).

use sockeye::{CloseCode, CloseFrame, Message, PreparedMessage};

use crate::backplane::position::{Position, Recovery};
use crate::delivery::Delivery;
use crate::error::Error;
use crate::topic::Topic;

/// How a protocol answers a request once its outcome is known: called once with the result,
/// it returns the frame to send the client, if any. Made by [`Protocol::request`], which knows
/// the request's id; run by the session when the request has been carried out.
pub type Answer<T> = Box<dyn for<'e> FnOnce(Result<T, &'e Error>) -> Option<Message> + Send>;

/// What the client's messages mean and how deliveries are sent to it: see the
/// [session module docs](crate::session). `&self` and `Sync`: both directions of a connection use it at once.
pub trait Protocol: Send + Sync {
    /// What a data message (text or binary) received from the client asks for.
    fn request(&self, message: Message) -> Request;

    /// What is sent to the client for `delivery`. The default sends a publication as it was
    /// published (prepared once for every subscriber) and nothing for a [`Delivery::Gap`] or a
    /// [`Delivery::Dropped`] notice ([`SlowPolicy::Drop`](crate::SlowPolicy)).
    ///
    /// A gap is never silent: when this sends nothing for one, the session closes the
    /// connection with [`gap_close`] whatever its [`OnGap`](crate::OnGap) says; when it sends a
    /// notice, that notice is written before any close ([`OnGap::Close`](crate::OnGap::Close)).
    fn outgoing<'a>(&self, delivery: &'a Delivery) -> Outgoing<'a> {
        match delivery {
            Delivery::Message(published) => Outgoing::Prepared(published.prepared()),
            _ => Outgoing::Nothing,
        }
    }
}

/// The close of a connection for a gap on `topic` ([`Delivery::Gap`]): 1013 (try again later),
/// the reason `gap on TOPIC: resume from OFFSET@EPOCH` (the gap's `resume`: the position to
/// resume from to skip nothing), or `gap on TOPIC: publications were missed` when the gap has
/// no `resume` (keep the position held before). A topic too long for a close reason (123
/// bytes) is left out (`gap: resume from …`): a protocol with one topic per connection
/// ([`Relay`]) names it with the URL already.
pub fn gap_close(topic: &Topic, resume: Option<&Position>) -> CloseFrame {
    const MAX_REASON: usize = 123;
    let what = match resume {
        Some(position) => format!("resume from {position}"),
        None => "publications were missed".to_owned(),
    };
    let mut reason = format!("gap on {}: {what}", topic.as_str());
    if reason.len() > MAX_REASON {
        reason = format!("gap: {what}");
    }
    if reason.len() > MAX_REASON {
        reason = "gap: publications were missed".to_owned();
    }
    CloseFrame::new(CloseCode::TRY_AGAIN_LATER, reason)
}

/// What a message from the client asks for (see [`Protocol::request`]).
///
/// Requests are carried out in the order they were received, and their answers sent in that
/// order.
#[non_exhaustive]
pub enum Request {
    /// Publish `message` on `topic`, to every subscriber but this connection, on every node.
    /// Consecutive publications on one topic go to the backplane together.
    Publish {
        /// The topic.
        topic: Topic,
        /// The message.
        message: Message,
    },
    /// [`Publish`](Self::Publish), answered: `answer` gets the position the publication got
    /// (`None` from a backplane without positions, or when it was published by a retry after
    /// an outage). A publication that cannot be published closes the connection as
    /// [`Publish`](Self::Publish) does (1013), unanswered.
    PublishAnswered {
        /// The topic.
        topic: Topic,
        /// The message.
        message: Message,
        /// Makes the answer.
        answer: Answer<Option<Position>>,
    },
    /// Subscribe to `topic`, resuming after `since` if given (see
    /// [`Subscriber::subscribe`](crate::Subscriber::subscribe)); `answer` gets how it began, or
    /// the error (too many subscriptions, the backplane down): the connection stays up.
    Subscribe {
        /// The topic.
        topic: Topic,
        /// The position to resume after.
        since: Option<Position>,
        /// Makes the answer.
        answer: Answer<Recovery>,
    },
    /// Unsubscribe from `topic` (nothing happens if not subscribed); `answer` gets the outcome.
    Unsubscribe {
        /// The topic.
        topic: Topic,
        /// Makes the answer.
        answer: Answer<()>,
    },
    /// Send this to the client, in order with the answers to the requests before it: the
    /// protocol's own answer (a refusal of a malformed request, say).
    Reply(Message),
    /// Nothing: the message is dropped (a protocol that only takes text, say).
    Ignore,
    /// Close the connection with this frame: the client broke the protocol. What it sent
    /// before is published first.
    Close(CloseFrame),
    /// The connection's credentials were renewed (a fresh token): from now on it expires at
    /// `expires` (`None`: never), in place of what [`Session::expires`](crate::Session::expires)
    /// or an earlier refresh set; then send `reply`, in order with the other answers.
    Refreshed {
        /// When the connection expires now (wall-clock time, as a token's `exp`).
        expires: Option<std::time::SystemTime>,
        /// The protocol's answer.
        reply: Message,
    },
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Publish { topic, message } => f
                .debug_struct("Publish")
                .field("topic", topic)
                .field("message", message)
                .finish(),
            Request::PublishAnswered { topic, message, .. } => f
                .debug_struct("PublishAnswered")
                .field("topic", topic)
                .field("message", message)
                .finish_non_exhaustive(),
            Request::Subscribe { topic, since, .. } => f
                .debug_struct("Subscribe")
                .field("topic", topic)
                .field("since", since)
                .finish_non_exhaustive(),
            Request::Unsubscribe { topic, .. } => f
                .debug_struct("Unsubscribe")
                .field("topic", topic)
                .finish_non_exhaustive(),
            Request::Reply(message) => f.debug_tuple("Reply").field(message).finish(),
            Request::Ignore => f.write_str("Ignore"),
            Request::Close(frame) => f.debug_tuple("Close").field(frame).finish(),
            Request::Refreshed { expires, reply } => f
                .debug_struct("Refreshed")
                .field("expires", expires)
                .field("reply", reply)
                .finish(),
        }
    }
}

/// What is sent to the client for a delivery (see [`Protocol::outgoing`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Outgoing<'a> {
    /// Nothing.
    Nothing,
    /// A message prepared once for every subscriber (encoded once: with permessage-deflate
    /// without context takeover, compressed once, not once per connection).
    Prepared(&'a PreparedMessage),
    /// A message made for this client.
    Message(Message),
}

/// The default [`Protocol`]: one topic per socket; every text and binary message the client
/// sends is a publication on it, and every publication is sent as it was published (what the
/// `ws broadcast_server` relay does). Its messages are the publications themselves, so it has
/// no frame of its own for a gap: a gap closes the connection with [`gap_close`] (1013, the
/// position to resume from in the reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    topic: Topic,
}

impl Relay {
    /// Publishes on `topic`.
    pub fn new(topic: Topic) -> Relay {
        Relay { topic }
    }

    /// The topic it publishes on.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }
}

impl Protocol for Relay {
    fn request(&self, message: Message) -> Request {
        Request::Publish {
            topic: self.topic.clone(),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_close_names_the_topic_and_the_position_within_a_close_reason() {
        let topic = Topic::new("news").unwrap();
        let at: Position = "17@9f3c:2".parse().unwrap();
        let frame = gap_close(&topic, Some(&at));
        assert_eq!(frame.code, CloseCode::TRY_AGAIN_LATER);
        assert_eq!(frame.reason.as_str(), "gap on news: resume from 17@9f3c:2");
        assert_eq!(
            gap_close(&topic, None).reason.as_str(),
            "gap on news: publications were missed"
        );
        let long = Topic::new(&"x".repeat(200)).unwrap();
        assert_eq!(
            gap_close(&long, Some(&at)).reason.as_str(),
            "gap: resume from 17@9f3c:2"
        );
    }
}
