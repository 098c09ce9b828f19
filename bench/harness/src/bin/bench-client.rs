//! Client-side push: each system's client receives N two-byte text messages from a server that
//! pushes pre-encoded frames (the raw push server), so the figure measures the client.
//!
//! `bench-client SYSTEM ADDR N` — SYSTEM: sockeye, tungstenite or fastwebsockets. One JSON line.

use std::time::Instant;

use futures_util::StreamExt;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
    if count != n {
        return Err(format!("received {count} of {n} messages").into());
    }
    println!(
        r#"{{"msgs_per_s": {:.0}, "messages": {count}, "seconds": {secs:.3}}}"#,
        count as f64 / secs
    );
    Ok(())
}
