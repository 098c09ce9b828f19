//! A client that stays connected: [`ReconnectingClient`] reconnects with jittered exponential
//! backoff, keeps the connection checked with the engine's keepalive, tells what happens as
//! [`Event`]s, queues (bounded) or refuses what is sent while it is disconnected, and runs a hook
//! on every new connection to subscribe or resume.
//!
//! ```text
//!   caller ── next() ◄──── events (bounded channel) ◄──┐
//!          ── send() ──► the connection's sending half ─┤   one driver task: the connection,
//!                    └─► the offline queue ─────────────┤   the backoff timer, the hook
//!          ── pause() / resume() / close() ──► commands ┘
//! ```
//!
//! One driver task owns the connection's receiving half, the backoff timer and the hook; the
//! handle talks to it through channels, and sends go straight to the connection's sending half
//! (or to the offline queue). Every wait of the driver also listens for commands and for the
//! handle going away: dropping the [`ReconnectingClient`] closes the connection (1001, bounded by
//! the close timeout) and ends the task.
//!
//! # Heartbeat
//!
//! The heartbeat is the engine's keepalive, set in the [`Config`]:
//! [`keepalive`](crate::ConfigBuilder::keepalive) pings a peer that has been silent that long,
//! and [`keepalive_timeout`](crate::ConfigBuilder::keepalive_timeout) declares it dead when the
//! ping goes unanswered. A dead peer ends the connection with an error whose
//! [`timeout`](Error::timeout) is `Some(TimeoutCause::Keepalive)` ([`Disconnect::Lost`]), and the client
//! reconnects as after any other loss.
//!
//! # Example
//!
//! ```
//! use futures_util::StreamExt;
//! use sockeye::reconnect::{Event, ReconnectingClient};
//! use sockeye::{Message, Server};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = Server::bind("127.0.0.1:0", sockeye::Config::default()).await?;
//! let url = format!("ws://{}/", server.local_addr()?);
//! tokio::spawn(server.serve(|mut ws, _peer| async move {
//!     while let Some(Ok(message)) = ws.next().await {
//!         if message.is_data() && ws.feed(message).await.is_err() {
//!             break;
//!         }
//!     }
//! }));
//!
//! let mut client = ReconnectingClient::builder(url)
//!     // On every connection, before anything queued is sent: subscribe again.
//!     .on_connect(|ws| Box::pin(async move { ws.send("subscribe").await }))
//!     .start();
//! // Sent while not connected yet: queued, and sent after the hook's message.
//! client.send("hello").await?;
//! let mut heard = Vec::new();
//! while let Some(event) = client.next().await {
//!     match event {
//!         Event::Connected { .. } => {}
//!         Event::Message(m) => {
//!             heard.push(m);
//!             if heard.len() == 2 {
//!                 break;
//!             }
//!         }
//!         other => println!("{other:?}"),
//!     }
//! }
//! assert_eq!(heard, [Message::text("subscribe"), Message::text("hello")]);
//! client.close(None);
//! while client.next().await.is_some() {} // the closing handshake, then the end
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use http::{Request, Response};
use sockeye_proto::{CloseCode, CloseFrame, HandshakeError, Message};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub use crate::backoff::{Backoff, Jitter};
use crate::client::IntoClientRequest;
use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::split::WebSocketWriter;
use crate::stream::TransportStream;
use crate::websocket::WebSocket;

/// How many events wait for the caller before the driver stops reading the connection.
const EVENT_CAPACITY: usize = 32;

/// What happens to messages sent while no connection is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Offline {
    /// Keep them, in order, and send them on the next connection (after the
    /// [`on_connect`](Builder::on_connect) hook). Past either bound, a send fails with
    /// [`SendError::QueueFull`] (the message is handed back, never dropped silently).
    Queue {
        /// The most messages kept.
        max_messages: usize,
        /// The most payload bytes kept.
        max_bytes: usize,
    },
    /// Refuse them: a send fails with [`SendError::NotConnected`].
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

/// How a [`ReconnectingClient`] reconnects. Build with the setters from the default:
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

/// Which connection attempt this is, for the request factory (fail over between URLs, put a
/// resume position in each attempt's URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// 1 for the first attempt of this client, counting every attempt since.
    pub number: u64,
    /// How many attempts in a row failed just before this one (0 after a connection opened).
    pub failures: u32,
}

