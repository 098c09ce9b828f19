//! One WebSocket server per system, single-threaded, for the side-by-side benchmarks.
//!
//! `bench-server SYSTEM MODE PORT [N]` — SYSTEM: sockeye, tungstenite, fastwebsockets, raw
//! (TCP, no WebSocket: echoes bytes, or writes pre-encoded frames) or encoded (raw after a real
//! handshake: the push server for client-side figures); MODE: `echo`, `push` (N
//! two-byte text messages "yo" to each client, then a close frame) or `deflate` (Sockeye's echo
//! with permessage-deflate; the other modes turn it off, as the peers' defaults do).
//! Each system is used the way its documentation shows.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use sockeye_bench::{encode_frame, server_handshake};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [system, mode, port, rest @ ..] = &args[..] else {
        return Err("usage: bench-server SYSTEM MODE PORT [N]".into());
    };
    let n: u64 = rest.first().map_or(Ok(1_000_000), |s| s.parse())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(("127.0.0.1", port.parse::<u16>()?)).await?;
        println!("ready");
        match system.as_str() {
            "sockeye" => sockeye_server(listener, mode, n).await,
            other => loop {
                let (tcp, _) = listener.accept().await?;
                tcp.set_nodelay(true)?;
                let mode = mode.clone();
                match other {
                    "tungstenite" => tokio::spawn(tungstenite(tcp, mode, n)),
                    "fastwebsockets" => tokio::spawn(fastws(tcp, mode, n)),
                    "raw" => tokio::spawn(raw(tcp, mode, n, false)),
                    "encoded" => tokio::spawn(raw(tcp, mode, n, true)),
                    _ => return Err(format!("unknown system {other}").into()),
                };
            },
        }
    })
}

async fn sockeye_server(listener: TcpListener, mode: &str, n: u64) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = sockeye::Config::default();
    if mode != "deflate" {
        config.protocol.deflate = None;
    }
    config.max_connections = 100_000;
    let push = mode == "push";
    sockeye::Server::from_listener(listener, config)
        .serve(move |mut ws, _| async move {
            if push {
                let yo = sockeye::Message::text("yo");
                if ws.send_batch(std::iter::repeat_n(yo, n as usize)).await.is_ok() {
                    let _ = ws.close(None).await;
                }
                return;
            }
            while let Some(Ok(m)) = ws.next().await {
                if m.is_data() && ws.feed(m).await.is_err() {
                    break;
                }
            }
        })
        .await?;
    Ok(())
}

async fn tungstenite(tcp: TcpStream, mode: String, n: u64) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    use tokio_tungstenite::tungstenite::Message;
    if mode == "push" {
        // `feed` queues without flushing (tungstenite's documented way to batch); `close` flushes.
        let yo = Message::text("yo");
        for _ in 0..n {
            if ws.feed(yo.clone()).await.is_err() {
                return;
            }
        }
        let _ = ws.close(None).await;
        while let Some(Ok(_)) = ws.next().await {}
        return;
    }
    while let Some(Ok(m)) = ws.next().await {
        if (m.is_text() || m.is_binary()) && ws.send(m).await.is_err() {
            break;
        }
    }
}

async fn fastws(mut tcp: TcpStream, mode: String, n: u64) {
    use fastwebsockets::{Frame, OpCode, Payload, Role, WebSocket};
    if server_handshake(&mut tcp).await.is_err() {
        return;
    }
    let mut ws = WebSocket::after_handshake(tcp, Role::Server);
    ws.set_auto_close(true);
    ws.set_auto_pong(true);
    ws.set_max_message_size(64 << 20);
    if mode == "push" {
        for _ in 0..n {
            if ws
                .write_frame(Frame::text(Payload::Borrowed(b"yo")))
                .await
                .is_err()
            {
                return;
            }
        }
        let _ = ws.write_frame(Frame::close(1000, b"")).await;
        return;
    }
    while let Ok(frame) = ws.read_frame().await {
        match frame.opcode {
            OpCode::Close => break,
            OpCode::Text | OpCode::Binary => {
                // A read frame keeps its mask key; a server must send unmasked frames.
                let reply = Frame::new(true, frame.opcode, None, frame.payload);
                if ws.write_frame(reply).await.is_err() {
                    break;
                }
            }
            _ => {}
        }
    }
}

/// Raw TCP; `handshake`: answer the opening handshake first ("encoded": the fastest possible
/// WebSocket push server, pre-encoded frames, for measuring clients).
async fn raw(mut tcp: TcpStream, mode: String, n: u64, handshake: bool) {
    if handshake {
        if server_handshake(&mut tcp).await.is_err() {
            return;
        }
        // Let the client finish its handshake first: a client library that cannot take bytes
        // read past the 101 (fastwebsockets' `after_handshake`) would otherwise lose them.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if mode == "push" {
        // The same bytes a WebSocket server would send, encoded once.
        let frame = encode_frame(1, b"yo", false);
        let batch: Vec<u8> = frame.iter().copied().cycle().take(frame.len() * 16384).collect();
        let mut left = n as usize;
        while left > 0 {
            let count = left.min(16384);
            if tcp.write_all(&batch[..count * frame.len()]).await.is_err() {
                return;
            }
            left -= count;
        }
        let _ = tcp
            .write_all(&encode_frame(8, &1000u16.to_be_bytes(), false))
            .await;
        let _ = tcp.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut [0u8; 64])).await;
        return;
    }
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(k) => {
                if tcp.write_all(&buf[..k]).await.is_err() {
                    return;
                }
            }
        }
    }
}
