//! Starting a server: one thread per loop, each with its own listener on the address
//! (`SO_REUSEPORT`), its own handler and its own ring (or epoll instance); stopping it.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;

use sockeye_proto::Message;

use crate::handler::Handler;
use crate::listener::reuseport_listener;
use crate::shared::Shared;
use crate::topics::{self, Inbox, Mail, PublishError, SocketId};

/// Which system interface a loop thread waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Runtime {
    /// io_uring where the kernel allows it, else epoll. The default.
    Auto,
    /// io_uring (Linux 6.1 or later); the server fails to start where it is refused.
    Uring,
    /// epoll (through mio), everywhere mio runs.
    Epoll,
}

impl std::str::FromStr for Runtime {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Runtime::Auto),
            "uring" | "io_uring" | "io-uring" => Ok(Runtime::Uring),
            "epoll" => Ok(Runtime::Epoll),
            other => Err(format!(
                "unknown runtime {other:?}: expected auto, uring or epoll"
            )),
        }
    }
}

/// A server on Sockeye's own loop: configure it, then [`listen`](Self::listen).
///
/// ```no_run
/// use sockeye_loop::{Handler, Message, Server, Socket};
///
/// struct Echo;
/// impl Handler for Echo {
///     type Data = ();
///     fn message(&mut self, socket: &mut Socket<'_, ()>, message: Message) {
///         socket.send(message);
///     }
/// }
///
/// let server = Server::new(sockeye::Config::default()).threads(2).listen("127.0.0.1:9001", || Echo)?;
/// println!("echo on ws://{} ({:?})", server.local_addr(), server.runtime());
/// server.wait()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Server {
    config: sockeye::Config,
    threads: usize,
    runtime: Runtime,
    max_backlog: usize,
    #[cfg(feature = "tls")]
    tls: Option<Arc<sockeye::tls::rustls::ServerConfig>>,
}

/// The default of [`Server::max_backlog`]: 16 MiB.
pub const DEFAULT_MAX_BACKLOG: usize = 16 << 20;

