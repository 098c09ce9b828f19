//! The caller's side: [`Builder`], which starts the driver task, [`ReconnectingClient`] (events
//! in, commands out) and [`Sender`], for sending from any task.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::Stream;
use http::Request;
use sockeye_proto::{CloseFrame, Message};
use tokio::sync::mpsc;

use super::channels::{Command, Io};
use super::config::ReconnectConfig;
use super::driver::{Driver, Factory, Hook, HookFuture};
use super::events::{Attempt, Event};
use super::link::{Link, lock};
use super::send_error::SendError;
use crate::client::IntoClientRequest;
use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::stream::TransportStream;
use crate::websocket::WebSocket;

/// How many events wait for the caller before the driver stops reading the connection.
const EVENT_CAPACITY: usize = 32;

/// Sets up a [`ReconnectingClient`]; [`start`](Self::start) starts it.
#[must_use]
pub struct Builder {
    factory: Factory,
    config: Config,
    reconnect: ReconnectConfig,
    hook: Option<Hook>,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("reconnect", &self.reconnect)
            .field("hook", &self.hook.is_some())
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// The connection settings (default [`Config::default`]); their keepalive is the heartbeat
    /// (see *Heartbeat* in the [module](crate::reconnect) documentation).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// The reconnection settings (default [`ReconnectConfig::default`]).
    pub fn reconnect(mut self, reconnect: ReconnectConfig) -> Self {
        self.reconnect = reconnect;
        self
    }

    /// A hook run on every new connection, after the handshake and before anything else: before the
    /// queued messages are sent and before any message is delivered as an [`Event`]. It may send
    /// (subscribe, resume from a position) and receive (a server's welcome, an answer to its
    /// request) on the connection. An error fails the attempt
    /// ([`Disconnect::Failed`](crate::reconnect::Disconnect::Failed)), which is retried as any
    /// other. Messages it leaves unread are delivered as events.
    ///
    /// ```
    /// # fn demo(b: sockeye::reconnect::Builder) -> sockeye::reconnect::Builder {
    /// b.on_connect(|ws| Box::pin(async move {
    ///     ws.send(r#"{"subscribe": "prices"}"#).await
    /// }))
    /// # }
    /// ```
    pub fn on_connect<H>(mut self, hook: H) -> Self
    where
        H: for<'a> FnMut(&'a mut WebSocket<TransportStream>) -> HookFuture<'a> + Send + 'static,
    {
        self.hook = Some(Box::new(hook));
        self
    }

    /// Starts the client: spawns its driver task, which makes the first attempt at once. Must be
    /// called within a tokio runtime (as `tokio::spawn`).
    pub fn start(self) -> ReconnectingClient {
        let (events_tx, events) = mpsc::channel(EVENT_CAPACITY);
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let link = Arc::new(Mutex::new(Link {
            writer: None,
            queue: VecDeque::new(),
            queued_bytes: 0,
            offline: self.reconnect.offline,
            ended: false,
        }));
        let driver = Driver {
            factory: self.factory,
            hook: self.hook,
            config: Arc::new(self.config),
            reconnect: self.reconnect,
            link: Arc::clone(&link),
            io: Io {
                commands: commands_rx,
                events: events_tx,
                outbox: VecDeque::new(),
                gone: false,
            },
            attempts: 0,
            failures: 0,
            retry: 0,
        };
        tokio::spawn(driver.run());
        ReconnectingClient {
            events,
            commands,
            sender: Sender {
                link,
                gate: Arc::new(tokio::sync::Mutex::new(())),
            },
        }
    }
}

/// A WebSocket client that reconnects: see the [module](crate::reconnect) documentation.
///
/// Read what happens with [`next`](Self::next) (or as a [`Stream`] of [`Event`]s), and keep
/// reading: like a [`WebSocket`]'s receiving side, it is what moves the connection along (pings
/// answered, the closing handshake). Send with [`send`](Self::send), or from other tasks with a
/// [`Sender`].
pub struct ReconnectingClient {
    events: mpsc::Receiver<Event>,
    commands: mpsc::UnboundedSender<Command>,
    sender: Sender,
}

impl fmt::Debug for ReconnectingClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReconnectingClient").finish_non_exhaustive()
    }
}

impl ReconnectingClient {
    /// A client of one URL or request (`&'static str`, `String`, [`http::Uri`], an
    /// [`http::Request`] with headers), the same for every attempt.
    pub fn builder<R>(request: R) -> Builder
    where
        R: IntoClientRequest + Clone + Send + 'static,
    {
        Self::with_factory(move |_| request.clone().into_client_request())
    }

