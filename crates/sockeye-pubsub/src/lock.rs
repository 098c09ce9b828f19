//! The crate's one way to take a `Mutex`: a leaf, so that any file may use it without importing
//! the file that first needed it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// A lock whose holder cannot leave the data half-updated on panic (every critical section in
/// this crate is a few pushes, removals or stores), so a poisoned lock is still usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
