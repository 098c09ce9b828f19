//! The echo server that Autobahn's fuzzingclient tests: `sockeye-autobahn-server [ADDR]`
//! (default 127.0.0.1:9002).

use sockeye::{Config, Server};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:9002".into());
    let server = Server::bind(&addr, Config::default()).await?;
    eprintln!(
        "sockeye-autobahn-server: listening on ws://{}",
        server.local_addr()?
    );
    server
        .serve(|ws, _peer| async move {
            sockeye_conformance::echo(ws).await;
        })
        .await
}
