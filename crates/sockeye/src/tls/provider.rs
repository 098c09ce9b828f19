//! The crypto provider every TLS config here is built with: aws-lc-rs (see the module docs of
//! [`tls`](crate::tls) for why).

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;

/// The crypto provider every config here is built with (explicitly, so that another crate
/// installing a process-wide default cannot change it).
pub(super) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .clone()
}
