//! TLS for `wss://`, with rustls and the aws-lc-rs crypto provider (chosen by measurement: in
//! `bench/tls-providers` it ran about 16% more handshakes and 16% more AES-GCM throughput than
//! ring on this machine). No OpenSSL.
//!
//! Client: [`ClientTlsOptions`] builds a `rustls::ClientConfig` — the platform's root
//! certificates by default, extra CA files, a client certificate for mutual TLS, ALPN `http/1.1`,
//! and two clearly named `danger_` switches for testing. SNI is sent from the URL's host name.
//!
//! Server: [`ServerTls`] loads a PEM certificate chain and key (PKCS#8, PKCS#1 or SEC1), can
//! require client certificates, and swaps its certificate without a restart
//! ([`ServerTls::reload_pem`]). Any `tokio_rustls::TlsAcceptor` of your own works too
//! ([`Server::with_tls`](crate::Server::with_tls)): its `ServerConfig` is what is used.
//!
//! Connections: [`TlsStream`] drives rustls's unbuffered API over buffers of Sockeye's own,
//! given back while a connection waits, so that an idle `wss://` connection holds only rustls's
//! keys and state (6.7 KiB of heap per idle server connection in all, against 10.7 KiB through
//! `tokio-rustls`, whose rustls connection keeps a 4 KiB receive buffer for life).

use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme,
};

pub use rustls;
pub use tokio_rustls::{TlsAcceptor, TlsConnector};

pub use crate::tls_error::{TlsError, TlsErrorKind};
pub use crate::tls_stream::{ClientTlsStream, ServerTlsStream, TlsSide, TlsStream};

use crate::error::Error;

/// The crypto provider every config here is built with (explicitly, so that another crate
/// installing a process-wide default cannot change it).
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .clone()
}

/// Whether the first bytes a server sent (at least one) are the start of an HTTP response, which
/// no TLS record is (a record starts with its content type, 20 to 24).
pub(crate) fn looks_like_http(first: &[u8]) -> bool {
    !first.is_empty() && b"HTTP/".starts_with(&first[..first.len().min(5)])
}

/// Which root certificates a client trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Roots {
    /// The operating system's store (on Linux, `/etc/ssl/certs` and friends). Default.
    #[default]
    Platform,
    /// Mozilla's roots compiled into the binary (feature `webpki-roots`).
    #[cfg(feature = "webpki-roots")]
    WebPki,
    /// None: only the CAs added with [`ClientTlsOptions::add_ca_pem`].
    Empty,
}

/// How a client verifies servers and identifies itself.
///
/// ```no_run
/// # fn run() -> Result<(), sockeye::Error> {
/// let tls = sockeye::tls::ClientTlsOptions::default().add_ca_file("ca.pem")?.build()?;
/// let config = sockeye::Config::builder().tls_client(Some(tls)).build();
/// # let _ = config; Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClientTlsOptions {
    /// The trusted roots. Default: the platform's.
    pub roots: Roots,
    /// Extra trusted CA certificates (DER).
    pub extra_cas: Vec<CertificateDer<'static>>,
    /// A certificate chain and key to present for mutual TLS.
    pub identity: Option<(Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>)>,
    /// Accept any server certificate, verifying nothing but the handshake signature. For tests
    /// against self-signed servers only: it removes all protection against impersonation.
    pub danger_accept_invalid_certs: bool,
    /// Verify the chain but accept a certificate issued for another host name. For tests only.
    pub danger_skip_hostname_verification: bool,
}

impl ClientTlsOptions {
    /// Trusts the CA certificates in a PEM file, besides the roots.
    pub fn add_ca_file(self, path: impl AsRef<Path>) -> Result<Self, Error> {
        let pem = read(path.as_ref())?;
        self.add_ca_pem(&pem)
    }

    /// Trusts the CA certificates in PEM text.
    pub fn add_ca_pem(mut self, pem: &[u8]) -> Result<Self, Error> {
        let certs = certs_from_pem(pem)?;
        self.extra_cas.extend(certs);
        Ok(self)
    }