impl Server {
    /// A server with this configuration (limits, keepalive, permessage-deflate, close and
    /// handshake timeouts, write buffer high water mark: the tokio server's `Config`), one loop
    /// thread per available core and [`Runtime::Auto`].
    pub fn new(config: sockeye::Config) -> Self {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        Server {
            config,
            threads,
            runtime: Runtime::Auto,
            max_backlog: DEFAULT_MAX_BACKLOG,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// How many bytes may wait for one connection before a publication to it (or a
    /// [`ServerHandle::send`]) closes it with 1008 instead of queueing more: a subscriber that
    /// does not read is dropped, not buffered without end. Default [`DEFAULT_MAX_BACKLOG`]
    /// (16 MiB). Its own handler's [`Socket::send`](crate::Socket::send) is not cut off: it
    /// reports backpressure past the high water mark, and the handler decides.
    pub fn max_backlog(mut self, bytes: usize) -> Self {
        self.max_backlog = bytes;
        self
    }

    /// Serves `wss://`: every connection runs TLS with `acceptor`'s config first (for instance
    /// [`ServerTls::acceptor`](sockeye::tls::ServerTls::acceptor), whose certificate can be
    /// reloaded while serving). ALPN offers `http/1.1` only, and 0-RTT data is refused (see
    /// [`ServerTlsSession::config`](sockeye::tls::ServerTlsSession::config)). The TLS handshake
    /// counts against `handshake_timeout` with the upgrade.
    ///
    /// ```no_run
    /// # use sockeye_loop::{Handler, Message, Server, Socket};
    /// # struct Echo;
    /// # impl Handler for Echo {
    /// #     type Data = ();
    /// #     fn message(&mut self, socket: &mut Socket<'_, ()>, message: Message) { socket.send(message); }
    /// # }
    /// let tls = sockeye::tls::ServerTls::from_pem_files("cert.pem", "key.pem")?;
    /// let server = Server::new(sockeye::Config::default())
    ///     .tls(&tls.acceptor())
    ///     .listen("0.0.0.0:443", || Echo)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls(mut self, acceptor: &sockeye::tls::TlsAcceptor) -> Self {
        self.tls = Some(sockeye::tls::ServerTlsSession::config(acceptor));
        self
    }

    /// How many loop threads (at least 1). Default: one per available core.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Which interface the loops wait on. Default [`Runtime::Auto`]. The environment variable
    /// `SOCKEYE_LOOP_RUNTIME` (`uring`, `epoll`, `auto`) overrides it, to try a deployment on
    /// the fallback without rebuilding.
    pub fn runtime(mut self, runtime: Runtime) -> Self {
        self.runtime = runtime;
        self
    }

    /// Binds `addr` once per thread and starts the loops; each calls `make_handler` once, on its
    /// own thread, for its handler.
    pub fn listen<H, F>(self, addr: impl ToSocketAddrs, make_handler: F) -> io::Result<Listening>
    where
        H: Handler,
        F: Fn() -> H + Send + Sync + 'static,
    {
        let mut addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the address resolves to nothing"))?;
        let runtime = match std::env::var("SOCKEYE_LOOP_RUNTIME") {
            Ok(name) => name
                .parse()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            Err(_) => self.runtime,
        };
        let runtime = resolve(runtime)?;
        // Every listener first, on this thread: a taken port fails here, not in a thread.
        let mut listeners: Vec<TcpListener> = Vec::with_capacity(self.threads);
        for _ in 0..self.threads {
            let listener = reuseport_listener(addr)?;
            // Port 0: the others bind the port the first one got.
            addr = listener.local_addr()?;
            listeners.push(listener);
        }
        let mut wake_readers = Vec::with_capacity(listeners.len());
        let mut inboxes = Vec::with_capacity(listeners.len());
        for _ in &listeners {
            let (wake_reader, wake_writer) = std::io::pipe()?;
            // The loop empties it without blocking (the flag is on the pipe, shared by both ends'
            // descriptors of the reading side).
            socket2::SockRef::from(&wake_reader).set_nonblocking(true)?;
            wake_readers.push(wake_reader);
            inboxes.push(Inbox::new(wake_writer));
        }
        #[allow(unused_mut)]
        let mut shared = Shared::new(self.config, self.max_backlog, inboxes);
        #[cfg(feature = "tls")]
        {
            shared.tls = self.tls;
        }
        let shared = Arc::new(shared);
        let make_handler = Arc::new(make_handler);
        let mut threads = Vec::with_capacity(listeners.len());
        for (n, (listener, wake_reader)) in listeners.into_iter().zip(wake_readers).enumerate() {
            let thread_shared = shared.clone();
            let make_handler = make_handler.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("sockeye-loop-{n}"))
                .spawn(move || {
                    topics::Topics::start(n as u32);
                    let handler = make_handler();
                    run_loop(runtime, listener, wake_reader, thread_shared, handler)
                });
            match spawned {
                Ok(thread) => threads.push(thread),
                Err(e) => {
                    // The threads started so far stop, rather than serve without the others.
                    shared.stop();
                    for thread in threads {
                        let _ = thread.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Listening {
            local_addr: addr,
            runtime,
            shared,
            threads,
        })
    }
}

fn run_loop<H: Handler>(
    runtime: Runtime,
    listener: TcpListener,
    wake: std::io::PipeReader,
    shared: Arc<Shared>,
    handler: H,
) -> io::Result<()> {
    match runtime {
        #[cfg(target_os = "linux")]
        Runtime::Uring => crate::uring::run(listener, wake, shared, handler),
        _ => crate::epoll::run(listener, wake, shared, handler),
    }
}

/// `Auto` becomes what this kernel allows; `Uring` fails where it is refused, naming why.
fn resolve(runtime: Runtime) -> io::Result<Runtime> {
    #[cfg(target_os = "linux")]
    match runtime {
        Runtime::Auto => Ok(match crate::uring::probe() {
            Ok(()) => Runtime::Uring,
            Err(e) => {
                tracing::debug!("io_uring unavailable, the loop uses epoll: {e}");
                Runtime::Epoll
            }
        }),
        Runtime::Uring => crate::uring::probe().map(|()| Runtime::Uring).map_err(|e| {
            // `Unsupported` whatever the cause (EPERM from seccomp or the sysctl, ENOSYS, an old
            // kernel): the caller can tell it from a failed bind.
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "io_uring is unavailable here ({e}); seccomp (Docker's default profile) or \
                     kernel.io_uring_disabled refuse it: use the epoll runtime"
                ),
            )
        }),
        other => Ok(other),
    }
    #[cfg(not(target_os = "linux"))]
    match runtime {
        Runtime::Uring => Err(io::Error::new(io::ErrorKind::Unsupported, "io_uring is Linux's")),
        _ => Ok(Runtime::Epoll),
    }
}

/// A running server: its address, which runtime it uses, how to stop it.
#[derive(Debug)]
pub struct Listening {
    local_addr: SocketAddr,
    runtime: Runtime,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

/// The server, from anywhere (a tokio task, another thread, a signal handler's thread): publish
/// to topics, send to one connection, stop. Cheap to clone; nothing waits: each call queues for
/// the loop threads and wakes them.
///
/// ```no_run
/// # use sockeye_loop::{Handler, Message, Server, Socket};
/// # struct Chat;
/// # impl Handler for Chat {
/// #     type Data = ();
/// #     fn open(&mut self, socket: &mut Socket<'_, ()>) { socket.subscribe("news"); }
/// #     fn message(&mut self, _: &mut Socket<'_, ()>, _: Message) {}
/// # }
/// let server = Server::new(sockeye::Config::default()).listen("127.0.0.1:9001", || Chat)?;
/// let handle = server.handle();
/// std::thread::spawn(move || {
///     // From async code the same: nothing here awaits.
///     let _ = handle.publish("news", "the loop says hello");
/// });
/// server.wait()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl ServerHandle {
    /// Publishes a text or binary message to `topic`: every subscriber on every thread gets it,
    /// encoded once, with its thread's next turn. Err: see [`PublishError`] (with
    /// `Overloaded`, the threads whose inbox had room still deliver it).
    pub fn publish(&self, topic: &str, message: impl Into<Message>) -> Result<(), PublishError> {
        if self.shared.is_stopping() {
            return Err(PublishError::Stopped);
        }
        let topic = topics::topic_name(topic)?;
        let message = topics::prepare(message.into())?;
        topics::post_everywhere(&self.shared.inboxes, None, &topic, &message, None)
    }

