//! The echo server that Autobahn's fuzzingclient tests:
//! `sockeye-autobahn-server [ADDR] [--runtime uring|epoll|auto] [--tls CERT_PEM KEY_PEM]`
//! (default 127.0.0.1:9002, plain ws, the tokio server; `--runtime`: Sockeye's own loop,
//! sockeye-loop, on that interface; `--tls`: wss:// on either).

use std::process::ExitCode;

use sockeye::tls::ServerTls;
use sockeye::{Config, Server};

const USAGE: &str =
    "usage: sockeye-autobahn-server [ADDR] [--runtime uring|epoll|auto] [--tls CERT_PEM KEY_PEM]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, rest) = match args.first() {
        Some(first) if !first.starts_with("--") => (first.as_str(), &args[1..]),
        _ => ("127.0.0.1:9002", &args[..]),
    };
    let (runtime, rest) = match rest {
        [flag, runtime, rest @ ..] if flag == "--runtime" => (Some(runtime), rest),
        rest => (None, rest),
    };
    let tls = match rest {
        [] => None,
        [flag, cert, key] if flag == "--tls" => Some((cert, key)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match runtime.map(|r| r.parse()) {
        None => serve_tokio(addr, tls),
        Some(Ok(runtime)) => serve_loop(addr, runtime, tls),
        Some(Err(e)) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sockeye-autobahn-server: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve_loop(
    addr: &str,
    runtime: sockeye_loop::Runtime,
    tls: Option<(&String, &String)>,
) -> Result<(), String> {
    let mut server = sockeye_loop::Server::new(Config::default())
        .threads(1)
        .runtime(runtime);
    let mut scheme = "ws";
    if let Some((cert, key)) = tls {
        let tls = ServerTls::from_pem_files(cert, key).map_err(|e| e.to_string())?;
        server = server.tls(&tls.acceptor());
        scheme = "wss";
    }
    let server = server
        .listen(addr, || sockeye_conformance::LoopEcho)
        .map_err(|e| format!("{addr}: {e}"))?;
    eprintln!(
        "sockeye-autobahn-server: listening on {scheme}://{} (sockeye-loop, {:?})",
        server.local_addr(),
        server.runtime()
    );
    server.wait().map_err(|e| e.to_string())
}

fn serve_tokio(addr: &str, tls: Option<(&String, &String)>) -> Result<(), String> {
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(serve(addr, tls)).map_err(|e| e.to_string())
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