    /// Presents this certificate chain and key (PEM) when the server asks (mutual TLS).
    pub fn identity_pem(mut self, chain: &[u8], key: &[u8]) -> Result<Self, Error> {
        self.identity = Some((certs_from_pem(chain)?, Arc::new(key_from_pem(key)?)));
        Ok(self)
    }

    /// The rustls configuration, with ALPN `http/1.1` (RFC 6455 runs over HTTP/1.1).
    pub fn build(&self) -> Result<Arc<ClientConfig>, Error> {
        self.build_with_provider(provider())
    }

    /// [`build`](Self::build) with another crypto provider: aws-lc-rs's with fewer cipher
    /// suites, say (`rustls::crypto::aws_lc_rs::default_provider()` with `cipher_suites`
    /// filtered). Certificates are verified with the same provider.
    pub fn build_with_provider(&self, provider: Arc<CryptoProvider>) -> Result<Arc<ClientConfig>, Error> {
        let mut roots = RootCertStore::empty();
        match self.roots {
            Roots::Platform => {
                for cert in platform_roots().iter() {
                    let _ = roots.add(cert.clone());
                }
            }
            #[cfg(feature = "webpki-roots")]
            Roots::WebPki => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            Roots::Empty => {}
        }
        for ca in &self.extra_cas {
            roots
                .add(ca.clone())
                .map_err(|e| TlsError::config(format!("bad CA certificate: {e}")))?;
        }
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::config(e.to_string()))?;
        let builder = if self.danger_accept_invalid_certs {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider.clone())))
        } else if self.danger_skip_hostname_verification {
            let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| TlsError::config(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SkipHostname(inner)))
        } else {
            builder.with_root_certificates(roots)
        };
        let mut config = match &self.identity {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .map_err(|e| TlsError::config(format!("client certificate: {e}")))?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The platform's roots, loaded once per process (reading them takes milliseconds).
fn platform_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// The client configuration used for `wss://` when [`Config::tls_client`](crate::Config) is unset.
pub(crate) fn default_client_config() -> Result<Arc<ClientConfig>, Error> {
    static DEFAULT: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(c) = DEFAULT.get() {
        return Ok(c.clone());
    }
    let built = ClientTlsOptions::default().build()?;
    Ok(DEFAULT.get_or_init(|| built).clone())
}

/// The config a server's TLS connections are made with: `acceptor`'s, with `h2` offered by ALPN
/// (ahead of `http/1.1`) when `http2` and withdrawn when not (a list without `http/1.1` was
/// chosen by the application and is left as it is when adding), and its certificate resolver
/// wrapped so that each connection learns the client's SNI host name (see `tls_stream::sni`),
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
    config.cert_resolver = Arc::new(crate::tls_stream::sni::NoteSni(config.cert_resolver.clone()));
    // No 0-RTT: early data can be replayed by anyone who saw it (RFC 8446 §8), and an upgrade
    // request and the frames after it are not known to be safe to repeat (RFC 8470 §5.1).
    config.max_early_data_size = 0;
    Arc::new(config)
}

/// `config` offering exactly `alpn` (a copy, unless it already does).
pub(crate) fn with_alpn(config: Arc<ClientConfig>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    if config
        .alpn_protocols
        .iter()
        .map(Vec::as_slice)
        .eq(alpn.iter().copied())
    {
        return config;
    }
    let mut copy = (*config).clone();
    copy.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(copy)
}

/// The server name to send as SNI and to verify the certificate against.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(host.to_string())
        .map_err(|_| TlsError::config(format!("{host:?} is not a valid server name")).into())
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

fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::config(format!("unreadable PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::config("no certificate in the PEM data").into());
    }
    Ok(certs)
}

/// A PKCS#8, PKCS#1 (RSA) or SEC1 (EC) private key, whichever the PEM holds first.
fn key_from_pem(pem: &[u8]) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| TlsError::config(format!("no usable private key in the PEM data: {e}")).into())
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| TlsError::config(format!("{}: {e}", path.display())).into())
}

/// `danger_accept_invalid_certs`: any certificate; handshake signatures are still checked.
#[derive(Debug)]
struct AcceptAnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `danger_skip_hostname_verification`: the full WebPKI check, except the name.
#[derive(Debug)]
struct SkipHostname(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for SkipHostname {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
