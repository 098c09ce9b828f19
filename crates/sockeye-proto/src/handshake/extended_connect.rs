//! The opening handshake over HTTP/2 (RFC 8441): an extended CONNECT instead of an upgrade.
//!
//! RFC 8441 §3: a server that sends `SETTINGS_ENABLE_CONNECT_PROTOCOL = 1` accepts a CONNECT that
//! carries a `:protocol` pseudo-header. §5: for WebSockets `:protocol` is `websocket`, `:scheme`,
//! `:authority` and `:path` are those of the URL, there is no `Sec-WebSocket-Key` or `-Accept`,
//! and `Sec-WebSocket-Version`, `-Protocol`, `-Extensions` and `Origin` mean what they mean in RFC
//! 6455. A 2xx response opens the WebSocket; the stream's DATA frames then carry RFC 6455 frames.
//!
//! This crate knows no HTTP/2 framing: `:protocol` is handed in and out as a string, and the
//! HTTP/2 layer (h2, hyper) carries it.

use http::header::{
    CONNECTION, HOST, ORIGIN, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, TE, TRANSFER_ENCODING, UPGRADE,
};
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri, Version};

use super::client::{add_offer, check_negotiated};
use super::common::{single_header, url_target};
use super::server::{ClientHello, check_websocket_version, offered_extension_list, offered_protocols};
use crate::config::Config;
use crate::error::HandshakeError;
use crate::extension::client_accept;
use crate::extension::deflate::PerMessageDeflate;

/// The value of `:protocol` that asks for a WebSocket (RFC 8441 §5).
pub const WEBSOCKET_PROTOCOL: &str = "websocket";

impl ClientHello {
    /// Checks an HTTP/2 request as a WebSocket request (RFC 8441 §4–5): `CONNECT` (else
    /// [`HandshakeError::MethodNotConnect`], 405), `:protocol` `websocket` (else 400) and one
    /// `Sec-WebSocket-Version: 13` (else 426, RFC 6455 §4.4). `Sec-WebSocket-Version` and `Origin`
    /// may appear only once (400 naming the header). `protocol` is the request's `:protocol`
    /// pseudo-header, which HTTP/2 libraries keep apart from the headers; the HTTP/2 layer checks
    /// `:authority`, which replaces `Host`.
    ///
    /// ```
    /// use sockeye_proto::handshake::ClientHello;
    /// let mut headers = http::HeaderMap::new();
    /// headers.insert("sec-websocket-version", "13".parse().unwrap());
    /// headers.insert("sec-websocket-protocol", "chat".parse().unwrap());
    /// let hello = ClientHello::from_extended_connect(&http::Method::CONNECT, Some("websocket"), &headers).unwrap();
    /// assert_eq!(hello.protocols, ["chat"]);
    /// assert_eq!(hello.accept().status(), 200);
    /// ```
    pub fn from_extended_connect(
        method: &Method,
        protocol: Option<&str>,
        headers: &HeaderMap,
    ) -> Result<ClientHello, HandshakeError> {
        if method != Method::CONNECT {
            return Err(HandshakeError::MethodNotConnect);
        }
        if !protocol.is_some_and(|p| p.eq_ignore_ascii_case(WEBSOCKET_PROTOCOL)) {
            return Err(HandshakeError::MissingHeader(":protocol: websocket"));
        }
        let version = single_header(headers, &SEC_WEBSOCKET_VERSION, "Sec-WebSocket-Version")?;
        single_header(headers, &ORIGIN, "Origin")?;
        check_websocket_version(version)?;
        Ok(ClientHello {
            key: String::new(),
            protocols: offered_protocols(headers),
            extensions: offered_extension_list(headers)?,
            version: Version::HTTP_2,
        })
    }
}

