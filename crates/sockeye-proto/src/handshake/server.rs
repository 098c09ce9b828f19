//! The server side of the opening handshake (RFC 6455 §4.2).

use base64::Engine as _;
use http::header::HeaderName;
use http::header::{
    CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_EXTENSIONS,
    SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version};

use super::common::{
    accept_key, check_parsed, header_has_token, header_list, shared_part, single_header, to_header_map,
    write_headers,
};
use crate::config::Config;
use crate::error::HandshakeError;
use crate::extension::deflate::PerMessageDeflate;
use crate::extension::offer::{ExtensionOffer, parse_extensions};
use crate::extension::server_accept;

/// How many header slots [`parse_request`] keeps on the stack: the default
/// [`max_handshake_headers`](Config::max_handshake_headers).
const STACK_HEADERS: usize = 64;

/// Parses an HTTP request head from the start of `buf`.
///
/// `Ok(None)`: incomplete, read more (the size limit is enforced on incomplete heads too).
/// `Ok(Some((request, n)))`: the head was the first `n` bytes; what follows belongs to the
/// WebSocket connection. The request is not yet checked as a WebSocket upgrade: see
/// [`ClientHello::from_request`].
pub fn parse_request(buf: &[u8], config: &Config) -> Result<Option<(Request<()>, usize)>, HandshakeError> {
    // The header slots live on the stack up to the default limit: left uninitialised, they cost
    // nothing per request, where a `Vec` of `EMPTY_HEADER`s was an allocation and 2 KiB of
    // stores on every connection. A larger configured limit takes them from the heap.
    let mut on_stack = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut on_heap = Vec::new();
    let slots = if config.max_handshake_headers <= STACK_HEADERS {
        &mut on_stack[..config.max_handshake_headers]
    } else {
        on_heap.resize_with(config.max_handshake_headers, std::mem::MaybeUninit::uninit);
        &mut on_heap[..]
    };
    let mut parsed = httparse::Request::new(&mut []);
    let status = parsed.parse_with_uninit_headers(buf, slots);
    if matches!(status, Err(httparse::Error::Version)) && names_another_http_version(buf) {
        // httparse knows HTTP/1.0 and 1.1 only; any other version is a 505 too, not a 400.
        return Err(HandshakeError::UnsupportedHttpVersion);
    }
    let Some(n) = check_parsed(status, buf.len(), config)? else {
        return Ok(None);
    };
    let method = Method::from_bytes(parsed.method.unwrap_or("").as_bytes())
        .map_err(|_| HandshakeError::MalformedHttp("bad method".into()))?;
    // One copy of the head; the target and the header values are slices of it.
    let head = bytes::Bytes::copy_from_slice(&buf[..n]);
    let uri = match parsed.path {
        Some(path) => http::Uri::from_maybe_shared(shared_part(&head, buf, path.as_bytes())),
        None => Ok(http::Uri::from_static("/")),
    }
    .map_err(|_| HandshakeError::MalformedHttp("bad request target".into()))?;
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = if parsed.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    *request.headers_mut() = to_header_map(&head, buf, parsed.headers)?;
    Ok(Some((request, n)))
}

/// Whether the request line (complete or not) ends in a well-formed `HTTP/x[.y]` other than
/// HTTP/1.0 and HTTP/1.1 (`HTTP/2.0`, `HTTP/0.9`). A line that ends in `HTTP/1.1` but failed the
/// version check is malformed elsewhere (a space in the target), not of another version.
fn names_another_http_version(buf: &[u8]) -> bool {
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(version) = line
        .rsplit(|&b| b == b' ')
        .next()
        .and_then(|v| v.strip_prefix(b"HTTP/"))
    else {
        return false;
    };
    let well_formed = match version {
        [major] => major.is_ascii_digit(),
        [major, b'.', minor] => major.is_ascii_digit() && minor.is_ascii_digit(),
        _ => false,
    };
    well_formed && version != b"1.0" && version != b"1.1"
}

