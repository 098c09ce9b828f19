//! The opening handshake, RFC 6455 §4: an HTTP/1.1 `GET` with `Upgrade: websocket`, answered by
//! `101 Switching Protocols`. Bytes in, typed [`http`] values out, and back.
//!
//! Client: [`ClientHandshake::new`] → [`ClientHandshake::encode_request`] → write → read until
//! [`ClientHandshake::parse_response`] returns a response → leftover bytes belong to the connection.
//!
//! Server: read until [`parse_request`] returns a request → [`ClientHello::from_request`] validates
//! it → the application accepts ([`ClientHello::accept`], then edit the response) or rejects
//! ([`reject_response`]) → [`encode_response`] → write.
//!
//! Over HTTP/2 (RFC 8441) the same negotiation rides on an extended CONNECT: the client sends
//! [`extended_connect_request`] with `:protocol: websocket`, the server checks it with
//! [`ClientHello::from_extended_connect`] and answers [`ClientHello::accept`] (`200`), and the client
//! checks that with [`check_extended_connect_response`]. The HTTP/2 layer itself lives above.

mod client;
mod extended_connect;
mod server;

pub use client::{ClientHandshake, response_extensions};
pub use extended_connect::{WEBSOCKET_PROTOCOL, check_extended_connect_response, extended_connect_request};
pub use server::{ClientHello, ResponseBody, encode_response, parse_request, reject_response};

use base64::Engine as _;
use http::HeaderMap;
use http::header::HeaderName;

/// The GUID that RFC 6455 §1.3 appends to the key before hashing.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key` (§4.2.2): base64(SHA-1(key + GUID)).
///
/// ```
/// // The example of RFC 6455 §1.3.
/// assert_eq!(sockeye_proto::handshake::accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
/// ```
pub fn accept_key(key: &[u8]) -> String {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key);
    sha.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

/// Whether any of the comma-separated values of header `name` equals `token`, ignoring ASCII case
/// (`Connection: keep-alive, Upgrade` contains `upgrade`).
pub fn header_has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    header_list(headers, name).any(|v| v.eq_ignore_ascii_case(token))
}

/// The comma-separated elements of every value of header `name`, trimmed, empty ones skipped.
pub fn header_list<'a>(headers: &'a HeaderMap, name: &HeaderName) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The parts of a WebSocket URL a handshake needs: whether it is secure (`wss`/`https`), its
/// host, and the scheme's default port. Schemes are compared without regard to case (RFC 3986
/// §3.1).
fn url_target(uri: &http::Uri) -> Result<(bool, &str, u16), crate::HandshakeError> {
    let secure = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("ws" | "http") => false,
        Some("wss" | "https") => true,
        Some(other) => {
            return Err(crate::HandshakeError::InvalidUrl(format!(
                "unsupported scheme {other:?}"
            )));
        }
        None => {
            return Err(crate::HandshakeError::InvalidUrl(
                "no scheme (expected ws:// or wss://)".into(),
            ));
        }
    };
    let Some(host) = uri.host() else {
        return Err(crate::HandshakeError::InvalidUrl("no host".into()));
    };
    Ok((secure, host, if secure { 443 } else { 80 }))
}

/// The value of a header that may appear only once (`Host`, RFC 9112 §3.2; `Sec-WebSocket-Key`,
/// `-Version` and `-Accept`, RFC 6455 §11.3; `Origin`, RFC 6454 §7.3): `None` when absent, and an
/// error that names the header when it appears on more than one field line. List headers
/// (`Connection`, `Upgrade`, `Sec-WebSocket-Protocol`, `Sec-WebSocket-Extensions`) may repeat and
/// are read with [`header_list`].
fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    display: &'static str,
) -> Result<Option<&'a http::HeaderValue>, crate::HandshakeError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(crate::HandshakeError::MalformedHttp(format!(
            "duplicate {display} header"
        )));
    }
    Ok(first)
}

/// The port of an authority (`host`, `host:port`, `[v6]:port`, with or without `user@`): `None`
/// when it has none or an empty one (RFC 3986 §3.2.3), an error naming it unless it is 1*DIGIT
/// of at most 65535. ([`http::Uri::port_u16`] answers `None` for a bad port, and a URL that names
/// one must not fall back to the default.)
fn authority_port(authority: &str) -> Result<Option<u16>, String> {
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let port = match hostport.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((_, "")) => None,
            Some((_, after)) => Some(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| format!("{after:?} after the IPv6 address"))?,
            ),
            None => return Err("unclosed '[' in the host".into()),
        },
        None => hostport.rsplit_once(':').map(|(_, port)| port),
    };
    match port {
        None | Some("") => Ok(None),
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => p
            .parse::<u16>()
            .map(Some)
            .map_err(|_| format!("port {p} is out of range (0 to 65535)")),
        Some(p) => Err(format!("port {p:?} is not a number")),
    }
}

/// Copies parsed header slots into a [`HeaderMap`].
fn to_header_map(parsed: &[httparse::Header<'_>]) -> Result<HeaderMap, crate::HandshakeError> {
    let mut map = HeaderMap::with_capacity(parsed.len());
    for h in parsed {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| crate::HandshakeError::MalformedHttp(format!("bad header name {:?}", h.name)))?;
        let value = http::HeaderValue::from_bytes(h.value)
            .map_err(|_| crate::HandshakeError::MalformedHttp(format!("bad value for header {}", h.name)))?;
        map.append(name, value);
    }
    Ok(map)
}

/// Maps an httparse outcome, enforcing the size limit on incomplete heads too (a slowloris that
/// never finishes its head cannot make us buffer more than the limit).
fn check_parsed(
    status: Result<httparse::Status<usize>, httparse::Error>,
    buffered: usize,
    config: &crate::Config,
) -> Result<Option<usize>, crate::HandshakeError> {
    let limit = config.max_handshake_size;
    match status {
        Ok(httparse::Status::Complete(n)) if n <= limit => Ok(Some(n)),
        Ok(httparse::Status::Partial) if buffered <= limit => Ok(None),
        // Complete but longer than the limit, or still incomplete past it.
        Ok(_) => Err(crate::HandshakeError::HeadTooLarge { limit }),
        Err(httparse::Error::TooManyHeaders) if buffered > limit => {
            Err(crate::HandshakeError::HeadTooLarge { limit })
        }
        Err(httparse::Error::TooManyHeaders) => Err(crate::HandshakeError::TooManyHeaders {
            limit: config.max_handshake_headers,
        }),
        Err(e) => Err(crate::HandshakeError::MalformedHttp(e.to_string())),
    }
}

/// Writes headers in HTTP/1.1 syntax.
fn write_headers(out: &mut Vec<u8>, headers: &HeaderMap) {
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}
