//! Turning the TLS and compression flags into library configuration.

use std::time::Duration;

use sockeye::proxy::{Proxy, ProxyConfig};
use sockeye::tls::rustls::{self, SupportedCipherSuite};
use sockeye::tls::{ClientTlsOptions, ServerTls, TlsAcceptor};
use sockeye::{Config, Server};

use crate::cli::{ClientOpts, ServerOpts};
use crate::failure::Failure;
use crate::output::errln;

/// The client configuration the flags ask for.
pub(crate) fn client_config(opts: &ClientOpts) -> Result<Config, Failure> {
    if let Some(pidfile) = &opts.pidfile {
        write_pidfile(pidfile)?;
    }
    let mut config = Config::default();
    if opts.no_deflate {
        config.protocol.deflate = None;
    }
    if opts.http2 {
        config.http_version = sockeye::HttpVersion::Http2Only;
    }
    config.handshake_timeout = Duration::from_secs(opts.timeout);
    config.protocol.keepalive_interval =
        (opts.ping_interval > 0).then(|| Duration::from_secs(opts.ping_interval));
    if opts.ping_interval > 0 {
        config.protocol.keepalive_timeout = Duration::from_secs(opts.ping_interval);
    }
    config.proxy = match opts.proxy.as_deref() {
        None => ProxyConfig::Environment,
        Some("none") => ProxyConfig::Direct,
        Some(url) => {
            ProxyConfig::Url(Proxy::parse(url).map_err(|e| Failure::usage(format!("--proxy {url}: {e}")))?)
        }
    };
    if opts
        .url
        .get(..6)
        .is_some_and(|s| s.eq_ignore_ascii_case("wss://"))
        || opts
            .url
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
    {
        let mut tls = ClientTlsOptions {
            danger_accept_invalid_certs: opts.verify_none,
            danger_skip_hostname_verification: opts.disable_hostname_validation,
            ..Default::default()
        };
        if let Some(ca) = &opts.ca_file {
            tls = tls.add_ca_file(ca).map_err(|e| usage_file("--ca-file", ca, e))?;
        }
        if let (Some(cert), Some(key)) = (&opts.cert_file, &opts.key_file) {
            let chain = std::fs::read(cert).map_err(|e| usage_file("--cert-file", cert, e))?;
            let key_pem = std::fs::read(key).map_err(|e| usage_file("--key-file", key, e))?;
            tls = tls
                .identity_pem(&chain, &key_pem)
                .map_err(|e| usage_file("--cert-file/--key-file", cert, e))?;
        }
        config.tls_client = Some(match &opts.ciphers {
            None => tls.build()?,
            Some(ciphers) => tls.build_with_provider(ciphers.provider())?,
        });
    }
    Ok(config)
}

/// `--pidfile`: the process id and a newline.
fn write_pidfile(path: &std::path::Path) -> Result<(), Failure> {
    std::fs::write(path, format!("{}\n", std::process::id()))
        .map_err(|e| Failure::usage(format!("--pidfile {}: {e}", path.display())))
}

/// A file named on the command line that cannot be used: a usage error naming flag and file.
pub(crate) fn usage_file(flag: &str, path: &std::path::Path, e: impl std::fmt::Display) -> Failure {
    Failure::usage(format!("{flag} {}: {e}", path.display()))
}

/// The server configuration and, with `--tls`, the acceptor.
pub(crate) fn server_config(opts: &ServerOpts) -> Result<(Config, Option<TlsAcceptor>), Failure> {
    let mut config = Config::default();
    if opts.no_deflate {
        config.protocol.deflate = None;
    }
    let acceptor = if opts.tls {
        let (Some(cert), Some(key)) = (&opts.cert_file, &opts.key_file) else {
            return Err(Failure::new("--tls needs --cert-file and --key-file"));
        };
        let mut tls = ServerTls::from_pem_files(cert, key)
            .map_err(|e| usage_file("--cert-file/--key-file", cert, e))?;
        if let Some(ciphers) = &opts.ciphers {
            tls = tls.with_provider(ciphers.provider())?;
        }
        Some(tls.acceptor())
    } else {
        None
    };
    Ok((config, acceptor))
}

