//! What a device and the engine over it count, for leak tests and
//! benchmarks: live objects, copies, queued work. Kept by whoever makes or
//! moves the thing counted, on any thread.

use std::sync::atomic::{AtomicU64, Ordering};

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
pub struct Counters {
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
    pub fn snapshot(&self) -> BackendCounters {
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
