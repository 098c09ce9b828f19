//! The SNI host name, seen by the certificate resolver (rustls's unbuffered server connection
//! does not tell it otherwise). The resolver runs inside `process_tls_records`, on the thread
//! that called it, so a thread-local carries the name from one to the other.

use std::cell::RefCell;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

thread_local! {
    static SEEN: RefCell<Option<Box<str>>> = const { RefCell::new(None) };
}

/// The name the last ClientHello on this thread carried, taken.
pub(super) fn take() -> Option<Box<str>> {
    SEEN.try_with(|seen| seen.borrow_mut().take()).ok().flatten()
}

/// A certificate resolver that notes the SNI host name, then asks the one it wraps.
#[derive(Debug)]
pub(crate) struct NoteSni(pub(crate) Arc<dyn ResolvesServerCert>);

impl ResolvesServerCert for NoteSni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().map(Box::from);
        let _ = SEEN.try_with(|seen| *seen.borrow_mut() = name);
        self.0.resolve(hello)
    }

    fn only_raw_public_keys(&self) -> bool {
        self.0.only_raw_public_keys()
    }
}
