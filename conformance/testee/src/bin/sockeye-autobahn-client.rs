//! The client that Autobahn's fuzzingserver tests: `sockeye-autobahn-client [BASE_URL]`
//! (default ws://127.0.0.1:9001). Runs every case (`/getCaseCount`, `/runCase?case=N&agent=A`),
//! echoing, then asks the server to write its report (`/updateReports?agent=A`).

use std::process::ExitCode;

use sockeye::Message;
use sockeye_conformance::{AGENT, echo};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let base = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "ws://127.0.0.1:9001".into());
    match run(&base).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sockeye-autobahn-client: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(base: &str) -> Result<(), sockeye::Error> {
    let count = case_count(base).await?;
    eprintln!("sockeye-autobahn-client: {count} cases");
    for case in 1..=count {
        let url = format!("{base}/runCase?case={case}&agent={AGENT}");
        // A case may fail on purpose; only a connection that cannot be made at all stops the run.
        let (ws, _) = sockeye::connect(url.as_str()).await?;
        echo(ws).await;
    }
    let (mut ws, _) = sockeye::connect(format!("{base}/updateReports?agent={AGENT}")).await?;
    while ws.recv().await.is_some() {}
    Ok(())
}

async fn case_count(base: &str) -> Result<u32, sockeye::Error> {
    let (mut ws, _) = sockeye::connect(format!("{base}/getCaseCount")).await?;
    let mut count = None;
    while let Some(item) = ws.recv().await {
        if let Ok(Message::Text(text)) = item {
            count = text.trim().parse().ok();
        }
    }
    count.ok_or(sockeye::Error::InvalidInput(
        "the server did not send a case count",
    ))
}
