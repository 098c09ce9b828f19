//! A chat-style broadcast server: every text message goes to every connected client. A client
//! that cannot keep up is skipped for that message (`try_send` reports a full write buffer)
//! instead of slowing everyone down or growing memory.
//!
//! ```sh
//! cargo run --example broadcast -- 127.0.0.1:8008
//! ```

use futures_util::StreamExt;
use sockeye::{Config, Message, Server};
use tokio::sync::broadcast;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8008".into());
    let server = Server::bind(addr.as_str(), Config::default()).await?;
    println!("broadcast server on ws://{}/", server.local_addr()?);
    let (hub, _) = broadcast::channel::<Message>(1024);
    server
        .serve(move |mut ws, peer| {
            let hub = hub.clone();
            async move {
                let mut inbox = hub.subscribe();
                loop {
                    tokio::select! {
                        incoming = ws.next() => match incoming {
                            Some(Ok(message)) if message.is_data() => {
                                let _ = hub.send(message);
                            }
                            Some(Ok(_)) => {}
                            _ => break,
                        },
                        outgoing = inbox.recv() => match outgoing {
                            Ok(message) => match ws.try_send(message) {
                                Ok(()) => {
                                    // Write now; the receive side also writes when it waits.
                                    if ws.flush().await.is_err() {
                                        break;
                                    }
                                }
                                Err(sockeye::Error::WriteBufferFull) => eprintln!("{peer} is slow: skipped one"),
                                Err(_) => break,
                            },
                            Err(broadcast::error::RecvError::Lagged(n)) => eprintln!("{peer} missed {n}"),
                            Err(broadcast::error::RecvError::Closed) => break,
                        },
                    }
                }
            }
        })
        .await
}
