//! The fence handle.

use std::sync::Arc;

use crate::cancel::{cancellable, CancelToken};
use crate::error::Result;

/// "All work admitted on a stream (or on every stream) up to now."
///
/// Await it as often as you like, from any number of threads and coroutines;
/// a fence whose work is done resolves at once, without a wake-up.
#[derive(Debug, uniffi::Object)]
pub struct Fence {
    inner: weir_core::Fence,
}

impl Fence {
    pub(crate) fn new(inner: weir_core::Fence) -> Self {
        Fence { inner }
    }
}

#[uniffi::export]
impl Fence {
    /// Suspends until the work is done; fails with the first error of the
    /// covered work. Woken on Weir's wake thread (`weir-wake`), which holds
    /// no lock of Weir's; no thread per waiter. `cancel` ends the wait early with `Cancelled`.
    #[uniffi::method(name = "await", default(cancel = None))]
    pub async fn wait_async(&self, cancel: Option<Arc<CancelToken>>) -> Result<()> {
        cancellable(self.inner.wait_async(), cancel).await
    }

    /// Blocks the calling thread until the work is done.
    pub fn wait_blocking(&self) -> Result<()> {
        Ok(self.inner.wait()?)
    }

    /// True once the work is done. Never blocks.
    pub fn is_complete(&self) -> bool {
        self.inner.is_complete()
    }
}
