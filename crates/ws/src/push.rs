//! `push_server`: as fast as each client reads.

use sockeye::{CloseCode, CloseFrame, Message};

use crate::Failure;
use crate::cli::PushServerArgs;
use crate::shutdown::{self, serve_until_ctrl_c};
use crate::tls::bind;

/// Pushes `--send_msg` to every client. The path `/N` sends N messages and then closes (1000);
/// any other path pushes until the client goes away. `feed` waits at the write high-water mark,
/// so a slow client slows its pusher instead of growing memory.
pub(crate) async fn server(args: PushServerArgs) -> Result<(), Failure> {
    let server = bind(&args.server, |_| {}, "push_server").await?;
    let message = Message::text(args.send_msg);
    let quiet = args.quiet;
    let (shutdown, trigger) = shutdown::channel();
    let serving = server.serve_requests(move |mut ws, request, peer| {
        let message = message.clone();
        let shutdown = shutdown.clone();
        async move {
            let _active = shutdown.enter();
            let limit: Option<u64> = request.uri().path().trim_start_matches('/').parse().ok();
            if !quiet {
                eprintln!(
                    "{peer}: connected, pushing {}",
                    limit.map_or("until it leaves".into(), |n| format!("{n} messages"))
                );
            }
            let mut sent = 0u64;
            let mut interrupted = false;
            while limit.is_none_or(|n| sent < n) {
                if ws.feed(message.clone()).await.is_err() {
                    break;
                }
                sent += 1;
                // A cheap look every 1024 messages keeps the hot loop hot.
                if sent.is_multiple_of(1024) && shutdown.is_requested() {
                    interrupted = true;
                    break;
                }
            }
            if interrupted {
                let _ = ws.close(Some(CloseFrame::new(CloseCode::GOING_AWAY, ""))).await;
            } else if limit.is_some() {
                let _ = ws.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
            }
            if !quiet {
                eprintln!("{peer}: sent {sent} messages");
            }
        }
    });
    serve_until_ctrl_c(serving, trigger).await
}
