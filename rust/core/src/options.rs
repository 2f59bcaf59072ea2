//! What a runtime is opened with: the options a [`RuntimeBuilder`]
//! collects and each backend reads what concerns it from. Kept apart from
//! the builder, which opens runtimes, so that backends depend on the options
//! alone.
//!
//! [`RuntimeBuilder`]: crate::RuntimeBuilder

use std::time::Duration;

/// How long a GPU backend's waiting thread spins before it blocks, unless
/// the builder says otherwise: a blocking wait wakes its thread well after
/// the device got there (some 20 µs for a CUDA blocking-sync event, hundreds
/// for some Vulkan drivers' fence waits); a polling loop sees it at once.
/// Each waiter spins only while recent waits ended within the budget, so
/// long work costs no core.
pub(crate) const SPIN_BUDGET: Duration = Duration::from_micros(200);

/// Where a CUDA or HIP runtime completes fences and reads (see
/// [`RuntimeBuilder::wake`](crate::RuntimeBuilder::wake)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuWake {
    /// On the driver's host-callback thread, enqueued on the stream.
    Callback,
    /// On the device's waiter threads, one for each stream with completions
    /// pending, which sleep in an event synchronisation (and the wake
    /// thread, for fences likely to be quick).
    Waiter,
}

pub use weir_device::QueueLimit;

pub(crate) use weir_device::info::AdapterChoice;

/// A deliberate scheduler bug, for tests that prove the suite catches it.
#[cfg_attr(not(feature = "test-support"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Versions are keyed on the allocation position and writes publish
    /// nothing: the CubeCL write-cursor bug.
    KeyVersionsAtAllocation,
}

/// What a runtime is opened with. Backends read what concerns them.
#[derive(Debug, Clone)]
pub(crate) struct RuntimeOptions {
    /// The device's place in [`devices`](crate::devices) for its backend.
    pub(crate) device: usize,
    /// How long a GPU waiting thread spins before it blocks.
    pub(crate) spin: Duration,
    /// `None`: the driver's own choice.
    pub(crate) wake: Option<GpuWake>,
    /// wgpu: a device (and queue) of this runtime's own, not the adapter's shared one.
    pub(crate) own_device: bool,
    /// The most work queued on the host before admission waits.
    pub(crate) queue_limit: QueueLimit,
    /// wgpu: which adapters `device` counts among.
    pub(crate) adapters: AdapterChoice,
    /// A deliberate scheduler bug (tests that prove the suite catches it).
    #[cfg(feature = "test-support")]
    pub(crate) fault: Option<Fault>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            device: 0,
            spin: SPIN_BUDGET,
            wake: None,
            own_device: false,
            queue_limit: QueueLimit::DEFAULT,
            adapters: AdapterChoice::default(),
            #[cfg(feature = "test-support")]
            fault: None,
        }
    }
}
