//! Command-line definitions (IXWebSocket's sub-command and flag names).

use clap::{Args, Parser, Subcommand};

/// A positive number (`--count 0` would divide by zero, or "send none" by surprise).
fn positive<T: std::str::FromStr + PartialOrd + Default>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    let n: T = s.trim().parse().map_err(|e| format!("{e}"))?;
    if n > T::default() {
        Ok(n)
    } else {
        Err("must be at least 1".into())
    }
}

/// A `ws://` or `wss://` URL the library can connect to: checked while parsing the command
/// line, so that a typo is a usage error (exit 2) and never something `connect` retries.
pub(crate) fn websocket_url(s: &str) -> Result<String, String> {
    use sockeye::IntoClientRequest;
    let request = s.into_client_request().map_err(|e| e.to_string())?;
    sockeye::proto::handshake::url_target(request.uri()).map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

/// Sockeye's WebSocket tool.
#[derive(Debug, Parser)]
#[command(name = "ws", version, about, propagate_version = true)]
pub struct Cli {
    /// Log what happens to stderr (-v: connections and errors, -vv: more). Quiet by default.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The sub-commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Echo every message back to its sender.
    #[command(name = "echo_server")]
    EchoServer(EchoServerArgs),
    /// Send a message and count the echoes (or, with -m, only count what arrives).
    #[command(name = "echo_client")]
    EchoClient(EchoClientArgs),
    /// Push a message to every client as fast as it reads (path /N: N messages, then close).
    #[command(name = "push_server")]
    PushServer(PushServerArgs),
    /// Pipe: stdin lines become messages, messages are printed one per line.
    Cat(CatArgs),
    /// Pipe, server side: accept one client; its messages go to stdout, stdin lines to it.
    Listen(ListenArgs),
    /// Benchmark Sockeye against itself on loopback: push rate, round trips, connection set-up.
    Bench(BenchArgs),
    /// Relay every message to every other connected client.
    #[command(name = "broadcast_server")]
    BroadcastServer(RelayArgs),
    /// The relay that `send` and `receive` meet at (a broadcast server for large messages).
    Transfer(RelayArgs),
    /// Send a file through a relay to the clients running `receive`.
    Send(SendArgs),
    /// Receive one file through a relay, check it, and write it under the sender's file name.
    Receive(ReceiveArgs),
    /// Send pings and print the round-trip time of each pong.
    Ping(PingArgs),
    /// Connect to URL/N, receive N messages, print the rate.
    Autoroute(AutorouteArgs),
    /// Run Autobahn|Testsuite's fuzzingserver cases as a client.
    Autobahn(AutobahnArgs),
    /// Interactive client: type messages; /stop and /start; reconnects with backoff unless -d.
    Connect(ConnectArgs),
    /// Chat through a broadcast server: your lines go out as "USER: line".
    Chat(ChatArgs),
    /// Reverse proxy: forward each client to --remote_host, or by its Host header (--config_path).
    #[command(name = "proxy_server", after_help = crate::proxy_server::AFTER_HELP)]
    ProxyServer(crate::proxy_server::ProxyServerArgs),
}

/// `connect`.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// Extra request header, "Name: value" (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Send lines as binary messages.
    #[arg(short = 'b', long)]
    pub binary: bool,
    /// Subprotocol to ask for.
    #[arg(long)]
    pub subprotocol: Option<String>,
    /// Send a ping every this many seconds (0: never).
    #[arg(long = "ping_interval", default_value_t = 0)]
    pub ping_interval: u64,
    /// Do not reconnect when the connection drops.
    #[arg(short = 'd', long = "disable_automatic_reconnection")]
    pub no_reconnect: bool,
    /// The longest wait between reconnection attempts, in milliseconds.
    #[arg(long = "max_wait", default_value_t = 10_000)]
    pub max_wait: u64,
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
    /// Quiet: no per-connection log.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// `send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// The file to send.
    pub path: std::path::PathBuf,
    /// How long to wait for a receiver's acknowledgement, in seconds.
    #[arg(long, default_value_t = 60, value_parser = positive::<u64>)]
    pub timeout: u64,
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
    /// The fuzzingserver's base URL.
    #[arg(long, default_value = "ws://127.0.0.1:9001")]
    pub url: String,
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

/// Where a server listens, and with what.
#[derive(Debug, Args, Clone)]
pub struct ServerOpts {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind.
    #[arg(long, default_value_t = 8008)]
    pub port: u16,
    /// Bind the IPv6 loopback (::1) instead of the IPv4 one.
    #[arg(short = '6', long = "ipv6")]
    pub ipv6: bool,
    /// Disable permessage-deflate.
    #[arg(short = 'x', long = "disable_deflate")]
    pub no_deflate: bool,
    /// Write the process id to this file.
    #[arg(long)]
    pub pidfile: Option<std::path::PathBuf>,
    /// Serve wss:// (needs --cert-file and --key-file).
    #[arg(long, requires_all = ["cert_file", "key_file"])]
    pub tls: bool,
    /// PEM certificate chain for --tls.
    #[arg(long = "cert-file", requires = "tls")]
    pub cert_file: Option<std::path::PathBuf>,
    /// PEM private key for --tls.
    #[arg(long = "key-file", requires = "tls")]
    pub key_file: Option<std::path::PathBuf>,
}

/// How a client connects.
#[derive(Debug, Args, Clone)]
pub struct ClientOpts {
    /// ws:// or wss:// URL.
    #[arg(value_parser = websocket_url)]
    pub url: String,
    /// Disable permessage-deflate.
    #[arg(short = 'x', long = "disable_deflate")]
    pub no_deflate: bool,
    /// Trust the CA certificates in this PEM file (besides the system's).
    #[arg(long = "ca-file")]
    pub ca_file: Option<std::path::PathBuf>,
    /// Accept any server certificate (testing only).
    #[arg(long = "verify_none")]
    pub verify_none: bool,
    /// Accept a certificate issued for another host name (testing only).
    #[arg(long = "disable-hostname-validation")]
    pub disable_hostname_validation: bool,
    /// Connect through this proxy: http://[user:pass@]host:port (CONNECT), socks5://… or
    /// socks5h://… (the proxy resolves names); `none` to ignore https_proxy/http_proxy/all_proxy.
    #[arg(long)]
    pub proxy: Option<String>,
    /// Open the WebSocket over HTTP/2 (RFC 8441): ALPN h2 for wss://, h2c with prior knowledge
    /// for ws://; fails if the server does not offer it.
    #[arg(long)]
    pub http2: bool,
}

/// `echo_server`.
#[derive(Debug, Args)]
pub struct EchoServerArgs {
    #[command(flatten)]
    pub server: ServerOpts,
    /// Quiet: do not log each message.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Greet each client with a message when it connects.
    #[arg(short = 'g', long)]
    pub greet: bool,
    /// Do not answer pings.
    #[arg(short = 'p', long = "disable_pong")]
    pub no_pong: bool,
    /// Require this exact Authorization header; other clients are closed with 4001.
    #[arg(long = "http_authorization_header")]
    pub authorization: Option<String>,
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
    /// Quiet: no per-connection log.
    #[arg(short = 'q', long)]
    pub quiet: bool,
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
}

/// What the pipes do with lines and messages.
#[derive(Debug, Args, Clone)]
pub struct PipeOpts {
    /// Send stdin lines as binary messages (default: text).
    #[arg(short = 'b', long, conflicts_with = "text")]
    pub binary: bool,
    /// Send stdin lines as text messages (the default).
    #[arg(short = 't', long)]
    pub text: bool,
    /// Keep receiving after stdin ends (default: close the connection at end of input).
    #[arg(short = 'n', long = "no-close")]
    pub no_close: bool,
    /// Exit after receiving this many messages.
    #[arg(long = "max-messages", value_parser = positive::<u64>)]
    pub max_messages: Option<u64>,
}
