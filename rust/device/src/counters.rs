//! What a device and the engine over it count, for leak tests and
//! benchmarks: live objects, copies, queued work. Kept by whoever makes or
//! moves the thing counted, on any thread.

use std::sync::atomic::{AtomicU64, Ordering};

/// Declares the counters once: the snapshot a backend reports, the atomics
/// it bumps, and the one read from the second into the first.
macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Counters a backend keeps for tests and benchmarks.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct BackendCounters {
            $($(#[$doc])* pub $name: u64,)*
        }

        /// [`BackendCounters`] as a backend keeps them: bumped from any
        /// thread, read back as a snapshot.
        ///
        /// Every backend keeps the same set, so that a counter is added and
        /// read back in one place rather than once per backend; one that does
        /// not apply to a backend stays zero there, as `BackendCounters`
        /// documents.
        #[derive(Debug, Default)]
        pub struct Counters {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        impl Counters {
            /// The counts now.
            pub fn snapshot(&self) -> BackendCounters {
                BackendCounters { $($name: self.$name.load(Ordering::SeqCst),)* }
            }
        }
    };
}

counters! {
    /// Backend events (CUevent, hipEvent, …) alive now, beside the one a
    /// GPU stream keeps, as part of itself, for other streams to wait on.
    live_events,
    /// Device allocations alive now.
    live_allocations,
    /// Backend streams alive now (CPU lanes, CUstreams, wgpu lanes).
    live_streams,
    /// Host-to-device copies made so far.
    host_to_device_copies,
    /// Device-to-host copies made so far.
    device_to_host_copies,
    /// Page-locked host staging buffers allocated so far (CUDA, HIP).
    host_staging_buffers,
    /// Conflicting overlapping accesses seen by a race detector (CPU backend).
    race_violations,
    /// Ops admitted but not yet handed to the device (wgpu: not yet recorded
    /// and submitted, such as the ops behind a held or waiting stream).
    queued_ops,
    /// Host bytes those queued ops hold, as the backend counts its own
    /// allocations for them (wgpu; the driver's are not in it).
    queued_bytes,
}
