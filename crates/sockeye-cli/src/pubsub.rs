//! `pubsub_server`: a node's web face (`sockeye_pubsub::web`) on one port — the JSON protocol's
//! WebSocket at `/`, the JavaScript client and demo page, the HTTP API for backends, client
//! tokens, metrics — over HTTP/1.1 and HTTP/2 (h2c, or h2 by ALPN with `--tls`). Ctrl-C or
//! SIGTERM: stop accepting, close every socket with 1001, wait for them (bounded), exit 0.

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use sockeye::tls::TlsAcceptor;
use sockeye_pubsub::access::AccessRules;
use sockeye_pubsub::web::{Admitted, OverCap, Web, WebConfig, auth};
use sockeye_pubsub::{OnGap, SessionConfig};

use crate::cli::PubsubArgs;
use crate::failure::Failure;
use crate::interrupt::{CLOSE_GRACE, requested};
use crate::output::errln;
use crate::relay::json_hub;
use crate::tls::{listen, server_tls, write_pidfile};

const NAME: &str = "pubsub_server";

pub(crate) async fn server(args: PubsubArgs) -> Result<(), Failure> {
    let config = web_config(&args)?;
    let opts = &args.relay.server;
    let quiet = args.relay.quiet;
    // HTTP/2 by ALPN (RFC 7301) next to HTTP/1.1: a browser opens its sockets as extended
    // CONNECT streams (RFC 8441) on the page's connection.
    let tls = server_tls(opts)?.map(|tls| tls.with_alpn(&[b"h2", b"http/1.1"]).acceptor());
    let hub = json_hub(args.backplane.as_deref(), NAME).await?;
    let web = Web::new(hub, config);
    let handshake_timeout =
        (args.tls_handshake_timeout > 0.0).then(|| Duration::from_secs_f64(args.tls_handshake_timeout));
    let listener = listen(opts).await?;
    if let Some(pidfile) = &opts.pidfile {
        write_pidfile(pidfile)?;
    }
    let addr = listener.local_addr()?;
    let (http, ws) = if tls.is_some() {
        ("https", "wss")
    } else {
        ("http", "ws")
    };
    errln!("ws {NAME}: listening on {ws}://{addr}/ (demo page: {http}://{addr}/demo)");
    if args.jwt_secret.is_none() && args.token.is_none() {
        errln!(
            "ws {NAME}: warning: no --jwt-secret or --token: every client may subscribe to and publish on every topic"
        );
    }
    tracing::info!(name = NAME, pid = std::process::id(), "serving");
    let router = web.router();
    let mut stop = pin!(requested());
    // Every accepted connection, its TLS handshake included, until it ends: the shutdown waits
    // for those accepted just before it too.
    let connections = tokio_util::task::TaskTracker::new();
    let refusals = Throttle::default();
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: the next accept may succeed.
                    errln!("ws {NAME}: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let admitted = match web.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err(cap) => {
                // Closed at once; said at most once a second (a flood would fill the log).
                if !quiet && refusals.say_now() {
                    errln!("{peer}: closed: {}", over_cap(cap));
                }
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (web, router, tls) = (web.clone(), router.clone(), tls.clone());
        connections.spawn(async move {
            if !quiet {
                errln!("{peer}: connected");
            }
            serve(tcp, tls, handshake_timeout, &web, router, peer, admitted).await;
            if !quiet {
                errln!("{peer}: left");
            }
        });
    }
    web.shutdown();
    connections.close();
    let deadline = tokio::time::Instant::now() + CLOSE_GRACE;
    let ended = tokio::time::timeout_at(deadline, connections.wait())
        .await
        .is_ok();
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if !web.closed(left).await || !ended {
        errln!(
            "ws {NAME}: {} sockets and {} connections did not close within {} ms; exiting",
            web.connections(),
            connections.len(),
            CLOSE_GRACE.as_millis()
        );
    }
    Ok(())
}

/// `work`, bounded by `limit` if there is one.
async fn timeout<T>(
    limit: Option<Duration>,
    work: impl Future<Output = T>,
) -> Result<T, tokio::time::error::Elapsed> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, work).await,
        None => Ok(work.await),
    }
}

