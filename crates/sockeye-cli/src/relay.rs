//! `broadcast_server` and `transfer`: every message goes to every other client on the same URL
//! path (the topic), through a [`sockeye_pubsub::Hub`]: in this process, or across nodes over
//! Redis or NATS with `--backplane`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sockeye::{CloseCode, CloseFrame, Message};
use sockeye_pubsub::backplane::InProcess;
use sockeye_pubsub::{
    Delivery, HistoryConfig, Hub, HubConfig, PublishRetry, SlowPolicy, SubscriberConfig, Topic, next_batch,
};

use crate::cli::RelayArgs;
use crate::close::short_close;
use crate::failure::Failure;
use crate::interrupt::{CLOSE_GRACE, serve_until_stopped, unless_interrupted};
use crate::output::errln;
use crate::ready::Ready;
use crate::tls::bind;

/// Payload bytes queued for one client before it counts as too slow and is closed (1008): a
/// slow reader must not make the relay's memory grow without bound, nor lose messages silently.
/// One message of any size may always wait, so a 1 GiB transfer still goes through.
const QUEUE_BYTES: usize = 16 << 20;
/// The largest message relayed in this process: `transfer` carries whole files.
const LOCAL_MAX_MESSAGE: usize = 1 << 30;
/// The largest message relayed through a backplane: what fits NATS's default `max_payload` with
/// the backplane's header (far below Redis's limit). Larger messages are refused by the engine
/// with 1009 (message too big).
const BACKPLANE_MAX_MESSAGE: usize = (1 << 20) - 1024;
/// Deliveries fed to a socket at most before one flush.
const BATCH: usize = 256;
/// Messages a client has already sent that are published together, at most (one backplane round
/// trip for all of them), and their payload bytes: the batch ends at whichever comes first
/// (one message of any size may always go).
const READ_BATCH: usize = 256;
/// See [`READ_BATCH`].
const READ_BATCH_BYTES: usize = 1 << 20;

