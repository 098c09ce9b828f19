//! `broadcast_server` and `transfer`: every message goes to every other connected client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use sockeye::{CloseCode, CloseFrame, Message};
use tokio::sync::mpsc;

use crate::Failure;
use crate::cli::RelayArgs;
use crate::shutdown::{self, serve_until_ctrl_c};
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
    let (shutdown, trigger) = shutdown::channel();
    let serving = server.serve(move |ws, addr| {
        let peers = peers.clone();
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        let mut shutdown = shutdown.clone();
        async move {
            let _active = shutdown.enter();
            let (tx, mut rx) = mpsc::channel::<Message>(QUEUE);
            lock(&peers).insert(id, tx);
            if !quiet {
                eprintln!("{addr}: joined ({} connected)", lock(&peers).len());
            }
            let (mut sink, mut stream) = ws.split();
            let leaving = shutdown.clone();
            let writer = tokio::spawn(async move {
                while let Some(m) = rx.recv().await {
                    // Batch: flush once the queue is drained.
                    if sink.feed(m).await.is_err() || (rx.is_empty() && sink.flush().await.is_err()) {
                        return;
                    }
                }
                // Dropped from the registry: the server is going away, or this client was too slow.
                let frame = if leaving.is_requested() {
                    CloseFrame::new(CloseCode::GOING_AWAY, "")
                } else {
                    CloseFrame::new(CloseCode::POLICY_VIOLATION, "too slow")
                };
                let _ = sink.send(Message::Close(Some(frame))).await;
            });
            loop {
                let m = tokio::select! {
                    item = stream.next() => match item {
                        Some(Ok(m)) => m,
                        _ => break,
                    },
                    _ = shutdown.requested() => {
                        // Leave the registry: the writer then sends 1001; read until the reply.
                        lock(&peers).remove(&id);
                        while let Some(Ok(_)) = stream.next().await {}
                        break;
                    }
                };
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
                    lock(&peers).remove(&other);
                    if !quiet {
                        eprintln!("client {other}: dropped, its queue was full");
                    }
                }
            }
            lock(&peers).remove(&id);
            if !shutdown.is_requested() {
                writer.abort();
            }
            if !quiet {
                eprintln!("{addr}: left");
            }
        }
    });
    serve_until_ctrl_c(serving, trigger).await
}

/// The registry lock; a panic while holding it cannot leave the map half-updated, so a poisoned
/// lock is still usable.
fn lock(peers: &Peers) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::Sender<Message>>> {
    peers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
