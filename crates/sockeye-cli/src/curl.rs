//! `ws curl`: an HTTP/1.1 client for http:// and https:// URLs, with IXWebSocket's flags (which
//! are curl's). One connection per request, hyper 1's connection-level client over the library's
//! TLS configuration.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use sockeye::TransportStream;
use sockeye::tls::rustls::{self, ClientConfig};
use sockeye::tls::{ClientTlsOptions, ClientTlsStream};

use crate::ciphers::{CipherList, cipher_list};
use crate::failure::{Failure, usage_file};
use crate::interrupt::unless_interrupted;
use crate::opts::positive;
use crate::output::{errln, outln};

/// `curl`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ws curl https://example.com/ > page.html
  ws curl -L -O http://127.0.0.1:8008/file.bin
  ws curl -d name=value -H 'X-Trace: 1' -v http://127.0.0.1:8008/form

The body goes to stdout as it is (binary-safe); -v (verbose) prints the request and response
headers to stderr. HTTP proxy variables (http_proxy, https_proxy) are ignored.

Exit codes: 0 ok (a 2xx or 3xx final status), 1 failed (connection, TLS, timeout, or another
status), 2 usage, 130 interrupted.")]
pub struct CurlArgs {
    /// http:// or https:// URL.
    #[arg(value_parser = http_url)]
    pub url: Uri,
    /// Send this data with POST (as application/x-www-form-urlencoded unless -H sets a
    /// Content-Type); repeated, the parts are joined with '&'.
    #[arg(short = 'd', long = "data", conflicts_with_all = ["form", "head", "data_binary"])]
    pub data: Vec<String>,
    /// Send this body with POST exactly as given (no joining); @FILE sends the file's bytes.
    #[arg(long = "data-binary", conflicts_with_all = ["form", "head"])]
    pub data_binary: Option<String>,
    /// Compress the request body with gzip (Content-Encoding: gzip).
    #[arg(long = "compress_request")]
    pub compress_request: bool,
    /// A multipart/form-data field with POST: name=value, or name=@path to upload a file
    /// (repeatable).
    #[arg(short = 'F', long = "form", conflicts_with = "head")]
    pub form: Vec<String>,
    /// Extra request header, "Name: value" (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Send a HEAD request and print the response's status line and headers.
    #[arg(short = 'I', long = "head")]
    pub head: bool,
    /// Follow redirects (3xx with a Location).
    #[arg(short = 'L', long = "location")]
    pub follow: bool,
    /// With -L, the most redirects to follow before failing.
    #[arg(long = "max-redirects", default_value_t = 5)]
    pub max_redirects: u32,
    /// Write the body to a file named like the URL's last path segment (in this directory).
    #[arg(short = 'O', long = "remote-name", conflicts_with = "output")]
    pub remote_name: bool,
    /// Write the body to this file instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Ask for a compressed body (Accept-Encoding: gzip, deflate) and decode it.
    #[arg(long, visible_alias = "compressed")]
    pub compress: bool,
    /// Seconds allowed to connect (TCP and TLS handshake).
    #[arg(long = "connect-timeout", default_value_t = 60, value_parser = positive::<u64>)]
    pub connect_timeout: u64,
    /// Seconds allowed for the whole transfer (every request and body, redirects included).
    #[arg(long = "transfer-timeout", default_value_t = 1800, value_parser = positive::<u64>)]
    pub transfer_timeout: u64,
    /// Trust the CA certificates in this PEM file (besides the system's).
    #[arg(long = "ca-file")]
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate (testing only).
    #[arg(long = "verify_none")]
    pub verify_none: bool,
    /// PEM client certificate chain to present (needs --key-file).
    #[arg(long = "cert-file", requires = "key_file")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of --cert-file.
    #[arg(long = "key-file", requires = "cert_file")]
    pub key_file: Option<PathBuf>,
    /// Allowed TLS cipher suites, separated by ':' or ',': IANA names
    /// (TLS_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) or OpenSSL ones
    /// (ECDHE-RSA-AES128-GCM-SHA256); DEFAULT for all.
    #[arg(long, value_parser = cipher_list)]
    pub ciphers: Option<CipherList>,
}

/// As [`http_url`], kept as text (a flag's `Uri` would make `Command` large).
pub(crate) fn http_url_text(s: &str) -> Result<String, String> {
    http_url(s).map(|_| s.to_owned())
}

