//! Client-side push: each system's client receives N two-byte text messages from a server that
//! pushes pre-encoded frames (the raw push server), so the figure measures the client.
//!
//! `bench-client SYSTEM ADDR N` — SYSTEM: sockeye, tungstenite, fastwebsockets or tokio-websockets.
//! One JSON line.

use std::time::Instant;

use futures_util::StreamExt;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("compressed-echo") => return compressed_echo(&args[1..]),
        Some("compressed-push") => return compressed_push(&args[1..]),
        _ => {}
    }
    let [system, addr, n] = &args[..] else {
        return Err("usage: bench-client SYSTEM ADDR N".into());
    };
    let n: u64 = n.parse()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (count, secs) = runtime.block_on(async {
        let url = format!("ws://{addr}/");
        // The clock starts at the first message: handshakes are not what this measures.
        let mut started = None;
        let mut count = 0u64;
        match system.as_str() {
            "sockeye" => {
                let mut config = sockeye::Config::default();
                config.protocol.deflate = None;
                config.proxy = sockeye::proxy::ProxyConfig::Direct;
                let (mut ws, _) = sockeye::connect_with(url.as_str(), &config).await?;
                while let Some(Ok(m)) = ws.next().await {
                    if let sockeye::Message::Text(t) = m {
                        assert_eq!(t.as_bytes(), b"yo");
                        started.get_or_insert_with(Instant::now);
                        count += 1;
                    }
                    if count == n {
                        break;
                    }
                }
            }
            "tungstenite" => {
                let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str()).await?;
                while let Some(Ok(m)) = ws.next().await {
                    if let tokio_tungstenite::tungstenite::Message::Text(t) = m {
                        assert_eq!(t.as_str(), "yo");
                        started.get_or_insert_with(Instant::now);
                        count += 1;
                    }
                    if count == n {
                        break;
                    }
                }
            }
            "tokio-websockets" => {
                let (mut ws, _) = tokio_websockets::ClientBuilder::new()
                    .uri(url.as_str())?
                    .connect()
                    .await?;
                while let Some(Ok(m)) = ws.next().await {
                    if let Some(t) = m.as_text() {
                        assert_eq!(t, "yo");
                        started.get_or_insert_with(Instant::now);
                        count += 1;
                    }
                    if count == n {
                        break;
                    }
                }
            }
            "fastwebsockets" => {
                let (tcp, leftover) = sockeye_bench::connect(addr, false).await?;
                // The encoded push server pauses after its 101, so no frame is read with it.
                assert!(leftover.is_empty(), "frames arrived with the handshake response");
                let mut ws = fastwebsockets::WebSocket::after_handshake(tcp, fastwebsockets::Role::Client);
                ws.set_auto_close(true);
                while let Ok(frame) = ws.read_frame().await {
                    if frame.opcode == fastwebsockets::OpCode::Text {
                        assert_eq!(&frame.payload[..], b"yo");
                        started.get_or_insert_with(Instant::now);
                        count += 1;
                    }
                    if count == n || frame.opcode == fastwebsockets::OpCode::Close {
                        break;
                    }
                }
            }
            other => return Err(format!("unknown system {other}").into()),
        }
        let secs = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        Ok::<_, Box<dyn std::error::Error>>((count, secs))
    })?;
    report_push(count, n, secs)
}

/// Scenario 7: `bench-client compressed-echo ADDR SECONDS` — Sockeye's client, permessage-deflate
/// on, 16 pipelined ~1 KiB JSON messages in flight against a compressing echo server (Sockeye's or
/// Node ws's); every echo compared. The same client for both servers, so the ratio compares them.
fn compressed_echo(args: &[String]) -> Result<()> {
    let [addr, seconds] = args else {
        return Err("usage: bench-client compressed-echo ADDR SECONDS".into());
    };
    let seconds: u64 = seconds.parse()?;
    let (count, secs) = block_on(async {
        let mut ws = connect_deflate(addr).await?;
        let message = sockeye::Message::text(format!(
            r#"{{"user":"sockeye","tags":["fish","salmon","river"],"text":"{}"}}"#,
            "the quick brown fox jumps over the lazy dog ".repeat(22)
        ));
        for _ in 0..16 {
            ws.feed(message.clone()).await?;
        }
        ws.flush().await?;
        let started = Instant::now();
        let deadline = started + std::time::Duration::from_secs(seconds);
        let mut count = 0u64;
        while Instant::now() < deadline {
            match ws.next().await {
                Some(Ok(m)) if m.is_data() => {
                    if m != message {
                        return Err("an echo differs".into());
                    }
                    count += 1;
                    ws.feed(message.clone()).await?;
                }
                Some(Ok(_)) => {}
                _ => return Err("the connection ended".into()),
            }
        }
        Ok((count, started.elapsed().as_secs_f64()))
    })?;
    println!(
        r#"{{"msgs_per_s": {:.0}, "messages": {count}}}"#,
        count as f64 / secs
    );
    Ok(())
}

/// Scenario 7: `bench-client compressed-push ADDR N` — Sockeye's client, permessage-deflate on,
/// receives N compressed ~1.2 KiB JSON messages from a pushing server (Sockeye's or Node ws's);
/// every message compared. msgs/s from the first message.
fn compressed_push(args: &[String]) -> Result<()> {
    let [addr, n] = args else {
        return Err("usage: bench-client compressed-push ADDR N".into());
    };
    let n: u64 = n.parse()?;
    let expected = sockeye_bench::json_document();
    let (count, secs) = block_on(async {
        let mut ws = connect_deflate(addr).await?;
        let mut started = None;
        let mut count = 0u64;
        while count < n {
            match ws.next().await {
                Some(Ok(sockeye::Message::Text(t))) => {
                    if t.as_bytes() != expected.as_bytes() {
                        return Err("a message differs".into());
                    }
                    started.get_or_insert_with(Instant::now);
                    count += 1;
                }
                Some(Ok(_)) => {}
                _ => break,
            }
        }
        let secs = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        Ok((count, secs))
    })?;
    report_push(count, n, secs)
}

fn block_on<T>(future: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(future)
}

/// Sockeye's client with permessage-deflate (its default), which the server must accept.
async fn connect_deflate(addr: &str) -> Result<sockeye::WebSocket<sockeye::TransportStream>> {
    let config = sockeye::Config::builder()
        .proxy(sockeye::proxy::ProxyConfig::Direct)
        .build();
    let (ws, _) = sockeye::connect_with(format!("ws://{addr}/").as_str(), &config).await?;
    if !ws.connection().is_deflate_enabled() {
        return Err("permessage-deflate was not negotiated".into());
    }
    Ok(ws)
}

/// The push result line; an error unless all `n` messages arrived.
fn report_push(count: u64, n: u64, secs: f64) -> Result<()> {
    if count != n {
        return Err(format!("received {count} of {n} messages").into());
    }
    println!(
        r#"{{"msgs_per_s": {:.0}, "messages": {count}, "seconds": {secs:.3}}}"#,
        count as f64 / secs
    );
    Ok(())
}