/// Whether a `Host` value is a valid `uri-host [":" port]` (RFC 9112 §3.2, RFC 9110 §7.2): an
/// authority without user information and with a port, if any, of at most 65535.
fn is_valid_host(value: &HeaderValue) -> bool {
    let Ok(text) = value.to_str() else {
        return false;
    };
    !text.is_empty()
        && !text.contains('@')
        && text.parse::<http::uri::Authority>().is_ok()
        && super::common::authority_port(text).is_ok()
}

/// What a valid WebSocket upgrade request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The `Sec-WebSocket-Key`.
    pub key: String,
    /// The subprotocols offered, in the client's order of preference.
    pub protocols: Vec<String>,
    /// The extensions offered, in the client's order of preference.
    pub extensions: Vec<ExtensionOffer>,
    /// `HTTP/1.1` for an upgrade (§4.2.1, answered `101`), `HTTP/2` for an extended CONNECT
    /// (RFC 8441 §5, answered `200`, and `key` is empty: RFC 8441 has no key).
    pub version: Version,
}

impl ClientHello {
    /// Checks that `request` is a WebSocket upgrade (§4.2.1): `GET`, HTTP/1.1 or later (else 505),
    /// one valid `Host` (RFC 9112 §3.2), `Upgrade: websocket`, `Connection: Upgrade`, one
    /// `Sec-WebSocket-Version: 13` and one key of 16 base64-encoded bytes. `Host`,
    /// `Sec-WebSocket-Key`, `Sec-WebSocket-Version` and `Origin` may appear only once (RFC 6455
    /// §11.3, RFC 6454 §7.3): a repeated one is a 400 that names it. Header names and tokens are
    /// compared without regard to case.
    pub fn from_request<B>(request: &Request<B>) -> Result<ClientHello, HandshakeError> {
        Self::from_head(request.method(), request.version(), request.headers())
    }

    /// [`from_request`](Self::from_request) for a request head held in pieces (an
    /// `http::request::Parts`, a framework's extractor).
    pub fn from_head(
        method: &Method,
        version: Version,
        headers: &HeaderMap,
    ) -> Result<ClientHello, HandshakeError> {
        if method != Method::GET {
            return Err(HandshakeError::MethodNotGet);
        }
        if version < Version::HTTP_11 {
            return Err(HandshakeError::UnsupportedHttpVersion);
        }
        let host = single_header(headers, &HOST, "Host")?;
        let key = single_header(headers, &SEC_WEBSOCKET_KEY, "Sec-WebSocket-Key")?;
        let ws_version = single_header(headers, &SEC_WEBSOCKET_VERSION, "Sec-WebSocket-Version")?;
        single_header(headers, &ORIGIN, "Origin")?;
        match host {
            None => return Err(HandshakeError::MissingHeader("Host")),
            Some(host) if !is_valid_host(host) => return Err(HandshakeError::InvalidHeader("Host")),
            Some(_) => {}
        }
        if !header_has_token(headers, &UPGRADE, "websocket") {
            return Err(HandshakeError::MissingHeader("Upgrade: websocket"));
        }
        if !header_has_token(headers, &CONNECTION, "upgrade") {
            return Err(HandshakeError::MissingHeader("Connection: Upgrade"));
        }
        check_websocket_version(ws_version)?;
        let key = match key.map(|k| k.to_str()) {
            Some(Ok(k)) => k.trim(),
            Some(Err(_)) => return Err(HandshakeError::InvalidHeader("Sec-WebSocket-Key")),
            None => return Err(HandshakeError::MissingHeader("Sec-WebSocket-Key")),
        };
        // §4.2.1: "a base64-encoded value that, when decoded, is 16 bytes in length".
        // Decoded on the stack: a key too long for 16 bytes fails to fit and is refused too.
        let mut nonce = [0u8; 18];
        match base64::engine::general_purpose::STANDARD.decode_slice(key, &mut nonce) {
            Ok(16) => {}
            _ => return Err(HandshakeError::InvalidHeader("Sec-WebSocket-Key")),
        }
        Ok(ClientHello {
            key: key.to_string(),
            protocols: offered_protocols(headers),
            extensions: offered_extension_list(headers)?,
            version: Version::HTTP_11,
        })
    }

