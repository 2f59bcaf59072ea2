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

/// What a runtime runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub backend: BackendKind,
    pub name: String,
    /// Device memory, where the backend knows it.
    pub memory_bytes: Option<u64>,
    /// Largest buffer the device accepts.
    pub max_buffer_bytes: u64,
    /// True when the device is emulated on the host (lavapipe, llvmpipe,
    /// SwiftShader, the CPU backend): `Auto` prefers a hardware device.
    pub software: bool,
}
