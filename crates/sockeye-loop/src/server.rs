//! Starting a server: one thread per loop, each with its own listener on the address
//! (`SO_REUSEPORT`), its own handler and its own ring (or epoll instance); stopping it.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::handler::Handler;
use crate::listener::reuseport_listener;
use crate::shared::Shared;

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
}

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
        }
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
        let shared = Arc::new(Shared::new(self.config));
        let make_handler = Arc::new(make_handler);
        let mut threads = Vec::with_capacity(listeners.len());
        let mut wakers = Vec::with_capacity(listeners.len());
        for (n, listener) in listeners.into_iter().enumerate() {
            let (wake_reader, wake_writer) = std::io::pipe()?;
            // The loop empties it without blocking (the flag is on the pipe, shared by both ends'
            // descriptors of the reading side).
            socket2::SockRef::from(&wake_reader).set_nonblocking(true)?;
            wakers.push(wake_writer);
            let shared = shared.clone();
            let make_handler = make_handler.clone();
            let thread = std::thread::Builder::new()
                .name(format!("sockeye-loop-{n}"))
                .spawn(move || {
                    let handler = make_handler();
                    run_loop(runtime, listener, wake_reader, shared, handler)
                })?;
            threads.push(thread);
        }
        Ok(Listening {
            local_addr: addr,
            runtime,
            shared,
            threads,
            wakers: wakers.into(),
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
    wakers: Arc<[std::io::PipeWriter]>,
}

/// Stops a [`Listening`] server from anywhere (a signal handler's thread, a tokio task): see
/// [`Listening::shutdown`].
#[derive(Debug, Clone)]
pub struct StopHandle {
    shared: Arc<Shared>,
    wakers: Arc<[std::io::PipeWriter]>,
}

impl StopHandle {
    /// Starts the shutdown [`Listening::shutdown`] describes, without waiting for it.
    pub fn stop(&self) {
        self.shared.stop();
        for mut waker in self.wakers.iter() {
            // A full pipe already holds a wake-up.
            let _ = waker.write(&[1]);
        }
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
        self.stop_handle().stop();
        self.wait()
    }

    /// A handle that stops the server from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            shared: self.shared.clone(),
            wakers: self.wakers.clone(),
        }
    }

    /// Blocks until every loop thread is done: after a [`StopHandle::stop`], or when a loop
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
