//! The CUDA backend: the shared GPU layer over the CUDA driver API.
//!
//! The driver and NVRTC are loaded at run time (cudarc's dynamic loading),
//! so the backend builds where no CUDA is installed and opening it there is
//! a clean `Unavailable`. Only cudarc's raw `sys` layer is used: its safe
//! layer, and the cross-stream event tracking it does, stay out of the way,
//! so every cross-stream wait is one the scheduler inserted.
//!
//! External writes get `RawAccess::Cuda { stream, buffers }`: the raw
//! `CUstream` and device pointers, with the device's primary context current.

mod driver;
mod nccl;
mod nvrtc;

/// The cudarc crate this backend is built on, for external writes that call
/// the driver themselves.
pub use cudarc;
pub(crate) use driver::list;
pub(crate) use nccl::unique_id as new_group_id;

use crate::backend::gpu::GpuBackend;
use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::options::RuntimeOptions;

/// CUDA on one device.
pub(crate) type CudaBackend = GpuBackend<driver::Cuda>;

impl GpuBackend<driver::Cuda> {
    /// Opens device `options.device`; no library, driver or device is `Unavailable`, never a panic.
    pub(crate) fn open(options: &RuntimeOptions) -> Result<Self> {
        let ordinal = options.device;
        // The checks in `Cuda::open` make cudarc's loader panic-free; this
        // catches anything they missed.
        std::panic::catch_unwind(|| driver::Cuda::open(ordinal))
            .unwrap_or_else(|_| {
                Err(Error::unavailable(BackendKind::Cuda, "the CUDA driver library could not be loaded"))
            })
            .and_then(|driver| GpuBackend::new(driver, options))
    }
}
