//! `ping`, `autoroute` and `autobahn`.

use std::time::{Duration, Instant};

use sockeye::{Bytes, CloseCode, CloseFrame, Message};

use crate::Failure;
use crate::cli::{AutobahnArgs, AutorouteArgs, PingArgs};
use crate::output::outln;
use crate::tls::client_config;

/// Sends `--count` pings, one per interval, and prints each pong's round trip. Fails if any pong
/// is missing after the last ping.
pub(crate) async fn ping(args: PingArgs) -> Result<(), Failure> {
    let config = client_config(&args.client)?;
    let (mut ws, _) = sockeye::connect_with(args.client.url.as_str(), &config).await?;
    let mut answered = 0;
    for seq in 1..=args.count {
        let payload = Bytes::from(seq.to_be_bytes().to_vec());
        let sent = Instant::now();
        ws.send(Message::Ping(payload.clone())).await?;
        let wait = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(item) = ws.recv().await {
                if let Message::Pong(p) = item?
                    && p == payload
                {
                    return Ok::<bool, Failure>(true);
                }
            }
            Ok(false)
        });
        match wait.await {
            Ok(Ok(true)) => {
                answered += 1;
                outln!(
                    "pong from {}: seq={seq} time={:.3} ms",
                    args.client.url,
                    sent.elapsed().as_secs_f64() * 1e3
                )?;
            }
            Ok(Ok(false)) => return Err(Failure::new("the server closed the connection")),
            Ok(Err(e)) => return Err(e),
            Err(_) => outln!("no pong for seq={seq} within 5 s")?,
        }
        if seq < args.count {
            tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
        }
    }
    let _ = ws.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
    outln!("{} pings, {answered} pongs", args.count)?;
    if answered == args.count {
        Ok(())
    } else {
        Err(Failure::new("some pings went unanswered"))
    }
}

/// Connects to `URL/N` and times the arrival of N messages.
pub(crate) async fn autoroute(args: AutorouteArgs) -> Result<(), Failure> {
    let config = client_config(&args.client)?;
    let url = format!("{}/{}", args.client.url.trim_end_matches('/'), args.msg_count);
    let started = Instant::now();
    let (mut ws, _) = sockeye::connect_with(url.as_str(), &config).await?;
    let mut got = 0u64;
    while got < args.msg_count {
        match ws.recv().await {
            Some(Ok(m)) if m.is_data() => got += 1,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => break,
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let _ = ws.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
    outln!(
        "received {got} of {} messages in {secs:.3} s ({:.0} per second)",
        args.msg_count,
        got as f64 / secs.max(1e-9)
    )?;
    if got == args.msg_count {
        Ok(())
    } else {
        Err(Failure::new("the server closed before sending every message"))
    }
}

/// Autobahn|Testsuite's fuzzingserver cases, as the conformance harness runs them.
pub(crate) async fn autobahn(args: AutobahnArgs) -> Result<(), Failure> {
    sockeye_conformance::run_fuzzingserver_client(
        args.url.trim_end_matches('/'),
        &sockeye::Config::default(),
    )
    .await?;
    Ok(())
}
