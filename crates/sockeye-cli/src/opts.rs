//! What several sub-commands share on the command line: the flag groups flattened into their
//! arguments (a server's [`ServerOpts`], a client's [`ClientOpts`], the pipes' [`PipeOpts`]) and
//! the value parsers that check a flag while the command line is parsed (a bad value is a usage
//! error, exit 2). A leaf under the sub-commands' definitions ([`crate::cli`]) and the modules
//! that read the flags (`tls`, `client`, `curl`, …), so that none of them needs another.

use clap::Args;

use crate::ciphers::{CipherList, cipher_list};

/// A positive number (`--count 0` would divide by zero, or "send none" by surprise).
pub(crate) fn positive<T: std::str::FromStr + PartialOrd + Default>(s: &str) -> Result<T, String>
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

/// A duration in seconds, fractions allowed (`0.5`); 0 where a flag says it turns a limit off.
pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    let n: f64 = s.trim().parse().map_err(|e| format!("{e}"))?;
    if n.is_finite() && (0.0..=1e9).contains(&n) {
        Ok(n)
    } else {
        Err("expected seconds, from 0 to 1e9 (0.5 is half a second)".into())
    }
}

/// The JetStream stream's copies for `--history-copies`: 1 to 5 (NATS's limit).
pub(crate) fn copies(s: &str) -> Result<usize, String> {
    let max = sockeye_pubsub::HistoryConfig::MAX_COPIES;
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected 1 to {max}: the servers of the NATS cluster that store each publication \
             (3 survive the loss of any one)"
        )),
    }
}

/// A page origin for `--allowed-origin`: `scheme://host[:port]`, or `*`.
pub(crate) fn origin(s: &str) -> Result<String, String> {
    sockeye_pubsub::web::WebConfig::default()
        .allowed_origin(s)
        .map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

/// A `ws://` or `wss://` URL the library can connect to: checked while parsing the command
/// line, so that a typo is a usage error (exit 2) and never something `connect` retries.
pub(crate) fn websocket_url(s: &str) -> Result<String, String> {
    use sockeye::IntoClientRequest;
    let request = s.into_client_request().map_err(|e| e.to_string())?;
    sockeye::proto::handshake::url_target(request.uri()).map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

/// A pub/sub backplane URL: checked while parsing (a usage error, exit 2), connected later (an
/// unreachable server is retried).
pub(crate) fn backplane_url(s: &str) -> Result<String, String> {
    if s.starts_with("memory:") {
        return Err(
            "expected redis://HOST:PORT or nats://HOST:PORT (without --backplane the server is alone)".into(),
        );
    }
    sockeye_pubsub::backplane::check_url(s).map_err(|e| e.to_string())?;
    Ok(s.to_string())
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
    /// Allowed TLS cipher suites for --tls, separated by ':' or ',' (IANA or OpenSSL names;
    /// DEFAULT for all).
    #[arg(long, requires = "tls", value_parser = cipher_list)]
    pub ciphers: Option<CipherList>,
}

/// How a client connects.
#[derive(Debug, Args, Clone)]
pub struct ClientOpts {
    /// ws:// or wss:// URL.
    #[arg(value_parser = websocket_url)]
    pub url: String,
    /// Extra request header, "Name: value" (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Subprotocol to ask for (Sec-WebSocket-Protocol); repeat to offer several.
    #[arg(long = "subprotocol", visible_alias = "protocol")]
    pub subprotocols: Vec<String>,
    /// Ping after this many idle seconds and give up on a peer silent as long again; 0: never.
    #[arg(long = "ping_interval", default_value_t = 30)]
    pub ping_interval: u64,
    /// Give up connecting (DNS, TCP, proxy, TLS and the handshake) after this many seconds.
    #[arg(long, default_value_t = 10, value_parser = positive::<u64>)]
    pub timeout: u64,
    /// Disable permessage-deflate.
    #[arg(short = 'x', long = "disable_deflate")]
    pub no_deflate: bool,
    /// Trust the CA certificates in this PEM file (besides the system's).
    #[arg(long = "ca-file")]
    pub ca_file: Option<std::path::PathBuf>,
    /// Present this PEM certificate chain when the server asks (mutual TLS); needs --key-file.
    #[arg(long = "cert-file", requires = "key_file")]
    pub cert_file: Option<std::path::PathBuf>,
    /// The PEM private key of --cert-file.
    #[arg(long = "key-file", requires = "cert_file")]
    pub key_file: Option<std::path::PathBuf>,
    /// Allowed TLS cipher suites, separated by ':' or ',': IANA names
    /// (TLS_AES_128_GCM_SHA256) or OpenSSL ones (ECDHE-RSA-AES128-GCM-SHA256); DEFAULT for all.
    #[arg(long, value_parser = cipher_list)]
    pub ciphers: Option<CipherList>,
    /// Accept any server certificate (testing only).
    #[arg(short = 'k', long = "verify_none", visible_alias = "insecure")]
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
    /// Write the process id to this file.
    #[arg(long)]
    pub pidfile: Option<std::path::PathBuf>,
}

impl ClientOpts {
    /// The defaults of every flag, for `url`.
    pub(crate) fn for_url(url: String, timeout: u64) -> ClientOpts {
        ClientOpts {
            url,
            headers: Vec::new(),
            subprotocols: Vec::new(),
            ping_interval: 30,
            timeout,
            no_deflate: false,
            ca_file: None,
            cert_file: None,
            key_file: None,
            ciphers: None,
            verify_none: false,
            disable_hostname_validation: false,
            proxy: None,
            http2: false,
            pidfile: None,
        }
    }
}

/// What the pipes do with lines and messages.
#[derive(Debug, Args, Clone)]
pub struct PipeOpts {
    /// Binary mode: stdin is sent in chunks as binary messages, and messages are written to
    /// stdout byte for byte, with no newline added (a binary-safe pipe).
    #[arg(short = 'b', long, conflicts_with = "text")]
    pub binary: bool,
    /// Text mode (the default): stdin lines are text messages, one message is printed per line.
    #[arg(short = 't', long)]
    pub text: bool,
    /// Print messages as they are, without escaping control characters (text mode).
    #[arg(short = 'r', long, conflicts_with = "binary")]
    pub raw: bool,
    /// Keep receiving after stdin ends (default: close the connection at end of input).
    #[arg(short = 'n', long = "no-close", conflicts_with = "exit_on_eof")]
    pub no_close: bool,
    /// At the end of stdin, close and exit at once, without printing what is still in flight.
    #[arg(short = 'E', long = "exit-on-eof")]
    pub exit_on_eof: bool,
    /// Exit after printing exactly this many messages.
    #[arg(long = "max-messages", value_parser = positive::<u64>)]
    pub max_messages: Option<u64>,
}
