//! What the application writes: a [`Handler`] per loop thread, called with a [`Socket`] for each
//! event of each connection (open, message, drain, close), as uWebSockets' behaviours are.

use std::net::SocketAddr;

use http::{Request, Response};
use sockeye_proto::{CloseFrame, Connection, Message};

use crate::membership::{Membership, Offered};
use crate::shared::Shared;
use crate::topics::{self, MAX_TOPICS_PER_SOCKET, Mail, PublishError, SocketId};

/// The application's side of a loop thread. Each thread of a [`Server`](crate::Server) makes its
/// own handler (so it needs to be neither `Send` nor `Sync`) and calls it on that thread only,
/// never from two connections at once: no locks.
///
/// ```
/// use sockeye_loop::{Handler, Message, Socket};
///
/// /// Echoes text and binary messages, counting them per connection.
/// struct Echo;
///
/// impl Handler for Echo {
///     type Data = u64;
///
///     fn message(&mut self, socket: &mut Socket<'_, u64>, message: Message) {
///         *socket.data_mut() += 1;
///         socket.send(message);
///     }
/// }
/// ```
pub trait Handler: 'static {
    /// What the application keeps per connection ([`Socket::data_mut`]): made by
    /// [`upgrade`](Self::upgrade) (by default, with `Default`), handed back to
    /// [`close`](Self::close).
    type Data: Default;

    /// Looks at the upgrade request (path, query, `Origin`, headers, offered subprotocols) and
    /// returns the `101` response, with headers added, and the connection's data (made from the
    /// request: who the client is, what it asked for), or refuses with any HTTP response. Called
    /// only for valid upgrade requests: others are refused before (400, 405, 426, 431, 505).
    /// Default: accept every request, with `Data::default()`.
    fn upgrade(
        &mut self,
        request: &Request<()>,
        response: Response<()>,
    ) -> Result<(Response<()>, Self::Data), Response<String>> {
        let _ = request;
        Ok((response, Self::Data::default()))
    }

    /// The connection is open: the `101` response is queued. Default: nothing.
    fn open(&mut self, socket: &mut Socket<'_, Self::Data>) {
        let _ = socket;
    }

    /// A text or binary message arrived, whole (pings and pongs are answered by the engine; a
    /// close frame ends in [`close`](Self::close)).
    fn message(&mut self, socket: &mut Socket<'_, Self::Data>, message: Message);

    /// What the connection had queued past
    /// [`Config::write_buffer_high_water`](sockeye::Config::write_buffer_high_water) is written
    /// down below it again: sending will not pile up any more.
    /// Called once after each [`Sent::Backpressure`]. Default: nothing.
    fn drain(&mut self, socket: &mut Socket<'_, Self::Data>) {
        let _ = socket;
    }

    /// The connection is over (the transport is closed); its data is handed back. Default: nothing.
    fn close(&mut self, data: Self::Data, closed: Closed) {
        let _ = (data, closed);
    }
}

/// How a connection ended, as [`Handler::close`] is told.
#[derive(Debug)]
#[non_exhaustive]
pub struct Closed {
    /// The peer's close frame, if it sent one.
    pub frame: Option<CloseFrame>,
    /// Why the connection did not end cleanly, if it did not: a protocol violation, 1006 (the
    /// peer closed the transport without a close frame), a timeout, or an I/O error's text.
    pub error: Option<String>,
    /// The peer's address.
    pub peer: SocketAddr,
}

/// What [`Socket::send`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sent {
    /// Queued; it is written at the end of this loop turn, with everything else queued.
    Queued,
    /// Queued, but the connection now holds more than the high water mark
    /// ([`Config::write_buffer_high_water`](sockeye::Config::write_buffer_high_water)): the peer
    /// reads slower than this side sends.
    /// Stop sending to it until [`Handler::drain`].
    Backpressure,
    /// Not sent: the connection is closing or closed.
    Dropped,
}

