//! Echo server on tokio-tungstenite: `tungstenite-echo [ADDR] [--tls CERT_PEM KEY_PEM]`
//! (default 127.0.0.1:9102). Each text or binary message is sent back as it arrived; like its
//! upstream autobahn example, it flushes per message (`send`). TLS, when asked for, is
//! tokio-rustls with the same provider Sockeye uses, so a wss comparison compares the libraries.

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args.first().cloned().unwrap_or_else(|| "127.0.0.1:9102".into());
    let tls = match args.get(1..) {
        Some([flag, cert, key]) if flag == "--tls" => {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(cert).expect("cert").collect::<Result<_, _>>().expect("cert");
            let key = PrivateKeyDer::from_pem_file(key).expect("key");
            let config = ServerConfig::builder().with_no_client_auth().with_single_cert(certs, key).expect("tls");
            Some(TlsAcceptor::from(Arc::new(config)))
        }
        _ => None,
    };
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("tungstenite-echo: listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let tls = tls.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            match tls {
                Some(acceptor) => {
                    if let Ok(s) = acceptor.accept(stream).await {
                        echo(s).await;
                    }
                }
                None => echo(stream).await,
            }
        });
    }
}

async fn echo<S: AsyncRead + AsyncWrite + Unpin>(stream: S) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else { return };
    while let Some(Ok(message)) = ws.next().await {
        if (message.is_text() || message.is_binary()) && ws.send(message).await.is_err() {
            break;
        }
    }
}