/// An http:// or https:// URL with a host.
pub(crate) fn http_url(s: &str) -> Result<Uri, String> {
    if !s.contains("://") {
        return Err("no scheme: use http://HOST/… or https://HOST/…".into());
    }
    let uri: Uri = s.parse().map_err(|e| format!("{e}"))?;
    match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http" | "https") => {}
        Some(other) => return Err(format!("{other}:// is not HTTP: use http:// or https://")),
        None => return Err("no scheme: use http://HOST/… or https://HOST/…".into()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("no host in the URL".into());
    }
    Ok(uri)
}

/// Runs `ws curl`.
pub(crate) async fn run(args: CurlArgs) -> Result<(), Failure> {
    let plan = Plan::new(&args)?;
    let deadline = Duration::from_secs(args.transfer_timeout);
    match unless_interrupted(tokio::time::timeout(deadline, plan.fetch(&args))).await? {
        Ok(result) => result,
        Err(_) => Err(Failure::new(format!(
            "{}: the transfer took longer than {} s (--transfer-timeout)",
            args.url, args.transfer_timeout
        ))),
    }
}

/// What to send, prepared before connecting (files given with -F read, headers parsed).
#[derive(Debug)]
struct Plan {
    method: Method,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    output: Option<PathBuf>,
    tls: ClientTls,
    verbose: bool,
}

/// The TLS configuration, built on the first https:// request.
#[derive(Debug)]
struct ClientTls {
    options: ClientTlsOptions,
    ciphers: Option<CipherList>,
    built: std::sync::OnceLock<Arc<ClientConfig>>,
}

impl ClientTls {
    fn config(&self) -> Result<Arc<ClientConfig>, Failure> {
        if let Some(config) = self.built.get() {
            return Ok(config.clone());
        }
        let config = match &self.ciphers {
            None => self.options.build()?,
            Some(ciphers) => self.options.build_with_provider(ciphers.provider())?,
        };
        Ok(self.built.get_or_init(|| config).clone())
    }
}

/// Reads a file named on the command line; unreadable is a usage error.
fn read_arg_file(flag: &str, path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| usage_file(flag, path, e))
}

