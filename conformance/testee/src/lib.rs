//! What the Autobahn|Testsuite testees share: the echo loop.

use futures_util::StreamExt;
use sockeye::{Config, Message, WebSocket};
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

/// The echo of [`echo`] on Sockeye's own loop (`sockeye-autobahn-server --runtime`): data
/// messages are sent back as they come, written at the end of the loop's turn.
#[derive(Debug)]
pub struct LoopEcho;

impl sockeye_loop::Handler for LoopEcho {
    type Data = ();

    fn message(&mut self, socket: &mut sockeye_loop::Socket<'_, ()>, message: Message) {
        socket.send(message);
    }
}

/// Autobahn's fuzzingserver protocol, as a client: asks `base` for the number of cases, runs each
/// one (`/runCase?case=N&agent=sockeye`) by echoing, then asks for the report
/// (`/updateReports?agent=sockeye`). Cases that fail on purpose do not stop the run; a connection
/// that cannot be made at all does.
pub async fn run_fuzzingserver_client(base: &str, config: &Config) -> Result<(), sockeye::Error> {
    let count = case_count(base, config).await?;
    eprintln!("autobahn: {count} cases");
    for case in 1..=count {
        let url = format!("{base}/runCase?case={case}&agent={AGENT}");
        // A case may fail on purpose; only a connection that cannot be made at all stops the run.
        let (ws, _) = sockeye::connect_with(url.as_str(), config).await?;
        echo(ws).await;
    }
    let (mut ws, _) = sockeye::connect_with(format!("{base}/updateReports?agent={AGENT}"), config).await?;
    while ws.recv().await.is_some() {}
    Ok(())
}

async fn case_count(base: &str, config: &Config) -> Result<u32, sockeye::Error> {
    let (mut ws, _) = sockeye::connect_with(format!("{base}/getCaseCount"), config).await?;
    let mut count = None;
    while let Some(item) = ws.recv().await {
        if let Ok(Message::Text(text)) = item {
            count = text.trim().parse().ok();
        }
    }
    count.ok_or(sockeye::Error::from(sockeye::ProtocolError::InvalidInput(
        "the server did not send a case count",
    )))
}
