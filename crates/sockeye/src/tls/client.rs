//! The client side: [`ClientTlsOptions`] (roots, extra CAs, a client certificate, the `danger_`
//! switches) built into a rustls `ClientConfig`, the default config for `wss://`, the ALPN list a
//! connection offers, the SNI name, and the plain-HTTP answer that shows a server is not TLS.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use super::error::TlsError;
use super::pem::{certs_from_pem, key_from_pem, read};
use super::provider::provider;
use super::verify::{DangerousVerifier, Leniency};
use crate::error::Error;

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
                .with_custom_certificate_verifier(Arc::new(DangerousVerifier::new(
                    Leniency::AcceptAnyCert,
                    &provider,
                )))
        } else if self.danger_skip_hostname_verification {
            let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| TlsError::config(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(DangerousVerifier::new(
                    Leniency::SkipHostname(inner),
                    &provider,
                )))
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
