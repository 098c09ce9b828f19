//! [`ProxyError`]: why a proxy refused or failed the tunnel. A leaf, so that the crate's
//! [`Error`](crate::Error) can carry it without depending on the proxy client.

use std::fmt;

/// What went wrong with a proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyError {
    /// The proxy URL could not be understood.
    InvalidUrl(String),
    /// The HTTP proxy answered `CONNECT` with this status (407: credentials missing or wrong).
    Refused {
        /// The HTTP status.
        status: u16,
        /// Its reason phrase.
        reason: String,
    },
    /// The SOCKS5 proxy accepts none of the authentication methods offered (give credentials?).
    NoAcceptableAuth,
    /// The SOCKS5 proxy rejected the user name and password.
    AuthFailed,
    /// The SOCKS5 proxy could not connect (RFC 1928 §6 reply code).
    SocksReply(u8),
    /// The proxy broke its protocol.
    Malformed(&'static str),
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::InvalidUrl(why) => write!(f, "invalid proxy URL: {why}"),
            // 407 is the standard answer; some proxies (tinyproxy) send 401.
            ProxyError::Refused {
                status: status @ (401 | 407),
                ..
            } => write!(
                f,
                "the proxy wants credentials ({status}); put the right user:password in the proxy URL"
            ),
            ProxyError::Refused { status, reason } => {
                write!(f, "the proxy refused the tunnel: {status} {reason}")
            }
            ProxyError::NoAcceptableAuth => f.write_str(
                "the SOCKS5 proxy accepts none of our authentication methods (credentials needed?)",
            ),
            ProxyError::AuthFailed => f.write_str("the SOCKS5 proxy rejected the user name or password"),
            ProxyError::SocksReply(code) => {
                let what = match code {
                    1 => "general failure",
                    2 => "connection not allowed by its rules",
                    3 => "network unreachable",
                    4 => "host unreachable",
                    5 => "connection refused",
                    6 => "TTL expired",
                    7 => "command not supported",
                    8 => "address type not supported",
                    _ => "unknown error",
                };
                write!(f, "the SOCKS5 proxy could not connect: {what} (reply {code})")
            }
            ProxyError::Malformed(what) => write!(f, "the proxy broke its protocol: {what}"),
        }
    }
}

impl std::error::Error for ProxyError {}
