//! Opening a runtime: one device on one backend.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::cpu::CpuBackend;
use crate::backend::Backend;
use crate::builder::RuntimeBuilder;
use crate::completion::spin::SpinPolicy;
use crate::device::{BackendKind, DeviceInfo};
use crate::diagnostics::Diagnostics;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::host::HostBuffer;
use crate::options::RuntimeOptions;
use crate::scheduler::{Engine, Scheduler};
use crate::stream::Stream;

/// One device on one backend. Cheap to clone; `Send + Sync`. Every handle made
/// from it keeps it alive; see [`Runtime::close`].
#[derive(Clone)]
pub struct Runtime {
    pub(crate) engine: Arc<dyn Engine>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("backend", &self.engine.kind()).finish()
    }
}

fn engine<B: Backend>(backend: B, options: &RuntimeOptions) -> Result<Arc<dyn Engine>> {
    #[cfg(feature = "test-support")]
    let fault = options.fault;
    #[cfg(not(feature = "test-support"))]
    let fault = None;
    let fence_waits = fence_waits(B::KIND, options);
    Ok(Arc::new(Scheduler::new(backend, options.queue_limit, fence_waits, fault)?))
}

/// The most a stream fence's wait spins on its own thread (see [`crate::Fence`]).
const FENCE_SPIN_MOST: Duration = Duration::from_micros(100);

/// On a CPU backend, the longest recent wait a stream fence's wait spins
/// for: an op queued to an awake worker ends within it; beyond, the worker
/// was asleep, and the waiter blocks until the worker, once woken, wakes it.
const CPU_FENCE_SPIN_MOST: Duration = Duration::from_micros(10);

/// On a GPU backend, how long a stream fence's wait spins before it yields
/// its core between checks.
const GPU_FENCE_SPIN_BEFORE_YIELDING: Duration = Duration::from_micros(2);

/// How a stream fence's wait watches it before it parks: up to the
/// builder's `spin`, at most [`FENCE_SPIN_MOST`]; on a CPU backend only for
/// waits that recently took no longer than [`CPU_FENCE_SPIN_MOST`].
///
/// It yields its core between checks: what it watches for is a thread of
/// Weir's (a CPU worker, the wake thread's probe of a GPU event, the wgpu
/// poll thread), which a wake-up may have queued on the very core the
/// waiter spins on, and which would otherwise run only once the watch ran
/// out. Spinning without yielding, a Kotlin app's waits for one CPU no-op
/// after another ran out and blocked in most processes of a 2-core host
/// (15–19 µs each, 5–6 yielding), and a CUDA `executeAndWait` confined to
/// one core took 33–38 µs (17–20 yielding).
///
/// Yielding, it watches on a host of one core too: the worker it waits for
/// runs whenever it yields. Confined to one core of this 2-core host, a
/// CPU `execute_and_wait` took 2.8–4.5 µs where it used to block at once
/// (13–15 µs), and sparse ops' latency went from 4–5× a bare worker on a
/// channel to about 1×.
///
/// On a GPU backend it yields only past
/// [`GPU_FENCE_SPIN_BEFORE_YIELDING`]: yielding from the first check, 4 of
/// 9 processes waited 4.3× the floor for a CUDA fence awaited one after
/// another (on an H100's host). On a CPU backend it yields from the first:
/// spinning 2 µs first, a Kotlin app's `executeAndWait` of a CPU no-op
/// took 7.6–9.8 µs in five JVMs, against 4.8–8.8.
fn fence_waits(kind: BackendKind, options: &RuntimeOptions) -> SpinPolicy {
    let budget = options.spin.min(FENCE_SPIN_MOST);
    match kind {
        BackendKind::Cpu => SpinPolicy::yielding(budget).spinning_at_most(CPU_FENCE_SPIN_MOST),
        _ => SpinPolicy::new(budget).yielding_after(GPU_FENCE_SPIN_BEFORE_YIELDING),
    }
}

/// The device `options.device` of `kind`: a CUDA or HIP ordinal, a wgpu
/// adapter's place in the listing; any index on the CPU (each opening is a
/// device of its own).
fn open_engine(kind: BackendKind, options: &RuntimeOptions) -> Result<Arc<dyn Engine>> {
    let index = options.device;
    if index > 0 && kind == BackendKind::Auto {
        return Err(Error::invalid(format!("device {index} of Auto: name the backend (see `devices`)")));
    }
    match kind {
        BackendKind::Auto => {
            for kind in [BackendKind::Cuda, BackendKind::Hip, BackendKind::Wgpu] {
                if let Ok(engine) = open_engine(kind, options) {
                    if !engine.info().software {
                        return Ok(engine);
                    }
                }
            }
            engine(CpuBackend::new(), options)
        }
        BackendKind::Cpu => engine(CpuBackend::with_index(index), options),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => engine(crate::backend::wgpu::WgpuBackend::open_with(options)?, options),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => engine(crate::backend::cuda::CudaBackend::open(options)?, options),
        #[cfg(feature = "hip")]
        BackendKind::Hip => engine(crate::backend::hip::HipBackend::open(options)?, options),
        #[allow(unreachable_patterns)]
        other => Err(Error::unavailable(other, "not compiled in (enable its cargo feature)")),
    }
}

