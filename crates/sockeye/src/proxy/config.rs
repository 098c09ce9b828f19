//! Which proxy a client goes through: [`ProxyConfig`] (the setting in
//! [`Config`](crate::Config)), [`Proxy`] parsed from a URL, and the environment read as curl
//! reads it (see the [`proxy`](crate::proxy) module docs). No I/O: a leaf, so that the crate's
//! `Config` sits below the tunnel code.

use std::fmt;

use super::error::ProxyError;

/// Which proxy a client connects through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ProxyConfig {
    /// The proxy the environment names for the URL (see the [module docs](crate::proxy)), if
    /// any. The default, as in curl and most HTTP clients.
    #[default]
    Environment,
    /// Connect directly, whatever the environment says.
    Direct,
    /// Always this proxy.
    Url(Proxy),
}

/// How a proxy is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyKind {
    /// `http://`: an HTTP proxy, asked to open a tunnel with `CONNECT host:port`.
    HttpConnect,
    /// `socks5://`: SOCKS5, the client resolves the host name.
    Socks5,
    /// `socks5h://`: SOCKS5, the proxy resolves the host name.
    Socks5RemoteDns,
}

/// A proxy: its kind, address and credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    /// How to speak to it.
    pub kind: ProxyKind,
    /// Host name or IP address of the proxy.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// User name and password, if it wants them.
    pub credentials: Option<(String, String)>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the password.
        f.debug_struct("Proxy")
            .field("kind", &self.kind)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .finish()
    }
}

impl Proxy {
    /// Parses `http://[user:password@]host[:port]` (port 80 by default),
    /// `socks5://…` or `socks5h://…` (port 1080 by default). User and password may be
    /// percent-encoded.
    pub fn parse(url: &str) -> Result<Proxy, ProxyError> {
        let invalid = |why: &str| ProxyError::InvalidUrl(format!("{url:?}: {why}"));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("no scheme"))?;
        let (kind, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "http" => (ProxyKind::HttpConnect, 80),
            "socks5" => (ProxyKind::Socks5, 1080),
            "socks5h" => (ProxyKind::Socks5RemoteDns, 1080),
            _ => return Err(invalid("the scheme must be http, socks5 or socks5h")),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let credentials = userinfo
            .map(|u| {
                let (user, password) = u.split_once(':').unwrap_or((u, ""));
                Ok::<_, ProxyError>((percent_decode(user)?, percent_decode(password)?))
            })
            .transpose()?;
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(|| invalid("unclosed ["))?;
            (host, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(invalid("no host"));
        }
        let port = match port {
            Some(p) => p.parse().map_err(|_| invalid("bad port"))?,
            None => default_port,
        };
        Ok(Proxy {
            kind,
            host: host.to_string(),
            port,
            credentials,
        })
    }

    /// The proxy the environment names for a `ws://` (`secure = false`) or `wss://` URL to
    /// `host`, if any (see the [module docs](crate::proxy)).
    pub fn from_env(secure: bool, host: &str) -> Result<Option<Proxy>, ProxyError> {
        Self::from_lookup(secure, host, |name| std::env::var(name).ok())
    }

    fn from_lookup(
        secure: bool,
        host: &str,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Proxy>, ProxyError> {
        let one = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        // Lower case first, as curl does.
        let either = |lower: &str, upper: &str| one(lower).or_else(|| one(upper));
        let specific = if secure {
            either("https_proxy", "HTTPS_PROXY")
        } else {
            // Never `HTTP_PROXY` (httpoxy, see the module docs).
            one("http_proxy")
        };
        let Some(url) = specific.or_else(|| either("all_proxy", "ALL_PROXY")) else {
            return Ok(None);
        };
        if either("no_proxy", "NO_PROXY").is_some_and(|list| no_proxy_matches(&list, host)) {
            return Ok(None);
        }
        Proxy::parse(url.trim()).map(Some)
    }
}

/// `NO_PROXY`: a comma-separated list of host names (matching the name and its subdomains, with or
/// without a leading dot), IP addresses, or `*` for everything. Ports in entries are ignored.
fn no_proxy_matches(list: &str, host: &str) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|entry| {
            if entry == "*" {
                return true;
            }
            let entry = entry.trim_start_matches("*.").trim_start_matches('.');
            // Strip a port, but not from a bare IPv6 address.
            let entry = match entry.rsplit_once(':') {
                Some((name, port)) if !name.contains(':') && port.parse::<u16>().is_ok() => name,
                _ => entry,
            };
            let entry = entry
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase();
            host == entry || host.ends_with(&format!(".{entry}"))
        })
}

