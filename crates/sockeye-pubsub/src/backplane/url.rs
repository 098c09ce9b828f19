//! Reading the servers a backplane URL lists: `HOST[:PORT]`, several of them comma-separated,
//! an IPv6 host in brackets.

use crate::error::Error;

/// `HOST[:PORT]` (an IPv6 host in brackets) as `host:port`, with `default_port` when there is
/// none; the reason when it is not one.
pub(crate) fn host_port(authority: &str, default_port: u16) -> Result<String, String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return Err("unclosed [ in an IPv6 address".into());
        };
        if !after.is_empty() && !after.starts_with(':') {
            return Err(format!("{after:?} after an IPv6 address"));
        }
        (format!("[{host}]"), after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (authority.to_owned(), None),
        }
    };
    if host.is_empty() || host == "[]" || (host.contains(':') && !host.starts_with('[')) {
        return Err("no host".into());
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(format!("the port {p:?} is not a number from 1 to 65535")),
        },
    };
    Ok(format!("{host}:{port}"))
}

/// `SCHEME://HOST[:PORT][,HOST[:PORT]…][/]` (the servers of one cluster) → each `host:port`,
/// `default_port` where none is given; [`Error::InvalidUrl`] saying why and what is `accepted`.
pub(crate) fn host_list(
    url: &str,
    scheme: &str,
    default_port: u16,
    accepted: &str,
) -> Result<Vec<String>, Error> {
    let bad = |why: &str| Error::InvalidUrl(format!("{url:?}: {why}; {accepted}"));
    let Some(rest) = url.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) else {
        return Err(bad(&format!("the scheme must be {scheme}://")));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Err(bad("no host"));
    }
    if rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad(
            "only hosts and ports are accepted (no path, database, query or credentials)",
        ));
    }
    rest.split(',')
        .map(|server| host_port(server, default_port).map_err(|why| bad(&why)))
        .collect()
}
