//! A `wss://` echo server from a PEM certificate chain and key (PKCS#8, PKCS#1 or SEC1).
//!
//! ```sh
//! cargo run --example tls_server -- 127.0.0.1:8443 cert.pem key.pem
//! cargo run --example echo_client -- wss://localhost:8443/ --ca-file ca.pem
//! ```

use futures_util::StreamExt;
use sockeye::tls::ServerTls;
use sockeye::{Config, Server};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: tls_server ADDR CERT.pem KEY.pem";
    let (addr, cert, key) = (
        args.next().ok_or(usage)?,
        args.next().ok_or(usage)?,
        args.next().ok_or(usage)?,
    );
    let tls = ServerTls::from_pem_files(&cert, &key)?;
    let server = Server::bind(addr.as_str(), Config::default())
        .await?
        .with_tls(tls.acceptor());
    println!("wss echo server on {}", server.local_addr()?);
    server
        .serve(|mut ws, _| async move {
            while let Some(Ok(message)) = ws.next().await {
                if message.is_data() && ws.feed(message).await.is_err() {
                    break;
                }
            }
        })
        .await?;
    Ok(())
}