/// Why a connection ended, or an attempt failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Disconnect {
    /// A connection attempt failed: the request factory, the connection, the opening handshake
    /// (`error.handshake_error()` tells a refusal's status), or the
    /// [`on_connect`](Builder::on_connect) hook.
    Failed {
        /// The attempt.
        attempt: Attempt,
        /// What failed.
        error: Error,
    },
    /// The server closed the connection (closing handshake) with this close frame.
    Closed {
        /// The server's close frame (`None`: without a status code).
        frame: Option<CloseFrame>,
        /// How long the connection was up.
        uptime: Duration,
    },
    /// The connection was lost: reset, dropped without a close frame, a protocol violation, or
    /// a peer found dead by the keepalive (`error.timeout() == Some(TimeoutCause::Keepalive)`).
    Lost {
        /// What happened.
        error: Error,
        /// How long the connection was up.
        uptime: Duration,
    },
    /// The closing handshake that [`pause`](ReconnectingClient::pause) or
    /// [`close`](ReconnectingClient::close) started is over.
    ClosedByUs {
        /// The peer's reply, if it sent one in time.
        reply: Option<CloseFrame>,
        /// How long the connection was up.
        uptime: Duration,
    },
}

impl fmt::Display for Disconnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = |frame: &Option<CloseFrame>| frame.as_ref().map_or(1005, |f| f.code.0);
        match self {
            Disconnect::Failed { error, .. } => write!(f, "connection failed: {error}"),
            Disconnect::Closed { frame, .. } => write!(f, "closed by the server ({})", code(frame)),
            Disconnect::Lost { error, .. } => write!(f, "connection lost: {error}"),
            Disconnect::ClosedByUs { reply, .. } => write!(f, "closed ({})", code(reply)),
        }
    }
}

/// Why the client gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUp {
    /// The [`Disconnected`](Event::Disconnected) event just before was a final refusal
    /// ([`ReconnectConfig::final_refusal`]).
    FinalRefusal,
    /// [`ReconnectConfig::max_attempts`] attempts in a row failed.
    MaxAttempts,
}

/// What happens to a [`ReconnectingClient`], in order.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// A connection is open; the hook has run and what was queued is on its way.
    Connected {
        /// The server's handshake response (subprotocol, cookies...).
        response: Response<()>,
        /// The attempt that opened it.
        attempt: Attempt,
    },
    /// A message from the server (close frames are reported in [`Disconnect`]).
    Message(Message),
    /// The connection ended or an attempt failed. Followed by [`Reconnecting`](Event::Reconnecting),
    /// [`GaveUp`](Event::GaveUp), [`Paused`](Event::Paused), or the end (after `close`).
    Disconnected(Disconnect),
    /// The next attempt starts after `delay`.
    Reconnecting {
        /// The attempt to come.
        attempt: Attempt,
        /// The wait, jitter included.
        delay: Duration,
    },
    /// [`pause`](ReconnectingClient::pause) took effect: no connection until
    /// [`resume`](ReconnectingClient::resume).
    Paused,
    /// The client will not reconnect; [`next`](ReconnectingClient::next) then returns `None`.
    GaveUp(GiveUp),
}

/// Why a message was not sent. Each variant but `Failed` hands the message back.
#[derive(Debug)]
#[non_exhaustive]
pub enum SendError {
    /// No connection is open and [`Offline::Refuse`] is configured.
    NotConnected(Message),
    /// No connection is open and the offline queue is at its bound.
    QueueFull(Message),
    /// The client was closed, gave up, or its handle was dropped.
    Closed(Message),
    /// The connection failed while the message was being written: it may or may not have
    /// reached the peer. The client reconnects as usual.
    Failed {
        /// The error.
        error: Error,
        /// The message.
        message: Message,
    },
}

