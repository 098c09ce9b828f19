//! [`TlsError`]: why a TLS connection failed, sorted from rustls's errors. A leaf, so that the
//! crate's [`Error`](crate::Error) can carry it without depending on the TLS setup.

use std::fmt;

use rustls::CertificateError;

/// Why a TLS connection failed, sorted so that a program (or a person) can act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsErrorKind {
    /// The server's certificate is not signed by a trusted authority (add its CA with
    /// [`ClientTlsOptions::add_ca_pem`](crate::tls::ClientTlsOptions::add_ca_pem), or fix the server's chain).
    UnknownIssuer,
    /// The certificate is valid, but not for the host name in the URL.
    NameMismatch,
    /// The certificate has expired.
    Expired,
    /// The certificate is not valid yet (check the clock).
    NotYetValid,
    /// The certificate was revoked.
    Revoked,
    /// The server's certificate is a CA certificate (basic constraints `CA:TRUE`), which may
    /// sign certificates but not be a server's own — what `openssl req -x509` makes unless told
    /// otherwise. The error's text says how to make a proper one.
    CaUsedAsEndEntity,
    /// Another problem with a certificate (bad encoding, wrong usage, unsupported algorithm...).
    BadCertificate,
    /// The server does not speak TLS on this port: it answered the TLS ClientHello in plain HTTP.
    /// The URL should say `ws://`, not `wss://`.
    NotTls,
    /// The peer ended the handshake with this alert (e.g. `CertificateRequired` when a server wants a
    /// client certificate, `HandshakeFailure` when no cipher suite or version is shared).
    AlertReceived(String),
    /// A local configuration problem: unreadable PEM, no key, a key that does not match.
    Config,
    /// Anything else TLS reported.
    Other,
}

/// A TLS failure: its kind and rustls's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError {
    /// What went wrong.
    pub kind: TlsErrorKind,
    /// The details.
    pub detail: String,
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match &self.kind {
            TlsErrorKind::UnknownIssuer => "certificate signed by an unknown issuer",
            TlsErrorKind::NameMismatch => "certificate is not valid for this host name",
            TlsErrorKind::Expired => "certificate has expired",
            TlsErrorKind::NotYetValid => "certificate is not valid yet",
            TlsErrorKind::Revoked => "certificate was revoked",
            TlsErrorKind::CaUsedAsEndEntity => {
                "the server's certificate is a CA certificate (basic constraints CA:TRUE), which \
                 can sign certificates but cannot be a server's own; give the server a certificate \
                 with CA:FALSE: one signed by that CA, or a self-signed one such as `openssl req \
                 -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 -keyout \
                 key.pem -out cert.pem -subj /CN=localhost -addext \
                 subjectAltName=DNS:localhost,IP:127.0.0.1 -addext \
                 basicConstraints=critical,CA:FALSE` makes (without that last -addext, openssl \
                 req -x509 makes CA:TRUE certificates)"
            }
            TlsErrorKind::BadCertificate => "bad certificate",
            TlsErrorKind::NotTls => {
                "the server does not speak TLS on this port (it answered in plain HTTP): use ws:// \
                 instead of wss://"
            }
            TlsErrorKind::AlertReceived(_) => "the peer refused the handshake",
            TlsErrorKind::Config => "TLS configuration error",
            TlsErrorKind::Other => "TLS error",
        };
        write!(f, "{what} ({})", self.detail)
    }
}

impl std::error::Error for TlsError {}

impl TlsError {
    pub(crate) fn config(detail: impl Into<String>) -> TlsError {
        TlsError {
            kind: TlsErrorKind::Config,
            detail: detail.into(),
        }
    }

    /// The error for a `wss://` URL whose server answered in plain HTTP.
    pub(crate) fn plain_http_server() -> TlsError {
        TlsError {
            kind: TlsErrorKind::NotTls,
            detail: "the answer to the ClientHello began with \"HTTP/\"".into(),
        }
    }

    pub(crate) fn from_rustls(e: &rustls::Error) -> TlsError {
        let kind = match e {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer => TlsErrorKind::UnknownIssuer,
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    TlsErrorKind::NameMismatch
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => TlsErrorKind::Expired,
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    TlsErrorKind::NotYetValid
                }
                CertificateError::Revoked => TlsErrorKind::Revoked,
                // webpki's `CaUsedAsEndEntity`, which rustls passes on as `Other`.
                CertificateError::Other(other) if format!("{other:?}").contains("CaUsedAsEndEntity") => {
                    TlsErrorKind::CaUsedAsEndEntity
                }
                _ => TlsErrorKind::BadCertificate,
            },
            rustls::Error::AlertReceived(alert) => TlsErrorKind::AlertReceived(format!("{alert:?}")),
            _ => TlsErrorKind::Other,
        };
        TlsError {
            kind,
            detail: e.to_string(),
        }
    }
}
