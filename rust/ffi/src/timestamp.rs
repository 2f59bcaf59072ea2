//! The timestamp handle.

use std::sync::Arc;
use std::time::Duration;

use crate::cancel::{cancellable, CancelToken};
use crate::error::Result;

/// A point in a stream, timed on the device when the stream gets there
/// (`WeirStream.timestamp()`): the device time between two of one stream is
/// `elapsed_since`. Two of different streams or runtimes, or the later one
/// given as `earlier`, are refused with `InvalidArgument`.
///
/// A timestamp is a point, not a fence: waiting for one reports no op's
/// failure (the stream's next fence does), only what keeps the time from
/// being read (a lost device, a closed runtime).
#[derive(Debug, uniffi::Object)]
pub struct Timestamp {
    inner: weir_core::Timestamp,
}

impl Timestamp {
    pub(crate) fn new(inner: weir_core::Timestamp) -> Self {
        Timestamp { inner }
    }
}

#[uniffi::export]
impl Timestamp {
    /// Suspends until both this timestamp and `earlier` are taken, then gives
    /// the device time from `earlier` to this one (zero against itself).
    /// `cancel` ends the wait early with `Cancelled`.
    #[uniffi::method(default(cancel = None))]
    pub async fn elapsed_since(&self, earlier: Arc<Timestamp>, cancel: Option<Arc<CancelToken>>) -> Result<Duration> {
        cancellable(Box::pin(self.inner.elapsed_since_async(&earlier.inner)), cancel).await
    }

    /// What `elapsed_since` gives, blocking the calling thread until then.
    pub fn elapsed_since_blocking(&self, earlier: Arc<Timestamp>) -> Result<Duration> {
        Ok(self.inner.elapsed_since(&earlier.inner)?)
    }

    /// True once the device has taken the time. Never blocks.
    pub fn is_complete(&self) -> bool {
        self.inner.is_complete()
    }
}