impl SendError {
    /// The message that was not sent (or, for `Failed`, perhaps not).
    pub fn into_message(self) -> Message {
        match self {
            SendError::NotConnected(m) | SendError::QueueFull(m) | SendError::Closed(m) => m,
            SendError::Failed { message, .. } => message,
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::NotConnected(_) => f.write_str("not connected: the message was not sent"),
            SendError::QueueFull(_) => {
                f.write_str("not connected and the offline queue is full: the message was not queued")
            }
            SendError::Closed(_) => {
                f.write_str("the reconnecting client is closed: the message was not sent")
            }
            SendError::Failed { error, .. } => write!(f, "the connection failed while sending: {error}"),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::Failed { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// The future an [`on_connect`](Builder::on_connect) hook returns.
pub type HookFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

type Hook = Box<dyn for<'a> FnMut(&'a mut WebSocket<TransportStream>) -> HookFuture<'a> + Send>;
type Factory = Box<dyn FnMut(&Attempt) -> Result<Request<()>, Error> + Send>;

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
    /// (see *Heartbeat* in the [module](self) documentation).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// The reconnection settings (default [`ReconnectConfig::default`]).
    pub fn reconnect(mut self, reconnect: ReconnectConfig) -> Self {
        self.reconnect = reconnect;
        self
    }

    /// A hook run on every new connection, after the handshake and before anything else: before
    /// the queued messages are sent and before any message is delivered as an [`Event`]. It may
    /// send (subscribe, resume from a position) and receive (a server's welcome, an answer to its
    /// request) on the connection. An error fails the attempt ([`Disconnect::Failed`]), which is
    /// retried as any other. Messages it leaves unread are delivered as events.
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

/// A WebSocket client that reconnects: see the [module](self) documentation.
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
    /// token. An error from the factory fails that attempt ([`Disconnect::Failed`]).
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
    /// delivered, then [`Disconnect::ClosedByUs`]), or abandons the attempt or the backoff under
    /// way; then [`Event::Paused`]. Messages sent meanwhile are queued or refused as while
    /// disconnected.
    pub fn pause(&self, frame: Option<CloseFrame>) {
        let _ = self.commands.send(Command::Pause(frame));
    }

    /// Connects again at once: after [`pause`](Self::pause), or cutting a backoff short.
    pub fn resume(&self) {
        let _ = self.commands.send(Command::Resume);
    }

    /// Ends the client for good: closes the open connection with `frame` (messages still
    /// arriving are delivered, then [`Disconnect::ClosedByUs`] with the peer's reply), or
    /// abandons the attempt or the backoff; then [`next`](Self::next) returns `None`. Keep
    /// reading until then to finish the closing handshake (bounded by the close timeout).
    /// Sends fail from now on with [`SendError::Closed`]; messages still in the offline queue
    /// are not sent.
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

/// What the handles and the driver share: the open connection's sending half, or the queue.
struct Link {
    writer: Option<WebSocketWriter<TransportStream>>,
    queue: VecDeque<Message>,
    queued_bytes: usize,
    offline: Offline,
    ended: bool,
}

impl Link {
    /// A message sent while disconnected: queued or refused.
    fn offline(&mut self, message: Message) -> Result<(), SendError> {
        match self.offline {
            Offline::Refuse => Err(SendError::NotConnected(message)),
            Offline::Queue {
                max_messages,
                max_bytes,
            } => {
                let len = message.as_payload().len();
                if self.queue.len() >= max_messages || self.queued_bytes.saturating_add(len) > max_bytes {
                    return Err(SendError::QueueFull(message));
                }
                self.queued_bytes += len;
                self.queue.push_back(message);
                Ok(())
            }
        }
    }
}

/// Locks the link; never held across an `await`, so a poisoned lock is as consistent as any.
fn lock(link: &Mutex<Link>) -> MutexGuard<'_, Link> {
    link.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

enum Command {
    Pause(Option<CloseFrame>),
    Resume,
    Close(Option<CloseFrame>),
}

/// The driver's channels.
struct Io {
    commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::Sender<Event>,
    /// Events made and not yet in the channel: a few transitions, or one message (the
    /// connection is read only when this is empty, so the caller's pace bounds it).
    outbox: VecDeque<Event>,
    /// The caller dropped the client: events go nowhere.
    gone: bool,
}

/// What interrupted a wait.
enum Waited<T> {
    Done(T),
    Command(Command),
    /// The client was dropped.
    Stop,
}

impl Io {
    fn push(&mut self, event: Event) {
        if !self.gone {
            self.outbox.push_back(event);
        }
    }

    /// Waits for `work` while delivering events and listening for commands.
    async fn wait<T>(&mut self, mut work: Pin<&mut impl Future<Output = T>>) -> Waited<T> {
        loop {
            let gone = tokio::select! {
                biased;
                command = self.commands.recv() => {
                    return command.map_or(Waited::Stop, Waited::Command);
                }
                permit = self.events.reserve(), if !self.outbox.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(event) = self.outbox.pop_front() {
                            permit.send(event);
                        }
                        false
                    }
                    Err(_) => true,
                },
                () = self.events.closed(), if self.outbox.is_empty() => true,
                done = work.as_mut() => return Waited::Done(done),
            };
            if gone {
                return self.stop();
            }
        }
    }

    fn stop<T>(&mut self) -> Waited<T> {
        self.gone = true;
        self.outbox.clear();
        Waited::Stop
    }

    /// Hands over the events left, unless the caller goes away.
    async fn deliver_rest(&mut self) {
        while !self.outbox.is_empty() && !self.gone {
            tokio::select! {
                biased;
                command = self.commands.recv() => if command.is_none() {
                    return;
                },
                permit = self.events.reserve() => match permit {
                    Ok(permit) => {
                        if let Some(event) = self.outbox.pop_front() {
                            permit.send(event);
                        }
                    }
                    Err(_) => return,
                },
            }
        }
    }
}

/// The driver's next state.
enum Next {
    Connect,
    Wait(Duration),
    Paused,
    End,
}

/// After a closing handshake we started.
#[derive(Clone, Copy)]
enum After {
    Pause,
    End,
}

struct Driver {
    factory: Factory,
    hook: Option<Hook>,
    config: Arc<Config>,
    reconnect: ReconnectConfig,
    link: Arc<Mutex<Link>>,
    io: Io,
    /// Attempts made.
    attempts: u64,
    /// Failed attempts in a row.
    failures: u32,
    /// Reconnections since the last healthy connection (the backoff's exponent).
    retry: u32,
}

impl Driver {
    async fn run(mut self) {
        let mut next = Next::Connect;
        loop {
            next = match next {
                Next::Connect => self.connect().await,
                Next::Wait(delay) => self.backoff(delay).await,
                Next::Paused => self.paused().await,
                Next::End => break,
            };
        }
        {
            let mut link = lock(&self.link);
            link.ended = true;
            link.writer = None;
        }
        self.io.deliver_rest().await;
    }

