//! Command-line definitions (IXWebSocket's sub-command and flag names): the tool, its sub-commands
//! and their arguments; the flag groups and value parsers several share are in [`crate::opts`].

use clap::{Args, Parser, Subcommand};

use crate::log::LogFormat;
use crate::opts::{
    ClientOpts, PipeOpts, ServerOpts, backplane_url, copies, origin, positive, seconds, websocket_url,
};

/// Sockeye's WebSocket tool.
#[derive(Debug, Parser)]
#[command(
    name = "ws",
    version,
    about,
    propagate_version = true,
    after_help = "Examples:
  ws echo_server &                      then: echo hello | ws cat ws://127.0.0.1:8008/
  ws push_server -q &                   then: ws echo_client -m ws://127.0.0.1:8008/
  ws connect wss://example.com/socket   interactive; /stop, /start, Ctrl-D

Every long flag is accepted with '_' or '-' (--send_msg, --send-msg).

Exit codes: 0 success (also: a server stopped by Ctrl-C, or stdout closed by its reader),
  1 the work failed, 2 usage, 130 a client stopped by Ctrl-C or SIGTERM."
)]
pub struct Cli {
    /// More detail on stderr: -v adds debug lines to the log, -vv trace. The same in every
    /// sub-command.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only warnings and errors on stderr: no info lines (a server's one line per session), no
    /// per-message or per-connection notes. The same in every sub-command.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// How log lines are written: text (coloured on a terminal unless NO_COLOR is set) or json
    /// (one object a line: ts, level, target, msg, fields).
    #[arg(long = "log-format", global = true, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Append the log to this file instead of stderr (never coloured).
    #[arg(long, global = true, value_name = "FILE")]
    pub logfile: Option<std::path::PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The sub-commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Echo every message back to its sender.
    #[command(name = "echo_server")]
    #[command(after_help = "Examples:
  ws echo_server --port 8008
  ws echo_server -q --tls --cert-file cert.pem --key-file key.pem
  ws echo_server --http_authorization_header 'Bearer s3cret'

Exit codes: 0 stopped by Ctrl-C or SIGTERM (every connection closed with 1001), 1 cannot
  listen (address in use, bad certificate files), 2 usage.")]
    EchoServer(EchoServerArgs),
    /// Send a message and count the echoes (or, with -m, only count what arrives).
    #[command(name = "echo_client")]
    #[command(after_help = "Examples:
  ws echo_client -m ws://127.0.0.1:8008/          count what a push_server sends
  ws echo_client --send_msg ping --msg_count 1000 ws://127.0.0.1:8008/

Exit codes: 0 done (or the peer closed with 1000/1001), 1 failed (refused, TLS, handshake,
  timeout, closed abnormally or with another code), 2 usage, 130 interrupted (Ctrl-C, SIGTERM).")]
    EchoClient(EchoClientArgs),
    /// Push a message to every client as fast as it reads (path /N: N messages, then close).
    #[command(name = "push_server")]
    #[command(after_help = "Examples:
  ws push_server -q --send_msg yo                    then: ws echo_client -m ws://127.0.0.1:8008/
  ws push_server -q --port 9000                      ws://127.0.0.1:9000/1000 pushes 1000 and closes

Exit codes: 0 stopped by Ctrl-C or SIGTERM (every connection closed with 1001), 1 cannot
  listen (address in use, bad certificate files), 2 usage.")]
    PushServer(PushServerArgs),
    /// Pipe stdin and stdout through a WebSocket (websocat style): lines, or raw bytes with -b.
    #[command(after_help = "Examples:
  echo hello | ws cat ws://127.0.0.1:8008/
  head -c 10M /dev/urandom | ws cat -b ws://127.0.0.1:8008/ > back.bin
  ws cat -n --max-messages 3 -H 'Authorization: Bearer k' wss://example.com/feed

Exit codes: 0 done (or the peer closed with 1000/1001), 1 failed (refused, TLS, handshake,
  timeout, closed abnormally or with another code), 2 usage, 130 interrupted (Ctrl-C, SIGTERM).")]
    Cat(CatArgs),
    /// Pipe, server side: serve clients one at a time (or all at once); stdin to them, theirs to stdout.
    #[command(after_help = "Examples:
  ws listen --port 9000                  one client at a time; stdin lines go to it
  ws listen --broadcast -n --port 9000   every client at once; keep going after stdin ends
  ws listen -b --oneshot > upload.bin    receive one client's bytes

Exit codes: 0 done (stdin ended, the client left, --max-messages reached, or Ctrl-C),
  1 cannot listen or a client failed, 2 usage.")]
    Listen(ListenArgs),
    /// Benchmark Sockeye against itself on loopback: push rate, round trips, connection set-up.
    #[command(after_help = "Examples:
  ws bench
  ws bench --count 5000000 --connections 4 --no-tls
  ws bench --deflate --http2 --seconds 10

Exit codes: 0 done, 1 a scenario failed, 2 usage, 130 interrupted.")]
    Bench(BenchArgs),
    /// Relay every message to every other client on the same URL path (the topic), on this node
    /// or, with --backplane, on every node.
    #[command(name = "broadcast_server")]
    #[command(after_help = "Examples:
  ws broadcast_server --port 8008          then: ws chat ws://127.0.0.1:8008/lobby alice
  ws broadcast_server -q --tls --cert-file cert.pem --key-file key.pem
  ws broadcast_server --port 8001 --backplane redis://127.0.0.1:6379     (one node of several)
  ws broadcast_server --port 8002 --backplane nats://127.0.0.1:4222

The URL path is the topic: clients of ws://host/a and ws://host/b do not see each other.
A client that falls 16 MiB behind is closed with 1008. With --backplane, every node on the
same Redis or NATS server delivers each message to every other client on the topic, once,
in each sender's order; an unreachable backplane is retried, and a node resubscribes by
itself after the backplane restarts (messages missed meanwhile are recovered from Redis's
stream history or NATS JetStream; without history the gap is logged).

Exit codes: 0 stopped by Ctrl-C or SIGTERM (every connection closed with 1001), 1 cannot
  listen (address in use, bad certificate files), 2 usage.")]
    BroadcastServer(BroadcastArgs),
    /// Serve pub/sub for web applications on one port: the JSON protocol's WebSocket at / (many
    /// topics on one socket, positions, resume after a reconnect to any node, gap notices), the
    /// JavaScript client and a demo page, an HTTP API for backends, client tokens and metrics; on
    /// this node or, with --backplane, across nodes.
    #[command(name = "pubsub_server")]
    #[command(after_help = "Examples:
  ws pubsub_server --port 8008                                     (then open http://127.0.0.1:8008/demo)
  ws pubsub_server --port 8001 --backplane redis://127.0.0.1:6379     (one node of several)
  ws pubsub_server --port 8002 --backplane nats://127.0.0.1:4222
  ws pubsub_server --port 8003 --backplane nats://n1:4222,n2:4222,n3:4222 --history-copies 3
  ws pubsub_server -q --tls --cert-file cert.pem --key-file key.pem
  ws pubsub_server --api-token s3cret --jwt-secret-file jwt.key  (backends and clients need tokens)
  ws pubsub_server --token shared --allow-subscribe 'rooms/*' --allow-publish 'rooms/*'

On one port, over HTTP/1.1 and HTTP/2 (h2c, or h2 by ALPN with --tls):
  /                      the WebSocket of the protocol (ws://HOST:PORT/?token=…)
  /client.js, /demo      the JavaScript client (clients/js) and a live notifications page
  POST /publish/TOPIC    publish the JSON body; answers {\"topic\",\"offset\",\"epoch\"}
  POST /publish          a batch: {\"publications\":[{\"topic\":T,\"data\":D},…]}
  GET /history/TOPIC?since=OFFSET@EPOCH&limit=N   what the history holds after a position
  /metrics               Prometheus (OpenMetrics text)
  GET /healthz, /readyz  alive; ready while the backplane is up (else 503)
Every HTTP error has a JSON body {\"error\":{\"code\":…,\"message\":…}}. The log has one line
per WebSocket session (at info: -q hides it), none per HTTP request.
The HTTP API needs --api-token T (sent as Authorization: Bearer T); without it, it answers 403.

Clients send JSON text frames to ws://HOST:PORT/:
  {\"type\":\"subscribe\",\"topic\":\"user/42\",\"since\":{\"offset\":17,\"epoch\":\"…\"},\"id\":1}
  {\"type\":\"unsubscribe\",\"topic\":\"user/42\"}
  {\"type\":\"publish\",\"topic\":\"global\",\"data\":{\"any\":\"JSON\"},\"id\":2}
and receive subscribed, message (with offset and epoch), gap, published and error frames
(docs/pubsub-protocol.md). A client that reconnects, to this node or another, and subscribes
with the last position it received gets exactly what it missed, or a gap notice for what no
history holds. A client that falls --max-queued-bytes behind is closed with 1008.

Without --jwt-secret, --jwt-secret-file, --jwt-public-key, --jwks-url, --token or --token-file (or
SOCKEYE_JWT_SECRET or SOCKEYE_TOKEN in the environment), every client may subscribe to and
publish on every topic. With one, a client connects with ?token=…: none or an invalid one is
refused with 401 (a JWT needs exp and sub; nbf, and iss and aud when --jwt-issuer and
--jwt-audience are given, are checked); an open socket is closed with 4002 when its JWT's exp
passes, unless the client sent {\"type\":\"refresh\",\"token\":…} with a fresh token for the same
user first. It may subscribe to and publish on what --allow-subscribe and
--allow-publish grant, matched segment by segment ({claim} a whole segment, the JWT's string
claim, never with a /; * one segment; ** as the last, the rest); without
those flags: subscribe to user/{sub} and global, publish nothing (backends publish through the
HTTP API). A refused subscription is an error frame (not_allowed); the socket stays up.

Bounds on hostile clients (see the flags): a 10 s header-read timeout, a 60 s idle timeout, a
10 s TLS handshake, 10,000 connections, 100 per client address (more are closed as they
arrive), sockets only from pages of the node's own origin unless --allowed-origin lists more
(403 origin_not_allowed; clients without an Origin header are not browsers and pass), and 100
publications a second per socket on at most 100 topics (error frames past them).

Exit codes: 0 stopped by Ctrl-C or SIGTERM (every connection closed with 1001), 1 cannot
  listen (address in use, bad certificate files), 2 usage.")]
    PubsubServer(Box<PubsubArgs>),
    /// The relay that `send` and `receive` meet at (a broadcast server for large messages).
    #[command(after_help = "Examples:
  ws transfer --port 8008
  ws receive ws://127.0.0.1:8008/ --output-dir in/     (first)
  ws send ws://127.0.0.1:8008/ big.iso

Exit codes: 0 stopped by Ctrl-C or SIGTERM (every connection closed with 1001), 1 cannot
  listen (address in use, bad certificate files), 2 usage.")]
    Transfer(RelayArgs),
    /// Send a file through a relay to the clients running `receive`.
    #[command(after_help = "Examples:
  ws send ws://127.0.0.1:8008/ big.iso
  ws send --ack-timeout 300 wss://relay.example/ backup.tar

Exit codes: 0 done (or the peer closed with 1000/1001), 1 failed (refused, TLS, handshake,
  timeout, closed abnormally or with another code), 2 usage, 130 interrupted (Ctrl-C, SIGTERM).")]
    Send(SendArgs),
    /// Receive one file through a relay, check it, and write it under the sender's file name.
    #[command(after_help = "Examples:
  ws receive ws://127.0.0.1:8008/ --output-dir downloads/
  ws receive --max-size 4294967296 wss://relay.example/

Exit codes: 0 done (or the peer closed with 1000/1001), 1 failed (refused, TLS, handshake,
  timeout, closed abnormally or with another code), 2 usage, 130 interrupted (Ctrl-C, SIGTERM).")]
    Receive(ReceiveArgs),
    /// Send pings and print the round-trip time of each pong.
    #[command(after_help = "Examples:
  ws ping ws://127.0.0.1:8008/
  ws ping --count 100 --interval_ms 10 wss://example.com/

Exit codes: 0 done (or the peer closed with 1000/1001), 1 failed (refused, TLS, handshake,
  timeout, closed abnormally or with another code), 2 usage, 130 interrupted (Ctrl-C, SIGTERM).")]
    Ping(PingArgs),
    /// Connect to URL/N, receive N messages, print the rate.
    #[command(after_help = "Examples:
  ws autoroute --msg_count 5000000 ws://127.0.0.1:8008/      against ws push_server
  ws autoroute --msg_count 1000 'ws://127.0.0.1:8008/?token=x'  connects to /1000?token=x

Exit codes: 0 done (or the peer closed with 1000/1001), 1 failed (refused, TLS, handshake,
  timeout, closed abnormally or with another code), 2 usage, 130 interrupted (Ctrl-C, SIGTERM).")]
    Autoroute(AutorouteArgs),
    /// Run Autobahn|Testsuite's fuzzingserver cases as a client.
    #[command(after_help = "Examples:
  wstest -m fuzzingserver -s fuzzingserver.json &   (Autobahn|Testsuite)
  ws autobahn --url ws://127.0.0.1:9001

Exit codes: 0 done (or the peer closed with 1000/1001), 1 failed (refused, TLS, handshake,
  timeout, closed abnormally or with another code), 2 usage, 130 interrupted (Ctrl-C, SIGTERM).")]
    Autobahn(AutobahnArgs),
    /// Interactive client: type messages; /stop and /start; reconnects with backoff unless -d.
    #[command(after_help = "Examples:
  ws connect ws://127.0.0.1:8008/
  ws connect -H 'Authorization: Bearer k' --subprotocol chat wss://example.com/ws
  printf 'one\\ntwo\\n' | ws connect -d ws://127.0.0.1:8008/

Type a line to send it; /stop closes the connection and /start opens it again; Ctrl-D ends,
Ctrl-C too (twice: at once). A dropped connection is re-opened after 100 ms, doubling up to
--max_wait (each wait drawn between half and all of that, so that clients spread out); a
server that refuses (HTTP 4xx, close codes 1002-1010 or 4000-4999) is not retried. Lines typed
while disconnected are not sent.

Exit codes: 0 done (or the peer closed with 1000/1001), 1 failed (refused, TLS, handshake,
  timeout, closed abnormally or with another code), 2 usage, 130 interrupted (Ctrl-C, SIGTERM).")]
    Connect(ConnectArgs),
    /// Chat through a broadcast server: your lines go out as "USER: line".
    #[command(after_help = "Examples:
  ws broadcast_server &
  ws chat ws://127.0.0.1:8008/ alice

Exit codes: 0 done (or the peer closed with 1000/1001), 1 failed (refused, TLS, handshake,
  timeout, closed abnormally or with another code), 2 usage, 130 interrupted (Ctrl-C, SIGTERM).")]
    Chat(ChatArgs),
    /// HTTP/HTTPS client: fetch a URL, body to stdout (curl's flags: -d, -F, -H, -I, -L, -o, -O).
    Curl(crate::curl::CurlArgs),
    /// Static file server for a directory (GET and HEAD, gzip, TLS, or redirect everything).
    Httpd(crate::httpd::HttpdArgs),
    /// Resolve a host name with the system resolver and print its addresses.
    Dnslookup(crate::dnslookup::DnslookupArgs),
    /// Compress a file to FILE.gz (or stdin to stdout), readable by the system's gunzip.
    Gzip(crate::gzip::GzipArgs),
    /// Decompress FILE.gz to FILE (or stdin to stdout), the system's gzip files included.
    Gunzip(crate::gzip::GunzipArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(crate::docs::CompletionsArgs),
    /// Print the man page (or write one page per sub-command with --dir).
    Man(crate::docs::ManArgs),
    /// Reverse proxy: forward each client to --remote_host, or by its Host header (--config_path).
    #[command(name = "proxy_server", after_help = crate::proxy_server::AFTER_HELP)]
    ProxyServer(crate::proxy_server::ProxyServerArgs),
}

/// `connect`.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// Send lines as binary messages.
    #[arg(short = 'b', long)]
    pub binary: bool,
    /// Do not reconnect when the connection drops.
    #[arg(short = 'd', long = "disable_automatic_reconnection")]
    pub no_reconnect: bool,
    /// The longest wait between reconnection attempts, in milliseconds.
    #[arg(long = "max_wait", default_value_t = 10_000, value_parser = positive::<u64>)]
    pub max_wait: u64,
    /// Show gzip-compressed messages decompressed.
    #[arg(short = 'g', long)]
    pub gunzip: bool,
}

/// `chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// Your name, put before each line you send.
    pub user: String,
}

/// `broadcast_server` and `transfer`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    pub server: ServerOpts,
}

/// `broadcast_server`.
#[derive(Debug, Args)]
pub struct BroadcastArgs {
    #[command(flatten)]
    pub relay: RelayArgs,
    /// Connect the nodes through this pub/sub server: redis://HOST:PORT or nats://HOST:PORT.
    /// Served by the tokio loop (the own loop's topics are one node's).
    #[arg(long, value_name = "URL", value_parser = backplane_url)]
    pub backplane: Option<String>,
    #[command(flatten)]
    pub runtime: RuntimeOpts,
}

/// `pubsub_server`.
#[derive(Debug, Args)]
pub struct PubsubArgs {
    #[command(flatten)]
    pub relay: RelayArgs,
    /// Connect the nodes through this pub/sub server: redis://HOST:PORT or nats://HOST:PORT.
    #[arg(long, value_name = "URL", value_parser = backplane_url)]
    pub backplane: Option<String>,
    /// The bearer token of the HTTP API (POST /publish, GET /history). Without it the API is off.
    #[arg(long = "api-token", value_name = "TOKEN")]
    pub api_token: Option<String>,
    /// Clients need a JWT signed with this secret (HS256; exp and sub required), as ?token=.
    /// Visible to every user in `ps`: prefer --jwt-secret-file or SOCKEYE_JWT_SECRET.
    #[arg(long = "jwt-secret", value_name = "SECRET", group = "client_auth")]
    pub jwt_secret: Option<String>,
    /// As --jwt-secret, the secret read from this file (one trailing newline dropped). Without
    /// any of these flags, the environment variable SOCKEYE_JWT_SECRET is used if set.
    #[arg(long = "jwt-secret-file", value_name = "PATH", group = "client_auth")]
    pub jwt_secret_file: Option<std::path::PathBuf>,
    /// Clients need a JWT signed with the private half of this public key: a PEM file (RS256 for
    /// RSA, ES256 for P-256, EdDSA for Ed25519) or a JSON Web Key Set file ({"keys":[…]}, the
    /// key chosen by the token's kid).
    #[arg(long = "jwt-public-key", value_name = "PATH", group = "client_auth")]
    pub jwt_public_key: Option<std::path::PathBuf>,
    /// Clients need a JWT signed with a key of the JSON Web Key Set at this http:// or https://
    /// URL (an identity provider's jwks_uri; the key chosen by the token's kid). Fetched at start
    /// (the node does not start without a usable set), then every --jwks-refresh seconds, and at
    /// once when a token names an unknown kid (at most once per --jwks-min-refetch seconds). A
    /// fetch has 5 s, 1 MiB, and must answer 200 (redirects are not followed); a failed one keeps
    /// the last set, with a warning.
    #[arg(long = "jwks-url", value_name = "URL", group = "client_auth", value_parser = crate::curl::http_url_text)]
    pub jwks_url: Option<String>,
    /// With --jwks-url, seconds between two fetches of the key set.
    #[arg(long = "jwks-refresh", value_name = "SECS", default_value_t = 300, value_parser = crate::opts::positive::<u64>, requires = "jwks_url")]
    pub jwks_refresh: u64,
    /// With --jwks-url, the fewest seconds between two fetches asked for by tokens with an
    /// unknown kid (forged ones cannot make the node hammer the key server).
    #[arg(long = "jwks-min-refetch", value_name = "SECS", default_value_t = 30, value_parser = crate::opts::positive::<u64>, requires = "jwks_url")]
    pub jwks_min_refetch: u64,
    /// JWTs must have this iss (repeatable: one of them). Default: iss not checked.
    #[arg(long = "jwt-issuer", value_name = "ISS")]
    pub jwt_issuers: Vec<String>,
    /// JWTs must have this aud (repeatable: one of them). Default: aud not checked.
    #[arg(long = "jwt-audience", value_name = "AUD")]
    pub jwt_audiences: Vec<String>,
    /// Clients need this token, as ?token=. Visible to every user in `ps`: prefer --token-file
    /// or SOCKEYE_TOKEN.
    #[arg(long, value_name = "TOKEN", group = "client_auth")]
    pub token: Option<String>,
    /// As --token, read from this file (one trailing newline dropped).
    #[arg(long = "token-file", value_name = "PATH", group = "client_auth")]
    pub token_file: Option<std::path::PathBuf>,
    /// A topic clients with a token may subscribe to, segment by segment: {claim} (a whole
    /// segment), * (one segment), ** (last: the rest); repeatable. Default: user/{sub} and global.
    #[arg(long = "allow-subscribe", value_name = "RULE")]
    pub allow_subscribe: Vec<String>,
    /// A topic clients with a token may publish on (as --allow-subscribe); repeatable. Default:
    /// none.
    #[arg(long = "allow-publish", value_name = "RULE")]
    pub allow_publish: Vec<String>,
    /// Pages of this origin (scheme://host[:port]) may open sockets too; * allows every page;
    /// repeatable. Default: only pages of the node's own origin (the host the request names, its
    /// Host, and the scheme it is served with: https with --tls, else http), so that a page of
    /// another site cannot use this one's cookies or sign-on; clients that send no
    /// Origin (not browsers) are not checked. Behind a proxy that rewrites Host, list the site.
    #[arg(long = "allowed-origin", value_name = "ORIGIN", value_parser = origin)]
    pub allowed_origins: Vec<String>,
    /// Which pages of other sites may import /client.js (its Access-Control-Allow-Origin): *
    /// for every page (public code, fetched without credentials), one ORIGIN, or none.
    #[arg(long = "client-js-cors", value_name = "ORIGIN|*|none", default_value = "*")]
    pub client_js_cors: String,
    /// Seconds an HTTP/1.1 client has to send a request's head, and an idle keep-alive
    /// connection to start the next one; 0 for no limit (a browser sends its head at once).
    #[arg(long = "header-read-timeout", value_name = "SECS", default_value_t = sockeye_pubsub::web::HEADER_READ_TIMEOUT.as_secs_f64(), value_parser = seconds)]
    pub header_read_timeout: f64,
    /// Seconds a connection may pass with no byte either way before it is closed (HTTP/2:
    /// GOAWAY); 0 for no limit (its sockets are pinged every 30 s: a live one is never idle).
    #[arg(long = "idle-timeout", value_name = "SECS", default_value_t = sockeye_pubsub::web::IDLE_TIMEOUT.as_secs_f64(), value_parser = seconds)]
    pub idle_timeout: f64,
    /// Seconds a client has to finish its TLS handshake with --tls; 0 for no limit (a browser
    /// needs one or two round trips).
    #[arg(long = "tls-handshake-timeout", value_name = "SECS", default_value_t = 10.0, value_parser = seconds)]
    pub tls_handshake_timeout: f64,
    /// The most connections served at once; more are closed as they arrive (each costs a file
    /// descriptor: raise `ulimit -n` with it).
    #[arg(long = "max-connections", value_name = "N", default_value_t = sockeye_pubsub::web::MAX_CONNECTIONS, value_parser = positive::<usize>)]
    pub max_connections: usize,
    /// The most connections one client address (an IPv6 one by its /64) holds at once; more
    /// are closed as they arrive (a browser opens some 6 per site: 100 is some 15 behind one
    /// NAT address; behind a reverse proxy every client has its address: raise it there). A
    /// WebSocket over HTTP/2 is one more (answered 503 over the cap).
    #[arg(long = "max-connections-per-address", value_name = "N", default_value_t = sockeye_pubsub::web::MAX_CONNECTIONS_PER_ADDRESS, value_parser = positive::<usize>)]
    pub max_connections_per_address: usize,
    /// The most publications one socket makes a second (a burst of as many, then that rate);
    /// more are refused with an error frame (unavailable: retry later). 0 for no bound.
    #[arg(long = "max-publish-rate", value_name = "N", default_value_t = sockeye_pubsub::web::MAX_PUBLISH_RATE)]
    pub max_publish_rate: u32,
    /// The most distinct topics one socket publishes on over its life (each may leave a key in
    /// the backplane for a day); more are refused with an error frame (not_allowed). 0 for no
    /// bound.
    #[arg(long = "max-publish-topics", value_name = "N", default_value_t = sockeye_pubsub::web::MAX_PUBLISH_TOPICS)]
    pub max_publish_topics: usize,
    /// The most topics one socket is subscribed to at once; one more is refused with an error
    /// frame (each may be a subscription at the backplane's server).
    #[arg(long = "max-subscriptions", value_name = "N", default_value_t = sockeye_pubsub::SubscriberConfig::default().max_subscriptions, value_parser = positive::<usize>)]
    pub max_subscriptions: usize,
    /// The largest publication, in bytes (a socket's frame may add 4 KiB of JSON around it;
    /// a larger one is closed with 1009, a larger HTTP body answered 413). The default fits
    /// NATS's default max_payload.
    #[arg(long = "max-message-size", value_name = "BYTES", default_value_t = sockeye_pubsub::HubConfig::default().max_payload, value_parser = positive::<usize>)]
    pub max_message_size: usize,
    /// Bytes queued for one socket that does not read fast enough before it is closed with
    /// 1008 (a slow reader); one message of any size may always wait.
    #[arg(long = "max-queued-bytes", value_name = "BYTES", default_value_t = sockeye_pubsub::SubscriberConfig::default().max_queued_bytes, value_parser = positive::<usize>)]
    pub max_queued_bytes: usize,
    /// Bytes all sockets' queues may hold together; past it the sockets furthest behind are
    /// closed first (1013: their clients resume later from history), so that many slow readers
    /// cannot take the node's memory. Counted in 16 KiB steps.
    #[arg(long = "max-queued-bytes-total", value_name = "BYTES", default_value_t = sockeye_pubsub::HubConfig::default().max_queued_bytes_total, value_parser = positive::<usize>)]
    pub max_queued_bytes_total: usize,
    /// The most topics this node follows at once; a subscription to one more is refused
    /// (the client retries later or on another node).
    #[arg(long = "max-topics", value_name = "N", default_value_t = sockeye_pubsub::HubConfig::default().max_topics, value_parser = positive::<usize>)]
    pub max_topics: usize,
    /// Publications kept per topic for recovery (with a backplane, it keeps them); 0 for no
    /// history.
    #[arg(long = "history-len", value_name = "N", default_value_t = sockeye_pubsub::HistoryConfig::default().max_len)]
    pub history_len: usize,
    /// Seconds a publication is kept for recovery.
    #[arg(long = "history-age", value_name = "SECS", default_value_t = sockeye_pubsub::HistoryConfig::default().max_age.as_secs_f64(), value_parser = seconds)]
    pub history_age: f64,
    /// With a NATS backplane: the copies of the JetStream stream that holds the history, 1 to
    /// 5, each on a server of the cluster (a publication is acknowledged once a majority stored
    /// it: 3 survive the loss of any one server). Default: one per server --backplane lists, up
    /// to 3; give every node of a cluster the same. The stream is shared: a node asking for more
    /// raises it, one asking for fewer keeps it and warns (`nats stream edit SOCKEYE --replicas
    /// N` lowers it).
    #[arg(long = "history-copies", value_name = "N", value_parser = copies)]
    pub history_copies: Option<usize>,
    /// The most messages one GET /history answers with (its limit is capped to it).
    #[arg(long = "history-limit", value_name = "N", default_value_t = sockeye_pubsub::web::HISTORY_LIMIT, value_parser = positive::<usize>)]
    pub history_limit: usize,
}

/// `send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// The file to send.
    pub path: std::path::PathBuf,
    /// How long to wait for a receiver's acknowledgement, in seconds.
    #[arg(long = "ack-timeout", default_value_t = 60, value_parser = positive::<u64>)]
    pub ack_timeout: u64,
}

/// `receive`.
#[derive(Debug, Args)]
pub struct ReceiveArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// Directory to write the file into.
    #[arg(long = "output-dir", default_value = ".")]
    pub output_dir: std::path::PathBuf,
    /// The largest file accepted, in bytes.
    #[arg(long = "max-size", default_value_t = 1 << 30, value_parser = positive::<usize>)]
    pub max_size: usize,
}

/// `ping`.
#[derive(Debug, Args)]
pub struct PingArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// Number of pings.
    #[arg(short = 'c', long, default_value_t = 4, value_parser = positive::<u32>)]
    pub count: u32,
    /// Milliseconds between pings.
    #[arg(long = "interval_ms", default_value_t = 1000)]
    pub interval_ms: u64,
}

/// `autoroute`.
#[derive(Debug, Args)]
pub struct AutorouteArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// How many messages to ask for and receive.
    #[arg(long = "msg_count", default_value_t = 1000, value_parser = positive::<u64>)]
    pub msg_count: u64,
}

/// `autobahn`.
#[derive(Debug, Args)]
pub struct AutobahnArgs {
    /// The fuzzingserver's base URL (a flag, as in IXWebSocket).
    #[arg(long, default_value = "ws://127.0.0.1:9001", value_parser = websocket_url)]
    pub url: String,
    /// Give up when the server does not answer within this many seconds.
    #[arg(long, default_value_t = 10, value_parser = positive::<u64>)]
    pub timeout: u64,
}

/// `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Messages pushed in the push test (split across connections).
    #[arg(long, default_value_t = 1_000_000, value_parser = positive::<u64>)]
    pub count: u64,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 2)]
    pub size: usize,
    /// Concurrent connections in the push test.
    #[arg(long, default_value_t = 1, value_parser = positive::<usize>)]
    pub connections: usize,
    /// Sequential echoes in the round-trip test.
    #[arg(long = "round-trips", default_value_t = 1000, value_parser = positive::<usize>)]
    pub round_trips: usize,
    /// Sequential connections in the set-up test.
    #[arg(long, default_value_t = 200, value_parser = positive::<usize>)]
    pub connects: usize,
    /// Negotiate permessage-deflate.
    #[arg(long)]
    pub deflate: bool,
    /// Skip wss://.
    #[arg(long = "no-tls")]
    pub no_tls: bool,
    /// Also run every test over HTTP/2 (RFC 8441: h2c and h2), where a new socket opens as a
    /// stream on the connection already open, and compare connect times with HTTP/1.1.
    #[arg(long)]
    pub http2: bool,
    /// Stop every test after this many seconds, whatever the counts.
    #[arg(long, default_value_t = 60, value_parser = positive::<u64>)]
    pub seconds: u64,
}

