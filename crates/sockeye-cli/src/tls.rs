//! Turning the TLS and compression flags into library configuration.

use std::time::Duration;

use sockeye::proxy::{Proxy, ProxyConfig};
use sockeye::tls::{ClientTlsOptions, ServerTls, TlsAcceptor};
use sockeye::{Config, Server};

use crate::failure::{Failure, usage_file};
use crate::opts::{ClientOpts, ServerOpts};
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
pub(crate) fn write_pidfile(path: &std::path::Path) -> Result<(), Failure> {
    std::fs::write(path, format!("{}\n", std::process::id())).map_err(|e| usage_file("--pidfile", path, e))
}

/// The server configuration and, with `--tls`, the acceptor.
pub(crate) fn server_config(opts: &ServerOpts) -> Result<(Config, Option<TlsAcceptor>), Failure> {
    let mut config = Config::default();
    if opts.no_deflate {
        config.protocol.deflate = None;
    }
    let acceptor = server_tls(opts)?.map(|tls| tls.acceptor());
    Ok((config, acceptor))
}

/// `--tls`, `--cert-file`, `--key-file` and `--ciphers`, when `--tls` is given.
pub(crate) fn server_tls(opts: &ServerOpts) -> Result<Option<ServerTls>, Failure> {
    if !opts.tls {
        return Ok(None);
    }
    let (Some(cert), Some(key)) = (&opts.cert_file, &opts.key_file) else {
        return Err(Failure::new("--tls needs --cert-file and --key-file"));
    };
    let mut tls =
        ServerTls::from_pem_files(cert, key).map_err(|e| usage_file("--cert-file/--key-file", cert, e))?;
    if let Some(ciphers) = &opts.ciphers {
        tls = tls.with_provider(ciphers.provider())?;
    }
    Ok(Some(tls))
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

/// The host of `--host`, or the IPv6 loopback for `-6` with the default host.
pub(crate) fn listen_host(opts: &ServerOpts) -> &str {
    if opts.ipv6 && opts.host == "127.0.0.1" {
        "::1"
    } else {
        opts.host.as_str()
    }
}

/// The TCP listener for `--host`/`--port` (`-6`: the IPv6 loopback).
pub(crate) async fn listen(opts: &ServerOpts) -> Result<tokio::net::TcpListener, Failure> {
    let host = listen_host(opts);
    tokio::net::TcpListener::bind((host, opts.port))
        .await
        .map_err(|e| Failure::new(format!("cannot listen on {host}:{}: {e}", opts.port)))
}
