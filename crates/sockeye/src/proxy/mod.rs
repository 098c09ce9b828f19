//! Client connections through proxies: HTTP `CONNECT` (RFC 9110 §9.3.6) with optional basic
//! authentication, and SOCKS5 (RFC 1928) with or without username/password authentication
//! (RFC 1929). Chosen per connection by [`Config::proxy`](crate::Config::proxy): none, a URL, or
//! the environment, read as curl reads it:
//!
//! - `wss://`: `https_proxy`, else `HTTPS_PROXY`;
//! - `ws://`: `http_proxy` only — never `HTTP_PROXY`, which a CGI program finds set from a request's
//!   `Proxy:` header ("httpoxy", CVE-2016-5385), so curl ignores it and so does Sockeye;
//! - then, for either, `all_proxy`, else `ALL_PROXY`;
//! - minus the hosts in `no_proxy`, else `NO_PROXY`.
//!
//! The lower-case name wins when both are set; an empty variable counts as unset.
//!
//! ```
//! use sockeye::proxy::{Proxy, ProxyConfig};
//! let proxy = Proxy::parse("socks5h://user:secret@127.0.0.1:1080").unwrap();
//! let config = sockeye::Config::builder().proxy(ProxyConfig::Url(proxy)).build();
//! # let _ = config;
//! ```
//!
//! The files: `config` (the setting, URL parsing, the environment), `tunnel` (CONNECT and
//! SOCKS5), `error`.

pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod tunnel;

pub use config::{Proxy, ProxyConfig, ProxyKind};
pub use error::ProxyError;