/// The HTTP/2 request that opens a WebSocket to `request.uri()` (`ws`, `wss`, `http` or `https`,
/// with a host): `CONNECT` with `:scheme` `http`/`https`, `:authority` and `:path` from the URL,
/// `Sec-WebSocket-Version: 13`, and the extensions `config` offers (RFC 8441 §5, RFC 6455 §9.1;
/// unless the request names its own `Sec-WebSocket-Extensions`). The caller adds `:protocol:
/// websocket` the way its HTTP/2 library spells it. The request's other headers (subprotocols,
/// origin, cookies) are kept; `Host`, `Upgrade`, `Connection` and `Sec-WebSocket-Key` are
/// removed, since HTTP/2 forbids connection-specific headers (RFC 9113 §8.2.2) and RFC 8441
/// uses no key.
///
/// ```
/// let request = http::Request::get("wss://example.com/chat?room=1").body(()).unwrap();
/// let config = sockeye_proto::Config::default();
/// let request = sockeye_proto::handshake::extended_connect_request(request, &config).unwrap();
/// assert_eq!(request.method(), http::Method::CONNECT);
/// assert_eq!(request.uri(), "https://example.com/chat?room=1");
/// assert_eq!(request.headers()["sec-websocket-version"], "13");
/// ```
pub fn extended_connect_request(
    mut request: Request<()>,
    config: &Config,
) -> Result<Request<()>, HandshakeError> {
    let uri = request.uri();
    let target = url_target(uri)?;
    let scheme = if target.secure { "https" } else { "http" };
    // RFC 9113 §8.3.1: `:authority` replaces `Host`; one the caller set wins over the URL's.
    let authority = match request.headers().get(HOST).and_then(|h| h.to_str().ok()) {
        Some(host) => host.to_string(),
        None => target.authority(),
    };
    let path = match uri.path_and_query().map(|p| p.as_str()) {
        None | Some("") => "/",
        Some(path) => path,
    };
    let target = Uri::builder()
        .scheme(scheme)
        .authority(authority.as_str())
        .path_and_query(path)
        .build()
        .map_err(|e| HandshakeError::InvalidUrl(format!("{uri}: {e}")))?;
    *request.uri_mut() = target;
    *request.method_mut() = Method::CONNECT;
    *request.version_mut() = Version::HTTP_2;
    let headers = request.headers_mut();
    // RFC 9113 §8.2.2: connection-specific headers are malformed in HTTP/2 (and `TE` may only
    // say `trailers`); RFC 8441 uses no key.
    for name in [HOST, UPGRADE, CONNECTION, SEC_WEBSOCKET_KEY, TRANSFER_ENCODING] {
        headers.remove(name);
    }
    for name in ["keep-alive", "proxy-connection"] {
        headers.remove(name);
    }
    if headers.get(TE).is_some_and(|te| te != "trailers") {
        headers.remove(TE);
    }
    headers.insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
    add_offer(headers, config);
    Ok(request)
}