    /// One attempt: the request, the connection, the hook.
    async fn connect(&mut self) -> Next {
        self.attempts += 1;
        let attempt = Attempt {
            number: self.attempts,
            failures: self.failures,
        };
        let result = match (self.factory)(&attempt) {
            Err(e) => Err(e),
            Ok(request) => {
                let config = Arc::clone(&self.config);
                let hook = &mut self.hook;
                let mut connecting = pin!(async move {
                    let (mut ws, response) = crate::client::connect_with(request, &config).await?;
                    if let Some(hook) = hook {
                        hook(&mut ws).await?;
                    }
                    Ok::<_, Error>((ws, response))
                });
                loop {
                    match self.io.wait(connecting.as_mut()).await {
                        Waited::Done(result) => break result,
                        Waited::Command(Command::Resume) => {}
                        Waited::Command(Command::Pause(_)) => {
                            self.io.push(Event::Paused);
                            return Next::Paused;
                        }
                        Waited::Command(Command::Close(_)) | Waited::Stop => return Next::End,
                    }
                }
            }
        };
        match result {
            Ok((ws, response)) => self.connected(ws, response, attempt).await,
            Err(error) => {
                self.failures = self.failures.saturating_add(1);
                self.disconnected(Disconnect::Failed { attempt, error })
            }
        }
    }