impl Plan {
    fn new(args: &CurlArgs) -> Result<Plan, Failure> {
        let mut headers = Vec::new();
        for line in &args.headers {
            let Some((name, value)) = line.split_once(':') else {
                return Err(Failure::usage(format!(
                    "-H {line:?}: write it as \"Name: value\""
                )));
            };
            let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                Failure::usage(format!("-H {line:?}: {:?} is not a header name", name.trim()))
            })?;
            let value = HeaderValue::from_str(value.trim())
                .map_err(|_| Failure::usage(format!("-H {line:?}: the value has forbidden characters")))?;
            headers.push((name, value));
        }
        let mut method = if args.head { Method::HEAD } else { Method::GET };
        let mut body = Bytes::new();
        let mut content_type = None;
        if !args.data.is_empty() {
            method = Method::POST;
            body = Bytes::from(args.data.join("&"));
            content_type = Some("application/x-www-form-urlencoded".to_string());
        } else if let Some(data) = &args.data_binary {
            method = Method::POST;
            body = match data.strip_prefix('@') {
                Some(path) => Bytes::from(read_arg_file("--data-binary", Path::new(path))?),
                None => Bytes::from(data.clone().into_bytes()),
            };
            content_type = Some("application/x-www-form-urlencoded".to_string());
        } else if !args.form.is_empty() {
            method = Method::POST;
            let boundary = format!("------------------------sockeye{:016x}", random_u64());
            body = Bytes::from(multipart(&args.form, &boundary)?);
            content_type = Some(format!("multipart/form-data; boundary={boundary}"));
        }
        if args.compress_request && !body.is_empty() {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            body = gz
                .write_all(&body)
                .and_then(|()| gz.finish())
                .map(Bytes::from)
                .map_err(|e| Failure::new(format!("cannot compress the request: {e}")))?;
            headers.push((header::CONTENT_ENCODING, HeaderValue::from_static("gzip")));
        }
        let has =
            |headers: &[(HeaderName, HeaderValue)], name: &HeaderName| headers.iter().any(|(n, _)| n == name);
        let defaults = [
            (
                header::USER_AGENT,
                Some(format!("ws/{} (sockeye)", env!("CARGO_PKG_VERSION"))),
            ),
            (header::ACCEPT, Some("*/*".to_string())),
            (header::CONTENT_TYPE, content_type),
            (
                header::ACCEPT_ENCODING,
                args.compress.then(|| "gzip, deflate".to_string()),
            ),
        ];
        for (name, value) in defaults {
            if let Some(value) = value
                && !has(&headers, &name)
                && let Ok(value) = HeaderValue::from_str(&value)
            {
                headers.push((name, value));
            }
        }
        let output = if args.remote_name {
            Some(remote_name(&args.url)?)
        } else {
            args.output.clone()
        };
        let mut options = ClientTlsOptions {
            danger_accept_invalid_certs: args.verify_none,
            ..Default::default()
        };
        if let Some(ca) = &args.ca_file {
            options = options
                .add_ca_pem(&read_arg_file("--ca-file", ca)?)
                .map_err(|e| usage_file("--ca-file", ca, e))?;
        }
        if let (Some(cert), Some(key)) = (&args.cert_file, &args.key_file) {
            let chain = read_arg_file("--cert-file", cert)?;
            let key = read_arg_file("--key-file", key)?;
            options = options
                .identity_pem(&chain, &key)
                .map_err(|e| Failure::usage(format!("--cert-file/--key-file: {e}")))?;
        }
        Ok(Plan {
            method,
            headers,
            body,
            output,
            tls: ClientTls {
                options,
                ciphers: args.ciphers.clone(),
                built: std::sync::OnceLock::new(),
            },
            verbose: crate::log::verbose(),
        })
    }

    /// Every request, redirects included, and the final body.
    async fn fetch(&self, args: &CurlArgs) -> Result<(), Failure> {
        let mut url = args.url.clone();
        let mut method = self.method.clone();
        let mut body = self.body.clone();
        let mut redirects = 0;
        loop {
            let response = self.send(args, &url, &method, body.clone()).await?;
            let status = response.status();
            if args.head {
                print_head(&response)?;
            }
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok());
            if args.follow
                && status.is_redirection()
                && let Some(location) = location
            {
                if redirects >= args.max_redirects {
                    return Err(Failure::new(format!(
                        "{url}: redirected to {location}, but --max-redirects {} allows no more",
                        args.max_redirects
                    )));
                }
                redirects += 1;
                url = resolve(&url, location)?;
                if status == StatusCode::SEE_OTHER && method != Method::HEAD
                    || matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND)
                        && method == Method::POST
                {
                    method = Method::GET;
                    body = Bytes::new();
                }
                continue;
            }
            let ok = status.is_success() || status.is_redirection();
            self.write_body(response, ok && !args.head).await?;
            if !ok {
                return Err(Failure::new(format!("{url}: the server answered {status}")));
            }
            return Ok(());
        }
    }

    /// One request on a new connection.
    async fn send(
        &self,
        args: &CurlArgs,
        url: &Uri,
        method: &Method,
        body: Bytes,
    ) -> Result<Response<Incoming>, Failure> {
        let limit = Duration::from_secs(args.connect_timeout);
        let mut sender = connect(url, || self.tls.config(), limit, "--connect-timeout").await?;
        let host = url.host().unwrap_or_default();

        let target = url.path_and_query().map_or("/", |p| p.as_str());
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let mut request = Request::builder().method(method.clone()).uri(target);
        let has_host = self.headers.iter().any(|(n, _)| n == header::HOST);
        if !has_host {
            request = request.header(header::HOST, authority);
        }
        for (name, value) in &self.headers {
            if body.is_empty() && name == header::CONTENT_TYPE && self.body.len() != body.len() {
                continue; // the body was dropped by a 303: so is its type
            }
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| Failure::usage(format!("{url}: {e}")))?;
        if self.verbose {
            errln!("> {} {} HTTP/1.1", request.method(), target);
            for (name, value) in request.headers() {
                errln!("> {}: {}", name, String::from_utf8_lossy(value.as_bytes()));
            }
            errln!(">");
        }
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| Failure::new(format!("{url}: {e}")))?;
        if self.verbose {
            errln!("< {:?} {}", response.version(), response.status());
            for (name, value) in response.headers() {
                errln!("< {}: {}", name, String::from_utf8_lossy(value.as_bytes()));
            }
            errln!("<");
        }
        Ok(response)
    }

    /// Streams the body to its destination, decoded if it was compressed at our request; when
    /// `keep` is false it is read and dropped (no file is created), except to stdout.
    async fn write_body(&self, response: Response<Incoming>, keep: bool) -> Result<(), Failure> {
        let encoding = response
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase());
        let sink = match &self.output {
            None => Sink::Stdout,
            Some(path) if keep => Sink::File(
                std::fs::File::create(path)
                    .map_err(|e| Failure::new(format!("cannot write {}: {e}", path.display())))?,
                path.clone(),
            ),
            Some(_) => Sink::Discard,
        };
        let compressed = self.headers.iter().any(|(n, _)| n == header::ACCEPT_ENCODING);
        let mut decoder = match encoding.as_deref() {
            Some("gzip" | "x-gzip") if compressed => Decoder::Gzip(flate2::write::MultiGzDecoder::new(sink)),
            Some("deflate") if compressed => Decoder::Deflate(flate2::write::ZlibDecoder::new(sink)),
            _ => Decoder::Identity(sink),
        };
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Failure::new(format!("reading the body: {e}")))?;
            if let Ok(data) = frame.into_data() {
                decoder.write(&data)?;
            }
        }
        decoder.finish()
    }
}