/// `echo_server`.
#[derive(Debug, Args)]
pub struct EchoServerArgs {
    #[command(flatten)]
    pub server: ServerOpts,
    /// Greet each client with a message when it connects.
    #[arg(short = 'g', long)]
    pub greet: bool,
    /// Do not answer pings.
    #[arg(short = 'p', long = "disable_pong")]
    pub no_pong: bool,
    /// Require this exact Authorization header; other clients are closed with 4001.
    #[arg(long = "http_authorization_header")]
    pub authorization: Option<String>,
    #[command(flatten)]
    pub runtime: RuntimeOpts,
}

/// `--runtime` and `--threads` of the servers that run on either loop.
#[derive(Debug, Args)]
pub struct RuntimeOpts {
    /// The server loop. Default: Sockeye's own loop (`auto`) unless an option needs tokio
    /// (`--backplane`). `auto`, `uring`, `epoll`: the own loop, a thread per core, on io_uring
    /// where the kernel allows it (else epoll), on io_uring, on epoll; HTTP/1.1 only (an HTTP/2
    /// client is told HTTP_1_1_REQUIRED). `tokio`: a task per connection, HTTP/2 too.
    #[arg(long, value_enum)]
    pub runtime: Option<ServerRuntime>,
    /// Loop threads of the own loop (default: one per core this process may run on).
    #[arg(long, value_parser = positive::<usize>)]
    pub threads: Option<usize>,
}

