//! What the Autobahn|Testsuite testees share: the echo loop.

use futures_util::StreamExt;
use sockeye::WebSocket;
use tokio::io::{AsyncRead, AsyncWrite};

/// The Autobahn agent name; reports are written as `sockeye_case_*.json`.
pub const AGENT: &str = "sockeye";

/// Echoes every text and binary message until the connection ends. Replies are queued with `feed`
/// and written in one batch when the input runs dry; pongs and close replies are automatic.
/// Returns the error that ended the connection, if any (after the closing handshake).
pub async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut ws: WebSocket<S>) -> Option<sockeye::Error> {
    while let Some(item) = ws.next().await {
        match item {
            Ok(message) if message.is_data() => {
                if let Err(e) = ws.feed(message).await {
                    return Some(e);
                }
            }
            Ok(_) => {}
            Err(e) => return Some(e),
        }
    }
    None
}
