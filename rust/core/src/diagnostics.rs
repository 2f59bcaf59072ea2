//! Counters of live objects and scheduler work, for leak tests and benchmarks.
//!
//! A leaf module: backends bump the device layer's `Counters`, the
//! scheduler and the completion cell bump [`LiveCounters`], and
//! [`Diagnostics`] is the snapshot users read.

use std::sync::atomic::{AtomicUsize, Ordering};

pub use weir_device::counters::BackendCounters;
pub(crate) use weir_device::counters::Counters;

/// Live-object counters of one runtime, kept by its fences and completions.
#[derive(Debug, Default)]
pub struct LiveCounters {
    pub(crate) fences: AtomicUsize,
    pub(crate) waiters: AtomicUsize,
}

impl LiveCounters {
    /// Fence handles alive now.
    pub fn fences(&self) -> usize {
        self.fences.load(Ordering::SeqCst)
    }
    /// Registered wakers plus threads blocked in a wait, now.
    pub fn waiters(&self) -> usize {
        self.waiters.load(Ordering::SeqCst)
    }
}

/// Live objects and scheduler counts, for leak tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Diagnostics {
    pub backend: BackendCounters,
    /// Fence handles alive.
    pub live_fences: u64,
    /// Futures registered on, and threads blocked in, a pending completion.
    pub live_waiters: u64,
    /// Buffers with a live handle.
    pub live_buffers: u64,
    /// Released buffers whose memory waits for their last users.
    pub retiring_buffers: u64,
    /// Streams with a live handle (the default stream counts while the runtime lives).
    pub live_streams: u64,
    /// Streams whose last handle went and whose work is still running.
    pub retiring_streams: u64,
    /// Cross-stream waits the scheduler inserted.
    pub inserted_waits: u64,
    /// Ops admitted.
    pub admitted_ops: u64,
    /// Ops in the runtime's queue, which
    /// [`RuntimeBuilder::queue_limit`](crate::RuntimeBuilder::queue_limit)
    /// bounds: admitted and not yet run (CPU) or handed to the driver.
    pub ops_in_queue: u64,
    /// Host bytes those ops hold (uploads' data).
    pub host_bytes_in_queue: u64,
    /// The most ops in the queue at once since the runtime opened.
    pub peak_ops_in_queue: u64,
}
