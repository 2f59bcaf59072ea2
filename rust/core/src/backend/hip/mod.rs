//! The HIP backend: the shared GPU layer over the HIP runtime (ROCm 5.2 and
//! later), built with the `hip` feature.
//!
//! Completions arrive through `hipStreamAddCallback` (ROCm 5.2 has no
//! `hipLaunchHostFunc`); kernels compile with hiprtc. External writes get
//! `RawAccess::Hip { stream, buffers }`: the raw `hipStream_t` and device
//! pointers, with the device current.

#[cfg(feature = "test-support")]
mod toolchain;

#[cfg(feature = "test-support")]
pub use toolchain::{check_arguments_for, compile_builtins_for, compile_for, param_sizes_in};

/// The hip-sys crate whose handle types external writes receive.
pub use weir_device::hip::hip_sys;
use weir_device::hip::Hip;

use crate::backend::gpu::GpuBackend;
use crate::error::Result;
use crate::options::RuntimeOptions;

pub(crate) use weir_device::hip::list;

/// HIP on one device.
pub(crate) type HipBackend = GpuBackend<Hip>;

impl GpuBackend<Hip> {
    /// Opens device `options.device`; no such device is `Unavailable`, naming the cause.
    pub(crate) fn open(options: &RuntimeOptions) -> Result<Self> {
        Hip::open(options.device).and_then(|driver| GpuBackend::new(driver, options))
    }
}
