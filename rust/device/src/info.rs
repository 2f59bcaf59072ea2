//! What a backend is and what it drives: the names every layer shares.
//!
//! A leaf module: backends describe themselves with these types without
//! knowing the public handles that are built on top of them.

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
    /// The language custom kernels are given in on this backend (none for `Auto`).
    pub fn kernel_language(self) -> Option<KernelLanguage> {
        match self {
            BackendKind::Auto => None,
            BackendKind::Cpu => Some(KernelLanguage::Rust),
            BackendKind::Wgpu => Some(KernelLanguage::Wgsl),
            BackendKind::Cuda => Some(KernelLanguage::CudaC),
            BackendKind::Hip => Some(KernelLanguage::HipC),
        }
    }

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
        let name = name.trim().to_ascii_lowercase();
        std::iter::once(BackendKind::Auto).chain(BackendKind::CONCRETE).find(|kind| kind.name() == name)
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The language a backend runs custom kernels in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelLanguage {
    /// A Rust closure (the CPU backend).
    Rust,
    Wgsl,
    CudaC,
    HipC,
}

/// What a runtime runs on, as `devices` lists it and
/// `Runtime::info` reports it: the same value for the
/// same device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub backend: BackendKind,
    /// The index `Runtime::open_device` takes
    /// for this device of its backend.
    pub index: usize,
    pub name: String,
    /// Device memory, where the backend knows it (the host's memory for the CPU).
    pub memory_bytes: Option<u64>,
    /// Largest buffer the device accepts.
    pub max_buffer_bytes: u64,
    /// True when the device is emulated on the host (lavapipe, llvmpipe,
    /// SwiftShader, the CPU backend): `Auto` prefers a hardware device.
    pub software: bool,
    /// What a custom kernel's [`Grid`](crate::Grid) may ask for.
    pub limits: LaunchLimits,
}

/// The largest launch a device takes, in the terms of [`Grid`](crate::Grid):
/// groups of blocks of threads. WGSL kernels declare their block
/// (`@workgroup_size`) themselves; these are the bounds it must keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchLimits {
    /// Most threads of one block (CUDA/HIP block, wgpu workgroup) along x, y, z.
    pub max_block: [u32; 3],
    /// Most threads of one block, all dimensions together.
    pub max_threads_per_block: u32,
    /// Most groups (blocks) of one launch along x, y, z.
    pub max_groups: [u32; 3],
    /// Most shared (workgroup) memory one block may use, in bytes.
    pub max_shared_bytes: u32,
}

impl LaunchLimits {
    /// The CPU backend's: it hands the grid to the kernel's closure as given,
    /// so nothing bounds it, and it has no shared memory.
    pub const HOST: LaunchLimits = LaunchLimits {
        max_block: [u32::MAX; 3],
        max_threads_per_block: u32::MAX,
        max_groups: [u32::MAX; 3],
        max_shared_bytes: 0,
    };
}

/// Which wgpu adapters a device index counts among: the runtime builder's
/// `wgpu_backends` and `adapter_named`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdapterChoice {
    /// The graphics APIs to try, as wgpu names them (`vulkan,gl`); `None`:
    /// the primary ones (Vulkan, Metal, DX12), never GL.
    pub backends: Option<String>,
    /// Only adapters whose name contains this, compared in lower case.
    pub name: Option<String>,
}
