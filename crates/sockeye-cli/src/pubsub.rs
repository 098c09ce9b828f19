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
use sockeye_pubsub::web::jwt::{Jwt, Refresh};
use sockeye_pubsub::web::{Admitted, OverCap, Web, WebConfig, auth};
use sockeye_pubsub::{HistoryConfig, HubConfig, OnGap, SessionConfig, SubscriberConfig};
use tracing::Level;

use crate::cli::PubsubArgs;
use crate::failure::{Failure, usage_file};
use crate::interrupt::{CLOSE_GRACE, requested};
use crate::jwks::jwt_from_url;
use crate::log::announce;
use crate::relay::json_hub;
use crate::tls::{listen, server_tls, write_pidfile};

const NAME: &str = "pubsub_server";

pub(crate) async fn server(args: PubsubArgs) -> Result<(), Failure> {
    let auth = client_auth(&args).await?;
    let open_to_all = matches!(auth, ClientAuth::None);
    let config = web_config(&args, auth)?;
    let opts = &args.relay.server;
    // HTTP/2 by ALPN (RFC 7301) next to HTTP/1.1: a browser opens its sockets as extended
    // CONNECT streams (RFC 8441) on the page's connection.
    let tls = server_tls(opts)?.map(|tls| tls.with_alpn(&[b"h2", b"http/1.1"]).acceptor());
    let hub = json_hub(
        args.backplane.as_deref(),
        NAME,
        hub_config(&args),
        history_config(&args)?,
    )
    .await?;
    let web = Web::new(hub, config);
    let handshake_timeout =
        (args.tls_handshake_timeout > 0.0).then(|| Duration::from_secs_f64(args.tls_handshake_timeout));
    let listener = listen(opts).await?;
    if let Some(pidfile) = &opts.pidfile {
        write_pidfile(pidfile)?;
    }
    // Before "listening": whoever waits for that line (a test, an operator's script) may start
    // connecting at once, and must find the room already made.
    let short_of_descriptors = descriptors_for(args.max_connections);
    let addr = listener.local_addr()?;
    let (http, ws) = if tls.is_some() {
        ("https", "wss")
    } else {
        ("http", "ws")
    };
    announce(
        Level::INFO,
        &format!("ws {NAME}: listening on {ws}://{addr}/ (demo page: {http}://{addr}/demo)"),
    );
    if let Some(short) = short_of_descriptors {
        announce(Level::WARN, &format!("ws {NAME}: warning: {short}"));
    }
    if open_to_all {
        announce(
            Level::WARN,
            &format!(
                "ws {NAME}: warning: no --jwt-secret or --token (nor --jwt-secret-file, --jwt-public-key, --jwks-url, --token-file, {SECRET_ENV}, {TOKEN_ENV}): every client may subscribe to and publish on every topic"
            ),
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
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let admitted = match web.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err(cap) => {
                // Closed at once; said at most once a second (a flood would fill the log).
                if refusals.say_now() {
                    tracing::warn!(%peer, "connection closed as it arrived: {}", over_cap(cap));
                }
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (web, router, tls) = (web.clone(), router.clone(), tls.clone());
        // No line per connection: each WebSocket session logs one when it ends.
        connections.spawn(async move {
            serve(tcp, tls, handshake_timeout, &web, router, peer, admitted).await;
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
        tracing::warn!(
            "{} sockets and {} connections did not close within {} ms; exiting",
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
            Ok(Err(e)) => tracing::info!(%peer, "TLS handshake failed: {e}"),
            Err(_) => tracing::info!(
                %peer,
                "TLS handshake not finished within {} s (--tls-handshake-timeout): closed",
                handshake_timeout.unwrap_or_default().as_secs_f64()
            ),
        },
        None => web.serve_admitted(TokioIo::new(tcp), router, admitted).await,
    }
}

/// The flags as the hub's settings.
fn hub_config(args: &PubsubArgs) -> HubConfig {
    HubConfig::default()
        .max_payload(args.max_message_size)
        .max_topics(args.max_topics)
        .max_queued_bytes_total(args.max_queued_bytes_total)
}

/// The flags as the history's settings; `--history-copies` without a NATS backplane (nothing
/// would use it) is a usage error.
fn history_config(args: &PubsubArgs) -> Result<HistoryConfig, Failure> {
    let age = Duration::try_from_secs_f64(args.history_age).unwrap_or(Duration::MAX);
    let mut history = HistoryConfig::default();
    history.max_len = args.history_len;
    history.max_age = age;
    if let Some(copies) = args.history_copies {
        let nats = args
            .backplane
            .as_deref()
            .is_some_and(|url| url.get(..7).is_some_and(|s| s.eq_ignore_ascii_case("nats://")));
        if !nats {
            return Err(Failure::usage(
                "--history-copies applies to a NATS backplane (--backplane nats://…): the copies \
                 of its JetStream stream",
            ));
        }
        history = history.copies(copies);
    }
    Ok(history)
}

/// The flags as the web face's settings.
fn web_config(args: &PubsubArgs, auth: ClientAuth) -> Result<WebConfig, Failure> {
    let subscriber = SubscriberConfig::default()
        .max_subscriptions(args.max_subscriptions)
        .max_queued_bytes(args.max_queued_bytes);
    let session = SessionConfig::default()
        .subscriber(subscriber)
        .on_gap(OnGap::Deliver)
        .close_grace(CLOSE_GRACE);
    let mut socket = sockeye_pubsub::web::socket_config();
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
        .max_publish_topics((args.max_publish_topics > 0).then_some(args.max_publish_topics))
        .history_limit(args.history_limit);
    for origin in &args.allowed_origins {
        config = config
            .allowed_origin(origin)
            .map_err(|e| Failure::usage(format!("--allowed-origin: {e}")))?;
    }
    let cors = (args.client_js_cors != "none").then_some(args.client_js_cors.as_str());
    config = config
        .client_js_cors(cors)
        .map_err(|e| Failure::usage(format!("--client-js-cors: {e} (an origin, *, or none)")))?;
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
    Ok(match auth {
        ClientAuth::Jwt(jwt) => config.authorize(jwt.authorize(rules)),
        ClientAuth::Shared(token) => config.authorize(auth::shared_token(token, rules)),
        ClientAuth::None if granted => {
            return Err(Failure::usage(
                "--allow-subscribe and --allow-publish apply to clients with a token: add --jwt-secret or --token (or --jwt-secret-file, --jwt-public-key, --jwks-url, --token-file) (without them every client may do everything)",
            ));
        }
        ClientAuth::None => config,
    })
}

/// How clients are checked, from the flags or the environment.
enum ClientAuth {
    Jwt(Jwt),
    Shared(String),
    None,
}

/// The environment variables read when no flag names the clients' secret or token.
const SECRET_ENV: &str = "SOCKEYE_JWT_SECRET";
const TOKEN_ENV: &str = "SOCKEYE_TOKEN";

async fn client_auth(args: &PubsubArgs) -> Result<ClientAuth, Failure> {
    let env = |name: &str| std::env::var(name).ok();
    let flags = args.jwt_secret.is_some()
        || args.jwt_secret_file.is_some()
        || args.jwt_public_key.is_some()
        || args.jwks_url.is_some()
        || args.token.is_some()
        || args.token_file.is_some();
    let jwt = if let Some(secret) = &args.jwt_secret {
        Some(hs256(secret, "--jwt-secret")?)
    } else if let Some(path) = &args.jwt_secret_file {
        Some(hs256(
            &read_secret(path, "--jwt-secret-file")?,
            "--jwt-secret-file",
        )?)
    } else if let Some(path) = &args.jwt_public_key {
        let key = std::fs::read(path).map_err(|e| usage_file("--jwt-public-key", path, e))?;
        let jwt = if key.trim_ascii_start().starts_with(b"{") {
            Jwt::jwks(&key)
        } else {
            Jwt::public_key_pem(&key)
        };
        Some(jwt.map_err(|e| usage_file("--jwt-public-key", path, e))?)
    } else if let Some(url) = &args.jwks_url {
        let refresh = Refresh::default()
            .every(Duration::from_secs(args.jwks_refresh))
            .min_gap(Duration::from_secs(args.jwks_min_refetch));
        Some(jwt_from_url(url, refresh).await?)
    } else if let (false, Some(secret)) = (flags, env(SECRET_ENV)) {
        Some(hs256(&secret, SECRET_ENV)?)
    } else {
        None
    };
    if let Some(mut jwt) = jwt {
        for issuer in &args.jwt_issuers {
            jwt = jwt.issuer(issuer);
        }
        for audience in &args.jwt_audiences {
            jwt = jwt.audience(audience);
        }
        return Ok(ClientAuth::Jwt(jwt));
    }
    if !args.jwt_issuers.is_empty() || !args.jwt_audiences.is_empty() {
        return Err(Failure::usage(
            "--jwt-issuer and --jwt-audience apply to JWTs: add --jwt-secret-file, --jwt-public-key or --jwks-url",
        ));
    }
    let token = match (&args.token, &args.token_file) {
        (Some(token), _) => Some((token.clone(), "--token")),
        (None, Some(path)) => Some((read_secret(path, "--token-file")?, "--token-file")),
        (None, None) if !flags => env(TOKEN_ENV).map(|t| (t, TOKEN_ENV)),
        (None, None) => None,
    };
    match token {
        Some((token, from)) if token.is_empty() => Err(Failure::usage(format!(
            "{from} is empty: any client sending ?token= would be let in; give the token clients must send"
        ))),
        Some((token, _)) => Ok(ClientAuth::Shared(token)),
        None => Ok(ClientAuth::None),
    }
}

fn hs256(secret: &str, from: &str) -> Result<Jwt, Failure> {
    Jwt::hs256(secret.as_bytes()).map_err(|e| Failure::usage(format!("{from}: {e}")))
}

/// A secret from a file: its contents, less one trailing newline (`echo` adds one).
fn read_secret(path: &std::path::Path, flag: &str) -> Result<String, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| usage_file(flag, path, e))?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(text.strip_suffix('\r').unwrap_or(text).to_owned())
}

/// Descriptors the node needs besides its connections: the listener, the backplane's
/// connections, the log, a JWKS fetch, a pidfile, with room to spare.
const DESCRIPTORS_OF_ITS_OWN: u64 = 64;

/// Makes room for `--max-connections` (a descriptor each): raises the soft limit on open files
/// up to the hard one, as far as needed. A limit still too low, the node cannot serve what
/// `--max-connections` says (accepting past it fails with "too many open files"): the warning
/// says so, and what to raise. `None` when there is room.
#[cfg(unix)]
fn descriptors_for(connections: usize) -> Option<String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let needed = u64::try_from(connections)
        .unwrap_or(u64::MAX)
        .saturating_add(DESCRIPTORS_OF_ITS_OWN);
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= needed {
        return None;
    }
    let raised = needed.min(hard);
    let soft = match setrlimit(Resource::RLIMIT_NOFILE, raised, hard) {
        Ok(()) => raised,
        Err(_) => soft,
    };
    (soft < needed).then(|| {
        format!(
            "--max-connections {connections} needs {needed} open files and this process may have {soft} \
             (hard limit {hard}): connections past about {} will fail to be accepted; raise the limit \
             (ulimit -n, systemd's LimitNOFILE=) or lower --max-connections",
            soft.saturating_sub(DESCRIPTORS_OF_ITS_OWN)
        )
    })
}

#[cfg(not(unix))]
fn descriptors_for(_connections: usize) -> Option<String> {
    None
}
