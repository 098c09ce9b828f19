//! The server side: [`ServerTls`] (a PEM certificate chain and key in a slot that
//! [`ServerTls::reload_pem`] swaps while serving, client-certificate verification for mutual TLS,
//! ALPN), and the config a [`Server`](crate::Server)'s connections are made with.

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use super::error::TlsError;
use super::pem::{certs_from_pem, key_from_pem, read};
use super::provider::provider;
use super::stream::sni::NoteSni;
use crate::error::Error;

/// The config a server's TLS connections are made with: `acceptor`'s, with `h2` offered by ALPN
/// (ahead of `http/1.1`) when `http2` and withdrawn when not (a list without `http/1.1` was
/// chosen by the application and is left as it is when adding), and its certificate resolver
/// wrapped so that each connection learns the client's SNI host name (see `stream::sni`),
/// and 0-RTT data refused.
/// Made once per server: the copy shares the resolver, so `ServerTls::reload_pem` still reaches
/// it.
pub(crate) fn server_config(acceptor: &TlsAcceptor, http2: bool) -> Arc<ServerConfig> {
    let current = &acceptor.config().alpn_protocols;
    let has = |p: &[u8]| current.iter().any(|c| c == p);
    let mut config = (**acceptor.config()).clone();
    if http2 && !has(b"h2") && has(b"http/1.1") {
        config.alpn_protocols = std::iter::once(b"h2".to_vec())
            .chain(current.iter().cloned())
            .collect();
    } else if !http2 && has(b"h2") {
        config.alpn_protocols.retain(|p| p.as_slice() != b"h2");
    }
    config.cert_resolver = Arc::new(NoteSni(config.cert_resolver.clone()));
    // No 0-RTT: early data can be replayed by anyone who saw it (RFC 8446 §8), and an upgrade
    // request and the frames after it are not known to be safe to repeat (RFC 8470 §5.1).
    config.max_early_data_size = 0;
    Arc::new(config)
}

/// Server-side TLS: a certificate that can be swapped while serving, and optional client
/// certificate verification.
///
/// ```no_run
/// # async fn run() -> Result<(), sockeye::Error> {
/// let tls = sockeye::tls::ServerTls::from_pem_files("cert.pem", "key.pem")?;
/// let server = sockeye::Server::bind("127.0.0.1:8443", sockeye::Config::default()).await?.with_tls(tls.acceptor());
/// // Later, after renewing the certificate on disk:
/// tls.reload_pem_files("cert.pem", "key.pem")?;
/// # let _ = server; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ServerTls {
    slot: Arc<CertSlot>,
    config: Arc<ServerConfig>,
    /// Kept to rebuild the configuration with another provider.
    client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
}

/// The current certificate; swapped whole on reload, read on every handshake.
#[derive(Debug)]
struct CertSlot(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok().map(|key| key.clone())
    }
}

impl ServerTls {
    /// A server identity from a PEM certificate chain (leaf first) and a PEM private key.
    pub fn from_pem(chain: &[u8], key: &[u8]) -> Result<Self, Error> {
        Self::build(
            Arc::new(CertSlot(RwLock::new(certified_key(chain, key)?))),
            None,
            provider(),
            vec![b"http/1.1".to_vec()],
        )
    }

    /// [`from_pem`](Self::from_pem) with the PEM read from files.
    pub fn from_pem_files(chain: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Self, Error> {
        Self::from_pem(&read(chain.as_ref())?, &read(key.as_ref())?)
    }

    /// Requires every client to present a certificate signed by one of the CAs in `ca_pem`
    /// (mutual TLS); handshakes without one fail with the `CertificateRequired` alert.
    pub fn require_client_certs(self, ca_pem: &[u8]) -> Result<Self, Error> {
        let mut roots = RootCertStore::empty();
        for ca in certs_from_pem(ca_pem)? {
            roots
                .add(ca)
                .map_err(|e| TlsError::config(format!("bad client CA certificate: {e}")))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| TlsError::config(e.to_string()))?;
        let crypto = self.config.crypto_provider().clone();
        let alpn = self.config.alpn_protocols.clone();
        Self::build(self.slot, Some(verifier), crypto, alpn)
    }

    /// The same identity with another crypto provider: the aws-lc-rs one restricted to some
    /// cipher suites, say (`rustls::crypto::aws_lc_rs::default_provider()` with `cipher_suites`
    /// narrowed). Client-certificate checks and ALPN are kept.
    pub fn with_provider(self, crypto: Arc<CryptoProvider>) -> Result<Self, Error> {
        let alpn = self.config.alpn_protocols.clone();
        Self::build(self.slot, self.client_verifier, crypto, alpn)
    }

    fn build(
        slot: Arc<CertSlot>,
        client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
        crypto: Arc<CryptoProvider>,
        alpn: Vec<Vec<u8>>,
    ) -> Result<Self, Error> {
        let builder = ServerConfig::builder_with_provider(crypto)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::config(e.to_string()))?;
        let builder = match &client_verifier {
            Some(v) => builder.with_client_cert_verifier(v.clone()),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(slot.clone());
        config.alpn_protocols = alpn;
        Ok(ServerTls {
            slot,
            config: Arc::new(config),
            client_verifier,
        })
    }

    /// Replaces the certificate and key; handshakes from now on use the new one, connections
    /// already open are unaffected. On error the old certificate stays.
    pub fn reload_pem(&self, chain: &[u8], key: &[u8]) -> Result<(), Error> {
        let new = certified_key(chain, key)?;
        match self.slot.0.write() {
            Ok(mut current) => *current = new,
            Err(poisoned) => *poisoned.into_inner() = new,
        }
        Ok(())
    }

    /// [`reload_pem`](Self::reload_pem) from files.
    pub fn reload_pem_files(&self, chain: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<(), Error> {
        self.reload_pem(&read(chain.as_ref())?, &read(key.as_ref())?)
    }

    /// Offers these ALPN protocols, in order (default: `http/1.1`; [`Server`](crate::Server) adds
    /// `h2` by itself when it serves HTTP/2). For a hyper or axum server that serves HTTP/2 as
    /// well, offer `[b"h2", b"http/1.1"]`.
    pub fn with_alpn(mut self, protocols: &[&[u8]]) -> Self {
        let mut config = (*self.config).clone();
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        self.config = Arc::new(config);
        self
    }

    /// The acceptor to hand to [`Server::with_tls`](crate::Server::with_tls).
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.clone())
    }

    /// The rustls configuration.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }
}

fn certified_key(chain: &[u8], key: &[u8]) -> Result<Arc<CertifiedKey>, Error> {
    let chain = certs_from_pem(chain)?;
    let key = key_from_pem(key)?;
    let certified = CertifiedKey::from_der(chain, key, &provider())
        .map_err(|e| TlsError::config(format!("certificate and key: {e}")))?;
    Ok(Arc::new(certified))
}
