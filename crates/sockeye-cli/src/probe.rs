//! Probes: `ping`, `autoroute` and `autobahn` each send something (a ping, a connection to
//! `URL/N`, a request for the case count) and wait for the answer only as long as `--timeout`
//! says, and say what they were waiting for when none came.

use std::time::{Duration, Instant};

use sockeye::{Bytes, Message};

use crate::cli::{AutobahnArgs, AutorouteArgs, PingArgs};
use crate::client::{close_interrupted, close_normally, connect, connect_to, reply_timeout};
use crate::failure::Failure;
use crate::interrupt::unless_interrupted;
use crate::output::outln;

/// Sends `--count` pings, one per interval, and prints each pong's round trip. Fails if any pong
/// is missing after the last ping.
pub(crate) async fn ping(args: PingArgs) -> Result<(), Failure> {
    let (mut ws, _) = connect(&args.client).await?;
    let wait = reply_timeout(&args.client);
    let mut answered = 0;
    for seq in 1..=args.count {
        let payload = Bytes::from(seq.to_be_bytes().to_vec());
        let sent = Instant::now();
        ws.send(Message::Ping(payload.clone())).await?;
        let pong = tokio::time::timeout(wait, async {
            while let Some(item) = ws.recv().await {
                if let Message::Pong(p) = item?
                    && p == payload
                {
                    return Ok::<bool, Failure>(true);
                }
            }
            Ok(false)
        });
        let Ok(pong) = unless_interrupted(pong).await else {
            close_interrupted(&mut ws).await;
            return Err(Failure::interrupted());
        };
        match pong {
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
            Err(_) => outln!("no pong for seq={seq} within {} s", wait.as_secs())?,
        }
        if seq < args.count
            && unless_interrupted(tokio::time::sleep(Duration::from_millis(args.interval_ms)))
                .await
                .is_err()
        {
            close_interrupted(&mut ws).await;
            return Err(Failure::interrupted());
        }
    }
    close_normally(&mut ws).await;
    outln!("{} pings, {answered} pongs", args.count)?;
    if answered == args.count {
        Ok(())
    } else {
        Err(Failure::new("some pings went unanswered"))
    }
}

/// `URL` with `/N` added to its path, its query kept: `ws://h/?token=x` → `ws://h/1000?token=x`.
fn with_count(url: &str, n: u64) -> String {
    let (rest, fragment) = url.split_once('#').map_or((url, None), |(r, f)| (r, Some(f)));
    let (base, query) = rest.split_once('?').map_or((rest, None), |(b, q)| (b, Some(q)));
    let mut out = format!("{}/{n}", base.trim_end_matches('/'));
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// Connects to `URL/N` (a `ws push_server` sends N messages for that path) and times the
/// arrival of N messages. Fails, saying so, when nothing arrives for `--timeout` seconds.
pub(crate) async fn autoroute(args: AutorouteArgs) -> Result<(), Failure> {
    let url = with_count(&args.client.url, args.msg_count);
    let started = Instant::now();
    let (mut ws, _) = connect_to(&args.client, &url).await?;
    let idle = reply_timeout(&args.client);
    let mut got = 0u64;
    while got < args.msg_count {
        let next = unless_interrupted(tokio::time::timeout(idle, ws.recv())).await;
        match next {
            Err(interrupted) => {
                close_interrupted(&mut ws).await;
                return Err(interrupted);
            }
            Ok(Err(_)) => {
                return Err(Failure::new(format!(
                    "received {got} of {} messages, then nothing for {} s: is {url} a server that sends N messages for the path /N (like ws push_server)?",
                    args.msg_count,
                    idle.as_secs()
                )));
            }
            Ok(Ok(Some(Ok(m)))) if m.is_data() => got += 1,
            Ok(Ok(Some(Ok(_)))) => {}
            Ok(Ok(Some(Err(e)))) => return Err(e.into()),
            Ok(Ok(None)) => break,
        }
    }
    let secs = started.elapsed().as_secs_f64();
    close_normally(&mut ws).await;
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

/// Autobahn|Testsuite's fuzzingserver cases, as the conformance harness runs them. The server
/// is first asked for its case count, bounded by `--timeout`, so that a URL that is not a
/// fuzzingserver fails with a message instead of waiting for ever.
pub(crate) async fn autobahn(args: AutobahnArgs) -> Result<(), Failure> {
    let client = crate::opts::ClientOpts::for_url(args.url, args.timeout);
    let base = client.url.trim_end_matches('/').to_string();
    let probe = format!("{base}/getCaseCount");
    let (mut ws, _) = connect_to(&client, &probe).await?;
    let wait = reply_timeout(&client);
    let not_autobahn = |what: String| {
        Failure::new(format!(
            "{base} does not look like an Autobahn|Testsuite fuzzingserver (wstest -m fuzzingserver): {what}"
        ))
    };
    let count = match unless_interrupted(tokio::time::timeout(wait, ws.recv())).await? {
        Err(_) => {
            return Err(not_autobahn(format!(
                "no case count from {probe} within {} s",
                wait.as_secs()
            )));
        }
        Ok(Some(Ok(Message::Text(text)))) => text
            .trim()
            .parse::<u32>()
            .map_err(|_| not_autobahn(format!("{probe} answered {:?}", text.as_str())))?,
        Ok(Some(Ok(other))) => {
            return Err(not_autobahn(format!(
                "{probe} answered {:?} instead of a number",
                crate::output::escape(other.as_payload())
            )));
        }
        Ok(Some(Err(e))) => return Err(e.into()),
        Ok(None) => return Err(not_autobahn(format!("{probe} closed without a case count"))),
    };
    drop(ws);
    if !crate::log::quiet() {
        outln!("{base}: {count} cases")?;
    }
    let config = crate::tls::client_config(&client)?;
    unless_interrupted(sockeye_conformance::run_fuzzingserver_client(&base, &config)).await??;
    if !crate::log::quiet() {
        outln!("{count} cases run; the fuzzingserver has written its report")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::with_count;

    #[test]
    fn the_count_goes_into_the_path_not_the_query() {
        assert_eq!(with_count("ws://h", 5), "ws://h/5");
        assert_eq!(with_count("ws://h/", 5), "ws://h/5");
        assert_eq!(with_count("ws://h/a/?token=x", 5), "ws://h/a/5?token=x");
        assert_eq!(with_count("wss://h:9/p?x=1&y=2#f", 7), "wss://h:9/p/7?x=1&y=2#f");
    }
}
