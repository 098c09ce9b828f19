//! rustls crypto providers compared in memory (no sockets, so the figures are the crypto's):
//! full TLS 1.3 handshakes per second with an ECDSA P-256 certificate, and bulk application-data
//! throughput (encrypt + decrypt) in 16 KiB records.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

fn transfer(from: &mut dyn rustls_conn::Conn, to: &mut dyn rustls_conn::Conn) {
    let mut buf = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut buf).unwrap();
    }
    let mut rd = &buf[..];
    while !rd.is_empty() {
        to.read_tls(&mut rd).unwrap();
        to.process_new_packets().unwrap();
    }
}

mod rustls_conn {
    pub trait Conn {
        fn wants_write(&self) -> bool;
        fn write_tls(&mut self, w: &mut dyn std::io::Write) -> std::io::Result<usize>;
        fn read_tls(&mut self, r: &mut dyn std::io::Read) -> std::io::Result<usize>;
        fn process_new_packets(&mut self) -> Result<rustls::IoState, rustls::Error>;
    }
    macro_rules! imp {
        ($t:ty) => {
            impl Conn for $t {
                // rustls's own methods live on the `Deref` target; call them there.
                fn wants_write(&self) -> bool { std::ops::Deref::deref(self).wants_write() }
                fn write_tls(&mut self, w: &mut dyn std::io::Write) -> std::io::Result<usize> { std::ops::DerefMut::deref_mut(self).write_tls(w) }
                fn read_tls(&mut self, r: &mut dyn std::io::Read) -> std::io::Result<usize> { std::ops::DerefMut::deref_mut(self).read_tls(r) }
                fn process_new_packets(&mut self) -> Result<rustls::IoState, rustls::Error> { std::ops::DerefMut::deref_mut(self).process_new_packets() }
            }
        };
    }
    imp!(rustls::ClientConnection);
    imp!(rustls::ServerConnection);
}

fn configs(provider: CryptoProvider) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
    let cert_der: CertificateDer<'static> = cert.der().clone();
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(provider);
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.clone()], key_der)
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(cert_der).unwrap();
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(client), Arc::new(server))
}

fn pair(c: &Arc<ClientConfig>, s: &Arc<ServerConfig>) -> (ClientConnection, ServerConnection) {
    let mut client = ClientConnection::new(c.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
    let mut server = ServerConnection::new(s.clone()).unwrap();
    while client.is_handshaking() || server.is_handshaking() {
        transfer(&mut client, &mut server);
        transfer(&mut server, &mut client);
    }
    (client, server)
}

fn main() {
    for (name, provider) in [
        ("aws-lc-rs", rustls::crypto::aws_lc_rs::default_provider()),
        ("ring", rustls::crypto::ring::default_provider()),
    ] {
        let (c, s) = configs(provider);
        let n = 2000;
        let t = Instant::now();
        for _ in 0..n {
            pair(&c, &s);
        }
        let hs = n as f64 / t.elapsed().as_secs_f64();
        let (mut client, mut server) = pair(&c, &s);
        let chunk = vec![0x5au8; 16 << 10];
        let total = 512usize << 20;
        let mut sink = vec![0u8; 16 << 10];
        let t = Instant::now();
        let mut moved = 0;
        while moved < total {
            client.writer().write_all(&chunk).unwrap();
            transfer(&mut client, &mut server);
            let mut got = 0;
            while got < chunk.len() {
                got += server.reader().read(&mut sink[got..]).unwrap();
            }
            moved += chunk.len();
        }
        let mbs = total as f64 / t.elapsed().as_secs_f64() / 1e6;
        println!("{name:10} {:>7.0} handshakes/s (client+server, TLS 1.3, P-256)   {:>7.0} MB/s bulk (encrypt+decrypt, {})", hs, mbs, client.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite())).unwrap_or_default());
    }
}
