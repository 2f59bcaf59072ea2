//! Counters of live objects and scheduler work, for leak tests and benchmarks.
//!
//! A leaf module: backends bump [`Counters`], the scheduler and the completion
//! cell bump [`LiveCounters`], and [`Diagnostics`] is the snapshot users read.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counters a backend keeps for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendCounters {
    /// Backend events (CUevent, hipEvent, …) alive now, beside the one a
    /// GPU stream keeps, as part of itself, for other streams to wait on.
    pub live_events: u64,
    /// Device allocations alive now.
    pub live_allocations: u64,
    /// Backend streams alive now (CPU worker threads, CUstreams, wgpu lanes).
    pub live_streams: u64,
    /// Host-to-device copies made so far.
    pub host_to_device_copies: u64,
    /// Device-to-host copies made so far.
    pub device_to_host_copies: u64,
    /// Page-locked host staging buffers allocated so far (CUDA, HIP).
    pub host_staging_buffers: u64,
    /// Conflicting overlapping accesses seen by a race detector (CPU backend).
    pub race_violations: u64,
    /// Ops admitted but not yet handed to the device (wgpu: not yet recorded
    /// and submitted, such as the ops behind a held or waiting stream).
    pub queued_ops: u64,
    /// Host bytes those queued ops hold, as the backend counts its own
    /// allocations for them (wgpu; the driver's are not in it).
    pub queued_bytes: u64,
}

/// [`BackendCounters`] as a backend keeps them: bumped from any thread, read
/// back as a snapshot.
///
/// Every backend keeps the same set, so that a counter is added and read back
/// in one place rather than once per backend; one that does not apply to a
/// backend stays zero there, as `BackendCounters` documents.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub live_events: AtomicU64,
    pub live_allocations: AtomicU64,
    pub live_streams: AtomicU64,
    pub host_to_device_copies: AtomicU64,
    pub device_to_host_copies: AtomicU64,
    pub host_staging_buffers: AtomicU64,
    pub race_violations: AtomicU64,
    /// Ops admitted, not yet handed to the device (wgpu: recorded and submitted).
    pub queued_ops: AtomicU64,
    /// What those hold of our own host memory, in bytes.
    pub queued_bytes: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> BackendCounters {
        let load = |counter: &AtomicU64| counter.load(Ordering::SeqCst);
        BackendCounters {
            live_events: load(&self.live_events),
            live_allocations: load(&self.live_allocations),
            live_streams: load(&self.live_streams),
            host_to_device_copies: load(&self.host_to_device_copies),
            device_to_host_copies: load(&self.device_to_host_copies),
            host_staging_buffers: load(&self.host_staging_buffers),
            race_violations: load(&self.race_violations),
            queued_ops: load(&self.queued_ops),
            queued_bytes: load(&self.queued_bytes),
        }
    }
}

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
