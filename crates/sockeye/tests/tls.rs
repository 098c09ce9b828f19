//! wss:// over rustls: verification failures are told apart, mutual TLS, SNI, certificate reload.
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use futures_util::StreamExt;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use sockeye::tls::{ClientTlsOptions, Roots, ServerTls, TlsErrorKind};
use sockeye::{Config, Error, Message, Server};
use tokio::sync::mpsc;

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca() -> Ca {
    static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct names: a verifier looks issuers up by name.
    let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("Sockeye test CA {n}"));
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A leaf certificate for `names`, signed by `ca`; `expired` puts its validity in the past.
fn leaf(ca: &Ca, names: &[&str], expired: bool) -> (String, String) {
    let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A wss:// echo server; reports each connection's SNI host name on the channel.
async fn wss_server(tls: &ServerTls) -> (SocketAddr, mpsc::UnboundedReceiver<Option<String>>) {
    let server = Server::bind("127.0.0.1:0", Config::default())
        .await
        .unwrap()
        .with_tls(tls.acceptor());
    let addr = server.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(server.serve(move |mut ws, _| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(ws.get_ref().sni_hostname().map(str::to_string));
            while let Some(Ok(m)) = ws.next().await {
                if m.is_data() && ws.feed(m).await.is_err() {
                    break;
                }
            }
        }
    }));
    (addr, rx)
}

fn trusting(ca: &Ca) -> ClientTlsOptions {
    ClientTlsOptions {
        roots: Roots::Empty,
        ..Default::default()
    }
    .add_ca_pem(ca.pem.as_bytes())
    .unwrap()
}

async fn connect(
    url: String,
    tls: &ClientTlsOptions,
) -> Result<sockeye::WebSocket<sockeye::TransportStream>, Error> {
    let config = Config::builder().tls_client(Some(tls.build()?)).build();
    let (mut ws, _) = sockeye::connect_with(url, &config).await?;
    // With TLS 1.3 a server's refusal of the client certificate arrives after the client's
    // handshake completes, so a round trip is part of "connected".
    ws.send("ping?").await?;
    match ws.recv().await {
        Some(Ok(Message::Text(t))) if t == "ping?" => Ok(ws),
        Some(Err(e)) => Err(e),
        other => panic!("unexpected {other:?}"),
    }
}

fn tls_kind(result: Result<impl std::fmt::Debug, Error>) -> TlsErrorKind {
    match result {
        Err(Error::Tls(e)) => e.kind,
        other => panic!("expected a TLS error, got {other:?}"),
    }
}

#[tokio::test]
async fn echoes_over_wss_with_sni() {
    let ca = ca();
    let (cert, key) = leaf(&ca, &["localhost", "127.0.0.1"], false);
    let (addr, mut sni) = wss_server(&ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap()).await;
    let mut ws = connect(format!("wss://localhost:{}/", addr.port()), &trusting(&ca))
        .await
        .unwrap();
    assert!(ws.get_ref().is_tls());
    assert_eq!(
        sni.recv().await.unwrap().as_deref(),
        Some("localhost"),
        "SNI reached the server"
    );
    let big = Message::binary(vec![7u8; 3 << 20]);
    for _ in 0..3 {
        ws.send(big.clone()).await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), big);
    }
    ws.close(None).await.unwrap();
    // An IP address is verified against the certificate's IP SAN (and sends no SNI).
    connect(format!("wss://127.0.0.1:{}/", addr.port()), &trusting(&ca))
        .await
        .unwrap();
    assert_eq!(sni.recv().await.unwrap(), None);
}