    /// Sends a text or binary message to the connection `to` ([`Socket::id`](crate::Socket::id)),
    /// with its thread's next turn. Ok also when that connection has closed meanwhile (the
    /// message is dropped there: a connection can close at any time).
    pub fn send(&self, to: SocketId, message: impl Into<Message>) -> Result<(), PublishError> {
        if self.shared.is_stopping() {
            return Err(PublishError::Stopped);
        }
        let message = message.into();
        if !message.is_data() {
            return Err(PublishError::NotData);
        }
        let inbox = self
            .shared
            .inboxes
            .get(to.thread as usize)
            .ok_or(PublishError::Stopped)?;
        if inbox.post(Mail::Send { to, message }) {
            Ok(())
        } else {
            Err(PublishError::Overloaded)
        }
    }

    /// Starts the shutdown [`Listening::shutdown`] describes, without waiting for it.
    pub fn stop(&self) {
        self.shared.stop();
    }

    /// Connections open now, handshakes included, on every thread.
    pub fn connections(&self) -> usize {
        self.shared.connections()
    }
}

impl Listening {
    /// The address the server listens on (the port chosen, when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The runtime the loops use ([`Runtime::Auto`] resolved).
    pub fn runtime(&self) -> Runtime {
        self.runtime
    }

    /// Connections open now, handshakes included, on every thread.
    pub fn connections(&self) -> usize {
        self.shared.connections()
    }

    /// Stops accepting, closes every connection with 1001 ("going away"), waits for their
    /// closing handshakes up to the configured `shutdown_timeout` (then drops the rest), and
    /// returns once every loop thread is done.
    pub fn shutdown(self) -> io::Result<()> {
        self.shared.stop();
        self.wait()
    }

    /// A handle to publish, send and stop from anywhere (see [`ServerHandle`]).
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            shared: self.shared.clone(),
        }
    }

    /// Blocks until every loop thread is done: after a [`ServerHandle::stop`], or when a loop
    /// fails (its error is returned).
    pub fn wait(self) -> io::Result<()> {
        let mut result = Ok(());
        for thread in self.threads {
            let ended = thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a loop thread panicked")));
            if result.is_ok() {
                result = ended;
            }
        }
        result
    }
}