fn percent_decode(s: &str) -> Result<String, ProxyError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .ok_or_else(|| ProxyError::InvalidUrl("bad % escape".into()))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ProxyError::InvalidUrl("bad % escape".into()))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ProxyError::InvalidUrl("credentials are not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_proxy_urls() {
        let p = Proxy::parse("http://us%40er:p%3Ass@proxy.example:3128").unwrap();
        assert_eq!(p.kind, ProxyKind::HttpConnect);
        assert_eq!((p.host.as_str(), p.port), ("proxy.example", 3128));
        assert_eq!(p.credentials, Some(("us@er".into(), "p:ss".into())));
        let p = Proxy::parse("socks5h://[::1]").unwrap();
        assert_eq!(
            (p.kind, p.host.as_str(), p.port),
            (ProxyKind::Socks5RemoteDns, "::1", 1080)
        );
        assert!(format!("{:?}", Proxy::parse("socks5://u:secret@h:1").unwrap()).contains("\"u\""));
        assert!(!format!("{:?}", Proxy::parse("socks5://u:secret@h:1").unwrap()).contains("secret"));
        for bad in [
            "ftp://h",
            "h:80",
            "http://:80",
            "http://h:99999",
            "http://u:%zz@h",
        ] {
            assert!(
                matches!(Proxy::parse(bad), Err(ProxyError::InvalidUrl(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn environment_choice_and_no_proxy() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let vars = &[
            ("https_proxy", "http://a:1"),
            ("ALL_PROXY", "socks5://b:2"),
            ("NO_PROXY", "localhost, .internal.example,10.0.0.1:8080"),
        ];
        let pick = |secure, host| {
            Proxy::from_lookup(secure, host, env(vars))
                .unwrap()
                .map(|p| p.host)
        };
        assert_eq!(pick(true, "example.com").as_deref(), Some("a"));
        assert_eq!(pick(false, "example.com").as_deref(), Some("b"));
        assert_eq!(pick(true, "localhost"), None);
        assert_eq!(pick(true, "db.internal.example"), None);
        assert_eq!(pick(true, "internal.example"), None);
        assert_eq!(pick(true, "notinternal.example").as_deref(), Some("a"));
        assert_eq!(pick(true, "10.0.0.1"), None);
        assert_eq!(
            Proxy::from_lookup(true, "x", env(&[("NO_PROXY", "*"), ("ALL_PROXY", "http://a")])).unwrap(),
            None
        );
        assert_eq!(Proxy::from_lookup(true, "x", env(&[])).unwrap(), None);
    }

    /// curl's reading of the environment: lower case first; `HTTP_PROXY` never (httpoxy).
    #[test]
    fn environment_is_read_as_curl_reads_it() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        let pick = |secure, vars: &'static [(&'static str, &'static str)]| {
            Proxy::from_lookup(secure, "example.com", env(vars))
                .unwrap()
                .map(|p| p.host)
        };
        // ws:// reads http_proxy, and ignores HTTP_PROXY even when nothing else is set.
        let both = &[("HTTP_PROXY", "http://upper"), ("http_proxy", "http://lower")];
        assert_eq!(pick(false, both).as_deref(), Some("lower"));
        assert_eq!(pick(false, &[("HTTP_PROXY", "http://upper")]), None);
        assert_eq!(
            pick(
                false,
                &[("HTTP_PROXY", "http://upper"), ("ALL_PROXY", "http://all")]
            )
            .as_deref(),
            Some("all")
        );
        // wss:// reads both cases of its variable, lower case first.
        let both = &[("HTTPS_PROXY", "http://upper"), ("https_proxy", "http://lower")];
        assert_eq!(pick(true, both).as_deref(), Some("lower"));
        assert_eq!(
            pick(true, &[("HTTPS_PROXY", "http://upper")]).as_deref(),
            Some("upper")
        );
        // An empty lower-case variable counts as unset.
        let empty = &[("https_proxy", ""), ("HTTPS_PROXY", "http://upper")];
        assert_eq!(pick(true, empty).as_deref(), Some("upper"));
        // all_proxy before ALL_PROXY, for either scheme.
        let all = &[("ALL_PROXY", "http://upper"), ("all_proxy", "http://lower")];
        assert_eq!(pick(false, all).as_deref(), Some("lower"));
        assert_eq!(pick(true, all).as_deref(), Some("lower"));
        // no_proxy before NO_PROXY.
        let no = &[
            ("all_proxy", "http://p"),
            ("no_proxy", "other.example"),
            ("NO_PROXY", "example.com"),
        ];
        assert_eq!(pick(true, no).as_deref(), Some("p"));
        assert_eq!(
            pick(true, &[("all_proxy", "http://p"), ("NO_PROXY", "example.com")]),
            None
        );
    }
}