    /// The first of `supported` (the server's order of preference) that the client offered.
    pub fn choose_subprotocol<'a>(&self, supported: &[&'a str]) -> Option<&'a str> {
        supported
            .iter()
            .copied()
            .find(|s| self.protocols.iter().any(|p| p == s))
    }

    /// The response that accepts this request with the extensions `config` agrees to, and the
    /// state that goes with them: [`accept`](Self::accept)'s response with a
    /// `Sec-WebSocket-Extensions` naming the first permessage-deflate offer `config` can honour
    /// (RFC 6455 §9.1, RFC 7692 §5.1), if any. The response may still be edited (a subprotocol,
    /// cookies; an application may even remove the extension); [`NegotiatedExtensions::kept_by`]
    /// the response finally sent gives the state to install.
    pub fn accept_with(&self, config: &Config) -> (Response<()>, NegotiatedExtensions) {
        let mut response = self.accept();
        let deflate =
            server_accept(config, &self.extensions).map(|(state, answer)| (state, answer.to_string()));
        if let Some((_, answer)) = &deflate
            && let Ok(value) = HeaderValue::from_str(answer)
        {
            response.headers_mut().insert(SEC_WEBSOCKET_EXTENSIONS, value);
        }
        (response, NegotiatedExtensions { deflate })
    }

    /// The response that accepts this request, with no extension: `101 Switching Protocols`
    /// (§4.2.2), or for an HTTP/2 extended CONNECT `200 OK` with no upgrade headers (RFC 8441
    /// §5). Add a `Sec-WebSocket-Protocol` (one the client offered), cookies or other headers to
    /// it before sending; [`accept_with`](Self::accept_with) negotiates extensions too.
    pub fn accept(&self) -> Response<()> {
        let mut response = Response::new(());
        if self.version >= Version::HTTP_2 {
            return response;
        }
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = response.headers_mut();
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
        // base64 output is always a valid header value; the key's buffer becomes the value's.
        let accept = bytes::Bytes::from(accept_key(self.key.as_bytes()).into_bytes());
        if let Ok(v) = HeaderValue::from_maybe_shared(accept) {
            h.insert(SEC_WEBSOCKET_ACCEPT, v);
        }
        response
    }
}

/// The extensions a server agreed to in its accepting response ([`ClientHello::accept_with`]),
/// held until that response is final.
#[derive(Debug)]
pub struct NegotiatedExtensions {
    /// The permessage-deflate state and the `Sec-WebSocket-Extensions` value that agreed to it.
    deflate: Option<(PerMessageDeflate, String)>,
}

impl NegotiatedExtensions {
    /// The permessage-deflate state to install, if `response`, the one actually sent, still
    /// carries the answer it was negotiated with: the extensions in use are those the response
    /// names (RFC 6455 §9.1), and an application that removed or changed the header (to refuse
    /// compression for this client) has the connection run without it.
    pub fn kept_by<B>(self, response: &Response<B>) -> Option<PerMessageDeflate> {
        let sent = response
            .headers()
            .get(SEC_WEBSOCKET_EXTENSIONS)
            .and_then(|v| v.to_str().ok());
        self.deflate
            .filter(|(_, answer)| Some(answer.as_str()) == sent)
            .map(|(state, _)| state)
    }
}

/// §4.4: `Sec-WebSocket-Version` must be exactly `13` (one value, §4.2.1 item 6); anything else,
/// or none, gets 426 with the versions we speak.
pub(super) fn check_websocket_version(value: Option<&HeaderValue>) -> Result<(), HandshakeError> {
    match value.map(|v| v.as_bytes().trim_ascii()) {
        Some(b"13") => Ok(()),
        _ => Err(HandshakeError::UnsupportedVersion),
    }
}

/// The subprotocols a request offers, in its order of preference.
pub(super) fn offered_protocols(headers: &HeaderMap) -> Vec<String> {
    header_list(headers, &SEC_WEBSOCKET_PROTOCOL)
        .map(str::to_string)
        .collect()
}

/// The extensions a request offers, in its order of preference.
pub(super) fn offered_extension_list(headers: &HeaderMap) -> Result<Vec<ExtensionOffer>, HandshakeError> {
    let values: Vec<&str> = headers
        .get_all(SEC_WEBSOCKET_EXTENSIONS)
        .iter()
        .map(|v| v.to_str())
        .collect::<Result<_, _>>()
        .map_err(|_| HandshakeError::InvalidHeader("Sec-WebSocket-Extensions"))?;
    parse_extensions(values).map_err(|_| HandshakeError::InvalidHeader("Sec-WebSocket-Extensions"))
}

