//! The client that Autobahn's fuzzingserver tests:
//! `sockeye-autobahn-client [BASE_URL] [--ca-file PEM]` (default ws://127.0.0.1:9001; for a
//! wss:// URL, `--ca-file` names the certificate to trust). Runs every case (`/getCaseCount`, `/runCase?case=N&agent=A`),
//! echoing, then asks the server to write its report (`/updateReports?agent=A`).

use std::process::ExitCode;

use sockeye::tls::ClientTlsOptions;
use sockeye::{Config, Message};
use sockeye_conformance::{AGENT, echo};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (base, ca) = match args.as_slice() {
        [] => ("ws://127.0.0.1:9001", None),
        [base] => (base.as_str(), None),
        [base, flag, ca] if flag == "--ca-file" => (base.as_str(), Some(ca)),
        _ => {
            eprintln!("usage: sockeye-autobahn-client [BASE_URL] [--ca-file PEM]");
            return ExitCode::from(2);
        }
    };
    let mut config = Config::default();
    if let Some(ca) = ca {
        match ClientTlsOptions::default()
            .add_ca_file(ca)
            .and_then(|o| o.build())
        {
            Ok(tls) => config.tls_client = Some(tls),
            Err(e) => {
                eprintln!("sockeye-autobahn-client: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match run(base, &config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sockeye-autobahn-client: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(base: &str, config: &Config) -> Result<(), sockeye::Error> {
    let count = case_count(base, config).await?;
    eprintln!("sockeye-autobahn-client: {count} cases");
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
    count.ok_or(sockeye::Error::InvalidInput(
        "the server did not send a case count",
    ))
}
