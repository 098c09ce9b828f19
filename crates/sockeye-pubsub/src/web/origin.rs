//! The Origin check of a WebSocket (against cross-site WebSocket hijacking): a browser names
//! the page that opens a socket in `Origin`, and a page of another site may not use the
//! cookies or single sign-on of this one. Origins compare as RFC 6454 says: scheme, host and
//! port (the scheme's default when absent), host case-insensitively.

use std::fmt;

use http::{HeaderMap, Uri, header};

/// An origin: `scheme://host[:port]`, `http`/`ws` or `https`/`wss`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    secure: bool,
    host: String,
    port: u16,
}

impl Origin {
    /// `scheme://host[:port]` (a trailing `/` is allowed); `None` for anything else, such as
    /// the `null` of a sandboxed page or a `file:` one.
    pub(crate) fn parse(text: &str) -> Option<Origin> {
        let (scheme, rest) = text.trim().split_once("://")?;
        let secure = match scheme.to_ascii_lowercase().as_str() {
            "http" | "ws" => false,
            "https" | "wss" => true,
            _ => return None,
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return None;
        }
        let (host, port) = host_port(rest, if secure { 443 } else { 80 })?;
        Some(Origin { secure, host, port })
    }

    /// The origin a request is addressed to: `authority` (a `Host`: `host[:port]`, on the
    /// scheme's default port without one) with the scheme it was served with, `https` if
    /// `secure`.
    fn own(authority: &str, secure: bool) -> Option<Origin> {
        let (host, port) = host_port(authority, if secure { 443 } else { 80 })?;
        Some(Origin { secure, host, port })
    }

    fn port_default(&self) -> u16 {
        if self.secure { 443 } else { 80 }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.secure { "https" } else { "http" };
        if self.port == self.port_default() {
            write!(f, "{scheme}://{}", self.host)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

/// `host[:port]` or `[v6][:port]`, the host lowercased.
fn host_port(text: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => {
            let (address, after) = v6.split_once(']')?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':')?),
            };
            (&text[..address.len() + 2], port)
        }
        None => match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    if host.is_empty() || (host.contains(['[', ']']) && !host.starts_with('[')) {
        return None;
    }
    let port = match port {
        Some(port) => port.parse().ok()?,
        None => default_port,
    };
    Some((host.to_ascii_lowercase(), port))
}

/// An allowed origin that is not one: not `scheme://host[:port]` with `http` or `https`
/// (`ws`, `wss` too), nor `*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadOrigin(pub(crate) String);

impl fmt::Display for BadOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not an origin: scheme://host[:port] (http or https), or * for every origin",
            self.0
        )
    }
}

impl std::error::Error for BadOrigin {}

/// Which pages may open sockets: their own host's always, and these.
#[derive(Clone, Debug, Default)]
pub(crate) struct AllowedOrigins {
    pub(crate) any: bool,
    pub(crate) listed: Vec<Origin>,
}

/// What the Origin check finds wrong with a request.
pub(crate) struct Foreign(pub(crate) String);

