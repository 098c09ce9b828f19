//! A spawned task tied to the life of what owns it.

use tokio::task::AbortHandle;

/// Aborts its task when dropped: a hub's fan-out, a backplane's reader or sweeper ends with the
/// last handle that owns it.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