/// `--runtime` of the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerRuntime {
    /// tokio, a task per connection.
    Tokio,
    /// Sockeye's own loop on io_uring where allowed, else epoll.
    Auto,
    /// Sockeye's own loop on io_uring.
    Uring,
    /// Sockeye's own loop on epoll.
    Epoll,
}

/// `echo_client`.
#[derive(Debug, Args)]
pub struct EchoClientArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// Mute: send nothing, only count what arrives.
    #[arg(short = 'm', long)]
    pub mute: bool,
    /// The message to send.
    #[arg(long = "send_msg", default_value = "hello world")]
    pub send_msg: String,
    /// Send it as a binary message.
    #[arg(short = 'b', long)]
    pub binary: bool,
    /// Stop after this many received messages (default: run until closed or interrupted).
    #[arg(long = "msg_count", value_parser = positive::<u64>)]
    pub msg_count: Option<u64>,
}

/// `push_server`.
#[derive(Debug, Args)]
pub struct PushServerArgs {
    #[command(flatten)]
    pub server: ServerOpts,
    /// The message to push.
    #[arg(long = "send_msg", default_value = "yo")]
    pub send_msg: String,
    /// Do not answer pings.
    #[arg(short = 'p', long = "disable_pong")]
    pub no_pong: bool,
    #[command(flatten)]
    pub runtime: RuntimeOpts,
}

/// `cat`.
#[derive(Debug, Args)]
pub struct CatArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    #[command(flatten)]
    pub pipe: PipeOpts,
}

/// `listen`.
#[derive(Debug, Args)]
pub struct ListenArgs {
    #[command(flatten)]
    pub server: ServerOpts,
    #[command(flatten)]
    pub pipe: PipeOpts,
    /// Serve every client at once: stdin lines go to all, every client's messages to stdout.
    /// (Default: one client at a time; the next waits, connected, until the current one leaves.)
    #[arg(long, conflicts_with = "oneshot")]
    pub broadcast: bool,
    /// Serve one client, then exit; others are turned away with 1013 (try again later).
    #[arg(long)]
    pub oneshot: bool,
}
