//! `ws httpd`: a static file server (hyper 1, HTTP/1.1), IXWebSocket's `ws httpd`.
//!
//! Files under the root only: the request path is percent-decoded, any `..` segment is refused,
//! and the file found is canonicalized and must still be under the canonical root (a symbolic
//! link pointing outside is refused too).

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use clap::Args;
use futures_util::TryStreamExt;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use sockeye::TransportStream;
use sockeye::tls::{ServerTls, ServerTlsStream, TlsAcceptor};

use crate::failure::{Failure, usage_file};
use crate::output::errln;

/// `httpd`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  ws httpd --port 8080                       (serves the current directory)
  ws httpd --root ./site --tls --cert-file cert.pem --key-file key.pem
  ws httpd -L --redirect_url https://example.com/

GET and HEAD only; directories show index.html, else a listing; bodies are gzipped for clients
that accept it. Requests are logged with -v.

Exit codes: 0 ok (also: stopped by Ctrl-C), 1 failed (cannot listen), 2 usage.")]
pub struct HttpdArgs {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to bind (0: any free port).
    #[arg(long, default_value_t = 8008)]
    pub port: u16,
    /// The directory to serve (default: the current one).
    #[arg(long, default_value = ".")]
    pub root: PathBuf,
    /// Redirect every request to --redirect_url with 301 instead of serving files.
    #[arg(short = 'L', long = "redirect", requires = "redirect_url")]
    pub redirect: bool,
    /// Where -L redirects to.
    #[arg(long = "redirect_url", requires = "redirect")]
    pub redirect_url: Option<String>,
    /// Write the process id to this file.
    #[arg(long)]
    pub pidfile: Option<PathBuf>,
    /// Serve https:// (needs --cert-file and --key-file).
    #[arg(long, requires_all = ["cert_file", "key_file"])]
    pub tls: bool,
    /// PEM certificate chain for --tls.
    #[arg(long = "cert-file", requires = "tls")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key for --tls.
    #[arg(long = "key-file", requires = "tls")]
    pub key_file: Option<PathBuf>,
    /// Debug: print every request and its status to stderr (as -v does).
    #[arg(short = 'D', long)]
    pub debug: bool,
}

/// Files larger than this are sent as they are, never gzipped (that is done in memory).
const GZIP_LIMIT: u64 = 32 << 20;

type Body = BoxBody<Bytes, std::io::Error>;

/// What every request handler shares.
#[derive(Debug)]
struct Site {
    root: PathBuf,
    redirect: Option<HeaderValue>,
    /// `-D`: every request on stderr.
    debug: bool,
}

/// Runs `ws httpd` until Ctrl-C.
pub(crate) async fn run(args: HttpdArgs) -> Result<(), Failure> {
    let root = std::fs::canonicalize(&args.root).map_err(|e| usage_file("--root", &args.root, e))?;
    if !root.is_dir() {
        return Err(Failure::usage(format!(
            "--root {}: not a directory",
            args.root.display()
        )));
    }
    let redirect = match (&args.redirect, &args.redirect_url) {
        (true, Some(url)) => Some(
            HeaderValue::from_str(url)
                .map_err(|_| Failure::usage(format!("--redirect_url {url:?}: not a valid URL")))?,
        ),
        _ => None,
    };
    let acceptor: Option<TlsAcceptor> = match (args.tls, &args.cert_file, &args.key_file) {
        (true, Some(cert), Some(key)) => Some(
            ServerTls::from_pem_files(cert, key)
                .map_err(|e| Failure::usage(e.to_string()))?
                .with_alpn(&[b"http/1.1"])
                .acceptor(),
        ),
        _ => None,
    };
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .map_err(|e| Failure::new(format!("cannot listen on {}:{}: {e}", args.host, args.port)))?;
    if let Some(pidfile) = &args.pidfile {
        std::fs::write(pidfile, format!("{}\n", std::process::id()))
            .map_err(|e| Failure::new(format!("{}: {e}", pidfile.display())))?;
    }
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    errln!("ws httpd: listening on {scheme}://{}", listener.local_addr()?);
    let site = Arc::new(Site {
        root,
        redirect,
        debug: args.debug,
    });
    let stop = crate::interrupt::requested();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and friends: wait a little rather than spin.
                    tracing::info!("accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(connection(tcp, peer, acceptor.clone(), site.clone()));
    }
}

