//! `push_server`: as fast as each client reads.

use futures_util::FutureExt;
use sockeye::{CloseCode, CloseFrame, Message};

use crate::cli::PushServerArgs;
use crate::failure::Failure;
use crate::interrupt::serve_until_stopped;
use crate::output::errln;
use crate::ready::Ready;
use crate::tls::bind;

/// Messages pushed between two looks at the client's side of the connection.
const LOOK_EVERY: u64 = 4096;

/// Reads what the client sent, without waiting: true once it closed (or the connection failed).
fn client_left(ws: &mut sockeye::WebSocket<sockeye::TransportStream>) -> bool {
    let mut ready = Ready::all();
    while let Some(item) = ready.next(|| ws.recv().now_or_never()) {
        match item {
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return true,
            Some(Ok(_)) => {}
        }
    }
    false
}

/// Pushes `--send_msg` to every client. The path `/N` sends N messages and then closes (1000);
/// any other path pushes until the client goes away. `feed` waits at the write high-water mark,
/// so a slow client slows its pusher instead of growing memory.
pub(crate) async fn server(args: PushServerArgs) -> Result<(), Failure> {
    if let Some(runtime) = crate::own_loop::choose(&args.runtime, None)? {
        return crate::own_loop::push_server(args, runtime).await;
    }
    let no_pong = args.no_pong;
    let server = bind(&args.server, |c| c.protocol.auto_pong = !no_pong, "push_server").await?;
    let message = Message::text(args.send_msg);
    let quiet = crate::log::quiet();
    let shutdown = server.shutdown_handle();
    let serving = server.serve_requests(move |mut ws, request, peer| {
        let message = message.clone();
        async move {
            let limit: Option<u64> = request.uri().path().trim_start_matches('/').parse().ok();
            if !quiet {
                errln!(
                    "{peer}: connected, pushing {}",
                    limit.map_or("until it leaves".into(), |n| format!("{n} messages"))
                );
            }
            let mut sent = 0u64;
            // `feed` fails once the client left or the server's shutdown queued close 1001.
            while limit.is_none_or(|n| sent < n) {
                if ws.feed(message.clone()).await.is_err() {
                    break;
                }
                sent += 1;
                // Writing never reads: look at what the client sent now and then, or its close
                // (Ctrl-C, --max-messages) would wait behind a flood that never stops.
                if sent.is_multiple_of(LOOK_EVERY) && client_left(&mut ws) {
                    break;
                }
            }
            // Finishes the closing handshake: 1000 after `/N`, or the reply to a 1001 already sent.
            let _ = ws.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
            if !quiet {
                errln!("{peer}: sent {sent} messages");
            }
        }
    });
    serve_until_stopped(serving, shutdown).await
}