pub(crate) async fn server(
    args: RelayArgs,
    backplane: Option<String>,
    name: &'static str,
) -> Result<(), Failure> {
    let quiet = args.quiet;
    let (hub, max_message) = match &backplane {
        None => {
            let config = HubConfig::default().max_payload(LOCAL_MAX_MESSAGE);
            let hub = Hub::with_backplane(config, |events| InProcess::new(events, HistoryConfig::none()));
            (hub, LOCAL_MAX_MESSAGE)
        }
        Some(url) => (connect_backplane(url, name).await?, BACKPLANE_MAX_MESSAGE),
    };
    let server = bind(&args.server, |c| c.protocol.max_message_size = max_message, name).await?;
    let connected = Arc::new(AtomicUsize::new(0));
    let shutdown = server.shutdown_handle();
    let serving = server.serve_requests(move |ws, request, addr| {
        let hub = hub.clone();
        let connected = Arc::clone(&connected);
        async move {
            let (mut sink, mut stream) = ws.split();
            let topic = match Topic::new(request.uri().path()) {
                Ok(t) => t,
                Err(e) => {
                    let _ = sink.close(Some(short_close(CloseCode::POLICY_VIOLATION, &e.to_string()))).await;
                    return;
                }
            };
            let mut subscriber = hub.subscriber(SubscriberConfig::new(QUEUE_BYTES, SlowPolicy::Close));
            if let Err(e) = subscriber.subscribe(&topic, None).await {
                if !quiet {
                    errln!("{addr}: cannot subscribe to {topic}: {e}");
                }
                let _ = sink.close(Some(short_close(CloseCode::TRY_AGAIN_LATER, "pub/sub backplane unavailable"))).await;
                return;
            }
            let now = connected.fetch_add(1, Ordering::Relaxed) + 1;
            if !quiet {
                errln!("{addr}: joined ({now} connected)");
            }
            let publisher = subscriber.publisher();
            // A client's messages wait out an unreachable backplane (its connection is not read
            // meanwhile) for 10 s, then it is closed with 1013 (try again later): a backplane
            // restart of a few seconds loses nothing, and nothing is published twice.
            let retry = PublishRetry::default();
            // The reader asks the writer to close (the writer owns the sending half).
            let (close_tx, mut close_rx) = tokio::sync::oneshot::channel::<CloseFrame>();
            let writer = tokio::spawn(async move {
                let frame = loop {
                    let first = tokio::select! {
                        biased;
                        Ok(frame) = &mut close_rx => break frame,
                        d = subscriber.recv() => d,
                    };
                    let first = match first {
                        None => return, // the hub stopped: the server is stopping too
                        Some(Err(_)) => break too_slow(),
                        Some(Ok(d)) => d,
                    };
                    // What is queued now goes out with one flush (no batch buffer per
                    // connection: an idle one holds nothing).
                    let write = async {
                        let mut next = Some(first);
                        let mut ready = Ready::after_first(BATCH);
                        while let Some(d) = next.take() {
                            match d {
                                Delivery::Message(m) => sink.feed_prepared(m.prepared()).await?,
                                Delivery::Gap { topic, .. } if !quiet => {
                                    errln!("{addr}: messages on {topic} were missed during a backplane outage and could not be recovered");
                                }
                                _ => {}
                            }
                            // A too-slow stop shows in `too_slow` below.
                            next = ready.next(|| subscriber.try_recv().and_then(Result::ok));
                        }
                        sink.flush().await
                    };
                    // A client that does not read blocks the write: give up on it as soon as
                    // its queue passes the bound.
                    let written = tokio::select! {
                        biased;
                        () = subscriber.too_slow() => break too_slow(),
                        r = write => r,
                    };
                    if written.is_err() {
                        return;
                    }
                };
                // Too slow: its backlog is not sent; the close goes out as soon as the socket
                // takes it (it may not read at all: the close deadline then ends the connection).
                if frame.code == CloseCode::POLICY_VIOLATION && !quiet {
                    errln!("{addr}: dropped: it does not read fast enough (closed with 1008)");
                }
                let _ = tokio::time::timeout(CLOSE_GRACE, sink.close(Some(frame))).await;
            });
            // On Ctrl-C the server's shutdown closes the connection (1001) and the stream ends.
            // What the client has sent and is already here goes to the backplane in one batch
            // (one round trip), in order; the connection is not read while a batch waits.
            let mut batch: Vec<Message> = Vec::new();
            let mut open = true;
            while open {
                open = next_batch(&mut stream, &mut batch, READ_BATCH, READ_BATCH_BYTES).await;
                if batch.is_empty() {
                    continue;
                }
                if let Err(e) = retry.publish_many(&publisher, &topic, std::mem::take(&mut batch)).await {
                    if !quiet {
                        errln!("{addr}: messages not delivered: {e}; closing with 1013");
                    }
                    let _ = close_tx.send(short_close(CloseCode::TRY_AGAIN_LATER, "pub/sub backplane unavailable"));
                    break;
                }
            }
            drop(publisher);
            // The writer may still be sending the close of a client dropped as too slow.
            let mut writer = writer;
            if tokio::time::timeout(CLOSE_GRACE, &mut writer).await.is_err() {
                writer.abort();
            }
            connected.fetch_sub(1, Ordering::Relaxed);
            if !quiet {
                errln!("{addr}: left");
            }
        }
    });
    serve_until_stopped(serving, shutdown).await
}

/// Connects to the backplane, retrying an unreachable one (it may be starting) until Ctrl-C.
async fn connect_backplane(url: &str, name: &str) -> Result<Hub, Failure> {
    let config = HubConfig::default().max_payload(BACKPLANE_MAX_MESSAGE);
    let mut delay = Duration::from_millis(250);
    loop {
        match Hub::connect(url, config, HistoryConfig::default()).await {
            Ok(hub) => {
                errln!("ws {name}: pub/sub backplane {url} connected");
                return Ok(hub);
            }
            Err(e) if e.is_caller_fault() => return Err(Failure::usage(e.to_string())),
            Err(e) => {
                errln!(
                    "ws {name}: {e}; retrying in {} ms (Ctrl-C to stop)",
                    delay.as_millis()
                );
                unless_interrupted(tokio::time::sleep(delay)).await?;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// The close a client too slow to read is sent: 1008, saying why.
fn too_slow() -> CloseFrame {
    CloseFrame::new(CloseCode::POLICY_VIOLATION, "too slow: messages were dropped")
}
