//! `broadcast_server` and `transfer`: every message goes to every other connected client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use sockeye::{CloseCode, CloseFrame, Message};
use tokio::sync::mpsc;

use crate::Failure;
use crate::cli::RelayArgs;
use crate::interrupt::{CLOSE_GRACE, serve_until_stopped};
use crate::output::errln;
use crate::tls::bind;

/// Messages queued for one client before it counts as too slow and is disconnected (1008): a
/// slow reader must not make the relay's memory grow without bound, nor lose messages silently.
const QUEUE: usize = 1024;
/// Bytes queued for one client, the same way: counted per client (a message relayed to many is
/// one shared buffer, so this over-counts, on the safe side). One message of any size may always
/// wait, so a 1 GiB transfer still goes through.
const QUEUE_BYTES: usize = 256 << 20;

/// A connected client, as the others see it.
struct Peer {
    addr: std::net::SocketAddr,
    tx: mpsc::Sender<Message>,
    /// Bytes in its queue.
    queued: Arc<AtomicUsize>,
    /// Told when it is dropped for being too slow: its writer stops sending its backlog and
    /// closes with 1008 at once.
    kick: Arc<tokio::sync::Notify>,
}

impl Peer {
    /// Queues `m` unless that would pass a bound.
    fn offer(&self, m: &Message) -> bool {
        let len = m.as_payload().len();
        let before = self.queued.fetch_add(len, Ordering::Relaxed);
        if (before > 0 && before + len > QUEUE_BYTES) || self.tx.try_send(m.clone()).is_err() {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        true
    }
}

type Peers = Arc<Mutex<HashMap<u64, Peer>>>;

pub(crate) async fn server(args: RelayArgs, name: &'static str) -> Result<(), Failure> {
    // A relay for file transfers carries whole files as single messages.
    let server = bind(&args.server, |c| c.protocol.max_message_size = 1 << 30, name).await?;
    let peers: Peers = Arc::default();
    let next_id = Arc::new(AtomicU64::new(0));
    let quiet = args.quiet;
    let shutdown = server.shutdown_handle();
    let serving = server.serve(move |ws, addr| {
        let peers = peers.clone();
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        async move {
            let (tx, mut rx) = mpsc::channel::<Message>(QUEUE);
            let queued = Arc::new(AtomicUsize::new(0));
            let kick = Arc::new(tokio::sync::Notify::new());
            let peer = Peer {
                addr,
                tx,
                queued: Arc::clone(&queued),
                kick: Arc::clone(&kick),
            };
            lock(&peers).insert(id, peer);
            if !quiet {
                errln!("{addr}: joined ({} connected)", lock(&peers).len());
            }
            let (mut sink, mut stream) = ws.split();
            let writer = tokio::spawn(async move {
                let kicked = kick.notified();
                tokio::pin!(kicked);
                loop {
                    tokio::select! {
                        biased;
                        () = &mut kicked => break,
                        m = rx.recv() => {
                            let Some(m) = m else { return };
                            queued.fetch_sub(m.as_payload().len(), Ordering::Relaxed);
                            // Batch: flush once the queue is drained.
                            if sink.feed(m).await.is_err() || (rx.is_empty() && sink.flush().await.is_err()) {
                                return;
                            }
                        }
                    }
                }
                // Dropped from the registry: this client was too slow. Its backlog is not sent;
                // the close goes out as soon as the socket takes it (it may not read at all:
                // the close deadline then ends the connection).
                let frame = CloseFrame::new(CloseCode::POLICY_VIOLATION, "too slow: messages were dropped");
                let _ = tokio::time::timeout(CLOSE_GRACE, sink.close(Some(frame))).await;
            });
            // On Ctrl-C the server's shutdown closes the connection (1001) and the stream ends.
            while let Some(Ok(m)) = stream.next().await {
                if !m.is_data() {
                    continue;
                }
                let mut slow = Vec::new();
                for (other, peer) in lock(&peers).iter() {
                    if *other != id && !peer.offer(&m) {
                        slow.push(*other);
                    }
                }
                for other in slow {
                    // Two readers may find the same full queue at once: the one that removes it
                    // reports it.
                    if let Some(peer) = lock(&peers).remove(&other) {
                        peer.kick.notify_one();
                        if !quiet {
                            errln!(
                                "{}: dropped: it does not read fast enough (closed with 1008)",
                                peer.addr
                            );
                        }
                    }
                }
            }
            lock(&peers).remove(&id);
            // The writer may still be sending the close of a client dropped as too slow.
            let mut writer = writer;
            if tokio::time::timeout(CLOSE_GRACE, &mut writer).await.is_err() {
                writer.abort();
            }
            if !quiet {
                errln!("{addr}: left");
            }
        }
    });
    serve_until_stopped(serving, shutdown).await
}

/// The registry lock; a panic while holding it cannot leave the map half-updated, so a poisoned
/// lock is still usable.
fn lock(peers: &Peers) -> std::sync::MutexGuard<'_, HashMap<u64, Peer>> {
    peers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_bounded_in_bytes_but_always_takes_one_message() {
        let (tx, mut rx) = mpsc::channel(QUEUE);
        let peer = Peer {
            addr: "127.0.0.1:1".parse().unwrap(),
            tx,
            queued: Arc::default(),
            kick: Arc::default(),
        };
        // Zeroed pages are not touched: this costs no memory.
        let big = Message::binary(vec![0u8; QUEUE_BYTES / 2 + 1]);
        assert!(peer.offer(&big), "one message of any size may wait");
        assert!(!peer.offer(&big), "a second would pass the byte bound");
        assert!(peer.offer(&Message::text("x")), "a small one still fits");
        // The writer takes the first: room again.
        let taken = rx.try_recv().unwrap();
        peer.queued.fetch_sub(taken.as_payload().len(), Ordering::Relaxed);
        assert!(peer.offer(&big));
        assert_eq!(peer.queued.load(Ordering::Relaxed), big.as_payload().len() + 1);
    }
}
