//! `echo_server` and `echo_client`.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sockeye::{CloseCode, CloseFrame, Message};

use crate::Failure;
use crate::cli::{EchoClientArgs, EchoServerArgs};
use crate::interrupt::serve_until_stopped;
use crate::output::{errln, outln};
use crate::tls::{bind, client_config};

/// Echoes every message; `-q` silences the per-message log.
pub(crate) async fn server(args: EchoServerArgs) -> Result<(), Failure> {
    let no_pong = args.no_pong;
    let server = bind(&args.server, |c| c.protocol.auto_pong = !no_pong, "echo_server").await?;
    let (quiet, greet, authorization) = (args.quiet, args.greet, args.authorization);
    let shutdown = server.shutdown_handle();
    let serving = server.serve_requests(move |mut ws, request, peer| {
        let authorization = authorization.clone();
        async move {
            if let Some(expected) = authorization {
                let given = request
                    .headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok());
                if given != Some(expected.as_str()) {
                    if !quiet {
                        errln!("{peer}: refused: missing or wrong Authorization header");
                    }
                    let _ = ws
                        .close(Some(CloseFrame::new(CloseCode(4001), "Permission denied")))
                        .await;
                    return;
                }
            }
            if !quiet {
                errln!("{peer}: connected ({})", request.uri());
            }
            if greet && ws.send("Welcome !").await.is_err() {
                return;
            }
            // On Ctrl-C the server's shutdown closes the connection (1001) and the stream ends.
            while let Some(item) = ws.next().await {
                match item {
                    Ok(m) if m.is_data() => {
                        if !quiet {
                            errln!("{peer}: received {} bytes", m.as_payload().len());
                        }
                        if ws.feed(m).await.is_err() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::info!(%peer, "connection ended: {e}");
                        break;
                    }
                }
            }
        }
    });
    serve_until_stopped(serving, shutdown).await
}

/// Sends a message and counts echoes, or with `-m` only counts; prints the rate every second in
/// IXWebSocket's format and a summary at the end.
pub(crate) async fn client(args: EchoClientArgs) -> Result<(), Failure> {
    let config = client_config(&args.client)?;
    let (mut ws, _) = sockeye::connect_with(args.client.url.as_str(), &config).await?;
    let message = if args.binary {
        Message::binary(args.send_msg.into_bytes())
    } else {
        Message::text(args.send_msg)
    };
    if !args.mute {
        ws.send(message.clone()).await?;
    }
    let started = Instant::now();
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    let (mut total, mut last) = (0u64, 0u64);
    let mut failure = None;
    loop {
        tokio::select! {
            item = ws.recv() => match item {
                Some(Ok(m)) if m.is_data() => {
                    total += 1;
                    if args.msg_count.is_some_and(|n| total >= n) {
                        let _ = ws.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
                        break;
                    }
                    if !args.mute {
                        ws.send(message.clone()).await?;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    failure = abnormal_close(frame.as_ref());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    failure = Some(Failure::from(e));
                    break;
                }
                None => break,
            },
            _ = ticker.tick() => {
                outln!("messages received: {} per second {} total", total - last, total)?;
                last = total;
            }
            _ = tokio::signal::ctrl_c() => {
                let _ = ws.close(Some(CloseFrame::new(CloseCode::GOING_AWAY, ""))).await;
                break;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    outln!(
        "messages received: {total} total in {secs:.2} s ({:.0} per second)",
        total as f64 / secs.max(1e-9)
    )?;
    failure.map_or(Ok(()), Err)
}

/// A close from the peer that scripts should treat as failure: any code but 1000 and 1001.
pub(crate) fn abnormal_close(frame: Option<&CloseFrame>) -> Option<Failure> {
    match frame {
        Some(f) if f.code != CloseCode::NORMAL && f.code != CloseCode::GOING_AWAY => Some(Failure::new(
            format!("the server closed the connection with {} {}", f.code, f.reason),
        )),
        _ => None,
    }
}