#[tokio::test]
async fn verification_failures_are_told_apart() {
    let ca = ca();
    let other_ca = self::ca();
    let (good, good_key) = leaf(&ca, &["localhost"], false);
    let (addr, _) = wss_server(&ServerTls::from_pem(good.as_bytes(), good_key.as_bytes()).unwrap()).await;
    let url = format!("wss://localhost:{}/", addr.port());
    assert_eq!(
        tls_kind(connect(url.clone(), &trusting(&other_ca)).await),
        TlsErrorKind::UnknownIssuer
    );

    let (wrong, wrong_key) = leaf(&ca, &["example.com"], false);
    let (addr, _) = wss_server(&ServerTls::from_pem(wrong.as_bytes(), wrong_key.as_bytes()).unwrap()).await;
    let url = format!("wss://localhost:{}/", addr.port());
    assert_eq!(
        tls_kind(connect(url.clone(), &trusting(&ca)).await),
        TlsErrorKind::NameMismatch
    );
    let lax = ClientTlsOptions {
        danger_skip_hostname_verification: true,
        ..trusting(&ca)
    };
    connect(url, &lax).await.unwrap();

    let (old, old_key) = leaf(&ca, &["localhost"], true);
    let (addr, _) = wss_server(&ServerTls::from_pem(old.as_bytes(), old_key.as_bytes()).unwrap()).await;
    let url = format!("wss://localhost:{}/", addr.port());
    assert_eq!(
        tls_kind(connect(url.clone(), &trusting(&ca)).await),
        TlsErrorKind::Expired
    );
    let reckless = ClientTlsOptions {
        danger_accept_invalid_certs: true,
        roots: Roots::Empty,
        ..Default::default()
    };
    connect(url, &reckless).await.unwrap();
}

#[tokio::test]
async fn mutual_tls_accepts_known_clients_only() {
    let ca = ca();
    let (cert, key) = leaf(&ca, &["localhost"], false);
    let tls = ServerTls::from_pem(cert.as_bytes(), key.as_bytes())
        .unwrap()
        .require_client_certs(ca.pem.as_bytes())
        .unwrap();
    let (addr, _) = wss_server(&tls).await;
    let url = format!("wss://localhost:{}/", addr.port());
    let (client_cert, client_key) = leaf(&ca, &["client"], false);
    let with_cert = trusting(&ca)
        .identity_pem(client_cert.as_bytes(), client_key.as_bytes())
        .unwrap();
    connect(url.clone(), &with_cert).await.unwrap();
    let refused = connect(url.clone(), &trusting(&ca)).await;
    assert!(matches!(tls_kind(refused), TlsErrorKind::AlertReceived(a) if a.contains("CertificateRequired")));
    let stranger = self::ca();
    let (bad_cert, bad_key) = leaf(&stranger, &["client"], false);
    let wrong_cert = trusting(&ca)
        .identity_pem(bad_cert.as_bytes(), bad_key.as_bytes())
        .unwrap();
    assert!(matches!(
        tls_kind(connect(url, &wrong_cert).await),
        TlsErrorKind::AlertReceived(_)
    ));
}

#[tokio::test]
async fn certificates_reload_without_a_restart() {
    let ca = ca();
    let (old, old_key) = leaf(&ca, &["localhost"], true);
    let tls = ServerTls::from_pem(old.as_bytes(), old_key.as_bytes()).unwrap();
    let (addr, _) = wss_server(&tls).await;
    let url = format!("wss://localhost:{}/", addr.port());
    assert_eq!(
        tls_kind(connect(url.clone(), &trusting(&ca)).await),
        TlsErrorKind::Expired
    );
    let (new, new_key) = leaf(&ca, &["localhost"], false);
    tls.reload_pem(new.as_bytes(), new_key.as_bytes()).unwrap();
    connect(url, &trusting(&ca)).await.unwrap();
    // A bad reload is refused and leaves the working certificate in place.
    let err = tls.reload_pem(new.as_bytes(), old_key.as_bytes()).unwrap_err();
    assert!(
        matches!(err, Error::Tls(ref e) if e.kind == TlsErrorKind::Config),
        "{err:?}"
    );
}

#[tokio::test]
async fn unreadable_pem_is_a_config_error() {
    for (cert, key) in [("not pem", "not pem"), ("", "")] {
        let err = ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap_err();
        assert!(
            matches!(err, Error::Tls(ref e) if e.kind == TlsErrorKind::Config),
            "{err:?}"
        );
    }
    assert!(
        ClientTlsOptions::default()
            .add_ca_file("/nonexistent/ca.pem")
            .is_err()
    );
}