async fn connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    site: Arc<Site>,
) {
    let stream = match acceptor {
        None => TransportStream::Plain(tcp),
        Some(acceptor) => {
            let mut tls = match ServerTlsStream::server(tcp, acceptor.config().clone()) {
                Ok(tls) => Box::new(tls),
                Err(e) => return tracing::info!(%peer, "TLS: {e}"),
            };
            let handshake = tokio::time::timeout(std::time::Duration::from_secs(10), tls.handshake());
            match handshake.await {
                Ok(Ok(())) => TransportStream::ServerTls(tls),
                Ok(Err(e)) => return tracing::info!(%peer, "TLS handshake failed: {e}"),
                Err(_) => return tracing::info!(%peer, "TLS handshake timed out"),
            }
        }
    };
    let service = hyper::service::service_fn(move |request| {
        let site = site.clone();
        async move { Ok::<_, Infallible>(respond(&site, peer, request).await) }
    });
    // The timer lets hyper drop a client that never finishes its request head (30 s).
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::info!(%peer, "connection: {e}");
    }
}

async fn respond(site: &Site, peer: SocketAddr, request: Request<Incoming>) -> Response<Body> {
    let response = match &site.redirect {
        Some(location) => {
            let mut response = text(StatusCode::MOVED_PERMANENTLY, "moved\n");
            response.headers_mut().insert(header::LOCATION, location.clone());
            response
        }
        None => serve(site, &request).await,
    };
    if site.debug {
        errln!(
            "{peer}: {} {} {}",
            request.method(),
            request.uri(),
            response.status().as_u16()
        );
    } else {
        tracing::debug!(%peer, "{} {} {}", request.method(), request.uri(), response.status().as_u16());
    }
    response
}

async fn serve(site: &Site, request: &Request<Incoming>) -> Response<Body> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: GET or HEAD\n",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let head = request.method() == Method::HEAD;
    let path = request.uri().path();
    let Some(relative) = relative_path(path) else {
        return text(StatusCode::FORBIDDEN, "forbidden\n");
    };
    let Ok(found) = tokio::fs::canonicalize(site.root.join(&relative)).await else {
        return text(StatusCode::NOT_FOUND, "not found\n");
    };
    if !found.starts_with(&site.root) {
        return text(StatusCode::FORBIDDEN, "forbidden\n");
    }
    let mut file = found;
    if file.is_dir() {
        if !path.ends_with('/') {
            // Relative links in the page resolve against the directory only with the slash.
            let mut response = text(StatusCode::MOVED_PERMANENTLY, "moved\n");
            let location = match request.uri().query() {
                Some(q) => format!("{path}/?{q}"),
                None => format!("{path}/"),
            };
            if let Ok(location) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            return response;
        }
        let index = file.join("index.html");
        match tokio::fs::canonicalize(&index).await {
            Ok(index) if index.starts_with(&site.root) && index.is_file() => file = index,
            _ => return listing(&file, path, head).await,
        }
    }
    let gzip = accepts_gzip(request) && !already_compressed(&file);
    send_file(&file, head, gzip).await
}

/// The request path as a path relative to the root: percent-decoded, `None` if any segment is
/// `..` (or holds a NUL or a backslash) or the path is not UTF-8.
fn relative_path(path: &str) -> Option<PathBuf> {
    let decoded = String::from_utf8(percent_decode(path)?).ok()?;
    let mut relative = PathBuf::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => return None,
            s if s.contains(['\0', '\\']) => return None,
            s => relative.push(s),
        }
    }
    Some(relative)
}

/// `%XX` decoded; `None` for a malformed escape.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

