//! [`DeflatePool`]: the compressors and decompressors idle connections give back and busy ones
//! borrow, each remembering whose context it holds (see the [module docs](super) for the rule).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use flate2::{Compress, Decompress};

/// Compressors and decompressors lent to connections while they are busy, given back when they
/// wait for input (see the [module docs](super)). Cloning shares the pool. Two pools compare equal when their idle limits
/// are: the pool is a resource, its limit the setting.
///
/// ```
/// use sockeye_proto::extension::deflate::{DeflateConfig, DeflatePool};
/// // Up to 64 idle states each way, shared by every connection made from clones of `shared`.
/// let shared = DeflateConfig::default().pool(Some(DeflatePool::new(64)));
/// assert_eq!(shared.pool.as_ref().map(DeflatePool::idle_limit), Some(64));
/// // Each connection keeps its own states (~344 KiB with context takeover): no re-priming ever.
/// let dedicated = DeflateConfig::default().pool(None);
/// assert!(dedicated.pool.is_none());
/// ```
#[derive(Clone)]
pub struct DeflatePool {
    pub(super) shared: Arc<PoolShared>,
}

pub(super) struct PoolShared {
    pub(super) idle_limit: usize,
    pub(super) compressors: Mutex<Shelf<Compress>>,
    pub(super) decompressors: Mutex<Shelf<Decompress>>,
    pub(super) next_owner: AtomicU64,
}

/// One direction's states: those idle in the pool, and the count of those held by connections.
pub(super) struct Shelf<T> {
    idle: VecDeque<Lent<T>>,
    /// States out of the pool, held by busy connections.
    held: usize,
    /// Borrows since the pool was made.
    borrows: u64,
}

impl<T> Default for Shelf<T> {
    fn default() -> Self {
        Shelf {
            idle: VecDeque::new(),
            held: 0,
            borrows: 0,
        }
    }
}

/// An idle state in the pool: what it was made for (level and window bits) and whose context it
/// holds (0: nobody's, to be reset before use).
pub(super) struct Lent<T> {
    kind: (u32, u8),
    owner: u64,
    state: T,
}

/// What the pool lent: the borrower's own state, context intact, or another's, to reset.
pub(super) enum Borrowed<T> {
    Kept(T),
    Other(T),
}

impl DeflatePool {
    /// Idle states kept per direction by default: 8 (at most ~2.7 MiB for the pool).
    pub const DEFAULT_IDLE_LIMIT: usize = 8;

    /// A pool that keeps at most `idle_limit` idle compressors and as many decompressors; states
    /// given back beyond that are freed, oldest first. 0 keeps nothing: every busy spell (from a
    /// connection's first message after a wait for input to its next wait) allocates.
    pub fn new(idle_limit: usize) -> Self {
        DeflatePool {
            shared: Arc::new(PoolShared {
                idle_limit,
                compressors: Mutex::new(Shelf::default()),
                decompressors: Mutex::new(Shelf::default()),
                next_owner: AtomicU64::new(1),
            }),
        }
    }

    /// The most idle states kept per direction.
    pub fn idle_limit(&self) -> usize {
        self.shared.idle_limit
    }

    /// Idle (compressors, decompressors) in the pool now.
    pub fn idle(&self) -> (usize, usize) {
        (
            lock(&self.shared.compressors).idle.len(),
            lock(&self.shared.decompressors).idle.len(),
        )
    }

    /// (compressors, decompressors) held by connections now: out of the pool, between a
    /// connection's first message after a wait and its next wait for input (see the
    /// [module docs](super)).
    pub fn held(&self) -> (usize, usize) {
        (
            lock(&self.shared.compressors).held,
            lock(&self.shared.decompressors).held,
        )
    }

    /// (compressors, decompressors) borrowed from the pool since it was made: a connection
    /// borrows once per busy spell, not once per message.
    pub fn borrows(&self) -> (u64, u64) {
        (
            lock(&self.shared.compressors).borrows,
            lock(&self.shared.decompressors).borrows,
        )
    }

    pub(super) fn new_owner(&self) -> u64 {
        self.shared.next_owner.fetch_add(1, Ordering::Relaxed)
    }
}

impl Default for DeflatePool {
    fn default() -> Self {
        DeflatePool::new(Self::DEFAULT_IDLE_LIMIT)
    }
}

impl std::fmt::Debug for DeflatePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (compressors, decompressors) = self.idle();
        f.debug_struct("DeflatePool")
            .field("idle_limit", &self.shared.idle_limit)
            .field("idle_compressors", &compressors)
            .field("idle_decompressors", &decompressors)
            .finish()
    }
}

impl PartialEq for DeflatePool {
    fn eq(&self, other: &Self) -> bool {
        self.shared.idle_limit == other.shared.idle_limit
    }
}

impl Eq for DeflatePool {}

/// A poisoned lock only means another thread panicked while moving states in or out of the
/// queue; the queue itself is always whole, so go on with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes the borrower's own idle state if the pool still has it, else the least recently
/// returned one of the right kind; `None`: the borrower makes a new one. Either way the state
/// counts as held until it is given back.
pub(super) fn borrow<T>(shelf: &Mutex<Shelf<T>>, kind: (u32, u8), owner: u64) -> Option<Borrowed<T>> {
    let mut shelf = lock(shelf);
    shelf.held += 1;
    shelf.borrows += 1;
    let idle = &mut shelf.idle;
    if let Some(i) = idle.iter().rposition(|l| l.owner == owner && l.kind == kind) {
        return idle.remove(i).map(|l| Borrowed::Kept(l.state));
    }
    let i = idle.iter().position(|l| l.kind == kind)?;
    idle.remove(i).map(|l| Borrowed::Other(l.state))
}

/// Returns a held state; the oldest idle one is freed (outside the lock) when past the limit.
pub(super) fn give_back<T>(shelf: &Mutex<Shelf<T>>, limit: usize, lent: Lent<T>) {
    let evicted = {
        let mut shelf = lock(shelf);
        shelf.held = shelf.held.saturating_sub(1);
        shelf.idle.push_back(lent);
        (shelf.idle.len() > limit)
            .then(|| shelf.idle.pop_front())
            .flatten()
    };
    drop(evicted);
}

/// Gives a compressor of `kind` back to `pool`, as `owner`'s (0: nobody's).
pub(super) fn give_back_deflater(pool: &DeflatePool, kind: (u32, u8), c: Compress, owner: u64) {
    let lent = Lent {
        kind,
        owner,
        state: c,
    };
    give_back(&pool.shared.compressors, pool.shared.idle_limit, lent);
}

/// Gives a decompressor of `bits` back to `pool`, as `owner`'s (0: nobody's).
pub(super) fn give_back_inflater(pool: &DeflatePool, bits: u8, d: Decompress, owner: u64) {
    let lent = Lent {
        kind: (0, bits),
        owner,
        state: d,
    };
    give_back(&pool.shared.decompressors, pool.shared.idle_limit, lent);
}
