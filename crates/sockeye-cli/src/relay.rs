//! `broadcast_server` and `transfer`: every message goes to every other connected client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use sockeye::{CloseCode, CloseFrame, Message};
use tokio::sync::mpsc;

use crate::Failure;
use crate::cli::RelayArgs;
use crate::interrupt::serve_until_stopped;
use crate::output::errln;
use crate::tls::bind;

/// Messages queued for one client before it counts as too slow and is disconnected (1008): a
/// slow reader must not make the relay's memory grow without bound, nor lose messages silently.
const QUEUE: usize = 1024;

type Peers = Arc<Mutex<HashMap<u64, mpsc::Sender<Message>>>>;

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
            lock(&peers).insert(id, tx);
            if !quiet {
                errln!("{addr}: joined ({} connected)", lock(&peers).len());
            }
            let (mut sink, mut stream) = ws.split();
            let writer = tokio::spawn(async move {
                while let Some(m) = rx.recv().await {
                    // Batch: flush once the queue is drained.
                    if sink.feed(m).await.is_err() || (rx.is_empty() && sink.flush().await.is_err()) {
                        return;
                    }
                }
                // Dropped from the registry: this client was too slow.
                let frame = CloseFrame::new(CloseCode::POLICY_VIOLATION, "too slow");
                let _ = sink.send(Message::Close(Some(frame))).await;
            });
            // On Ctrl-C the server's shutdown closes the connection (1001) and the stream ends.
            while let Some(Ok(m)) = stream.next().await {
                if !m.is_data() {
                    continue;
                }
                let mut slow = Vec::new();
                for (other, tx) in lock(&peers).iter() {
                    if *other != id && tx.try_send(m.clone()).is_err() {
                        slow.push(*other);
                    }
                }
                for other in slow {
                    // Two readers may find the same full queue at once: the one that removes it
                    // reports it.
                    if lock(&peers).remove(&other).is_some() && !quiet {
                        errln!("client {other}: dropped, its queue was full");
                    }
                }
            }
            lock(&peers).remove(&id);
            writer.abort();
            if !quiet {
                errln!("{addr}: left");
            }
        }
    });
    serve_until_stopped(serving, shutdown).await
}

/// The registry lock; a panic while holding it cannot leave the map half-updated, so a poisoned
/// lock is still usable.
fn lock(peers: &Peers) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::Sender<Message>>> {
    peers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
