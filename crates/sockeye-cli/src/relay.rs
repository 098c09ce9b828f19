//! `broadcast_server` and `transfer`: clients of a [`sockeye_pubsub::Hub`], in this process or
//! across nodes over Redis or NATS with `--backplane`, every message relayed to every other
//! client on the same URL path (the topic); and the hub of `pubsub_server` (see `pubsub.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sockeye::CloseCode;
use sockeye::backoff::Backoff;
use sockeye_pubsub::backplane::InProcess;
use sockeye_pubsub::{
    Delivery, Ended, HistoryConfig, Hub, HubConfig, OnGap, Outgoing, Protocol, Relay, Request, Session,
    SessionConfig, Topic,
};

use crate::cli::RelayArgs;
use crate::close::short_close;
use crate::failure::Failure;
use crate::interrupt::{CLOSE_GRACE, serve_until_stopped, unless_interrupted};
use crate::output::errln;
use crate::tls::bind;

/// The largest message relayed in this process: `transfer` carries whole files.
pub(crate) const LOCAL_MAX_MESSAGE: usize = 1 << 30;
/// The largest message relayed through a backplane: what fits NATS's default `max_payload` with
/// the backplane's header (far below Redis's limit). Larger messages are refused by the engine
/// with 1009 (message too big).
const BACKPLANE_MAX_MESSAGE: usize = (1 << 20) - 1024;
/// Waits for a backplane that cannot be reached at start (it may be starting).
const CONNECT_BACKOFF: Backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));

pub(crate) async fn server(
    args: RelayArgs,
    backplane: Option<String>,
    name: &'static str,
) -> Result<(), Failure> {
    let quiet = crate::log::quiet();
    let (hub, max_message) = match &backplane {
        None => {
            let config = HubConfig::default().max_payload(LOCAL_MAX_MESSAGE);
            let hub = Hub::with_backplane(config, |events| InProcess::new(events, HistoryConfig::none()));
            (hub, LOCAL_MAX_MESSAGE)
        }
        Some(url) => {
            let config = HubConfig::default().max_payload(BACKPLANE_MAX_MESSAGE);
            let hub = connect_backplane(url, name, config, HistoryConfig::default()).await?;
            (hub, BACKPLANE_MAX_MESSAGE)
        }
    };
    let server = bind(&args.server, |c| c.protocol.max_message_size = max_message, name).await?;
    let connected = Arc::new(AtomicUsize::new(0));
    let shutdown = server.shutdown_handle();
    // The session's defaults are the relay's policy: 16 MiB queued per client, then 1008; what
    // a client already sent published as one batch, a backplane outage waited out for 10 s, then
    // 1013. A gap (publications missed during a backplane outage, beyond what history
    // recovers) is told to the client as a text line (`gap_line`) and the relay goes on: its
    // clients have no positions to resume from, so closing them would lose what the node
    // delivers after the gap (the history of a new epoch) and whatever is published while they
    // reconnect.
    let config = SessionConfig::default()
        .on_gap(OnGap::Deliver)
        .close_grace(CLOSE_GRACE);
    let serving = server.serve_requests(move |mut ws, request, addr| {
        let hub = hub.clone();
        let connected = Arc::clone(&connected);
        async move {
            let topic = match Topic::new(request.uri().path()) {
                Ok(t) => t,
                Err(e) => {
                    let _ = ws
                        .close(Some(short_close(CloseCode::POLICY_VIOLATION, &e.to_string())))
                        .await;
                    return;
                }
            };
            let protocol = Logged {
                relay: Relay::new(topic.clone()),
                addr,
                quiet,
            };
            let mut session = Session::new(&hub, protocol, config);
            if let Err(e) = session.subscribe(&topic, None).await {
                if !quiet {
                    errln!("{addr}: cannot subscribe to {topic}: {e}");
                }
                let _ = ws.close(Some(e.close_frame())).await;
                return;
            }
            let now = connected.fetch_add(1, Ordering::Relaxed) + 1;
            if !quiet {
                errln!("{addr}: joined ({now} connected)");
            }
            // On Ctrl-C the server's shutdown closes the connection (1001) and the session ends.
            let ended = session.run(ws).await;
            connected.fetch_sub(1, Ordering::Relaxed);
            if !quiet {
                log_end(addr, ended);
            }
        }
    });
    serve_until_stopped(serving, shutdown).await
}

/// How a client left, on stderr.
fn log_end(addr: SocketAddr, ended: Ended) {
    match ended {
        Ended::TooSlow => errln!("{addr}: dropped: it does not read fast enough (closed with 1008)"),
        Ended::NotPublished(e) => errln!("{addr}: messages not delivered: {e}; closing with 1013"),
        _ => {}
    }
    errln!("{addr}: left");
}

/// The hub of `ws pubsub_server`, with `config` and `history`: over the backplane at `url`, or
/// in this process (a web client resumes from positions on one node too).
pub(crate) async fn json_hub(
    backplane: Option<&str>,
    name: &str,
    config: HubConfig,
    history: HistoryConfig,
) -> Result<Hub, Failure> {
    match backplane {
        None => Ok(Hub::with_backplane(config, |events| {
            InProcess::new(events, history)
        })),
        Some(url) => connect_backplane(url, name, config, history).await,
    }
}

/// Connects to the backplane, retrying an unreachable one (it may be starting) until Ctrl-C.
async fn connect_backplane(
    url: &str,
    name: &str,
    config: HubConfig,
    history: HistoryConfig,
) -> Result<Hub, Failure> {
    let mut retry = 0;
    loop {
        match Hub::connect(url, config, history).await {
            Ok(hub) => {
                errln!("ws {name}: pub/sub backplane {url} connected");
                return Ok(hub);
            }
            Err(e) if e.is_caller_fault() => return Err(Failure::usage(e.to_string())),
            Err(e) => {
                let delay = CONNECT_BACKOFF.random_delay(retry);
                errln!(
                    "ws {name}: {e}; retrying in {} ms (Ctrl-C to stop)",
                    delay.as_millis()
                );
                unless_interrupted(tokio::time::sleep(delay)).await?;
                retry = retry.saturating_add(1);
            }
        }
    }
}

/// The relay's protocol: [`Relay`]'s, but a gap is told to the client as a text line
/// ([`gap_line`]) instead of a close, with a note on stderr.
struct Logged {
    relay: Relay,
    addr: SocketAddr,
    quiet: bool,
}

impl Protocol for Logged {
    fn request(&self, message: sockeye::Message) -> Request {
        self.relay.request(message)
    }

    fn outgoing<'a>(&self, delivery: &'a Delivery) -> Outgoing<'a> {
        if let Delivery::Gap { topic, .. } = delivery {
            if !self.quiet {
                errln!(
                    "{}: messages on {topic} were missed during a backplane outage and could not be recovered",
                    self.addr
                );
            }
            return Outgoing::Message(sockeye::Message::text(gap_line(topic)));
        }
        self.relay.outgoing(delivery)
    }
}

/// What a `broadcast_server` client receives for a gap: one text line,
/// `sockeye: gap on TOPIC: publications were missed` (what follows it is delivered). Relayed
/// messages are what clients sent, so a client could send the same line: the relay is for people
/// and scripts that trust each other; a protocol that needs an unforgeable notice, with a
/// position to resume from, is `ws pubsub_server`'s (`gap` frames).
pub(crate) fn gap_line(topic: &Topic) -> String {
    format!("sockeye: gap on {topic}: publications were missed")
}
