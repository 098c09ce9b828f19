//! The client that Autobahn's fuzzingserver tests:
//! `sockeye-autobahn-client [BASE_URL] [--ca-file PEM] [--http2]` (default ws://127.0.0.1:9001;
//! for a wss:// URL, `--ca-file` names the certificate to trust; `--http2`: every WebSocket over
//! HTTP/2 (RFC 8441), h2c with prior knowledge for ws://, sharing one connection). Runs every case (`/getCaseCount`, `/runCase?case=N&agent=A`),
//! echoing, then asks the server to write its report (`/updateReports?agent=A`).

use std::process::ExitCode;

use sockeye::Config;
use sockeye::tls::ClientTlsOptions;
use sockeye_conformance::run_fuzzingserver_client as run;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let http2 = args.iter().any(|a| a == "--http2");
    args.retain(|a| a != "--http2");
    let (base, ca) = match args.as_slice() {
        [] => ("ws://127.0.0.1:9001", None),
        [base] => (base.as_str(), None),
        [base, flag, ca] if flag == "--ca-file" => (base.as_str(), Some(ca)),
        _ => {
            eprintln!("usage: sockeye-autobahn-client [BASE_URL] [--ca-file PEM] [--http2]");
            return ExitCode::from(2);
        }
    };
    let mut config = Config::default();
    if http2 {
        config.http_version = sockeye::HttpVersion::Http2Only;
    }
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