    /// A client that makes each attempt's request anew: fail over between servers (by
    /// [`Attempt::number`]), put the position to resume from in the URL (`?since=…`), refresh a
    /// token. An error from the factory fails that attempt
    /// ([`Disconnect::Failed`](crate::reconnect::Disconnect::Failed)).
    ///
    /// ```
    /// # use sockeye::reconnect::ReconnectingClient;
    /// let nodes = ["ws://10.0.0.1:8008/", "ws://10.0.0.2:8008/"];
    /// let builder = ReconnectingClient::with_factory(move |attempt| {
    ///     let node = nodes[(attempt.number as usize - 1) % nodes.len()];
    ///     sockeye::IntoClientRequest::into_client_request(node)
    /// });
    /// ```
    pub fn with_factory<F>(factory: F) -> Builder
    where
        F: FnMut(&Attempt) -> Result<Request<()>, Error> + Send + 'static,
    {
        Builder {
            factory: Box::new(factory),
            config: Config::default(),
            reconnect: ReconnectConfig::default(),
            hook: None,
        }
    }

    /// The next event; `None` once the client is closed or gave up and every event was read.
    /// Cancel safe.
    pub async fn next(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// Sends a message: on the open connection (waiting while the socket is busy), or, while
    /// disconnected, into the offline queue or refused, as [`ReconnectConfig::offline`] says.
    /// Queued messages go out in order on the next connection, after the hook. Cancel safety as
    /// [`WebSocket::send`]: once polled, the message is queued.
    pub async fn send(&self, message: impl Into<Message>) -> Result<(), SendError> {
        self.sender.send(message).await
    }

    /// A handle for sending from other tasks.
    pub fn sender(&self) -> Sender {
        self.sender.clone()
    }

    /// Stops connecting: closes the open connection with `frame` (messages still arriving are
    /// delivered, then [`Disconnect::ClosedByUs`](crate::reconnect::Disconnect::ClosedByUs)), or
    /// abandons the attempt or the backoff under way; then [`Event::Paused`]. Messages sent
    /// meanwhile are queued or refused as while disconnected.
    pub fn pause(&self, frame: Option<CloseFrame>) {
        let _ = self.commands.send(Command::Pause(frame));
    }

    /// Connects again at once: after [`pause`](Self::pause), or cutting a backoff short.
    pub fn resume(&self) {
        let _ = self.commands.send(Command::Resume);
    }

    /// Ends the client for good: closes the open connection with `frame` (messages still arriving
    /// are delivered, then [`Disconnect::ClosedByUs`](crate::reconnect::Disconnect::ClosedByUs)
    /// with the peer's reply), or abandons the attempt or the backoff; then [`next`](Self::next)
    /// returns `None`. Keep reading until then to finish the closing handshake (bounded by the
    /// close timeout). Sends fail from now on with [`SendError::Closed`]; messages still in the
    /// offline queue are not sent.
    pub fn close(&self, frame: Option<CloseFrame>) {
        let _ = self.commands.send(Command::Close(frame));
    }
}

impl Stream for ReconnectingClient {
    type Item = Event;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.get_mut().events.poll_recv(cx)
    }
}

/// Sends through a [`ReconnectingClient`] from any task; see [`ReconnectingClient::send`].
#[derive(Clone)]
pub struct Sender {
    link: Arc<Mutex<Link>>,
    /// One sender at a time writes (the sending half keeps one waker).
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl Sender {
    /// Sends a message; see [`ReconnectingClient::send`].
    pub async fn send(&self, message: impl Into<Message>) -> Result<(), SendError> {
        let message = message.into();
        let _gate = self.gate.lock().await;
        let writer = {
            let mut link = lock(&self.link);
            if link.ended {
                return Err(SendError::Closed(message));
            }
            let Some(writer) = &link.writer else {
                return link.offline(message);
            };
            match writer.queue_now(message.clone()) {
                Ok(()) => writer.handle(),
                // The connection is closing: as good as disconnected, nothing was queued.
                Err(e) if e.kind() == ErrorKind::Closed => return link.offline(message),
                Err(error) => return Err(SendError::Failed { error, message }),
            }
        };
        let mut writer = writer;
        writer
            .flush()
            .await
            .map_err(|error| SendError::Failed { error, message })
    }

    /// How many messages wait in the offline queue.
    pub fn queued(&self) -> usize {
        lock(&self.link).queue.len()
    }
}