/// Over `max_connections`, a TLS client is closed before any TLS handshake and without a task:
/// the limit bounds the work a flood costs, and a TLS handshake is most of it.
#[tokio::test]
async fn over_the_limit_tls_clients_are_closed_without_a_handshake_or_a_task() {
    let ca = ca();
    let (cert, key) = leaf(&ca, &["localhost"], false);
    let tls = ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
    let server = Server::bind("127.0.0.1:0", Config::builder().max_connections(1).build())
        .await
        .unwrap()
        .with_tls(tls.acceptor());
    let addr = server.local_addr().unwrap();
    let stats = server.stats();
    tokio::spawn(server.serve(|mut ws, _| async move {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_data() && ws.feed(m).await.is_err() {
                break;
            }
        }
    }));
    let url = format!("wss://localhost:{}/", addr.port());
    let _held = connect(url.clone(), &trusting(&ca)).await.unwrap();
    let tasks = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let before = tasks();

    // A client that has not sent its ClientHello yet is closed at once (it would otherwise be
    // waited for, in a task of its own, for the whole handshake timeout).
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        tokio::io::AsyncReadExt::read(&mut silent, &mut byte),
    )
    .await
    .expect("closed at once, not after the handshake timeout");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(tasks(), before, "no task was spawned for it");

    // A TLS client gets no ServerHello: its handshake ends with the connection, not with a
    // certificate or protocol error.
    let started = std::time::Instant::now();
    match connect(url, &trusting(&ca)).await {
        Err(Error::Io(_)) => {}
        other => panic!("expected the connection to be closed, got {other:?}"),
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(tasks(), before);
    assert_eq!((stats.refused(), stats.handshake_failures()), (2, 0));
}

/// A plain echo server (no TLS) and a TLS one, for the wrong-scheme tests.
async fn plain_and_tls_servers(ca: &Ca) -> (SocketAddr, SocketAddr) {
    let plain = Server::bind("127.0.0.1:0", Config::default()).await.unwrap();
    let plain_addr = plain.local_addr().unwrap();
    tokio::spawn(plain.serve(|_, _| async {}));
    let (cert, key) = leaf(ca, &["localhost"], false);
    let (tls_addr, _) = wss_server(&ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap()).await;
    (plain_addr, tls_addr)
}

#[tokio::test]
async fn the_wrong_scheme_is_named_in_the_error() {
    let ca = ca();
    let (plain, tls) = plain_and_tls_servers(&ca).await;
    // wss:// to a server without TLS: it answers the ClientHello in plain HTTP.
    let err = connect(format!("wss://localhost:{}/", plain.port()), &trusting(&ca))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Tls(e) if e.kind == TlsErrorKind::NotTls),
        "{err:?}"
    );
    assert!(err.to_string().contains("use ws:// instead of wss://"), "{err}");
    // ws:// to a TLS server: it answers the request with a TLS alert.
    let err = sockeye::connect(format!("ws://localhost:{}/", tls.port()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::WebSocket(sockeye::ProtocolError::Handshake(
                sockeye::HandshakeError::MalformedHttp(_)
            ))
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("use wss://"), "{err}");
}

/// A self-signed CA certificate (CA:TRUE, what `openssl req -x509` makes by default) used as the
/// server's own: the error says so and how to make a proper one — and the way it gives works.
#[tokio::test]
async fn a_ca_certificate_used_as_the_server_certificate_is_explained() {
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let tls = ServerTls::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).unwrap();
    let (addr, _) = wss_server(&tls).await;
    let url = format!("wss://localhost:{}/", addr.port());
    let trusting_it = ClientTlsOptions {
        roots: Roots::Empty,
        ..Default::default()
    }
    .add_ca_pem(cert.pem().as_bytes())
    .unwrap();
    let err = connect(url.clone(), &trusting_it).await.unwrap_err();
    assert!(
        matches!(&err, Error::Tls(e) if e.kind == TlsErrorKind::CaUsedAsEndEntity),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("CA:FALSE"), "{message}");

    // The openssl command the message gives makes a certificate the client accepts.
    let command = message
        .split('`')
        .find(|part| part.starts_with("openssl req"))
        .expect("the message gives an openssl command")
        .to_string();
    let dir = std::env::temp_dir().join(format!("sockeye-tls-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = std::process::Command::new("openssl")
        .args(command.split_whitespace().skip(1))
        .current_dir(&dir)
        .output();
    match made {
        Ok(out) if out.status.success() => {
            tls.reload_pem_files(dir.join("cert.pem"), dir.join("key.pem"))
                .unwrap();
            let trusting_it = ClientTlsOptions {
                roots: Roots::Empty,
                ..Default::default()
            }
            .add_ca_file(dir.join("cert.pem"))
            .unwrap();
            connect(url, &trusting_it).await.unwrap();
        }
        Ok(out) => panic!("{command}: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => eprintln!("openssl not run ({e}); the command was not checked"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
