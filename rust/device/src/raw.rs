//! A stream handed raw to foreign code: what an external op's closure (a
//! library call, the user's own driver calls) enqueues on.

/// A driver's stream as foreign code takes it: the API's own handle.
#[non_exhaustive]
#[derive(Debug, Clone, Copy)]
pub enum RawStream {
    /// CUDA's `CUstream`.
    #[cfg(feature = "cuda")]
    Cuda(cudarc::driver::sys::CUstream),
    /// HIP's `hipStream_t`.
    #[cfg(feature = "hip")]
    Hip(hip_sys::hiprt::hipStream_t),
    /// The fake driver's stream number (engine tests).
    #[cfg(feature = "fake")]
    Fake(u64),
}
