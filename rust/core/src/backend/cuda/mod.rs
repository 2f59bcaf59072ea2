//! The CUDA backend: the shared GPU engine over the device layer's CUDA
//! driver (`weir_device::cuda`: the driver API, NVRTC and NCCL, loaded at
//! run time).
//!
//! External writes get `RawAccess::Cuda { stream, buffers }`: the raw
//! `CUstream` and device pointers, with the device's primary context current.

/// The cudarc crate this backend is built on, for external writes that call
/// the driver themselves.
pub use weir_device::cuda::cudarc;
pub(crate) use weir_device::cuda::list;
pub(crate) use weir_device::cuda::unique_id as new_group_id;
use weir_device::cuda::Cuda;

use crate::backend::gpu::GpuBackend;
use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::options::RuntimeOptions;

/// CUDA on one device.
pub(crate) type CudaBackend = GpuBackend<Cuda>;

impl GpuBackend<Cuda> {
    /// Opens device `options.device`; no library, driver or device is `Unavailable`, never a panic.
    pub(crate) fn open(options: &RuntimeOptions) -> Result<Self> {
        let ordinal = options.device;
        // The checks in `Cuda::open` make cudarc's loader panic-free; this
        // catches anything they missed.
        std::panic::catch_unwind(|| Cuda::open(ordinal))
            .unwrap_or_else(|_| {
                Err(Error::unavailable(BackendKind::Cuda, "the CUDA driver library could not be loaded"))
            })
            .and_then(|driver| GpuBackend::new(driver, options))
    }
}
