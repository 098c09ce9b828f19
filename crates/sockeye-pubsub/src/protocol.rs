//! What a [`Session`](crate::Session)'s messages mean: the [`Protocol`] that turns a client's
//! message into a [`Request`] and a [`Delivery`] into what is sent ([`Outgoing`]), and
//! [`Relay`], the default. A leaf: it knows the hub's types, not the session's loop (how a
//! protocol for many topics on one socket plugs in is in the session's module docs).

use sockeye::{CloseFrame, Message, PreparedMessage};

use crate::{Delivery, Topic};

/// What the client's messages mean and how deliveries are sent to it: see the
/// [session module docs](crate::session). `&self` and `Sync`: both directions of a connection use it at once.
pub trait Protocol: Send + Sync {
    /// What a data message (text or binary) received from the client asks for.
    fn request(&self, message: Message) -> Request;

    /// What is sent to the client for `delivery`. The default sends a publication as it was
    /// published (prepared once for every subscriber) and nothing for a [`Delivery::Gap`]
    /// (reached only with [`OnGap::Deliver`](crate::OnGap::Deliver)) or a [`Delivery::Dropped`] notice
    /// ([`SlowPolicy::Drop`](crate::SlowPolicy)).
    fn outgoing<'a>(&self, delivery: &'a Delivery) -> Outgoing<'a> {
        match delivery {
            Delivery::Message(published) => Outgoing::Prepared(published.prepared()),
            _ => Outgoing::Nothing,
        }
    }
}

/// What a message from the client asks for (see [`Protocol::request`]).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Nothing: the message is dropped (a protocol that only takes text, say).
    Ignore,
    /// Close the connection with this frame: the client broke the protocol. What it sent
    /// before is published first.
    Close(CloseFrame),
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
/// `ws broadcast_server` relay does).
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
