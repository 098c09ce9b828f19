//! Connects to an echo server and checks it: text and binary messages of sizes around every frame
//! length boundary (0, 125, 126, 65535, 65536, 1 MiB) must come back unchanged, and so must a
//! message streamed from a source that waits between chunks (sent as fragments as the chunks
//! come, compressed fragment by fragment with permessage-deflate, ended by an empty frame after
//! the source's last wait). Prints what was
//! negotiated and exits non-zero on any difference — the interop tests use it against Python's
//! `websockets` and Node's `ws`.
//!
//! ```sh
//! cargo run --example echo_client -- ws://127.0.0.1:8008/ [--no-deflate] [--ca-file ca.pem] [--proxy URL] [--http2]
//! ```
//!
//! `--http2`: over HTTP/2 only (RFC 8441; h2c with prior knowledge for `ws://`, ALPN `h2` for
//! `wss://`).
//!
//! ```sh
//! ```

use sockeye::proxy::{Proxy, ProxyConfig};
use sockeye::{CloseCode, CloseFrame, Config, Message};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: echo_client URL [--no-deflate] [--ca-file PEM] [--proxy URL] [--http2]")?;
    let mut config = Config::default();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--no-deflate" => config.protocol.deflate = None,
            "--http2" => config.http_version = sockeye::HttpVersion::Http2Only,
            "--ca-file" => {
                let pem = args.next().ok_or("--ca-file needs a path")?;
                config.tls_client = Some(
                    sockeye::tls::ClientTlsOptions::default()
                        .add_ca_file(pem)?
                        .build()?,
                );
            }
            "--proxy" => {
                config.proxy = ProxyConfig::Url(Proxy::parse(&args.next().ok_or("--proxy needs a URL")?)?)
            }
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    let (mut ws, response) = sockeye::connect_with(url.as_str(), &config).await?;
    let extensions = response
        .headers()
        .get("sec-websocket-extensions")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none");
    println!("connected to {url}; extensions: {extensions}");
    let mut checked = 0;
    for size in [0usize, 1, 125, 126, 65535, 65536, 1 << 20] {
        let text: String = (0..size).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let binary: Vec<u8> = (0..size).map(|i| (i * 7 % 256) as u8).collect();
        for message in [Message::text(text), Message::binary(binary)] {
            ws.send(message.clone()).await?;
            let echo = next_data(&mut ws).await?;
            if echo != message {
                return Err(format!("echo of a {size}-byte message differs").into());
            }
            checked += 1;
        }
    }
    // Streamed: the server sees fragments (compressed as they go when deflate is on, each one
    // sync-flushed) and an empty last frame, and must inflate and assemble them as one message.
    let row = "{\"id\":12345,\"name\":\"sockeye\",\"tags\":[\"a\",\"b\"]},";
    let chunks: Vec<String> = (0..5).map(|i| row.repeat(500 + 300 * i)).collect();
    let streamed = chunks.concat();
    let source = futures_util::stream::unfold(chunks.into_iter(), |mut chunks| async move {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let chunk = chunks.next()?;
        Some((Ok::<_, std::io::Error>(sockeye::Bytes::from(chunk)), chunks))
    });
    ws.send_stream(sockeye::DataKind::Text, source).await?;
    let echo = next_data(&mut ws).await?;
    if echo != Message::text(streamed) {
        return Err("echo of a streamed message differs".into());
    }
    checked += 1;
    // With context takeover, the next message is inflated with the window the streamed one left:
    // it fails if the streamed message did not end the compressed data as RFC 7692 §7.2.1 says.
    let after = Message::text(row.repeat(40));
    ws.send(after.clone()).await?;
    let echo = next_data(&mut ws).await?;
    if echo != after {
        return Err("echo of the message after the streamed one differs".into());
    }
    checked += 1;
    let reply = ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "done"))).await?;
    println!(
        "{checked} echoes identical; server closed with {:?}",
        reply.map(|f| f.code.0)
    );
    Ok(())
}

/// The next data message (pings and pongs skipped), or an error if the server closed first.
async fn next_data<S>(ws: &mut sockeye::WebSocket<S>) -> Result<Message, Box<dyn std::error::Error>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match ws.recv().await.ok_or("the server closed the connection")?? {
            Message::Ping(_) | Message::Pong(_) => continue,
            other => return Ok(other),
        }
    }
}
