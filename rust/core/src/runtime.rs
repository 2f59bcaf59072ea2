//! Opening a runtime: one device on one backend.

use std::sync::Arc;

use crate::backend::cpu::CpuBackend;
use crate::backend::{Backend, BackendCounters};
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::scheduler::{Engine, Fault, Scheduler};
use crate::stream::Stream;

/// Which backend to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// The best available: CUDA, then HIP, then a hardware wgpu adapter, then the CPU.
    Auto,
    Cpu,
    Wgpu,
    Cuda,
    Hip,
}

impl BackendKind {
    /// Every concrete backend, best first.
    pub const CONCRETE: [BackendKind; 4] = [BackendKind::Cuda, BackendKind::Hip, BackendKind::Wgpu, BackendKind::Cpu];

    /// Lower-case name, as used in `WEIR_REQUIRE_BACKENDS`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Cpu => "cpu",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cuda => "cuda",
            BackendKind::Hip => "hip",
        }
    }

    /// Parses [`BackendKind::name`].
    pub fn from_name(name: &str) -> Option<BackendKind> {
        [BackendKind::Auto, BackendKind::Cpu, BackendKind::Wgpu, BackendKind::Cuda, BackendKind::Hip]
            .into_iter()
            .find(|kind| kind.name() == name.trim().to_ascii_lowercase())
    }
}

/// What a runtime runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub backend: BackendKind,
    pub name: String,
    /// Device memory, where the backend knows it.
    pub memory_bytes: Option<u64>,
    /// Largest buffer the device accepts.
    pub max_buffer_bytes: u64,
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
    /// Cross-stream waits the scheduler inserted.
    pub inserted_waits: u64,
    /// Ops admitted.
    pub admitted_ops: u64,
}

/// One device on one backend. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) engine: Arc<dyn Engine>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("backend", &self.engine.kind()).finish()
    }
}

fn engine<B: Backend>(backend: B, fault: Option<Fault>) -> Result<Arc<dyn Engine>> {
    Ok(Arc::new(Scheduler::new(backend, fault)?))
}

fn open_engine(kind: BackendKind, fault: Option<Fault>) -> Result<Arc<dyn Engine>> {
    match kind {
        BackendKind::Auto => {
            for kind in [BackendKind::Cuda, BackendKind::Hip, BackendKind::Wgpu] {
                if let Ok(engine) = open_engine(kind, fault) {
                    if engine.info().is_hardware() {
                        return Ok(engine);
                    }
                }
            }
            engine(CpuBackend::new(), fault)
        }
        BackendKind::Cpu => engine(CpuBackend::new(), fault),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => engine(crate::backend::wgpu::WgpuBackend::open()?, fault),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => engine(crate::backend::cuda::CudaBackend::open()?, fault),
        #[cfg(feature = "hip")]
        BackendKind::Hip => engine(crate::backend::hip::HipBackend::open()?, fault),
        #[allow(unreachable_patterns)]
        other => Err(Error::unavailable(other.name(), "not compiled in (enable its cargo feature)")),
    }
}

impl DeviceInfo {
    /// False for software adapters (lavapipe, llvmpipe, SwiftShader), which `Auto` passes over.
    fn is_hardware(&self) -> bool {
        let name = self.name.to_ascii_lowercase();
        !["llvmpipe", "lavapipe", "swiftshader", "software"].iter().any(|soft| name.contains(soft))
    }
}

impl Runtime {
    /// Opens the device of `kind`. A backend that cannot run here is [`Error::Unavailable`].
    pub fn open(kind: BackendKind) -> Result<Runtime> {
        Ok(Runtime { engine: open_engine(kind, None)? })
    }

    /// Opens a runtime whose scheduler has a deliberate bug. Only for tests
    /// that prove the test suite detects that bug.
    #[doc(hidden)]
    pub fn open_with_fault(kind: BackendKind, fault: Fault) -> Result<Runtime> {
        Ok(Runtime { engine: open_engine(kind, Some(fault))? })
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

    /// A fence on all work admitted on every stream so far.
    pub fn fence(&self) -> Result<Fence> {
        Ok(Fence::new(self.engine.fence(None)?, self.engine.live().clone()))
    }

    /// Waits, without blocking a thread, for all work admitted so far.
    pub async fn sync(&self) -> Result<()> {
        self.fence()?.await
    }

    /// Counters for leak tests and benchmarks.
    pub fn diagnostics(&self) -> Diagnostics {
        self.engine.diagnostics()
    }

    /// Waits for all work in flight, then releases the device. Later calls on
    /// this runtime, its streams and buffers fail with [`Error::Closed`];
    /// closing again does nothing.
    pub fn close(&self) -> Result<()> {
        self.engine.close()
    }

    pub(crate) fn same_engine(a: &Arc<dyn Engine>, b: &Arc<dyn Engine>) -> bool {
        Arc::ptr_eq(a, b)
    }
}
