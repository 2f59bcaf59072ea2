//! The HIP backend: the shared GPU layer over the HIP runtime (ROCm 5.2 and
//! later), built with the `hip` feature.
//!
//! Completions arrive through `hipStreamAddCallback` (ROCm 5.2 has no
//! `hipLaunchHostFunc`); kernels compile with hiprtc. External writes get
//! `RawAccess::Hip { stream, buffers }`: the raw `hipStream_t` and device
//! pointers, with the device current.

mod driver;
mod ffi;
mod hiprtc;

/// The hip-sys crate whose handle types external writes receive.
pub use hip_sys;

use crate::backend::gpu::{GpuBackend, BUILTIN_SOURCE};
use crate::error::Result;

/// HIP on device 0.
pub(crate) type HipBackend = GpuBackend<driver::Hip>;

impl GpuBackend<driver::Hip> {
    /// Opens device 0; no device is `Unavailable`, naming the cause.
    pub(crate) fn open() -> Result<Self> {
        driver::Hip::open().and_then(GpuBackend::new)
    }
}

/// Compiles the built-in kernels for an AMD GPU architecture (`gfx90a`, …)
/// without a device; returns the code object. For tests of the toolchain.
#[doc(hidden)]
pub fn compile_builtins_for(arch: &str) -> Result<Vec<u8>> {
    compile_for(arch, BUILTIN_SOURCE)
}

/// Compiles HIP C `source` for an AMD GPU architecture without a device.
#[doc(hidden)]
pub fn compile_for(arch: &str, source: &str) -> Result<Vec<u8>> {
    hiprtc::compile(source, Some(arch))
}
