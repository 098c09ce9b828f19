//! What a NATS cluster kept of what it had acknowledged, read back after all of it was killed
//! and started again: the proof `checker::lost_by_engine` asks for before it calls a miss the
//! engine's own.

use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::history::{Record, payloads};

/// What the engine kept of what it had acknowledged, once all of it was killed and started
/// again: the publication acknowledged at the highest offset before the restart is read back
/// from the stream (a stream loses a tail, so that one tells), and the answer recorded for
/// `checker::lost_by_engine`, which excuses nothing without "lost its tail"; `None` when nothing
/// was acknowledged with a position. Still there: kept.
/// Another publication there, or none with the stream ending before it: lost (an acknowledged
/// publication the engine gave up; the offset may already be given again).
pub(crate) async fn check_tail(history: &[Record], ports: &[u16]) -> Option<String> {
    let payloads = payloads(history);
    // The first acknowledgement at the highest offset.
    let (offset, payload) = history
        .iter()
        .filter_map(|r| match r {
            Record::Ack {
                publisher,
                seq,
                position: Some(p),
            } => payloads
                .get(&(*publisher, *seq))
                .map(|&payload| (p.offset, payload)),
            _ => None,
        })
        .reduce(|highest, next| if next.0 > highest.0 { next } else { highest })?;
    let addrs: Vec<async_nats::ServerAddr> = ports
        .iter()
        .filter_map(|p| format!("nats://127.0.0.1:{p}").parse().ok())
        .collect();
    let verdict = async {
        // The servers may be down again (another fault): the connection is tried again too.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut js = None;
        loop {
            let answer = async {
                if js.is_none() {
                    let client = async_nats::connect(addrs.clone()).await.map_err(|e| e.to_string())?;
                    js = Some(async_nats::jetstream::new(client));
                }
                let Some(js) = &js else { unreachable!() };
                let stream = js.get_stream("SOCKEYE").await.map_err(|e| e.to_string())?;
                match stream.get_raw_message(offset).await {
                    Ok(m) => Ok(Some(m.payload.windows(payload.len()).any(|w| w == payload.as_bytes()))),
                    Err(e) if e.kind() == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
                        Ok(None)
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            .await;
            match answer {
                Ok(Some(true)) => return Ok(format!("the engine kept its tail: {offset} still holds {payload:?}")),
                Ok(Some(false)) => {
                    return Ok(format!(
                        "the engine lost its tail: {offset} no longer holds {payload:?}, acknowledged before its restart"
                    ));
                }
                Ok(None) => {
                    return Ok(format!(
                        "the engine lost its tail: {offset} ({payload:?}, acknowledged before its restart) is no longer stored"
                    ));
                }
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => sleep(Duration::from_millis(200)).await,
            }
        }
    }
    .await;
    Some(verdict.unwrap_or_else(|e| format!("the engine's tail not checked: {e}")))
}
