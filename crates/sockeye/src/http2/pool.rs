//! The client's pool of HTTP/2 connections: one per origin (and proxy, and TLS configuration),
//! shared by the WebSockets opened to it, held weakly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;

/// One HTTP/2 connection shared by a client's WebSockets to one origin. The pool holds it weakly:
/// it lives while some WebSocket uses it, and closes once the last one is gone.
#[derive(Debug)]
pub(super) struct PooledConnection {
    pub(super) requests: h2::client::SendRequest<Bytes>,
    pub(super) tls: bool,
    /// WebSockets open on it, against the server's `SETTINGS_MAX_CONCURRENT_STREAMS`: a full
    /// connection is not offered again (h2 would queue the stream until one ends).
    pub(super) open: std::sync::atomic::AtomicUsize,
}

impl PooledConnection {
    pub(super) fn has_room(&self) -> bool {
        self.open.load(std::sync::atomic::Ordering::Acquire) < self.requests.current_max_send_streams()
    }
}

/// A WebSocket's place on a pooled connection: keeps the connection open, and counts.
#[derive(Debug)]
pub(super) struct StreamSlot(Arc<PooledConnection>);

impl StreamSlot {
    pub(super) fn new(connection: Arc<PooledConnection>) -> Self {
        connection.open.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        StreamSlot(connection)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// What makes two connections interchangeable: the origin, the proxy, and the very TLS
/// configuration (held, so that its address cannot be reused by another while the key exists:
/// a connection made with one client certificate is never handed to another configuration).
#[derive(Debug, Clone)]
pub(crate) struct PoolKey {
    pub(crate) tls: bool,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) proxy: String,
    #[cfg(feature = "tls")]
    pub(crate) tls_config: Option<Arc<rustls::ClientConfig>>,
}

impl PoolKey {
    fn tls_config_address(&self) -> usize {
        #[cfg(feature = "tls")]
        if let Some(config) = &self.tls_config {
            return Arc::as_ptr(config) as usize;
        }
        0
    }
}

impl PartialEq for PoolKey {
    fn eq(&self, other: &Self) -> bool {
        (
            self.tls,
            &self.host,
            self.port,
            &self.proxy,
            self.tls_config_address(),
        ) == (
            other.tls,
            &other.host,
            other.port,
            &other.proxy,
            other.tls_config_address(),
        )
    }
}

impl Eq for PoolKey {}

impl std::hash::Hash for PoolKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (
            self.tls,
            &self.host,
            self.port,
            &self.proxy,
            self.tls_config_address(),
        )
            .hash(state);
    }
}

fn pool() -> &'static Mutex<HashMap<PoolKey, Weak<PooledConnection>>> {
    static POOL: OnceLock<Mutex<HashMap<PoolKey, Weak<PooledConnection>>>> = OnceLock::new();
    POOL.get_or_init(Default::default)
}

/// The connection pooled under `key`, if it is still up (entries of closed ones are dropped).
pub(super) fn pooled(key: &PoolKey) -> Option<Arc<PooledConnection>> {
    let mut pool = pool().lock().unwrap_or_else(|e| e.into_inner());
    pool.retain(|_, weak| weak.strong_count() > 0);
    pool.get(key).and_then(Weak::upgrade)
}

/// Pools `connection` under `key` (held weakly: it closes once its last WebSocket is gone).
pub(super) fn insert(key: PoolKey, connection: &Arc<PooledConnection>) {
    pool()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, Arc::downgrade(connection));
}