/// Where the body goes.
#[derive(Debug)]
enum Sink {
    Stdout,
    File(std::fs::File, PathBuf),
    Discard,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Stdout => std::io::stdout().lock().write(buf),
            Sink::File(file, _) => file.write(buf),
            Sink::Discard => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Stdout => std::io::stdout().lock().flush(),
            Sink::File(file, _) => file.flush(),
            Sink::Discard => Ok(()),
        }
    }
}

impl Sink {
    fn error(&self, e: std::io::Error) -> Failure {
        match self {
            Sink::File(_, path) => Failure::new(format!("cannot write {}: {e}", path.display())),
            _ => crate::output::stdout_error(e),
        }
    }
}

/// The body decoder `--compress` asked for.
#[derive(Debug)]
enum Decoder {
    Identity(Sink),
    Gzip(flate2::write::MultiGzDecoder<Sink>),
    Deflate(flate2::write::ZlibDecoder<Sink>),
}

impl Decoder {
    fn sink(&self) -> &Sink {
        match self {
            Decoder::Identity(sink) => sink,
            Decoder::Gzip(d) => d.get_ref(),
            Decoder::Deflate(d) => d.get_ref(),
        }
    }

    fn write(&mut self, data: &[u8]) -> Result<(), Failure> {
        let result = match self {
            Decoder::Identity(sink) => sink.write_all(data),
            Decoder::Gzip(d) => d.write_all(data),
            Decoder::Deflate(d) => d.write_all(data),
        };
        result.map_err(|e| self.decode_error(e))
    }

    fn finish(self) -> Result<(), Failure> {
        let sink = match self {
            Decoder::Identity(sink) => Ok(sink),
            Decoder::Gzip(d) => d.finish(),
            Decoder::Deflate(d) => d.finish(),
        };
        let mut sink = sink.map_err(|e| Failure::new(format!("cannot decode the compressed body: {e}")))?;
        sink.flush().map_err(|e| sink.error(e))
    }

    fn decode_error(&self, e: std::io::Error) -> Failure {
        if matches!(
            e.kind(),
            std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData
        ) {
            Failure::new(format!("cannot decode the compressed body: {e}"))
        } else {
            self.sink().error(e)
        }
    }
}

/// A new HTTP/1.1 connection to `url`'s host and port, over TLS (`tls`, asked for only then) for
/// https://, within `limit` (TCP, TLS and HTTP handshakes; `flag` sets it); its driver is
/// spawned. Shared by `ws curl` and `pubsub_server --jwks-url`.
pub(crate) async fn connect(
    url: &Uri,
    tls: impl FnOnce() -> Result<Arc<ClientConfig>, Failure>,
    limit: Duration,
    flag: &str,
) -> Result<SendRequest<Full<Bytes>>, Failure> {
    let https = url.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("https"));
    let host = url.host().unwrap_or_default();
    let bare_host = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
    let connect = async {
        let tcp = tokio::net::TcpStream::connect((bare_host, port))
            .await
            .map_err(|e| Failure::new(format!("cannot connect to {host}:{port}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let stream = if https {
            let name = rustls::pki_types::ServerName::try_from(bare_host.to_string())
                .map_err(|_| Failure::new(format!("{host:?} is not a valid TLS server name")))?;
            let mut tls = Box::new(
                ClientTlsStream::client(tcp, tls()?, name)
                    .map_err(|e| Failure::new(format!("{host}:{port}: TLS: {e}")))?,
            );
            tls.handshake().await.map_err(|e| tls_failure(host, port, &e))?;
            TransportStream::ClientTls(tls)
        } else {
            TransportStream::Plain(tcp)
        };
        hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Failure::new(format!("{host}:{port}: {e}")))
    };
    let (sender, connection) = tokio::time::timeout(limit, connect).await.map_err(|_| {
        Failure::new(format!(
            "cannot connect to {host}:{port}: no answer within {} s ({flag})",
            limit.as_secs_f64()
        ))
    })??;
    tokio::spawn(connection);
    Ok(sender)
}