/// One connection, as a handler sees it during a call: send, close, topics, its data, its peer.
#[derive(Debug)]
pub struct Socket<'a, D> {
    pub(crate) engine: &'a mut Connection,
    pub(crate) data: &'a mut D,
    pub(crate) facing: &'a mut Facing,
    pub(crate) shared: &'a Shared,
}

/// What a connection keeps for its handler's calls, besides its engine and data: who it is,
/// its topics and what waits for it, whether a send reported backpressure.
#[derive(Debug)]
pub(crate) struct Facing {
    pub(crate) id: SocketId,
    pub(crate) peer: SocketAddr,
    /// Its subscriptions and the publications waiting for it.
    pub(crate) membership: Membership,
    /// Set when a send crossed the high water mark: the loop calls `drain` once below it.
    pub(crate) backpressured: bool,
    /// wss://: the server name the client's TLS handshake asked for (SNI), if it named one.
    pub(crate) sni_hostname: Option<Box<str>>,
}

impl Facing {
    pub(crate) fn new(id: SocketId, peer: SocketAddr) -> Self {
        Facing {
            id,
            peer,
            membership: Membership::default(),
            backpressured: false,
            sni_hostname: None,
        }
    }
}

impl<D> Socket<'_, D> {
    /// Queues a message (text, binary, ping, pong; a close frame is [`close`](Self::close)'s).
    /// Nothing waits: what the peer has not read yet stays queued, and the result says when
    /// that is more than the high water mark.
    pub fn send(&mut self, message: impl Into<Message>) -> Sent {
        // Behind the publications waiting for it, if any: in the order sent.
        match self
            .facing
            .membership
            .send(self.engine, message.into(), self.shared.max_backlog)
        {
            Offered::Taken => self.pressure(),
            Offered::Dropped => Sent::Dropped,
        }
    }

    /// Queues a message encoded once for many connections (a broadcast): the frame's bytes are
    /// shared, not copied.
    pub fn send_prepared(&mut self, prepared: &sockeye_proto::PreparedMessage) -> Sent {
        if self.facing.membership.backlog_bytes() > 0 {
            let message = prepared.message().clone();
            return match self
                .facing
                .membership
                .send(self.engine, message, self.shared.max_backlog)
            {
                Offered::Taken => self.pressure(),
                Offered::Dropped => Sent::Dropped,
            };
        }
        if self.engine.send_prepared(prepared).is_err() {
            return Sent::Dropped;
        }
        self.pressure()
    }

    fn pressure(&mut self) -> Sent {
        if self.buffered_amount() > self.shared.config.write_buffer_high_water {
            self.facing.backpressured = true;
            Sent::Backpressure
        } else {
            Sent::Queued
        }
    }

    /// Starts the closing handshake (RFC 6455 §7.1.2) with an optional code and reason; the
    /// connection ends once the peer answers, or after the close timeout.
    pub fn close(&mut self, frame: Option<CloseFrame>) {
        // Already closing or closed: nothing more to do.
        let _ = self.engine.close(frame);
    }

    /// Bytes queued for this connection and not yet written (publications waiting for it
    /// included).
    pub fn buffered_amount(&self) -> usize {
        self.facing.membership.queued(self.engine)
    }

    /// The application's data for this connection.
    pub fn data(&self) -> &D {
        self.data
    }

    /// The application's data for this connection, to change.
    pub fn data_mut(&mut self) -> &mut D {
        self.data
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.facing.peer
    }

    /// wss:// ([`Server::tls`](crate::Server::tls)): the server name the client asked for in
    /// its TLS handshake (SNI), to serve several names from one listener. `None` over ws://, or
    /// when the client named none (an IP address is never sent as SNI, RFC 6066 §3).
    pub fn sni_hostname(&self) -> Option<&str> {
        self.facing.sni_hostname.as_deref()
    }

    /// Whether permessage-deflate was negotiated.
    pub fn is_compressed(&self) -> bool {
        self.engine.is_deflate_enabled()
    }

    /// Its id: what [`ServerHandle::send`](crate::ServerHandle::send) takes to send to it from outside the loop (a tokio
    /// task, another thread). Never the id of another connection, even one in the same slot
    /// later.
    pub fn id(&self) -> SocketId {
        self.facing.id
    }

    /// Subscribes it to `topic`: every publication to the topic, from any thread, is sent to
    /// it. `false` if it was subscribed already, or the name is empty or over 256 bytes, or it
    /// is subscribed to 1,024 topics already.
    pub fn subscribe(&mut self, topic: &str) -> bool {
        if self.is_subscribed(topic) || self.facing.membership.subscriptions.len() >= MAX_TOPICS_PER_SOCKET {
            return false;
        }
        let Ok(topic) = topics::topic_name(topic) else {
            return false;
        };
        let key = self.facing.id.key;
        topics::with(|t| t.subscribe(&topic, key));
        self.facing.membership.subscriptions.push(topic);
        true
    }

    /// Unsubscribes it from `topic`; `false` if it was not subscribed.
    pub fn unsubscribe(&mut self, topic: &str) -> bool {
        let Some(at) = self
            .facing
            .membership
            .subscriptions
            .iter()
            .position(|t| &**t == topic)
        else {
            return false;
        };
        self.facing.membership.subscriptions.swap_remove(at);
        let key = self.facing.id.key;
        topics::with(|t| t.unsubscribe(topic, key));
        true
    }

    /// Whether it is subscribed to `topic`.
    pub fn is_subscribed(&self, topic: &str) -> bool {
        self.facing.membership.subscriptions.iter().any(|t| &**t == topic)
    }

    /// The topics it is subscribed to.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.facing.membership.subscriptions.iter().map(|t| &**t)
    }

    /// Publishes a text or binary message to `topic`: every subscriber on every thread gets it,
    /// except this connection (as uWebSockets' `ws.publish`; [`publish_to_all`](Self::publish_to_all)
    /// includes it, as does [`ServerHandle::publish`](crate::ServerHandle::publish)). Encoded
    /// once for all of them. It goes out with this loop turn's writes on this thread, and with
    /// the next turn of the others.
    ///
    /// A subscriber that does not read is closed with 1008 once more than the server's
    /// [`max_backlog`](crate::Server::max_backlog) waits for it, rather than kept without end.
    pub fn publish(&mut self, topic: &str, message: impl Into<Message>) -> Result<(), PublishError> {
        let (topic, message) = self.prepare(topic, message.into())?;
        self.post(topic, message)
    }

    /// [`publish`](Self::publish), this connection included if it is subscribed (as
    /// uWebSockets' `app.publish`): one encoding for every subscriber, where a `publish` and a
    /// `send` to itself would encode the message twice. This connection's copy is queued at
    /// once, as [`send_prepared`](Self::send_prepared) would: in order with what it sends next.
    pub fn publish_to_all(&mut self, topic: &str, message: impl Into<Message>) -> Result<(), PublishError> {
        let (topic, message) = self.prepare(topic, message.into())?;
        if self.is_subscribed(&topic) {
            self.send_prepared(&message);
        }
        self.post(topic, message)
    }

    /// A publication's checked topic and its message encoded once.
    fn prepare(
        &self,
        topic: &str,
        message: Message,
    ) -> Result<(std::sync::Arc<str>, sockeye_proto::PreparedMessage), PublishError> {
        if self.shared.is_stopping() {
            return Err(PublishError::Stopped);
        }
        Ok((topics::topic_name(topic)?, topics::prepare(message)?))
    }

    /// Hands a publication to every thread's subscribers but this connection.
    fn post(
        &mut self,
        topic: std::sync::Arc<str>,
        message: sockeye_proto::PreparedMessage,
    ) -> Result<(), PublishError> {
        let except = Some(self.facing.id);
        let others = topics::post_everywhere(
            &self.shared.inboxes,
            Some(self.facing.id.thread),
            &topic,
            &message,
            except,
        );
        topics::with(|t| {
            t.queue(Mail::Publish {
                topic,
                message,
                except,
            })
        });
        others
    }
}
