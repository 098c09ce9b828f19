//! What the client's and the server's handshakes (over HTTP/1.1 and over HTTP/2's extended
//! CONNECT) share: the accept key, header lists, the WebSocket URL, reading and writing a head.
//!
//! A leaf of the handshake's import graph: `client`, `server` and `extended_connect` import it,
//! and `handshake/mod.rs` only declares them and re-exports their public items, so no file of
//! the handshake imports one that imports it back.

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

/// Where a WebSocket URL leads: what [`url_target`] reads from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlTarget<'a> {
    /// `wss://` (or `https://`): the connection runs over TLS.
    pub secure: bool,
    /// The host as the URL writes it; an IPv6 literal keeps its brackets (`[::1]`).
    pub host: &'a str,
    /// The port the URL names, if it names one.
    pub explicit_port: Option<u16>,
}

impl UrlTarget<'_> {
    /// The scheme's default port: 443 for `wss`, 80 for `ws`.
    pub fn default_port(&self) -> u16 {
        if self.secure { 443 } else { 80 }
    }

    /// The port to connect to: the URL's, else the scheme's default.
    pub fn port(&self) -> u16 {
        self.explicit_port.unwrap_or(self.default_port())
    }

    /// The host to resolve or connect to: an IPv6 literal without its brackets.
    pub fn host_name(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// `host[:port]` for `Host` or `:authority`: the port only when it is not the default.
    pub fn authority(&self) -> String {
        match self.explicit_port {
            Some(port) if port != self.default_port() => format!("{}:{port}", self.host),
            _ => self.host.to_string(),
        }
    }
}

/// Reads a WebSocket URL: `ws://` or `wss://`, with a host and an optional port of at most 65535.
///
/// Schemes are compared without regard to case (RFC 3986 §3.1): `WS://` and `Wss://` work. As in
/// the WHATWG WebSocket constructor (what browsers do), `http://` is taken as `ws://` and
/// `https://` as `wss://`. Any other scheme, a missing scheme or host, and a port that is not a
/// number or is over 65535 are [`HandshakeError::InvalidUrl`](crate::error::HandshakeError::InvalidUrl),
/// naming what is wrong: an invalid port never falls back to the default.
///
/// ```
/// use sockeye_proto::handshake::url_target;
/// let uri: http::Uri = "WSS://[::1]:8443/chat".parse().unwrap();
/// let target = url_target(&uri).unwrap();
/// assert_eq!((target.secure, target.host_name(), target.port()), (true, "::1", 8443));
/// let uri: http::Uri = "ws://127.0.0.1:99999/".parse().unwrap();
/// assert!(url_target(&uri).unwrap_err().to_string().contains("99999"));
/// ```
pub fn url_target(uri: &http::Uri) -> Result<UrlTarget<'_>, crate::error::HandshakeError> {
    let invalid = |why: String| crate::error::HandshakeError::InvalidUrl(format!("{uri}: {why}"));
    const ACCEPTED: &str = "ws://, wss://, http:// or https://";
    let secure = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("ws" | "http") => false,
        Some("wss" | "https") => true,
        Some(other) => {
            return Err(invalid(format!(
                "unsupported scheme {other:?} (expected {ACCEPTED})"
            )));
        }
        None => return Err(invalid(format!("no scheme (expected {ACCEPTED})"))),
    };
    let (Some(host), Some(authority)) = (uri.host(), uri.authority()) else {
        return Err(invalid("no host".into()));
    };
    if host.is_empty() || host == "[]" {
        return Err(invalid("no host".into()));
    }
    let explicit_port = authority_port(authority.as_str()).map_err(invalid)?;
    Ok(UrlTarget {
        secure,
        host,
        explicit_port,
    })
}

/// The value of a header that may appear only once (`Host`, RFC 9112 §3.2; `Sec-WebSocket-Key`,
/// `-Version` and `-Accept`, RFC 6455 §11.3; `Origin`, RFC 6454 §7.3): `None` when absent, and an
/// error that names the header when it appears on more than one field line. List headers
/// (`Connection`, `Upgrade`, `Sec-WebSocket-Protocol`, `Sec-WebSocket-Extensions`) may repeat and
/// are read with [`header_list`].
pub(super) fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    display: &'static str,
) -> Result<Option<&'a http::HeaderValue>, crate::error::HandshakeError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(crate::error::HandshakeError::MalformedHttp(format!(
            "duplicate {display} header"
        )));
    }
    Ok(first)
}

/// The port of an authority (`host`, `host:port`, `[v6]:port`, with or without `user@`): `None`
/// when it has none or an empty one (RFC 3986 §3.2.3), an error naming it unless it is 1*DIGIT
/// of at most 65535. ([`http::Uri::port_u16`] answers `None` for a bad port, and a URL that names
/// one must not fall back to the default.)
pub(super) fn authority_port(authority: &str) -> Result<Option<u16>, String> {
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

/// The parsed header slots as a [`HeaderMap`] whose values share `head`, one copy of the head
/// the slots point into (`buf`, its first `head.len()` bytes): a slice of it for each value, not
/// an allocation each (five or more per handshake).
pub(super) fn to_header_map(
    head: &bytes::Bytes,
    buf: &[u8],
    parsed: &[httparse::Header<'_>],
) -> Result<HeaderMap, crate::error::HandshakeError> {
    let mut map = HeaderMap::with_capacity(parsed.len());
    for h in parsed {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| {
            crate::error::HandshakeError::MalformedHttp(format!("bad header name {:?}", h.name))
        })?;
        let value = http::HeaderValue::from_maybe_shared(shared_part(head, buf, h.value)).map_err(|_| {
            crate::error::HandshakeError::MalformedHttp(format!("bad value for header {}", h.name))
        })?;
        map.append(name, value);
    }
    Ok(map)
}

/// `part`, a slice of `buf`, as the same bytes of `head` (a copy of `buf`'s start) without a copy;
/// a part outside it (never, from httparse) is copied.
pub(super) fn shared_part(head: &bytes::Bytes, buf: &[u8], part: &[u8]) -> bytes::Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if !part.is_empty() && end <= head.len() => head.slice(start..end),
        _ => bytes::Bytes::copy_from_slice(part),
    }
}

