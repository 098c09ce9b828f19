//! `cat` and `listen`: websocat-style pipes between stdin/stdout and one connection.

use futures_util::StreamExt;
use sockeye::{CloseCode, CloseFrame, MaybeTlsStream, Message, WebSocket};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::Failure;
use crate::cli::{CatArgs, ChatArgs, ListenArgs, PipeOpts};
use crate::echo::abnormal_close;
use crate::output::{errln, escape, outln};
use crate::tls::{bind, client_config};

/// Connects to a URL and pipes.
pub(crate) async fn cat(args: CatArgs) -> Result<(), Failure> {
    let config = client_config(&args.client)?;
    let (ws, _) = sockeye::connect_with(args.client.url.as_str(), &config).await?;
    pump(ws, &args.pipe, "").await
}

/// A pipe whose outgoing lines are signed "USER: ".
pub(crate) async fn chat(args: ChatArgs) -> Result<(), Failure> {
    let config = client_config(&args.client)?;
    let (ws, _) = sockeye::connect_with(args.client.url.as_str(), &config).await?;
    let opts = PipeOpts {
        binary: false,
        text: true,
        no_close: false,
        max_messages: None,
    };
    pump(ws, &opts, &format!("{}: ", args.user)).await
}

/// Accepts one client — over HTTP/1.1 or HTTP/2, like every server sub-command — and pipes.
/// Clients that come while it is busy are closed with 1013 (try again later).
pub(crate) async fn listen(args: ListenArgs) -> Result<(), Failure> {
    let server = bind(&args.server, |_| {}, "listen").await?;
    let shutdown = server.shutdown_handle();
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let serving = tokio::spawn(server.serve(move |mut ws, peer| {
        let tx = tx.clone();
        async move {
            if let Err(refused) = tx.try_send((ws, peer)) {
                (ws, _) = refused.into_inner();
                let busy = CloseFrame::new(CloseCode(1013), "ws listen serves one client");
                let _ = ws.close(Some(busy)).await;
            }
        }
    }));
    let (ws, peer) = rx
        .recv()
        .await
        .ok_or_else(|| Failure::new("the server stopped before a client came"))?;
    // Later clients find the channel closed and are turned away.
    drop(rx);
    errln!("ws listen: {peer} connected");
    let result = pump(ws, &args.pipe, "").await;
    // A graceful stop, not an abort: over HTTP/2 the connection's task still has the stream's
    // last frames (the close, END_STREAM) to write.
    shutdown.shutdown();
    let _ = serving.await;
    result
}

/// Lines from stdin become messages; messages are printed one per line, escaped. At the end of
/// stdin the connection is closed (1000) unless `-n`; the pipe ends when the connection does.
async fn pump(ws: WebSocket<MaybeTlsStream>, opts: &PipeOpts, prefix: &str) -> Result<(), Failure> {
    let (mut sink, mut stream) = ws.split();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdin_open = true;
    let mut received = 0u64;
    let mut failure = None;
    loop {
        tokio::select! {
            line = lines.next_line(), if stdin_open => match line? {
                Some(line) => {
                    let line = format!("{prefix}{line}");
                    let message = if opts.binary { Message::binary(line.into_bytes()) } else { Message::text(line) };
                    sink.send(message).await?;
                }
                None => {
                    stdin_open = false;
                    if !opts.no_close {
                        sink.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await?;
                    }
                }
            },
            item = stream.next() => match item {
                Some(Ok(m @ (Message::Text(_) | Message::Binary(_)))) => {
                    outln!("{}", escape(m.as_payload()))?;
                    received += 1;
                    if opts.max_messages.is_some_and(|n| received >= n) {
                        sink.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await?;
                        stdin_open = false;
                    }
                }
                Some(Ok(Message::Close(frame))) => failure = abnormal_close(frame.as_ref()),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => break,
            },
            _ = tokio::signal::ctrl_c() => {
                // Going away: close with 1001 and read until the peer's reply ends the stream.
                let _ = sink.send(Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "")))).await;
                stdin_open = false;
            }
        }
    }
    failure.map_or(Ok(()), Err)
}