/// Binds a server as the flags say (after `adjust` has had its say on the configuration), writes
/// the pid file, and announces the URL on stderr.
pub(crate) async fn bind(
    opts: &ServerOpts,
    adjust: impl FnOnce(&mut Config),
    name: &str,
) -> Result<Server, Failure> {
    let (mut config, acceptor) = server_config(opts)?;
    // Ctrl-C: every connection is sent 1001 and given this long to answer before the process
    // exits — an operator's Ctrl-C is not a request to wait behind a client's backlog.
    config.shutdown_timeout = crate::interrupt::CLOSE_GRACE;
    adjust(&mut config);
    let mut server = Server::from_listener(listen(opts).await?, config);
    let scheme = if acceptor.is_some() { "wss" } else { "ws" };
    if let Some(acceptor) = acceptor {
        server = server.with_tls(acceptor);
    }
    if let Some(pidfile) = &opts.pidfile {
        write_pidfile(pidfile)?;
    }
    errln!("ws {name}: listening on {scheme}://{}", server.local_addr()?);
    tracing::info!(name, pid = std::process::id(), "serving");
    Ok(server)
}

/// The TCP listener for `--host`/`--port` (`-6`: the IPv6 loopback).
pub(crate) async fn listen(opts: &ServerOpts) -> Result<tokio::net::TcpListener, Failure> {
    let host = if opts.ipv6 && opts.host == "127.0.0.1" {
        "::1"
    } else {
        opts.host.as_str()
    };
    tokio::net::TcpListener::bind((host, opts.port))
        .await
        .map_err(|e| Failure::new(format!("cannot listen on {host}:{}: {e}", opts.port)))
}

/// The cipher suites `--ciphers` allows.
#[derive(Debug, Clone)]
pub struct CipherList(Vec<SupportedCipherSuite>);

/// OpenSSL's names of the TLS 1.2 suites rustls implements (TLS 1.3 names are IANA's).
const OPENSSL_NAMES: [(&str, &str); 6] = [
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// The IANA name of a suite (rustls spells TLS 1.3 ones `TLS13_…`).
fn iana_name(suite: &SupportedCipherSuite) -> String {
    format!("{:?}", suite.suite()).replacen("TLS13_", "TLS_", 1)
}

pub(crate) fn cipher_list(s: &str) -> Result<CipherList, String> {
    let all = rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES;
    let names: Vec<&str> = s.split([':', ',', ' ']).filter(|n| !n.is_empty()).collect();
    if names.is_empty() || names.iter().any(|n| n.eq_ignore_ascii_case("DEFAULT")) {
        return Ok(CipherList(all.to_vec()));
    }
    let mut chosen = Vec::new();
    for name in names {
        let iana = OPENSSL_NAMES
            .iter()
            .find(|(openssl, _)| openssl.eq_ignore_ascii_case(name))
            .map_or(name, |(_, iana)| iana)
            .replacen("TLS13_", "TLS_", 1);
        let Some(suite) = all
            .iter()
            .find(|suite| iana_name(suite).eq_ignore_ascii_case(&iana))
        else {
            let known: Vec<String> = all.iter().map(iana_name).collect();
            return Err(format!(
                "unknown cipher suite {name:?}; known: {}",
                known.join(":")
            ));
        };
        if !chosen
            .iter()
            .any(|c: &SupportedCipherSuite| c.suite() == suite.suite())
        {
            chosen.push(*suite);
        }
    }
    Ok(CipherList(chosen))
}

impl CipherList {
    /// The aws-lc-rs provider restricted to these suites.
    pub(crate) fn provider(&self) -> std::sync::Arc<rustls::crypto::CryptoProvider> {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        provider.cipher_suites = self.0.clone();
        std::sync::Arc::new(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cipher_names_map_to_suites() {
        let names = |s| cipher_list(s).map(|l| l.0.iter().map(iana_name).collect::<Vec<_>>());
        assert_eq!(
            names("ECDHE-RSA-AES128-GCM-SHA256:TLS_AES_256_GCM_SHA384").unwrap_or_default(),
            ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"]
        );
        assert!(names("RC4-MD5").is_err());
        assert_eq!(names("DEFAULT").map(|l| l.len()).unwrap_or_default(), 9);
    }
}