/// Maps an httparse outcome, enforcing the size limit on incomplete heads too (a slowloris that
/// never finishes its head cannot make us buffer more than the limit).
pub(super) fn check_parsed(
    status: Result<httparse::Status<usize>, httparse::Error>,
    buffered: usize,
    config: &crate::config::Config,
) -> Result<Option<usize>, crate::error::HandshakeError> {
    let limit = config.max_handshake_size;
    match status {
        Ok(httparse::Status::Complete(n)) if n <= limit => Ok(Some(n)),
        Ok(httparse::Status::Partial) if buffered <= limit => Ok(None),
        // Complete but longer than the limit, or still incomplete past it.
        Ok(_) => Err(crate::error::HandshakeError::HeadTooLarge { limit }),
        Err(httparse::Error::TooManyHeaders) if buffered > limit => {
            Err(crate::error::HandshakeError::HeadTooLarge { limit })
        }
        Err(httparse::Error::TooManyHeaders) => Err(crate::error::HandshakeError::TooManyHeaders {
            limit: config.max_handshake_headers,
        }),
        Err(e) => Err(crate::error::HandshakeError::MalformedHttp(e.to_string())),
    }
}

/// Writes headers in HTTP/1.1 syntax.
pub(super) fn write_headers<'a>(
    out: &mut Vec<u8>,
    headers: impl IntoIterator<Item = (&'a HeaderName, &'a http::HeaderValue)>,
) {
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::HandshakeError;

    fn target(url: &str) -> Result<(bool, String, u16), HandshakeError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| HandshakeError::InvalidUrl(format!("{e}")))?;
        url_target(&uri).map(|t| (t.secure, t.authority(), t.port()))
    }

    /// Regression (issue 13): a port that is not a number or is over 65535 was read as no port,
    /// and the connection went to port 80.
    #[test]
    fn an_invalid_port_is_an_invalid_url_naming_it() {
        for (url, port) in [
            ("ws://127.0.0.1:99999/", "99999"),
            ("ws://127.0.0.1:8008x/", "8008x"),
            ("ws://127.0.0.1:abc/", "abc"),
            ("wss://h:65536/", "65536"),
            ("ws://h:+80/", "+80"),
            ("ws://[::1]:1x/", "1x"),
        ] {
            let err = target(url).unwrap_err();
            let HandshakeError::InvalidUrl(why) = &err else {
                panic!("{url}: {err:?}");
            };
            assert!(
                why.contains(&format!("port {port}")) || why.contains(&format!("port {port:?}")),
                "{url}: {why}"
            );
        }
        assert_eq!(target("ws://h:65535/").unwrap(), (false, "h:65535".into(), 65535));
        assert_eq!(target("ws://h:0080/").unwrap(), (false, "h".into(), 80));
        // An empty port is the default (RFC 3986 §3.2.3).
        assert_eq!(target("ws://h:/").unwrap(), (false, "h".into(), 80));
    }

    /// Regression (issue 13): `WS://` was refused by the tokio client (schemes are
    /// case-insensitive, RFC 3986 §3.1); http and https are ws and wss as in the WHATWG
    /// WebSocket constructor.
    #[test]
    fn schemes_ignore_case_and_http_maps_to_ws() {
        for (url, want) in [
            ("WS://h/", (false, "h".into(), 80)),
            ("Wss://h/", (true, "h".into(), 443)),
            ("wSs://h:443/", (true, "h".into(), 443)),
            ("http://h:8080/", (false, "h:8080".into(), 8080)),
            ("HTTPS://[::1]/", (true, "[::1]".into(), 443)),
            ("https://h:80/", (true, "h:80".into(), 80)),
        ] {
            assert_eq!(target(url).unwrap(), want, "{url}");
        }
        for url in ["ftp://h/", "h:80", "/path", "ws:///path"] {
            let err = target(url).unwrap_err();
            assert!(matches!(err, HandshakeError::InvalidUrl(_)), "{url}: {err:?}");
        }
        let err = target("ftp://h/").unwrap_err().to_string();
        assert!(
            err.contains("\"ftp\"") && err.contains("ws://, wss://, http:// or https://"),
            "{err}"
        );
        let err = target("/path").unwrap_err().to_string();
        assert!(err.contains("no scheme"), "{err}");
    }

    #[test]
    fn the_target_keeps_the_host_for_headers_and_strips_brackets_for_sockets() {
        let uri: http::Uri = "wss://user:pw@[::1]:8443/x".parse().unwrap();
        let t = url_target(&uri).unwrap();
        assert_eq!(
            (t.host, t.host_name(), t.port(), t.authority()),
            ("[::1]", "::1", 8443, "[::1]:8443".into())
        );
    }
}