/// The status line and headers, for -I.
fn print_head(response: &Response<Incoming>) -> Result<(), Failure> {
    outln!("{:?} {}", response.version(), response.status())?;
    for (name, value) in response.headers() {
        outln!("{}: {}", name, String::from_utf8_lossy(value.as_bytes()))?;
    }
    outln!("")
}

fn tls_failure(host: &str, port: u16, e: &std::io::Error) -> Failure {
    let detail = e.to_string();
    let hint = if detail.contains("certificate") {
        " (--ca-file trusts its CA; --verify_none accepts any certificate, for testing)"
    } else {
        ""
    };
    Failure::new(format!("TLS handshake with {host}:{port} failed: {detail}{hint}"))
}

/// `-O`: the URL's last path segment, which must be a plain file name.
fn remote_name(url: &Uri) -> Result<PathBuf, Failure> {
    let name = url.path().rsplit('/').next().unwrap_or_default();
    if name.is_empty() || name == "." || name == ".." || name.contains('\\') {
        return Err(Failure::usage(format!(
            "-O: {url} has no file name at the end of its path; use -o FILE"
        )));
    }
    Ok(PathBuf::from(name))
}

/// A Location header resolved against the URL it came from (RFC 3986 §5.2, without dot-segment
/// removal: the server sees the path as it was written).
fn resolve(base: &Uri, location: &str) -> Result<Uri, Failure> {
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map_or("", |a| a.as_str());
    let absolute = if location.contains("://") {
        location.to_string()
    } else if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else if location.starts_with('?') {
        format!("{scheme}://{authority}{}{location}", base.path())
    } else {
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let dir = if dir.is_empty() { "/" } else { dir };
        format!("{scheme}://{authority}{dir}{location}")
    };
    http_url(&absolute).map_err(|e| Failure::new(format!("cannot follow the redirect to {location:?}: {e}")))
}

/// The body of a multipart/form-data request (RFC 7578) from `name=value` and `name=@path`.
fn multipart(fields: &[String], boundary: &str) -> Result<Vec<u8>, Failure> {
    let mut body = Vec::new();
    for field in fields {
        let Some((name, value)) = field.split_once('=') else {
            return Err(Failure::usage(format!(
                "-F {field:?}: write it as name=value or name=@file"
            )));
        };
        if name.is_empty() || name.contains(['"', '\r', '\n']) {
            return Err(Failure::usage(format!("-F {field:?}: bad field name")));
        }
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        if let Some(path) = value.strip_prefix('@') {
            let path = Path::new(path);
            let content = read_arg_file("-F", path)?;
            let file_name = path
                .file_name()
                .map(|n| n.to_string_lossy().replace(['"', '\r', '\n'], "_"))
                .unwrap_or_default();
            body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{file_name}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            body.extend_from_slice(&content);
        } else {
            body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            );
            body.extend_from_slice(value.as_bytes());
        }
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    Ok(body)
}

/// A random number for the multipart boundary (std's hasher keys are random per process).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_like_a_browser() {
        let base: Uri = "http://h:1/a/b?q".parse().unwrap_or_default();
        let r = |l| resolve(&base, l).map(|u| u.to_string()).unwrap_or_default();
        assert_eq!(r("/x"), "http://h:1/x");
        assert_eq!(r("c"), "http://h:1/a/c");
        assert_eq!(r("//o:2/p"), "http://o:2/p");
        assert_eq!(r("https://s/"), "https://s/");
        assert!(resolve(&base, "ftp://x/").is_err());
    }
}
