//! The client side of the opening handshake (RFC 6455 §4.1).

use base64::Engine as _;
use http::header::{
    CONNECTION, HOST, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_EXTENSIONS, SEC_WEBSOCKET_KEY,
    SEC_WEBSOCKET_PROTOCOL, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use http::{HeaderValue, Request, Response, StatusCode};

use super::common::{
    accept_key, check_parsed, header_has_token, header_list, single_header, to_header_map, url_target,
    write_headers,
};
use crate::config::Config;
use crate::error::HandshakeError;
use crate::extension::deflate::PerMessageDeflate;
use crate::extension::offer::{ExtensionOffer, parse_extensions};
use crate::extension::{client_accept, client_offer};

/// A client's opening handshake in progress: the request to send and what the response must say.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    request: Request<()>,
    key: String,
}

impl ClientHandshake {
    /// Prepares the request for `request.uri()`, a URL as [`url_target`](super::url_target) reads
    /// it (scheme `ws`, `wss`, `http` or `https` in any case, a host, a valid port if any).
    ///
    /// Adds the extensions `config` offers (§9.1: permessage-deflate, RFC 7692 §5, unless the
    /// request already carries a `Sec-WebSocket-Extensions` of its own), `Host` (unless set),
    /// `Upgrade`, `Connection`, `Sec-WebSocket-Version: 13` and a `Sec-WebSocket-Key` made from
    /// `nonce`, which must be 16 random bytes chosen for this connection (§4.1). Any other
    /// headers in `request` (subprotocols, cookies, authorization, origin) are sent as they are.
    /// [`parse_response`](Self::parse_response) checks the answer against the same `config`.
    ///
    /// ```
    /// use sockeye_proto::{Config, handshake::ClientHandshake};
    /// let request = http::Request::get("ws://example.com/chat?room=1").body(()).unwrap();
    /// let hs = ClientHandshake::new(request, [7; 16], &Config::default()).unwrap();
    /// let text = String::from_utf8(hs.encode_request()).unwrap();
    /// assert!(text.starts_with("GET /chat?room=1 HTTP/1.1\r\n"));
    /// assert!(text.contains("host: example.com\r\n"));
    /// ```
    pub fn new(mut request: Request<()>, nonce: [u8; 16], config: &Config) -> Result<Self, HandshakeError> {
        let host = url_target(request.uri())?.authority();
        let key = base64::engine::general_purpose::STANDARD.encode(nonce);
        let headers = request.headers_mut();
        add_offer(headers, config);
        if !headers.contains_key(HOST) {
            headers.insert(HOST, header_value(&host)?);
        }
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
        headers.insert(SEC_WEBSOCKET_KEY, header_value(&key)?);
        headers.insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        Ok(ClientHandshake { request, key })
    }

    /// The request that will be sent.
    pub fn request(&self) -> &Request<()> {
        &self.request
    }

    /// The request in HTTP/1.1 wire format.
    pub fn encode_request(&self) -> Vec<u8> {
        let path = self.request.uri().path_and_query().map_or("/", |p| p.as_str());
        let path = if path.is_empty() { "/" } else { path };
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        write_headers(&mut out, self.request.headers());
        out.extend_from_slice(b"\r\n");
        out
    }

