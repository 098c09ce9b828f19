//! The echo server that Autobahn's fuzzingclient tests:
//! `sockeye-autobahn-server [ADDR] [--tls CERT_PEM KEY_PEM]` (default 127.0.0.1:9002, plain ws).

use std::process::ExitCode;

use sockeye::tls::ServerTls;
use sockeye::{Config, Server};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, tls) = match args.as_slice() {
        [] => ("127.0.0.1:9002", None),
        [addr] => (addr.as_str(), None),
        [addr, flag, cert, key] if flag == "--tls" => (addr.as_str(), Some((cert, key))),
        _ => {
            eprintln!("usage: sockeye-autobahn-server [ADDR] [--tls CERT_PEM KEY_PEM]");
            return ExitCode::from(2);
        }
    };
    match serve(addr, tls).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sockeye-autobahn-server: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(addr: &str, tls: Option<(&String, &String)>) -> Result<(), sockeye::Error> {
    let mut server = Server::bind(addr, Config::default()).await?;
    let scheme = match tls {
        Some((cert, key)) => {
            server = server.with_tls(ServerTls::from_pem_files(cert, key)?.acceptor());
            "wss"
        }
        None => "ws",
    };
    eprintln!(
        "sockeye-autobahn-server: listening on {scheme}://{}",
        server.local_addr()?
    );
    server
        .serve(|ws, _peer| async move {
            sockeye_conformance::echo(ws).await;
        })
        .await?;
    Ok(())
}