    /// A connection is open: deliver its messages until it ends.
    async fn connected(
        &mut self,
        ws: WebSocket<TransportStream>,
        response: Response<()>,
        attempt: Attempt,
    ) -> Next {
        let since = Instant::now();
        self.failures = 0;
        let (writer, mut reader) = ws.split();
        {
            // The queue goes out first, in order: senders wait for this lock, then follow.
            let mut link = lock(&self.link);
            while let Some(message) = link.queue.pop_front() {
                let len = message.as_payload().len();
                if writer.queue_now(message.clone()).is_err() {
                    // Already failing: keep it for the next connection.
                    link.queue.push_front(message);
                    break;
                }
                link.queued_bytes -= len;
            }
            link.writer = Some(writer);
        }
        self.io.push(Event::Connected { response, attempt });

        let mut close_seen: Option<Option<CloseFrame>> = None;
        let mut closing: Option<After> = None;
        let going_away = || Some(CloseFrame::new(CloseCode::GOING_AWAY, ""));
        let error = loop {
            let mut begin_close = None;
            let mut gone = false;
            let mut received = None;
            tokio::select! {
                biased;
                command = self.io.commands.recv(), if closing.is_none() => match command {
                    None => begin_close = Some((going_away(), After::End)),
                    Some(Command::Resume) => {}
                    Some(Command::Pause(frame)) => begin_close = Some((frame, After::Pause)),
                    Some(Command::Close(frame)) => begin_close = Some((frame, After::End)),
                },
                permit = self.io.events.reserve(), if !self.io.outbox.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(event) = self.io.outbox.pop_front() {
                            permit.send(event);
                        }
                    }
                    Err(_) => gone = true,
                },
                () = self.io.events.closed(), if self.io.outbox.is_empty() && closing.is_none() => gone = true,
                item = reader.recv(), if self.io.outbox.is_empty() => match item {
                    Some(Ok(Message::Close(frame))) => close_seen = Some(frame),
                    Some(Ok(message)) => received = Some(message),
                    Some(Err(e)) => break Some(e),
                    None => break None,
                },
            }
            if let Some(message) = received {
                self.io.push(Event::Message(message));
            }
            if gone {
                let _ = self.io.stop::<()>();
                if closing.is_none() {
                    begin_close = Some((going_away(), After::End));
                }
            }
            if let Some((frame, after)) = begin_close {
                closing = Some(after);
                let mut link = lock(&self.link);
                if let After::End = after {
                    link.ended = true;
                }
                if let Some(writer) = link.writer.take() {
                    // Written by the reader's next poll, which then finishes the handshake.
                    let _ = writer.close_now(frame);
                }
            }
        };
        lock(&self.link).writer = None;
        let uptime = since.elapsed();
        if let Some(after) = closing {
            self.io.push(Event::Disconnected(Disconnect::ClosedByUs {
                reply: close_seen.flatten(),
                uptime,
            }));
            return match after {
                After::Pause => {
                    self.io.push(Event::Paused);
                    Next::Paused
                }
                After::End => Next::End,
            };
        }
        if uptime >= self.reconnect.healthy_after {
            self.retry = 0;
        }
        let disconnect = match (close_seen, error) {
            (Some(frame), _) => Disconnect::Closed { frame, uptime },
            (None, Some(error)) => Disconnect::Lost { error, uptime },
            (None, None) => Disconnect::Lost {
                error: sockeye_proto::Error::AbnormalClosure.into(),
                uptime,
            },
        };
        self.disconnected(disconnect)
    }

    /// Reports `disconnect`, then gives up or schedules the next attempt.
    fn disconnected(&mut self, disconnect: Disconnect) -> Next {
        let refused = self.reconnect.is_final(&disconnect);
        self.io.push(Event::Disconnected(disconnect));
        if refused {
            self.io.push(Event::GaveUp(GiveUp::FinalRefusal));
            return Next::End;
        }
        if self
            .reconnect
            .max_attempts
            .is_some_and(|max| self.failures >= max)
        {
            self.io.push(Event::GaveUp(GiveUp::MaxAttempts));
            return Next::End;
        }
        let delay = self.reconnect.backoff.random_delay(self.retry);
        self.retry = self.retry.saturating_add(1);
        self.io.push(Event::Reconnecting {
            attempt: Attempt {
                number: self.attempts + 1,
                failures: self.failures,
            },
            delay,
        });
        Next::Wait(delay)
    }

    /// The backoff: sleeps, unless told otherwise.
    async fn backoff(&mut self, delay: Duration) -> Next {
        let mut sleep = pin!(tokio::time::sleep(delay));
        match self.io.wait(sleep.as_mut()).await {
            Waited::Done(()) | Waited::Command(Command::Resume) => Next::Connect,
            Waited::Command(Command::Pause(_)) => {
                self.io.push(Event::Paused);
                Next::Paused
            }
            Waited::Command(Command::Close(_)) | Waited::Stop => Next::End,
        }
    }

    /// Paused: waits for `resume`.
    async fn paused(&mut self) -> Next {
        loop {
            match self.io.wait(pin!(std::future::pending::<()>())).await {
                Waited::Command(Command::Resume) => return Next::Connect,
                Waited::Command(Command::Pause(_)) => {}
                Waited::Done(()) | Waited::Command(Command::Close(_)) | Waited::Stop => return Next::End,
            }
        }
    }
}
