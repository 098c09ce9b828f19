//! A chat-style broadcast server: every text message goes to every connected client. A client
//! that cannot keep up is skipped for that message (`try_send` reports a full write buffer)
//! instead of slowing everyone down or growing memory.
//!
//! No connection's task ever waits on its client's socket: `try_send` queues a message (or says
//! the queue is full) without an `await`, and the queue is written while the task waits for its
//! next event — polling the WebSocket for input also writes what is queued. So a slow client's
//! task keeps taking messages from the hub and skipping them, rather than stalling on a write
//! while the hub runs ahead of it (which would lose its messages later, through `Lagged`), and
//! nobody else waits for it.
//!
//! ```sh
//! cargo run --example broadcast -- 127.0.0.1:8008
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::StreamExt;
use sockeye::{Config, Message, Server};
use tokio::sync::broadcast;

/// What clients missed, over the server's life.
#[derive(Debug, Default)]
pub(crate) struct Missed {
    /// Messages not queued for a client whose write buffer was full: the slow client's loss.
    pub(crate) skipped: AtomicU64,
    /// Messages a connection's task fell too far behind the hub to receive (a task that waits on
    /// its socket would; this one does not).
    pub(crate) lagged: AtomicU64,
}

/// Serves the broadcast until the server shuts down, counting what slow clients miss.
pub(crate) async fn serve(server: Server, missed: Arc<Missed>) -> std::io::Result<()> {
    let (hub, _) = broadcast::channel::<Message>(1024);
    server
        .serve(move |mut ws, peer| {
            let hub = hub.clone();
            let missed = Arc::clone(&missed);
            async move {
                let mut inbox = hub.subscribe();
                let mut skipping = false;
                loop {
                    tokio::select! {
                        // Waiting for input is also when what `try_send` queued is written.
                        incoming = ws.next() => match incoming {
                            Some(Ok(message)) if message.is_data() => {
                                let _ = hub.send(message);
                            }
                            Some(Ok(_)) => {}
                            _ => break,
                        },
                        outgoing = inbox.recv() => match outgoing {
                            // Queued without waiting; no flush here, which would wait for a slow
                            // client's socket.
                            Ok(message) => match ws.try_send(message) {
                                Ok(()) => skipping = false,
                                Err(sockeye::Error::WriteBufferFull) => {
                                    missed.skipped.fetch_add(1, Ordering::Relaxed);
                                    if !skipping {
                                        eprintln!("{peer} is slow: skipping messages until it catches up");
                                        skipping = true;
                                    }
                                }
                                Err(_) => break,
                            },
                            Err(broadcast::error::RecvError::Lagged(n)) => {
                                missed.lagged.fetch_add(n, Ordering::Relaxed);
                                eprintln!("{peer} missed {n}");
                            }
                            Err(broadcast::error::RecvError::Closed) => break,
                        },
                    }
                }
            }
        })
        .await
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8008".into());
    let server = Server::bind(addr.as_str(), Config::default()).await?;
    println!("broadcast server on ws://{}/", server.local_addr()?);
    serve(server, Arc::default()).await
}
