//! An echo server with graceful shutdown on Ctrl-C (every client gets close 1001).
//!
//! ```sh
//! cargo run --example echo_server -- 127.0.0.1:8008
//! ```

use futures_util::StreamExt;
use sockeye::{Config, Server};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8008".into());
    let server = Server::bind(addr.as_str(), Config::default()).await?;
    println!("echo server on ws://{}/", server.local_addr()?);
    let shutdown = server.shutdown_handle();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        shutdown.shutdown();
    });
    server
        .serve(|mut ws, peer| async move {
            // `feed` queues the echo; queued replies are written together when input runs dry.
            while let Some(Ok(message)) = ws.next().await {
                if message.is_data() && ws.feed(message).await.is_err() {
                    break;
                }
            }
            println!("{peer} left");
        })
        .await
}
