//! Locking without poisoning, as in the core.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, ignoring poisoning: no critical section here panics
/// halfway through changing its data.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
