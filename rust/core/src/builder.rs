//! Opening a runtime with options: the one door for configuration.
//!
//! Every knob a runtime has is a method of [`RuntimeBuilder`]; the library
//! reads no environment variable of its own for what a builder can say.

use std::time::Duration;

use crate::device::BackendKind;
use crate::error::{Error, Result};
#[cfg(feature = "test-support")]
use crate::options::Fault;
use crate::options::{GpuWake, QueueLimit, RuntimeOptions};
use crate::runtime::Runtime;

/// How to open a [`Runtime`]: `Runtime::builder(kind).device(1).open()`.
/// [`Runtime::open`] is `Runtime::builder(kind).open()`.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `open` is called"]
pub struct RuntimeBuilder {
    kind: BackendKind,
    options: RuntimeOptions,
}

impl RuntimeBuilder {
    pub(crate) fn new(kind: BackendKind) -> Self {
        RuntimeBuilder { kind, options: RuntimeOptions::default() }
    }

    /// Device `index` of the backend, as [`devices`](crate::devices) lists it:
    /// a CUDA or HIP ordinal, a wgpu adapter's place in the listing (0, the
    /// default, is the one [`BackendKind::Auto`] would take); on the CPU every
    /// opening is a device of its own, whatever the index. No such device is
    /// [`Error::Unavailable`] when opened; an index
    /// other than 0 with [`BackendKind::Auto`] is
    /// [`Error::InvalidArgument`].
    pub fn device(mut self, index: usize) -> Self {
        self.options.device = index;
        self
    }

    /// How long a thread that waits for the device spins before it blocks
    /// (CUDA and HIP waiters, the wake thread, the issuing thread's linger,
    /// the wgpu poll thread); default 200 µs, `Duration::ZERO` never spins.
    /// A blocking wait wakes its thread well after the device got there
    /// (some 20 µs for a CUDA blocking-sync event, hundreds for some Vulkan
    /// drivers); spinning sees it at once, at the cost of a core for at most
    /// the budget per wait, and only while recent waits ended within it.
    pub fn spin(mut self, budget: Duration) -> Self {
        self.options.spin = budget;
        self
    }

    /// Where a CUDA or HIP runtime completes its fences and reads: CUDA's
    /// default is [`GpuWake::Waiter`], HIP's [`GpuWake::Callback`]. Other
    /// backends ignore it. For measuring one path against the other.
    pub fn wake(mut self, wake: GpuWake) -> Self {
        self.options.wake = Some(wake);
        self
    }

    /// On wgpu, a device of this runtime's own, with its own queue, instead
    /// of the one device every runtime on the adapter shares (default
    /// `false`). wgpu opens one queue per device, so on a shared device a
    /// long kernel of any runtime delays every other runtime's work behind
    /// it; with a device of its own, a runtime's work runs beside it as far
    /// as the hardware runs two queues at once (measured in `cargo xtask
    /// bench --rust --backend wgpu --only own-device`). The cost: the device's
    /// own pipelines, buffers and poll thread, and the device is kept for
    /// the life of the process, as the shared ones are (some Vulkan drivers
    /// deadlock when a device is destroyed while another is made). Other
    /// backends ignore it: CUDA and HIP streams are hardware queues already.
    pub fn own_device(mut self, own: bool) -> Self {
        self.options.own_device = own;
        self
    }

    /// On wgpu, the graphics APIs whose adapters are tried, a comma list as
    /// wgpu names them (`vulkan`, `metal`, `dx12`, `gl`); default the
    /// primary ones, never GL, so a machine without Vulkan does not silently
    /// run on a GL emulation. A list naming none is
    /// [`Error::Unavailable`] when opened. Other
    /// backends ignore it.
    pub fn wgpu_backends(mut self, list: impl Into<String>) -> Self {
        self.options.adapters.backends = Some(list.into());
        self
    }

    /// On wgpu, only adapters whose name contains `name` (in any case):
    /// [`device`](Self::device) then counts among those. None matching is
    /// [`Error::Unavailable`] naming the APIs
    /// tried. Other backends ignore it.
    pub fn adapter_named(mut self, name: impl Into<String>) -> Self {
        self.options.adapters.name = Some(name.into().to_ascii_lowercase());
        self
    }

    /// The most work the runtime holds queued on the host (default
    /// [`QueueLimit::DEFAULT`]): ops admitted and not yet run or handed to
    /// the driver, and the host bytes they hold. At the limit, admission on a
    /// plain [`Stream`](crate::Stream) blocks until the device has taken
    /// some; a handle from [`Stream::without_waiting`](crate::Stream::without_waiting)
    /// fails with [`Error::QueueFull`] instead, and
    /// [`Stream::room`](crate::Stream::room) is a future to await first.
    /// A limit of 0 is [`Error::InvalidArgument`] when opened. What the
    /// queue may be waiting on admits past the limit rather than wait for
    /// itself: a kernel of this runtime, a woken task on Weir's wake thread,
    /// and an external write's closure (its op holds a share until it returns).
    pub fn queue_limit(mut self, limit: QueueLimit) -> Self {
        self.options.queue_limit = limit;
        self
    }

    /// A scheduler with a deliberate bug. Only for tests that prove the test
    /// suite detects that bug.
    #[cfg(feature = "test-support")]
    pub fn fault(mut self, fault: Fault) -> Self {
        self.options.fault = Some(fault);
        self
    }

    /// Opens the runtime. A backend that cannot run here is
    /// [`Error::Unavailable`], naming what is missing.
    pub fn open(self) -> Result<Runtime> {
        let limit = self.options.queue_limit;
        if limit.ops == 0 || limit.host_bytes == 0 {
            return Err(Error::invalid(format!("a queue limit of {limit:?} admits nothing: both must be at least 1")));
        }
        Runtime::open_with(self.kind, &self.options)
    }
}