/// Checks the server's answer to an [`extended_connect_request`] made with `config`: a 2xx status
/// (RFC 8441 §5; anything else is [`HandshakeError::Rejected`]), at most one subprotocol and one
/// that was offered, only extensions that were offered, with parameters we can honour (as over
/// HTTP/1.1: RFC 6455 §9.1, RFC 7692 §7.1). Returns the permessage-deflate state to install, if
/// the server accepted our offer.
pub fn check_extended_connect_response<B>(
    request: &Request<()>,
    response: &Response<B>,
    config: &Config,
) -> Result<Option<PerMessageDeflate>, HandshakeError> {
    let status = response.status();
    if !status.is_success() {
        return Err(HandshakeError::Rejected {
            status: status.as_u16(),
            reason: status.canonical_reason().unwrap_or("").to_string(),
        });
    }
    let accepted = check_negotiated(request.headers(), response.headers())?;
    client_accept(config, &accepted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|&(k, v)| (http::HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn server_checks_method_protocol_and_version() {
        let good = headers(&[("sec-websocket-version", "13")]);
        let cases: [(Method, Option<&str>, &HeaderMap, HandshakeError); 4] = [
            (
                Method::GET,
                Some("websocket"),
                &good,
                HandshakeError::MethodNotConnect,
            ),
            (
                Method::CONNECT,
                None,
                &good,
                HandshakeError::MissingHeader(":protocol: websocket"),
            ),
            (
                Method::CONNECT,
                Some("chat"),
                &good,
                HandshakeError::MissingHeader(":protocol: websocket"),
            ),
            (
                Method::CONNECT,
                Some("websocket"),
                &headers(&[("sec-websocket-version", "8")]),
                HandshakeError::UnsupportedVersion,
            ),
        ];
        for (method, protocol, headers, expected) in cases {
            let got = ClientHello::from_extended_connect(&method, protocol, headers).unwrap_err();
            assert_eq!(got, expected, "{method} {protocol:?}");
        }
        let statuses: Vec<u16> = [
            HandshakeError::MethodNotConnect,
            HandshakeError::MissingHeader(""),
            HandshakeError::UnsupportedVersion,
        ]
        .iter()
        .map(HandshakeError::status)
        .collect();
        assert_eq!(statuses, [405, 400, 426]);
    }

    /// Regression (issue 13): over HTTP/2 too, `Sec-WebSocket-Version` and `Origin` may appear
    /// once, and the version is exactly 13.
    #[test]
    fn server_refuses_repeated_singular_headers() {
        let mut twice = headers(&[("sec-websocket-version", "13"), ("origin", "https://a.example")]);
        twice.append("sec-websocket-version", HeaderValue::from_static("13"));
        let mut origins = headers(&[("sec-websocket-version", "13"), ("origin", "https://a.example")]);
        origins.append("origin", HeaderValue::from_static("https://b.example"));
        for (headers, name) in [(&twice, "Sec-WebSocket-Version"), (&origins, "Origin")] {
            assert_eq!(
                ClientHello::from_extended_connect(&Method::CONNECT, Some("websocket"), headers),
                Err(HandshakeError::MalformedHttp(format!("duplicate {name} header")))
            );
        }
        assert_eq!(
            ClientHello::from_extended_connect(
                &Method::CONNECT,
                Some("websocket"),
                &headers(&[("sec-websocket-version", "8, 13")])
            ),
            Err(HandshakeError::UnsupportedVersion)
        );
        let mut protocols = headers(&[("sec-websocket-version", "13"), ("sec-websocket-protocol", "a")]);
        protocols.append("sec-websocket-protocol", HeaderValue::from_static("b"));
        let hello =
            ClientHello::from_extended_connect(&Method::CONNECT, Some("websocket"), &protocols).unwrap();
        assert_eq!(hello.protocols, ["a", "b"]);
    }

    #[test]
    fn server_reads_offers_and_answers_200_without_upgrade_headers() {
        let request = headers(&[
            ("sec-websocket-version", "13"),
            ("sec-websocket-protocol", "chat, superchat"),
            (
                "sec-websocket-extensions",
                "permessage-deflate; client_max_window_bits",
            ),
        ]);
        let hello =
            ClientHello::from_extended_connect(&Method::CONNECT, Some("WebSocket"), &request).unwrap();
        assert_eq!(hello.protocols, ["chat", "superchat"]);
        assert_eq!(hello.extensions.len(), 1);
        assert_eq!(hello.version, Version::HTTP_2);
        let response = hello.accept();
        assert_eq!(response.status(), 200);
        assert!(response.headers().is_empty(), "{:?}", response.headers());
    }

    #[test]
    fn client_request_is_a_connect_without_connection_headers() {
        let request = Request::get("ws://127.0.0.1:9001")
            .header("host", "other:8080")
            .header("keep-alive", "timeout=5")
            .header("te", "gzip")
            .header("sec-websocket-protocol", "chat")
            .body(())
            .unwrap();
        let request = extended_connect_request(request, &Config::default()).unwrap();
        assert_eq!(request.uri(), "http://other:8080/");
        assert!(request.headers().get("keep-alive").is_none() && request.headers().get("te").is_none());
        let plain = extended_connect_request(
            Request::get("ws://127.0.0.1:9001").body(()).unwrap(),
            &Config::default(),
        )
        .unwrap();
        assert_eq!(plain.uri(), "http://127.0.0.1:9001/");
        assert_eq!(request.version(), Version::HTTP_2);
        assert!(request.headers().get(HOST).is_none());
        assert_eq!(request.headers()["sec-websocket-protocol"], "chat");
        let default_port = extended_connect_request(
            Request::get("WSS://h:443/x").body(()).unwrap(),
            &Config::default(),
        )
        .unwrap();
        assert_eq!(default_port.uri(), "https://h/x");
        for bad in ["ftp://h/", "/relative", "ws://h:99999/", "ws://h:80x/"] {
            let request = Request::get(bad).body(()).unwrap();
            assert!(matches!(
                extended_connect_request(request, &Config::default()),
                Err(HandshakeError::InvalidUrl(_))
            ));
        }
    }

    /// RFC 8441 §5 with RFC 7692: the offer rides on the CONNECT, the `200` carries the answer,
    /// and both ends install the state it names; an answer the offer cannot allow is refused.
    #[test]
    fn deflate_is_negotiated_over_extended_connect() {
        let config = Config::default();
        let request = extended_connect_request(Request::get("wss://h/").body(()).unwrap(), &config).unwrap();
        let hello =
            ClientHello::from_extended_connect(&Method::CONNECT, Some("websocket"), request.headers())
                .unwrap();
        let (response, extensions) = hello.accept_with(&config);
        assert_eq!(response.status(), 200);
        let client = check_extended_connect_response(&request, &response, &config).unwrap();
        let server = extensions.kept_by(&response);
        let on = cfg!(feature = "deflate");
        assert_eq!((client.is_some(), server.is_some()), (on, on));
        if on {
            assert_eq!(
                request.headers()["sec-websocket-extensions"],
                "permessage-deflate; client_max_window_bits"
            );
            let mut bad = Response::new(());
            bad.headers_mut().insert(
                "sec-websocket-extensions",
                HeaderValue::from_static("permessage-deflate; client_max_window_bits"),
            );
            assert!(matches!(
                check_extended_connect_response(&request, &bad, &config),
                Err(HandshakeError::ExtensionRejected(_))
            ));
        }
    }

    #[test]
    fn client_checks_status_and_negotiation() {
        let request = extended_connect_request(
            Request::get("ws://h/")
                .header("sec-websocket-protocol", "chat")
                .body(())
                .unwrap(),
            &Config::default(),
        )
        .unwrap();
        let c = Config::default();
        let respond = |status: u16, pairs: &[(&'static str, &'static str)]| {
            let mut response = Response::new(());
            *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
            *response.headers_mut() = headers(pairs);
            response
        };
        assert!(
            check_extended_connect_response(
                &request,
                &respond(200, &[("sec-websocket-protocol", "chat")]),
                &c
            )
            .is_ok()
        );
        assert_eq!(
            check_extended_connect_response(&request, &respond(403, &[]), &c).unwrap_err(),
            HandshakeError::Rejected {
                status: 403,
                reason: "Forbidden".into()
            }
        );
        assert!(matches!(
            check_extended_connect_response(
                &request,
                &respond(200, &[("sec-websocket-protocol", "other")]),
                &c
            ),
            Err(HandshakeError::UnexpectedSubprotocol(_))
        ));
        assert!(matches!(
            check_extended_connect_response(
                &request,
                &respond(200, &[("sec-websocket-extensions", "x-unknown")]),
                &c
            ),
            Err(HandshakeError::UnexpectedExtension(_))
        ));
    }
}