fn accepts_gzip(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

fn extension(path: &Path) -> String {
    path.extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// Formats that gzip would only make bigger.
fn already_compressed(path: &Path) -> bool {
    matches!(
        extension(path).as_str(),
        "gz" | "tgz"
            | "zip"
            | "bz2"
            | "xz"
            | "zst"
            | "7z"
            | "png"
            | "jpg"
            | "jpeg"
            | "gif"
            | "webp"
            | "avif"
            | "mp3"
            | "mp4"
            | "webm"
            | "ogg"
            | "woff"
            | "woff2"
    )
}

/// The Content-Type for a file name.
fn content_type(path: &Path) -> &'static str {
    match extension(path).as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" | "map" => "application/json",
        "txt" | "log" => "text/plain; charset=utf-8",
        "md" => "text/markdown; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "avif" => "image/avif",
        "ico" => "image/x-icon",
        "wasm" => "application/wasm",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "tar" => "application/x-tar",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "ogg" => "audio/ogg",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        _ => "application/octet-stream",
    }
}

async fn send_file(path: &Path, head: bool, gzip: bool) -> Response<Body> {
    let file = match tokio::fs::File::open(path).await {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return text(StatusCode::FORBIDDEN, "forbidden\n");
        }
        Err(_) => return text(StatusCode::NOT_FOUND, "not found\n"),
    };
    let Ok(metadata) = file.metadata().await else {
        return text(StatusCode::NOT_FOUND, "not found\n");
    };
    let builder = Response::builder()
        .header(header::CONTENT_TYPE, content_type(path))
        .header(header::VARY, "Accept-Encoding");
    if gzip && metadata.len() <= GZIP_LIMIT {
        let compressed = tokio::fs::read(path).await.and_then(|content| {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(&content)?;
            encoder.finish()
        });
        let Ok(compressed) = compressed else {
            return text(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the file\n");
        };
        let builder = builder
            .header(header::CONTENT_ENCODING, "gzip")
            .header(header::CONTENT_LENGTH, compressed.len());
        let body = if head { empty() } else { full(compressed) };
        return builder.body(body).unwrap_or_else(|_| internal_error());
    }
    let builder = builder.header(header::CONTENT_LENGTH, metadata.len());
    let body = if head {
        empty()
    } else {
        let stream = tokio_util::io::ReaderStream::new(file).map_ok(Frame::data);
        BodyExt::boxed(StreamBody::new(stream))
    };
    builder.body(body).unwrap_or_else(|_| internal_error())
}

/// A page listing a directory without index.html.
async fn listing(dir: &Path, url_path: &str, head: bool) -> Response<Body> {
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return text(StatusCode::FORBIDDEN, "forbidden\n");
    };
    let mut names = Vec::new();
    while let Ok(Some(entry)) = entries.next_entry().await {
        let mut name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
            name.push('/');
        }
        names.push(name);
    }
    names.sort();
    let title = html_escape(&String::from_utf8_lossy(
        &percent_decode(url_path).unwrap_or_default(),
    ));
    let mut page = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n\
         <body><h1>Index of {title}</h1>\n<ul>\n"
    );
    if url_path != "/" {
        page.push_str("<li><a href=\"../\">../</a></li>\n");
    }
    for name in names {
        page.push_str(&format!(
            "<li><a href=\"{}\">{}</a></li>\n",
            percent_encode(&name),
            html_escape(&name)
        ));
    }
    page.push_str("</ul></body></html>\n");
    let builder = Response::builder()
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CONTENT_LENGTH, page.len());
    let body = if head { empty() } else { full(page.into_bytes()) };
    builder.body(body).unwrap_or_else(|_| internal_error())
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A file name made safe for an href: everything but unreserved characters and `/` escaped.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn internal_error() -> Response<Body> {
    text(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_never_climb_out_of_the_root() {
        assert_eq!(relative_path("/a/b.txt"), Some(PathBuf::from("a/b.txt")));
        assert_eq!(relative_path("/a%20b"), Some(PathBuf::from("a b")));
        assert_eq!(relative_path("/"), Some(PathBuf::new()));
        assert_eq!(relative_path("/../etc/passwd"), None);
        assert_eq!(relative_path("/a/%2e%2e/%2E%2E/x"), None);
        assert_eq!(relative_path("/a%2f..%2fb"), None);
        assert_eq!(relative_path("/a%00"), None);
        assert_eq!(relative_path("/%zz"), None);
        assert_eq!(relative_path("/..%5c..%5cx"), None);
    }
}