    /// Parses and checks the server's response from the start of `buf`, and the extensions it
    /// accepted against `config`, the one the request was made with (§9.1; RFC 7692 §7.1).
    ///
    /// `Ok(None)`: the head is incomplete, read more. `Ok(Some((accepted, n)))`: the handshake
    /// succeeded and the first `n` bytes of `buf` were the response head; anything after them is
    /// WebSocket data for the connection, which installs `accepted.deflate`. An extension that
    /// was not offered is [`HandshakeError::UnexpectedExtension`], parameters we cannot honour
    /// [`HandshakeError::ExtensionRejected`].
    pub fn parse_response(
        &self,
        buf: &[u8],
        config: &Config,
    ) -> Result<Option<(AcceptedResponse, usize)>, HandshakeError> {
        let mut slots = vec![httparse::EMPTY_HEADER; config.max_handshake_headers];
        let mut parsed = httparse::Response::new(&mut slots);
        let Some(n) = check_parsed(parsed.parse(buf), buf.len(), config)? else {
            return Ok(None);
        };
        let status = parsed.code.unwrap_or(0);
        let headers = to_header_map(&bytes::Bytes::copy_from_slice(&buf[..n]), buf, parsed.headers)?;
        // §4.1: "If the status code received from the server is not 101, the client handles the
        // response per HTTP procedures" — for us, a failed connection attempt that says why.
        if status != 101 {
            let reason = parsed.reason.unwrap_or("").to_string();
            return Err(HandshakeError::Rejected { status, reason });
        }
        if !header_has_token(&headers, &UPGRADE, "websocket") {
            return Err(HandshakeError::MissingHeader("Upgrade: websocket"));
        }
        if !header_has_token(&headers, &CONNECTION, "upgrade") {
            return Err(HandshakeError::MissingHeader("Connection: Upgrade"));
        }
        // §11.3.3: it "MUST NOT appear more than once in an HTTP response".
        match single_header(&headers, &SEC_WEBSOCKET_ACCEPT, "Sec-WebSocket-Accept")? {
            Some(v) if v.as_bytes() == accept_key(self.key.as_bytes()).as_bytes() => {}
            Some(_) => return Err(HandshakeError::AcceptMismatch),
            None => return Err(HandshakeError::MissingHeader("Sec-WebSocket-Accept")),
        }
        let accepted = check_negotiated(self.request.headers(), &headers)?;
        let deflate = client_accept(config, &accepted)?;
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        *response.headers_mut() = headers;
        Ok(Some((AcceptedResponse { response, deflate }, n)))
    }

    /// The extensions this request offers.
    pub fn offered_extensions(&self) -> Result<Vec<ExtensionOffer>, HandshakeError> {
        offered_extensions(self.request.headers())
    }
}

/// The server's response that accepted a client's opening handshake, and the extension state
/// that comes with it (RFC 6455 §4.1, §9.1).
#[derive(Debug)]
#[non_exhaustive]
pub struct AcceptedResponse {
    /// The response: `101 Switching Protocols` over HTTP/1.1, its status and headers checked.
    pub response: Response<()>,
    /// The permessage-deflate state to install with
    /// [`Connection::set_deflate`](crate::Connection::set_deflate), if the server accepted our
    /// offer (RFC 7692 §7.1).
    pub deflate: Option<PerMessageDeflate>,
}

/// Adds the extensions `config` offers to a request (§9.1), unless it names its own.
pub(super) fn add_offer(request: &mut http::HeaderMap, config: &Config) {
    if !request.contains_key(SEC_WEBSOCKET_EXTENSIONS)
        && let Some(offer) = client_offer(config)
        && let Ok(value) = HeaderValue::from_str(&offer.to_string())
    {
        request.insert(SEC_WEBSOCKET_EXTENSIONS, value);
    }
}

/// The extensions a request's headers offer.
fn offered_extensions(request: &http::HeaderMap) -> Result<Vec<ExtensionOffer>, HandshakeError> {
    let values = request.get_all(SEC_WEBSOCKET_EXTENSIONS);
    parse_extensions(values.iter().filter_map(|v| v.to_str().ok()))
        .map_err(|_| HandshakeError::InvalidHeader("Sec-WebSocket-Extensions"))
}

/// What a successful response may choose, whatever the HTTP version (RFC 6455 §4.1, RFC 8441
/// §5): at most one subprotocol, one the request offered, and only extensions it offered (§9.1).
/// Returns the extensions it accepted, for their parameters to be checked.
pub(super) fn check_negotiated(
    request: &http::HeaderMap,
    response: &http::HeaderMap,
) -> Result<Vec<ExtensionOffer>, HandshakeError> {
    let chosen: Vec<&str> = header_list(response, &SEC_WEBSOCKET_PROTOCOL).collect();
    if let Some(&p) = chosen.first() {
        let offered = header_list(request, &SEC_WEBSOCKET_PROTOCOL).any(|o| o == p);
        if !offered || chosen.len() > 1 {
            return Err(HandshakeError::UnexpectedSubprotocol(chosen.join(", ")));
        }
    }
    let offered = offered_extensions(request)?;
    let accepted = response_extensions(response)?;
    if let Some(ext) = accepted
        .iter()
        .find(|e| !offered.iter().any(|o| o.name == e.name))
    {
        return Err(HandshakeError::UnexpectedExtension(ext.to_string()));
    }
    Ok(accepted)
}

