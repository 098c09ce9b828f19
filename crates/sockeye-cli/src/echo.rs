//! `echo_server` and `echo_client`.

use std::time::{Duration, Instant};

use std::pin::pin;

use futures_util::{FutureExt, StreamExt};
use sockeye::{CloseCode, CloseFrame, Message};

use crate::cli::{EchoClientArgs, EchoServerArgs};
use crate::client::{abnormal_close, close_interrupted, close_normally, connect, line_message};
use crate::failure::Failure;
use crate::interrupt;
use crate::interrupt::serve_until_stopped;
use crate::output::{errln, outln};
use crate::ready::Ready;
use crate::tls::bind;

/// Echoes every message; `-q` silences the per-message log.
pub(crate) async fn server(args: EchoServerArgs) -> Result<(), Failure> {
    if let Some(runtime) = crate::own_loop::choose(&args.runtime, None)? {
        return crate::own_loop::echo_server(args, runtime).await;
    }
    let no_pong = args.no_pong;
    let server = bind(&args.server, |c| c.protocol.auto_pong = !no_pong, "echo_server").await?;
    let (quiet, greet, authorization) = (crate::log::quiet(), args.greet, args.authorization);
    let shutdown = server.shutdown_handle();
    let serving = server.serve_requests(move |mut ws, request, peer| {
        // What the session needs of the request is taken here, before its future is made: that
        // future lives as long as the connection, and a `Request` inside it (~250 bytes, even
        // once dropped) would be held by every idle connection.
        let authorized = authorization.as_deref().is_none_or(|expected| {
            request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                == Some(expected)
        });
        let target = (!quiet).then(|| request.uri().to_string());
        drop(request);
        async move {
            if !authorized {
                if !quiet {
                    errln!("{peer}: refused: missing or wrong Authorization header");
                }
                let _ = ws
                    .close(Some(CloseFrame::new(CloseCode(4001), "Permission denied")))
                    .await;
                return;
            }
            if let Some(target) = target {
                errln!("{peer}: connected ({target})");
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
///
/// The receive loop takes every message already decoded before it looks at the clock or the
/// Ctrl-C flag again (up to [`BATCH`]): at millions of messages a second, a `select!` per message
/// costs more than the message. Ctrl-C is still seen within one batch.
pub(crate) async fn client(args: EchoClientArgs) -> Result<(), Failure> {
    let (mut ws, _) = connect(&args.client).await?;
    let message = line_message(args.send_msg, args.binary);
    if !args.mute {
        ws.send(message.clone()).await?;
    }
    let started = Instant::now();
    let mut next_report = tokio::time::Instant::now() + Duration::from_secs(1);
    let mut report = pin!(tokio::time::sleep_until(next_report));
    let mut stop = pin!(interrupt::requested());
    let (mut total, mut last) = (0u64, 0u64);
    let mut outcome = Ok(());
    'receiving: loop {
        let mut item = tokio::select! {
            biased;
            _ = &mut stop => {
                close_interrupted(&mut ws).await;
                outcome = Err(Failure::interrupted());
                break;
            }
            _ = &mut report => {
                outln!("messages received: {} per second {} total", total - last, total)?;
                last = total;
                next_report += Duration::from_secs(1);
                report.as_mut().reset(next_report);
                continue;
            }
            item = ws.recv() => item,
        };
        let mut ready = Ready::after_first(BATCH);
        loop {
            match item {
                Some(Ok(m)) if m.is_data() => {
                    total += 1;
                    if args.msg_count.is_some_and(|n| total >= n) {
                        if let Some(frame) = close_normally(&mut ws).await {
                            outcome = abnormal_close(Some(&frame)).map_or(Ok(()), Err);
                        }
                        break 'receiving;
                    }
                    if !args.mute {
                        ws.send(message.clone()).await?;
                        // Each echo waits for its reply: nothing else can be ready.
                        continue 'receiving;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    outcome = abnormal_close(frame.as_ref()).map_or(Ok(()), Err);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    outcome = Err(e.into());
                    break 'receiving;
                }
                None => break 'receiving,
            }
            match ready.next(|| ws.recv().now_or_never()) {
                Some(next) => item = next,
                None => break,
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    outln!(
        "messages received: {total} total in {secs:.2} s ({:.0} per second)",
        total as f64 / secs.max(1e-9)
    )?;
    outcome
}

/// Messages taken without looking at the clock or Ctrl-C in between.
const BATCH: usize = 1024;
