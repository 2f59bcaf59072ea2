//! HIP: the HIP runtime (ROCm 5.2 and later), linked at build time.
//! Completions arrive through `hipStreamAddCallback` (ROCm 5.2 has no
//! `hipLaunchHostFunc`); kernels compile with hiprtc, and a code object's
//! kernels are read from its metadata.

mod driver;
pub mod ffi;
pub mod hiprtc;
pub mod metadata;

pub use driver::{list, Hip};
/// The hip-sys crate whose handle types foreign code receives.
pub use hip_sys;