/// The extensions a response accepted.
fn response_extensions(headers: &http::HeaderMap) -> Result<Vec<ExtensionOffer>, HandshakeError> {
    let values = headers.get_all(SEC_WEBSOCKET_EXTENSIONS);
    let strs: Vec<&str> = values
        .iter()
        .map(|v| v.to_str())
        .collect::<Result<_, _>>()
        .map_err(|_| HandshakeError::InvalidHeader("Sec-WebSocket-Extensions"))?;
    parse_extensions(strs).map_err(|_| HandshakeError::InvalidHeader("Sec-WebSocket-Extensions"))
}

fn header_value(s: &str) -> Result<HeaderValue, HandshakeError> {
    HeaderValue::from_str(s)
        .map_err(|_| HandshakeError::InvalidUrl(format!("{s:?} is not a valid header value")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake() -> ClientHandshake {
        let request = Request::get("ws://127.0.0.1:9001/runCase?case=1")
            .header(SEC_WEBSOCKET_PROTOCOL, "chat, superchat")
            .body(())
            .unwrap();
        ClientHandshake::new(request, *b"the sample nonce", &Config::default()).unwrap()
    }

    fn response(extra: &str) -> String {
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\nConnection: keep-alive, upgrade\r\n\
             Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n{extra}\r\n"
        )
    }

    #[test]
    fn request_has_the_required_headers() {
        let text = String::from_utf8(handshake().encode_request()).unwrap();
        assert!(text.starts_with("GET /runCase?case=1 HTTP/1.1\r\n"), "{text}");
        for h in [
            "host: 127.0.0.1:9001",
            "upgrade: websocket",
            "connection: Upgrade",
            "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==",
            "sec-websocket-version: 13",
        ] {
            assert!(text.contains(&format!("{h}\r\n")), "missing {h} in {text}");
        }
    }

    #[test]
    fn accepts_a_good_response_and_keeps_leftover_bytes() {
        let hs = handshake();
        let mut bytes = response("Sec-WebSocket-Protocol: chat\r\n").into_bytes();
        let head = bytes.len();
        bytes.extend_from_slice(b"\x81\x02hi");
        let (accepted, n) = hs.parse_response(&bytes, &Config::default()).unwrap().unwrap();
        assert_eq!(n, head);
        assert_eq!(accepted.response.headers()[SEC_WEBSOCKET_PROTOCOL], "chat");
        assert!(accepted.deflate.is_none(), "no extension accepted");
        // Every prefix of the head is incomplete, never an error.
        for cut in 0..head {
            assert!(matches!(
                hs.parse_response(&bytes[..cut], &Config::default()),
                Ok(None)
            ));
        }
    }

    #[test]
    fn rejects_bad_responses() {
        let hs = handshake();
        let c = Config::default();
        let check = |text: &str| hs.parse_response(text.as_bytes(), &c).unwrap_err();
        assert_eq!(
            check("HTTP/1.1 403 Forbidden\r\n\r\n"),
            HandshakeError::Rejected {
                status: 403,
                reason: "Forbidden".into()
            }
        );
        assert_eq!(
            check(&response("").replace("s3pP", "AAAA")),
            HandshakeError::AcceptMismatch
        );
        assert_eq!(
            check(&response("Sec-WebSocket-Protocol: other\r\n")),
            HandshakeError::UnexpectedSubprotocol("other".into())
        );
        assert!(matches!(
            check(&response("Sec-WebSocket-Extensions: x-not-offered\r\n")),
            HandshakeError::UnexpectedExtension(_)
        ));
        assert_eq!(
            check(&response("").replace("Upgrade: WebSocket", "Upgrade: h2c")),
            HandshakeError::MissingHeader("Upgrade: websocket")
        );
        let huge = format!("HTTP/1.1 101 OK\r\nX: {}\r\n", "a".repeat(20_000));
        assert_eq!(
            check(&huge),
            HandshakeError::HeadTooLarge {
                limit: c.max_handshake_size
            }
        );
    }

    /// Regression (issue 13): a second `Sec-WebSocket-Accept` was ignored (§11.3.3: "MUST NOT
    /// appear more than once in an HTTP response"); list headers may still be split.
    #[test]
    fn refuses_a_repeated_accept_header() {
        let hs = handshake();
        let c = Config::default();
        for extra in [
            "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n",
            "sec-websocket-accept: AAAA\r\n",
        ] {
            let err = hs.parse_response(response(extra).as_bytes(), &c).unwrap_err();
            assert_eq!(
                err,
                HandshakeError::MalformedHttp("duplicate Sec-WebSocket-Accept header".into())
            );
            assert_eq!(
                err.to_string(),
                "malformed HTTP: duplicate Sec-WebSocket-Accept header"
            );
        }
        let split = response("Connection: Upgrade\r\nUpgrade: websocket\r\n")
            .replace("Connection: keep-alive, upgrade", "Connection: keep-alive");
        assert!(hs.parse_response(split.as_bytes(), &c).unwrap().is_some());
    }

    /// The request offers what the config asks for (RFC 7692 §5), and the response check hands
    /// back the state the server's answer agrees to, or refuses an answer it cannot honour.
    #[test]
    fn offers_deflate_and_installs_what_the_server_accepted() {
        let hs = handshake();
        let c = Config::default();
        let installs = |extra: &str| {
            hs.parse_response(response(extra).as_bytes(), &c)
                .map(|accepted| accepted.map(|(a, _)| a.deflate.is_some()))
        };
        assert_eq!(installs(""), Ok(Some(false)));
        let offer = hs.request().headers().get(SEC_WEBSOCKET_EXTENSIONS);
        if cfg!(feature = "deflate") {
            assert_eq!(offer.unwrap(), "permessage-deflate; client_max_window_bits");
            assert_eq!(
                installs("Sec-WebSocket-Extensions: permessage-deflate\r\n"),
                Ok(Some(true))
            );
            assert_eq!(
                installs("Sec-WebSocket-Extensions: permessage-deflate, permessage-deflate\r\n"),
                Err(HandshakeError::ExtensionRejected(
                    "permessage-deflate accepted twice".into()
                ))
            );
        } else {
            assert_eq!(offer, None);
        }
    }

    #[test]
    fn rejects_urls_it_cannot_use() {
        let bad = |uri: &str| {
            ClientHandshake::new(Request::get(uri).body(()).unwrap(), [0; 16], &Config::default())
                .unwrap_err()
        };
        assert!(matches!(bad("ftp://x/"), HandshakeError::InvalidUrl(_)));
        assert!(matches!(bad("/just/a/path"), HandshakeError::InvalidUrl(_)));
        // Regression (issue 13): these became `Host: 127.0.0.1`, port 80.
        for port in ["99999", "8008x", "abc"] {
            let err = bad(&format!("ws://127.0.0.1:{port}/"));
            assert!(
                matches!(&err, HandshakeError::InvalidUrl(why) if why.contains(port)),
                "{port}: {err:?}"
            );
        }
        let host = |uri: &str| {
            let hs = ClientHandshake::new(Request::get(uri).body(()).unwrap(), [0; 16], &Config::default())
                .unwrap();
            hs.request().headers()[HOST].to_str().unwrap().to_string()
        };
        assert_eq!(host("WSS://h:443/"), "h");
        assert_eq!(host("Ws://h:8080/"), "h:8080");
        assert_eq!(host("https://[::1]:80/"), "[::1]:80");
    }
}
