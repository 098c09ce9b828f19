//! Certificates and keys read from PEM text or files, with errors that say which.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::error::TlsError;
use crate::error::Error;

pub(super) fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::config(format!("unreadable PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::config("no certificate in the PEM data").into());
    }
    Ok(certs)
}

/// A PKCS#8, PKCS#1 (RSA) or SEC1 (EC) private key, whichever the PEM holds first.
pub(super) fn key_from_pem(pem: &[u8]) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| TlsError::config(format!("no usable private key in the PEM data: {e}")).into())
}

pub(super) fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| TlsError::config(format!("{}: {e}", path.display())).into())
}
