//! A TCP proxy in front of a server, that a test controls: cut a node off from its backplane
//! (a partition: every connection through it closed, new ones refused), let it back, blackhole
//! it (nothing forwarded, nothing closed: a route that drops packets), or move it to another
//! server (a virtual address that follows a failover).
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// A TCP proxy in front of the server that can cut a node off (every connection closed, new
/// ones refused) and let it back, while the server and the other nodes go on.
pub(crate) struct Proxy {
    port: u16,
    /// The server's port: may be changed (a failover behind a fixed address).
    target: Arc<AtomicU16>,
    open: Arc<AtomicBool>,
    /// False while blackholed: bytes are held, connections stay open.
    flowing: watch::Sender<bool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    /// Connections let through so far.
    passed: Arc<AtomicUsize>,
    /// Bytes forwarded to the server so far, every connection's.
    upstream: Arc<AtomicUsize>,
    accept: tokio::task::AbortHandle,
}

impl Proxy {
    pub(crate) async fn start(target: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let target = Arc::new(AtomicU16::new(target));
        let passed = Arc::new(AtomicUsize::new(0));
        let upstream = Arc::new(AtomicUsize::new(0));
        let flowing = watch::Sender::new(true);
        let accept = {
            let (open, conns, target, passed, upstream) = (
                Arc::clone(&open),
                Arc::clone(&conns),
                Arc::clone(&target),
                Arc::clone(&passed),
                Arc::clone(&upstream),
            );
            let flowing = flowing.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((down, _)) = listener.accept().await else {
                        return;
                    };
                    if !open.load(Ordering::SeqCst) {
                        continue; // dropped: refused
                    }
                    let target = target.load(Ordering::SeqCst);
                    passed.fetch_add(1, Ordering::SeqCst);
                    let flowing = flowing.subscribe();
                    let upstream = Arc::clone(&upstream);
                    let task = tokio::spawn(async move {
                        if let Ok(up) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await {
                            let (down_r, down_w) = down.into_split();
                            let (up_r, up_w) = up.into_split();
                            // Either way ending ends the connection, as a peer's close would.
                            tokio::select! {
                                () = forward(down_r, up_w, flowing.clone(), Some(upstream)) => {}
                                () = forward(up_r, down_w, flowing, None) => {}
                            }
                        }
                    });
                    conns.lock().unwrap().push(task.abort_handle());
                }
            })
            .abort_handle()
        };
        Proxy {
            port,
            target,
            open,
            flowing,
            conns,
            passed,
            upstream,
            accept,
        }
    }

    /// Stops forwarding without closing anything: what is sent either way is held (as TCP
    /// retransmits into a dead route) until [`let_through`](Self::let_through).
    pub(crate) fn blackhole(&self) {
        self.flowing.send_replace(false);
    }

    /// Forwards again, what was held first.
    pub(crate) fn let_through(&self) {
        self.flowing.send_replace(true);
    }

    /// Its port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `scheme://127.0.0.1:PORT`: a server's URL through the proxy.
    pub(crate) fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Closes every connection and refuses new ones; returns how many were open.
    pub(crate) fn cut(&self) -> usize {
        self.open.store(false, Ordering::SeqCst);
        let mut open = 0;
        for c in self.conns.lock().unwrap().drain(..) {
            open += usize::from(!c.is_finished());
            c.abort();
        }
        open
    }

    /// How many bytes it has forwarded to the server so far (every connection's).
    pub(crate) fn upstream(&self) -> usize {
        self.upstream.load(Ordering::SeqCst)
    }

    /// How many connections it has let through so far.
    pub(crate) fn passed(&self) -> usize {
        self.passed.load(Ordering::SeqCst)
    }

    pub(crate) fn reopen(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// Sends new connections to another server, and closes the ones to the old (as a virtual
    /// address moved to a promoted replica). A cut proxy stays cut.
    pub(crate) fn retarget(&self, port: u16) {
        let was_open = self.open.load(Ordering::SeqCst);
        self.cut();
        self.target.store(port, Ordering::SeqCst);
        if was_open {
            self.reopen();
        }
    }
}

/// Copies `from` to `to` while `flowing` says so; ends at either's end or error.
/// Forwards `from` to `to` while flowing, counting the bytes in `counted`.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut flowing: watch::Receiver<bool>,
    counted: Option<Arc<AtomicUsize>>,
) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if flowing.wait_for(|f| *f).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if let Some(counted) = &counted {
            counted.fetch_add(n, Ordering::SeqCst);
        }
    }
    let _ = to.shutdown().await;
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