/// Every device of every backend compiled in, best backend first (CUDA, HIP,
/// wgpu, then the CPU, as [`BackendKind::Auto`] tries them), each as
/// [`Runtime::open_device`]`(info.backend, info.index)` opens it and
/// [`Runtime::info`] then reports it, limits included.
///
/// Never fails and opens nothing: it asks each driver what it sees (wgpu's
/// adapters, CUDA's and HIP's device attributes) without creating a device
/// or a context. A backend that cannot run here (not compiled in, no driver
/// library, no device, no NVRTC, a driver that fails to answer) contributes
/// no device and no error; [`Runtime::open`] on it says why. The CPU is
/// always listed, once, at index 0.
// With no GPU backend compiled in, the CPU is all that is pushed.
#[cfg_attr(not(any(feature = "cuda", feature = "hip", feature = "wgpu")), allow(clippy::vec_init_then_push))]
pub fn devices() -> Vec<DeviceInfo> {
    let mut listed = Vec::new();
    #[cfg(feature = "cuda")]
    listed.extend(crate::backend::cuda::list());
    #[cfg(feature = "hip")]
    listed.extend(crate::backend::hip::list());
    #[cfg(feature = "wgpu")]
    listed.extend(crate::backend::wgpu::list());
    listed.push(CpuBackend::describe(0));
    listed
}

impl Runtime {
    /// Opens the device of `kind` with every option at its default:
    /// `Runtime::builder(kind).open()`. A backend that cannot run here is
    /// [`Error::Unavailable`].
    pub fn open(kind: BackendKind) -> Result<Runtime> {
        Runtime::builder(kind).open()
    }

    /// Options for opening a runtime of `kind` (the device, and every knob a
    /// runtime has): the one door for configuration.
    pub fn builder(kind: BackendKind) -> RuntimeBuilder {
        RuntimeBuilder::new(kind)
    }

    /// Opens device `index` of `kind`, as [`devices`] lists it (see
    /// [`DeviceGroup`](crate::DeviceGroup) for several at once):
    /// `Runtime::builder(kind).device(index).open()`.
    pub fn open_device(kind: BackendKind, index: usize) -> Result<Runtime> {
        Runtime::builder(kind).device(index).open()
    }

    pub(crate) fn open_with(kind: BackendKind, options: &RuntimeOptions) -> Result<Runtime> {
        Ok(Runtime { engine: open_engine(kind, options)? })
    }

    /// The device this runtime drives.
    pub fn info(&self) -> DeviceInfo {
        self.engine.info()
    }

    /// The stream every runtime starts with.
    pub fn default_stream(&self) -> Stream {
        Stream::new(self.engine.clone(), 0)
    }

    /// A new stream.
    pub fn new_stream(&self) -> Result<Stream> {
        Ok(Stream::new(self.engine.clone(), self.engine.new_stream()?))
    }

    /// Host memory holding a copy of `data`, for
    /// [`Stream::write_host`]: page-locked on CUDA and HIP, so that uploads
    /// from it need no host copy (on other backends, plain memory).
    pub fn host_buffer<T: Element>(&self, data: &[T]) -> Result<HostBuffer> {
        self.engine.host_buffer(bytemuck::cast_slice(data))
    }

    /// A fence on all work admitted on every stream so far. It reports
    /// every stream's failures since that stream's previous fence: the
    /// first, with their total.
    pub fn fence(&self) -> Result<Fence> {
        Ok(Fence::new(self.engine.fence(None)?, self.engine.clone(), None))
    }

    /// Waits, without blocking a thread, for all work admitted so far.
    pub async fn sync(&self) -> Result<()> {
        self.fence()?.await
    }

    /// The most work this runtime holds queued before admission waits (see
    /// [`RuntimeBuilder::queue_limit`]).
    pub fn queue_limit(&self) -> crate::QueueLimit {
        self.engine.queue_limit()
    }

    /// Counters for leak tests and benchmarks.
    pub fn diagnostics(&self) -> Diagnostics {
        self.engine.diagnostics()
    }

    /// Waits for all work in flight, then releases the device. Later calls on
    /// this runtime, its streams and buffers fail with [`Error::Closed`].
    /// Every caller, concurrent ones included, returns once that is done.
    ///
    /// Closing is the only way to end a runtime early: otherwise it lives as
    /// long as any handle (runtime, stream, buffer, fence, pending read), and
    /// when the last one goes, the work admitted so far completes and the
    /// device is released in the background.
    pub fn close(&self) -> Result<()> {
        self.engine.close()
    }

    pub(crate) fn same_engine(a: &Arc<dyn Engine>, b: &Arc<dyn Engine>) -> bool {
        Arc::ptr_eq(a, b)
    }
}
