//! Echo server on tokio-tungstenite: `tungstenite-echo [ADDR]` (default 127.0.0.1:9102).
//! Each text or binary message is sent back as it arrived; like its upstream autobahn example,
//! it flushes per message (`send`).

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:9102".into());
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("tungstenite-echo: listening on ws://{}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else { return };
            while let Some(Ok(message)) = ws.next().await {
                if (message.is_text() || message.is_binary()) && ws.send(message).await.is_err() {
                    break;
                }
            }
        });
    }
}