impl AllowedOrigins {
    /// Whether the request of `headers` and `uri` may open a socket: it has no `Origin` (not
    /// a browser, which always sends one with a socket), or its origin is the request's own
    /// (its scheme, and its host and port: `Host`, or HTTP/2's `:authority`) or one allowed.
    /// The request's scheme is `https` if it came over TLS (`tls`: the web face is served
    /// over TLS, itself or by a proxy in front of it) or HTTP/2's `:scheme` says so, else
    /// `http`: a page of `http://host`, which anyone on the path may have rewritten, is not the
    /// origin of a node served at `wss://host` (RFC 6454), and may not use its cookies.
    pub(crate) fn check(&self, headers: &HeaderMap, uri: &Uri, tls: bool) -> Result<(), Foreign> {
        let Some(value) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        if self.any {
            return Ok(());
        }
        let text = String::from_utf8_lossy(value.as_bytes());
        let Some(origin) = Origin::parse(&text) else {
            return Err(Foreign(text.into_owned()));
        };
        let authority = uri
            .authority()
            .map(|a| a.as_str())
            .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()));
        let secure = tls || uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let own = authority.and_then(|a| Origin::own(a, secure));
        if own.as_ref() == Some(&origin) || self.listed.contains(&origin) {
            Ok(())
        } else {
            Err(Foreign(origin.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Over cleartext HTTP/1.1.
    fn check(allowed: &AllowedOrigins, origin: &str, host: &str) -> bool {
        check_over(allowed, origin, host, false, "/")
    }

    fn check_over(allowed: &AllowedOrigins, origin: &str, host: &str, tls: bool, uri: &str) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, origin.parse().unwrap());
        headers.insert(header::HOST, host.parse().unwrap());
        allowed.check(&headers, &uri.parse().unwrap(), tls).is_ok()
    }

    #[test]
    fn the_own_origin_with_default_ports() {
        let none = AllowedOrigins::default();
        assert!(check(&none, "http://Example.com", "example.com"));
        assert!(check(&none, "http://example.com:80", "example.com"));
        assert!(check(&none, "http://example.com:8008", "example.com:8008"));
        assert!(check(&none, "http://[::1]:8008", "[::1]:8008"));
        assert!(!check(&none, "http://example.com:8009", "example.com:8008"));
        assert!(!check(&none, "https://example.com", "example.com:80"));
        assert!(!check(&none, "https://evil.example", "example.com"));
        assert!(!check(&none, "null", "example.com"));
        assert!(!check(&none, "http://example.com.evil.example", "example.com"));
        let tls = |origin: &str, host: &str| check_over(&none, origin, host, true, "/");
        assert!(tls("https://example.com", "example.com"));
        assert!(tls("https://example.com", "example.com:443"));
        assert!(tls("https://example.com:8443", "example.com:8443"));
        assert!(!tls("https://example.com", "example.com:8443"));
    }

    /// Review R1: the own host was allowed "with either scheme", so a plain-http page (which
    /// anyone on the path may rewrite) could open a socket on a node served over TLS, with the
    /// user's cookies. RFC 6454: another scheme is another origin.
    #[test]
    fn a_page_of_the_own_host_with_the_other_scheme_is_another_origin() {
        let none = AllowedOrigins::default();
        // A node served over TLS, HTTP/1.1: the page of `http://` is refused.
        assert!(!check_over(&none, "http://example.com", "example.com", true, "/"));
        assert!(!check_over(
            &none,
            "http://example.com:8443",
            "example.com:8443",
            true,
            "/"
        ));
        // Over HTTP/2, `:scheme` names it (the authority is the URI's).
        assert!(!check_over(
            &none,
            "http://example.com",
            "example.com",
            false,
            "https://example.com/"
        ));
        assert!(check_over(
            &none,
            "https://example.com",
            "example.com",
            false,
            "https://example.com/"
        ));
        assert!(check_over(
            &none,
            "http://example.com",
            "example.com",
            false,
            "http://example.com/"
        ));
        // And the reverse: a node served in cleartext is not the origin of an `https://` page.
        assert!(!check(&none, "https://example.com:8008", "example.com:8008"));
    }

    #[test]
    fn listed_and_any() {
        let listed = AllowedOrigins {
            any: false,
            listed: vec![Origin::parse("https://App.example:443/").unwrap()],
        };
        assert!(check(&listed, "https://app.example", "node:8008"));
        assert!(!check(&listed, "http://app.example", "node:8008"));
        let any = AllowedOrigins {
            any: true,
            listed: vec![],
        };
        assert!(check(&any, "null", "node:8008"));
        assert_eq!(Origin::parse("ftp://x"), None);
        assert_eq!(Origin::parse("https://x/path"), None);
        assert_eq!(Origin::parse("https://x:99999"), None);
    }
}
