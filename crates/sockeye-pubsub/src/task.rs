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

/// Spawns `future` in the span it is spawned from (`tracing`): the lines of a hub's or a
/// backplane's tasks carry the span the application started it in (a node's name, say), as
/// the lines of the call that started them do.
pub(crate) fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    use tracing::Instrument;
    tokio::spawn(future.in_current_span())
}

/// Spawns `future` in `span`: a task started on behalf of whoever calls (a topic's delivery,
/// started by a subscriber) but belonging to what the span names (its backplane).
#[cfg(feature = "nats")]
pub(crate) fn spawn_in<F>(span: &tracing::Span, future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    use tracing::Instrument;
    tokio::spawn(future.instrument(span.clone()))
}