/// Why a connection was closed as it arrived, naming the flag that changes it.
fn over_cap(cap: OverCap) -> String {
    match cap {
        OverCap::Address(max) => {
            format!("its address holds {max} connections (--max-connections-per-address)")
        }
        OverCap::Node(max) => format!("the node serves {max} connections (--max-connections)"),
        other => other.to_string(),
    }
}

/// Says yes at most once a second.
#[derive(Default)]
struct Throttle {
    /// Milliseconds since `start` when it last said yes, plus one (0: never).
    last: AtomicU64,
    start: std::sync::OnceLock<Instant>,
}

impl Throttle {
    fn say_now(&self) -> bool {
        let start = self.start.get_or_init(Instant::now);
        let now = u64::try_from(start.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = self.last.load(Ordering::Relaxed);
        (last == 0 || now.saturating_sub(last) >= 1000)
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

async fn serve(
    tcp: tokio::net::TcpStream,
    tls: Option<TlsAcceptor>,
    handshake_timeout: Option<Duration>,
    web: &Web,
    router: axum::Router,
    peer: std::net::SocketAddr,
    admitted: Admitted,
) {
    match tls {
        Some(acceptor) => match timeout(handshake_timeout, TlsAcceptor::accept(&acceptor, tcp)).await {
            Ok(Ok(stream)) => web.serve_admitted(TokioIo::new(stream), router, admitted).await,
            Ok(Err(e)) => errln!("{peer}: TLS handshake failed: {e}"),
            Err(_) => errln!(
                "{peer}: TLS handshake not finished within {} s (--tls-handshake-timeout): closed",
                handshake_timeout.unwrap_or_default().as_secs_f64()
            ),
        },
        None => web.serve_admitted(TokioIo::new(tcp), router, admitted).await,
    }
}

/// The flags as the web face's settings.
fn web_config(args: &PubsubArgs) -> Result<WebConfig, Failure> {
    let session = SessionConfig::default()
        .on_gap(OnGap::Deliver)
        .close_grace(CLOSE_GRACE);
    let mut socket = sockeye::Config::default();
    if args.relay.server.no_deflate {
        socket.protocol.deflate = None;
    }
    let limit = |secs: f64| (secs > 0.0).then(|| Duration::from_secs_f64(secs));
    let mut config = WebConfig::default()
        .session(session)
        .socket(socket)
        .header_read_timeout(limit(args.header_read_timeout))
        .idle_timeout(limit(args.idle_timeout))
        // The scheme of the node's own origin, for the Origin check.
        .tls(args.relay.server.tls)
        .max_connections(args.max_connections)
        .max_connections_per_address(args.max_connections_per_address)
        .max_publish_rate((args.max_publish_rate > 0).then_some(args.max_publish_rate))
        .max_publish_topics((args.max_publish_topics > 0).then_some(args.max_publish_topics));
    for origin in &args.allowed_origins {
        config = config
            .allowed_origin(origin)
            .map_err(|e| Failure::usage(format!("--allowed-origin: {e}")))?;
    }
    if let Some(token) = &args.api_token {
        config = config.api_token(token);
    }
    let granted = !args.allow_subscribe.is_empty() || !args.allow_publish.is_empty();
    let rules = if granted {
        let mut rules = AccessRules::new();
        for rule in &args.allow_subscribe {
            rules = rules
                .subscribe(rule)
                .map_err(|e| Failure::usage(format!("--allow-subscribe {rule}: {e}")))?;
        }
        for rule in &args.allow_publish {
            rules = rules
                .publish(rule)
                .map_err(|e| Failure::usage(format!("--allow-publish {rule}: {e}")))?;
        }
        rules
    } else {
        // The documented default: a user's own topic and a shared one; backends publish.
        AccessRules::new()
            .subscribe("user/{sub}")
            .and_then(|r| r.subscribe("global"))
            .map_err(|e| Failure::new(format!("the default access rules: {e}")))?
    };
    Ok(match (&args.jwt_secret, &args.token) {
        (Some(secret), _) => config.authorize(auth::jwt_hs256(secret.as_bytes(), rules)),
        (None, Some(token)) => config.authorize(auth::shared_token(token, rules)),
        (None, None) if granted => {
            return Err(Failure::usage(
                "--allow-subscribe and --allow-publish apply to clients with a token: add --jwt-secret or --token (without them every client may do everything)",
            ));
        }
        (None, None) => config,
    })
}