/// The response that refuses a request that failed [`ClientHello::from_request`]: the error's status
/// (400, 405, 426 with `Sec-WebSocket-Version: 13`, 431, 505) and a short plain-text body.
pub fn reject_response(error: &HandshakeError) -> Response<String> {
    let mut response = Response::new(format!("{error}\n"));
    *response.status_mut() = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST);
    if *error == HandshakeError::UnsupportedVersion {
        response
            .headers_mut()
            .insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
    }
    response
}

/// The answer to a client beyond a server's connection limit: `503 Service Unavailable`, with
/// `Retry-After: 1`, so that it tries again rather than hangs.
pub fn service_unavailable() -> Response<String> {
    let mut response = Response::new("server at its connection limit; retry later\n".to_string());
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Writes a response head and body in HTTP/1.1 wire format. Responses other than 101 get a
/// `Content-Length` (and a plain-text `Content-Type` if none is set) and `Connection: close`.
pub fn encode_response<B: ResponseBody>(response: &Response<B>) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + response.body().body_bytes().len());
    write_response(response, &mut out);
    out
}

/// [`encode_response`] appended to `out` (a connection's own output buffer).
pub fn write_response<B: ResponseBody>(response: &Response<B>, out: &mut Vec<u8>) {
    let status = response.status();
    let body = response.body().body_bytes();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
    let headers = response.headers();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        write_headers(out, headers.iter());
    } else {
        // The framing headers are ours to set: the application's are left out, not repeated.
        let own = |name: &HeaderName| name == CONTENT_LENGTH || name == CONNECTION;
        write_headers(out, headers.iter().filter(|(name, _)| !own(name)));
        let length = HeaderValue::from(body.len());
        write_headers(
            out,
            [
                (&CONTENT_LENGTH, &length),
                (&CONNECTION, &HeaderValue::from_static("close")),
            ],
        );
        if !body.is_empty() && !headers.contains_key(CONTENT_TYPE) {
            let plain = HeaderValue::from_static("text/plain; charset=utf-8");
            write_headers(out, [(&CONTENT_TYPE, &plain)]);
        }
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// A response body [`encode_response`] can write: `()` (none), `String`, `&str`, `Vec<u8>` or `Bytes`.
pub trait ResponseBody {
    /// The body's bytes.
    fn body_bytes(&self) -> &[u8];
}

impl ResponseBody for () {
    fn body_bytes(&self) -> &[u8] {
        &[]
    }
}

impl ResponseBody for String {
    fn body_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl ResponseBody for &str {
    fn body_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl ResponseBody for Vec<u8> {
    fn body_bytes(&self) -> &[u8] {
        self
    }
}

impl ResponseBody for bytes::Bytes {
    fn body_bytes(&self) -> &[u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_REQUEST: &str = "GET /chat?x=1 HTTP/1.1\r\nHost: server.example.com\r\nUpgrade: websocket\r\n\
        Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Origin: http://example.com\r\nSec-WebSocket-Protocol: chat, superchat\r\nSec-WebSocket-Version: 13\r\n\r\n";

    fn hello(text: &str) -> Result<ClientHello, HandshakeError> {
        let (req, _) = parse_request(text.as_bytes(), &Config::default())?.expect("complete");
        ClientHello::from_request(&req)
    }

    #[test]
    fn accepts_the_rfc_example() {
        let (req, n) = parse_request(RFC_REQUEST.as_bytes(), &Config::default())
            .unwrap()
            .unwrap();
        assert_eq!(n, RFC_REQUEST.len());
        assert_eq!(req.uri().path(), "/chat");
        assert_eq!(req.uri().query(), Some("x=1"));
        assert_eq!(req.headers()["origin"], "http://example.com");
        let hello = ClientHello::from_request(&req).unwrap();
        assert_eq!(hello.protocols, ["chat", "superchat"]);
        assert_eq!(
            hello.choose_subprotocol(&["superchat", "chat"]),
            Some("superchat")
        );
        let text = String::from_utf8(encode_response(&hello.accept())).unwrap();
        assert!(text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"));
        assert!(text.contains("sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
    }

    /// RFC 7692 §5.1: the response names the first offer the config can honour; the state is
    /// kept only while the response finally sent still names that answer (RFC 6455 §9.1).
    #[test]
    fn accept_with_negotiates_and_the_final_response_decides() {
        let text = RFC_REQUEST.replace(
            "Sec-WebSocket-Version: 13\r\n",
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: x-other, permessage-deflate; client_max_window_bits\r\n",
        );
        let h = hello(&text).unwrap();
        let config = Config::default();
        let (response, extensions) = h.accept_with(&config);
        assert_eq!(response.status(), 101);
        let named = response.headers().get(SEC_WEBSOCKET_EXTENSIONS).cloned();
        if !cfg!(feature = "deflate") {
            assert_eq!(named, None);
            assert!(extensions.kept_by(&response).is_none());
            return;
        }
        assert_eq!(named.unwrap(), "permessage-deflate");
        assert!(extensions.kept_by(&response).is_some());
        let (mut refused, extensions) = h.accept_with(&config);
        refused.headers_mut().remove(SEC_WEBSOCKET_EXTENSIONS);
        assert!(
            extensions.kept_by(&refused).is_none(),
            "the application refused it"
        );
        let (mut changed, extensions) = h.accept_with(&config);
        changed.headers_mut().insert(
            SEC_WEBSOCKET_EXTENSIONS,
            HeaderValue::from_static("permessage-deflate; server_no_context_takeover"),
        );
        assert!(extensions.kept_by(&changed).is_none(), "not what was negotiated");
    }

    #[test]
    fn every_prefix_is_incomplete() {
        for cut in 0..RFC_REQUEST.len() {
            assert!(matches!(
                parse_request(&RFC_REQUEST.as_bytes()[..cut], &Config::default()),
                Ok(None)
            ));
        }
    }

    #[test]
    fn rejects_what_section_4_2_1_forbids() {
        let cases = [
            (RFC_REQUEST.replace("GET", "POST"), HandshakeError::MethodNotGet),
            (
                RFC_REQUEST.replace("HTTP/1.1", "HTTP/1.0"),
                HandshakeError::UnsupportedHttpVersion,
            ),
            (
                RFC_REQUEST.replace("Host", "X-Host"),
                HandshakeError::MissingHeader("Host"),
            ),
            (
                RFC_REQUEST.replace("Upgrade: websocket", "Upgrade: h2c"),
                HandshakeError::MissingHeader("Upgrade: websocket"),
            ),
            (
                RFC_REQUEST.replace("keep-alive, Upgrade", "keep-alive"),
                HandshakeError::MissingHeader("Connection: Upgrade"),
            ),
            (
                RFC_REQUEST.replace("Version: 13", "Version: 8"),
                HandshakeError::UnsupportedVersion,
            ),
            (
                RFC_REQUEST.replace("dGhlIHNhbXBsZSBub25jZQ==", "c2hvcnQ="),
                HandshakeError::InvalidHeader("Sec-WebSocket-Key"),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(hello(&text), Err(want.clone()), "{text}");
        }
        let response = reject_response(&HandshakeError::UnsupportedVersion);
        let text = String::from_utf8(encode_response(&response)).unwrap();
        assert!(text.starts_with("HTTP/1.1 426 Upgrade Required\r\n"), "{text}");
        assert!(text.contains("sec-websocket-version: 13\r\n"));
        assert!(text.contains("content-length: "));
    }

    /// Regression (issue 13): a repeated `Sec-WebSocket-Key` (or other singular header) was
    /// accepted, the first value winning.
    #[test]
    fn refuses_repeated_singular_headers_and_names_them() {
        let add = |extra: &str| RFC_REQUEST.replace("\r\n\r\n", &format!("\r\n{extra}\r\n\r\n"));
        let cases = [
            ("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Key"),
            ("sec-websocket-key: AAAAAAAAAAAAAAAAAAAAAA==", "Sec-WebSocket-Key"),
            ("Host: other.example.com", "Host"),
            ("Host: server.example.com", "Host"),
            ("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version"),
            ("Origin: http://evil.example", "Origin"),
        ];
        for (extra, name) in cases {
            let err = hello(&add(extra)).unwrap_err();
            assert_eq!(
                err,
                HandshakeError::MalformedHttp(format!("duplicate {name} header")),
                "{extra}"
            );
            assert_eq!(err.status(), 400);
            let text = String::from_utf8(encode_response(&reject_response(&err))).unwrap();
            assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
            assert!(
                text.ends_with(&format!("malformed HTTP: duplicate {name} header\n")),
                "{text}"
            );
        }
        // One value, but a list of them: not "a value of 13" (§4.2.1 item 6).
        for versions in ["13, 8", "8, 13", "13,13"] {
            assert_eq!(
                hello(&RFC_REQUEST.replace("Version: 13", &format!("Version: {versions}"))),
                Err(HandshakeError::UnsupportedVersion),
                "{versions}"
            );
        }
        // List headers may be split over several field lines.
        let split = RFC_REQUEST
            .replace(
                "Connection: keep-alive, Upgrade",
                "Connection: keep-alive\r\nConnection: Upgrade",
            )
            .replace(
                "Sec-WebSocket-Protocol: chat, superchat",
                "Sec-WebSocket-Protocol: chat\r\nSec-WebSocket-Protocol: superchat\r\n\
                 Sec-WebSocket-Extensions: x-a\r\nSec-WebSocket-Extensions: x-b\r\nUpgrade: websocket",
            );
        let hello = hello(&split).unwrap();
        assert_eq!(hello.protocols, ["chat", "superchat"]);
        assert_eq!(hello.extensions.len(), 2);
    }

    /// RFC 9112 §3.2: a `Host` with an invalid value is a 400.
    #[test]
    fn refuses_an_invalid_host() {
        for host in [
            "",
            "a b",
            "user@server.example.com",
            "h:99999",
            "h:8008x",
            "h:abc",
            "[::1",
        ] {
            assert_eq!(
                hello(&RFC_REQUEST.replace("Host: server.example.com", &format!("Host: {host}"))),
                Err(HandshakeError::InvalidHeader("Host")),
                "{host:?}"
            );
        }
        for host in ["h:8080", "[::1]:8080", "[::1]", "127.0.0.1", "h:"] {
            assert!(
                hello(&RFC_REQUEST.replace("Host: server.example.com", &format!("Host: {host}"))).is_ok(),
                "{host:?}"
            );
        }
    }

    /// HTTP/1.0 was already a 505; versions httparse does not know were a 400 ("malformed").
    #[test]
    fn other_http_versions_are_505() {
        for version in ["HTTP/1.0", "HTTP/2.0", "HTTP/0.9", "HTTP/3", "HTTP/1.2"] {
            let text = RFC_REQUEST.replace("HTTP/1.1", version);
            let err = hello(&text).unwrap_err();
            assert_eq!(err, HandshakeError::UnsupportedHttpVersion, "{version}");
            assert_eq!(err.status(), 505);
        }
        // Incomplete, but already of another version.
        assert_eq!(
            parse_request(b"GET / HTTP/2", &Config::default()).unwrap_err(),
            HandshakeError::UnsupportedHttpVersion
        );
        // A broken request line is malformed, whatever version it ends with.
        for bad in ["GET /a b HTTP/1.1", "GET / HTTX/1.1", "GET / HTTP/1.1x"] {
            let text = RFC_REQUEST.replace("GET /chat?x=1 HTTP/1.1", bad);
            assert!(
                matches!(hello(&text), Err(HandshakeError::MalformedHttp(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn bounds_the_head_size_even_when_incomplete() {
        let config = Config::default();
        let dribble = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(config.max_handshake_size));
        assert_eq!(
            parse_request(dribble.as_bytes(), &config).unwrap_err(),
            HandshakeError::HeadTooLarge {
                limit: config.max_handshake_size
            }
        );
        let many: String = (0..100).map(|i| format!("X-{i}: 1\r\n")).collect();
        let text = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(parse_request(text.as_bytes(), &config).is_err());
    }
}
