//! A server's graceful shutdown: the [`ShutdownHandle`] that starts it, the signal the server
//! shares, and the [`CloseSignal`] each connection watches, which asks it to close with 1001
//! (going away). A leaf: the connection knows the signal, not the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

/// Starts a [`Server`](crate::Server)'s graceful shutdown: the server stops accepting, sends
/// close 1001 (going away) on every connection — at the connection's next receive or send —
/// waits up to [`Config::shutdown_timeout`](crate::Config::shutdown_timeout) for the closing
/// handshakes and handlers to finish, drops whatever is left, and then
/// [`Server::serve`](crate::Server::serve) returns.
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// let server = sockeye::Server::bind("127.0.0.1:8008", sockeye::Config::default()).await?;
/// let shutdown = server.shutdown_handle();
/// tokio::spawn(async move {
///     // In a real server: `tokio::signal::ctrl_c().await`.
///     tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
///     shutdown.shutdown();
/// });
/// server.serve(|_ws, _peer| async {}).await
/// # }
/// ```
///
/// A server of your own (hyper, axum) gets the same behaviour with a handle of its own: make one
/// with [`ShutdownHandle::new`], tie each connection to it with
/// [`WebSocket::close_on_shutdown`](crate::WebSocket::close_on_shutdown), and call
/// [`shutdown`](Self::shutdown) on Ctrl-C: every tied connection closes with 1001.
#[derive(Debug, Clone, Default)]
pub struct ShutdownHandle(pub(crate) ShutdownSignal);

impl ShutdownHandle {
    /// A handle not tied to a [`Server`](crate::Server): for connections served by another
    /// server (hyper, axum), tied to it with
    /// [`WebSocket::close_on_shutdown`](crate::WebSocket::close_on_shutdown).
    pub fn new() -> ShutdownHandle {
        ShutdownHandle::default()
    }

    /// Begins the graceful shutdown. Calling it again does nothing.
    pub fn shutdown(&self) {
        self.0.cancel();
    }

    /// Whether the shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Waits until the shutdown has begun (at once if it has): what a server of your own
    /// selects on to stop accepting, and to ask its HTTP connections to finish (hyper's
    /// `graceful_shutdown`), with the same handle its WebSockets watch.
    pub fn requested(&self) -> impl Future<Output = ()> + Send + 'static {
        self.0.token.clone().cancelled_owned()
    }
}

/// A server's shutdown signal: the token wakes connections waiting for input; the flag is what
/// the send path checks — an atomic load, where the token's own check takes a lock (callgrind:
/// 37 instructions of the ~390 a pushed message cost).
#[derive(Debug, Clone, Default)]
pub(crate) struct ShutdownSignal {
    pub(crate) token: CancellationToken,
    pub(crate) flag: Arc<AtomicBool>,
}

impl ShutdownSignal {
    pub(crate) fn cancel(&self) {
        self.flag.store(true, Ordering::Release);
        self.token.cancel();
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// What one connection watches: the flag on its send path, the token while it waits.
    pub(crate) fn watch(&self) -> CloseSignal {
        CloseSignal {
            flag: Arc::clone(&self.flag),
            signal: Box::pin(self.token.clone().cancelled_owned()),
            registered: None,
        }
    }
}

/// What asks one connection to close with 1001 (going away): a server's shutdown signal, as one
/// connection sees it. The connection looks at it on its send path and while it waits for input
/// (see `WebSocket::set_close_signal`); it knows nothing of the server.
pub(crate) struct CloseSignal {
    flag: Arc<AtomicBool>,
    signal: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    /// The waker `signal` was last polled with: it stays registered, so polling again with the
    /// same task's waker would only cost time (once per wait for input, on the busy path).
    registered: Option<std::task::Waker>,
}

impl CloseSignal {
    /// Whether the close is asked for (the send path: an atomic load).
    #[inline]
    pub(crate) fn begun(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Whether the close is asked for, waking the task when it is (while waiting for input).
    #[inline]
    pub(crate) fn poll_begun(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        if self.begun() {
            return true;
        }
        if self.registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return false;
        }
        self.registered = Some(cx.waker().clone());
        self.signal.as_mut().poll(cx).is_ready()
    }
}
