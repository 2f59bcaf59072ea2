//! What `backend/lane.rs` and `backend/progress.rs` build on (`backend::sync`
//! in the crate): here loom's primitives, for their model checks.

pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
