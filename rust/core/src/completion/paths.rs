//! Which way each wait went, counted in a build with `test-support` and
//! compiled to nothing without it: the probe that tells a process whose
//! fences end late (some 40 µs, where its neighbours see 12) which path its
//! waits took, and so which thread was late.

/// The ways a wait can go, each counted on its own.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WaitPath {
    /// A stream fence's wait saw it done while watching it (spinning, or,
    /// on a CPU backend behind longer waits, blocked for the span it watches).
    FenceSeen,
    /// A stream fence's wait watched, or would not, and then blocked until it was woken.
    FenceBlocked,
    /// The wake thread's probe of a watched GPU event saw it reached, and completed it.
    ProbeCompleted,
    /// A GPU waiter thread saw its event reached while querying it.
    WaiterSpun,
    /// A GPU waiter thread blocked in the driver for an event nobody else watched.
    WaiterBlocked,
    /// A GPU waiter thread blocked for a watched event, and completed it
    /// before the wake thread's probe did.
    WaiterBeatProbe,
    /// The wake thread went to sleep, with no quick fence pending and its linger over.
    WakeThreadSlept,
}

/// Counts one wait that went `path` (a build with `test-support`).
#[cfg(feature = "test-support")]
pub(crate) fn count(path: WaitPath) {
    counts::COUNTS[path as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Counts nothing: a build without `test-support` keeps no probe.
#[cfg(not(feature = "test-support"))]
#[inline(always)]
pub(crate) fn count(_: WaitPath) {}

#[cfg(feature = "test-support")]
pub use counts::{wait_paths, WaitPaths};

#[cfg(feature = "test-support")]
mod counts {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::WaitPath;

    /// How many ways a wait can go: the last of them, counted from zero, and one.
    const PATHS: usize = WaitPath::WakeThreadSlept as usize + 1;

    /// One counter per [`WaitPath`], in its order.
    pub(super) static COUNTS: [AtomicU64; PATHS] = [const { AtomicU64::new(0) }; PATHS];

    /// How many waits of this process went each way so far, for every
    /// runtime together: a probe for the benches, in a build with test support.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct WaitPaths {
        /// Stream fence waits that saw the fence done while watching it (spinning,
        /// or on a CPU backend behind longer waits, blocked for the span it watches).
        pub fences_seen: u64,
        /// Stream fence waits that watched, or would not, and then blocked until woken.
        pub fences_blocked: u64,
        /// Watched GPU events the wake thread's probe saw reached, and completed.
        pub probes_completed: u64,
        /// GPU events a waiter thread saw reached while querying them.
        pub waiters_spun: u64,
        /// GPU events nobody else watched, for which a waiter thread blocked in the driver.
        pub waiters_blocked: u64,
        /// Watched GPU events a waiter thread, blocked in the driver, completed before the probe did.
        pub waiters_beat_probe: u64,
        /// Times the wake thread went to sleep, no quick fence pending and its linger over.
        pub wake_thread_slept: u64,
    }

    impl WaitPaths {
        /// The waits counted since `earlier`, counts taken before these.
        pub fn since(&self, earlier: &WaitPaths) -> WaitPaths {
            WaitPaths {
                fences_seen: self.fences_seen - earlier.fences_seen,
                fences_blocked: self.fences_blocked - earlier.fences_blocked,
                probes_completed: self.probes_completed - earlier.probes_completed,
                waiters_spun: self.waiters_spun - earlier.waiters_spun,
                waiters_blocked: self.waiters_blocked - earlier.waiters_blocked,
                waiters_beat_probe: self.waiters_beat_probe - earlier.waiters_beat_probe,
                wake_thread_slept: self.wake_thread_slept - earlier.wake_thread_slept,
            }
        }
    }

    /// The counts so far, for every runtime of this process together.
    pub fn wait_paths() -> WaitPaths {
        let read = |path: WaitPath| COUNTS[path as usize].load(Ordering::Relaxed);
        WaitPaths {
            fences_seen: read(WaitPath::FenceSeen),
            fences_blocked: read(WaitPath::FenceBlocked),
            probes_completed: read(WaitPath::ProbeCompleted),
            waiters_spun: read(WaitPath::WaiterSpun),
            waiters_blocked: read(WaitPath::WaiterBlocked),
            waiters_beat_probe: read(WaitPath::WaiterBeatProbe),
            wake_thread_slept: read(WaitPath::WakeThreadSlept),
        }
    }
}
