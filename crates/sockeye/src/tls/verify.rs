//! The verifier behind the two `danger_` switches of
//! [`ClientTlsOptions`](crate::tls::ClientTlsOptions), for tests: each leaves out a part of the
//! certificate check, and both still verify the handshake's signatures as rustls does, with the
//! provider's algorithms — one adapter, so that the delegation to rustls is written once.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// What a [`DangerousVerifier`] leaves out of the certificate check.
#[derive(Debug)]
pub(super) enum Leniency {
    /// `danger_accept_invalid_certs`: any certificate; handshake signatures are still checked.
    AcceptAnyCert,
    /// `danger_skip_hostname_verification`: the full WebPKI check, except the name.
    SkipHostname(Arc<WebPkiServerVerifier>),
}

/// A rustls server-certificate verifier that judges the certificate with its [`Leniency`] and
/// verifies the handshake signatures (which prove the server holds the certificate's key) with
/// the provider's algorithms, as `WebPkiServerVerifier` verifies them.
#[derive(Debug)]
pub(super) struct DangerousVerifier {
    leniency: Leniency,
    algorithms: WebPkiSupportedAlgorithms,
}

impl DangerousVerifier {
    /// `leniency`, with the signature algorithms of `provider`.
    pub(super) fn new(leniency: Leniency, provider: &CryptoProvider) -> Self {
        DangerousVerifier {
            leniency,
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for DangerousVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let webpki = match &self.leniency {
            Leniency::AcceptAnyCert => return Ok(ServerCertVerified::assertion()),
            Leniency::SkipHostname(webpki) => webpki,
        };
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
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
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
