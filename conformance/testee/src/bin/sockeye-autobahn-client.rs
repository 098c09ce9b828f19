//! The client that Autobahn's fuzzingserver tests:
//! `sockeye-autobahn-client [BASE_URL] [--ca-file PEM]` (default ws://127.0.0.1:9001; for a
//! wss:// URL, `--ca-file` names the certificate to trust). Runs every case (`/getCaseCount`, `/runCase?case=N&agent=A`),
//! echoing, then asks the server to write its report (`/updateReports?agent=A`).

use std::process::ExitCode;

use sockeye::Config;
use sockeye::tls::ClientTlsOptions;
use sockeye_conformance::run_fuzzingserver_client as run;

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
