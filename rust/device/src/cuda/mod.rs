//! CUDA: the driver API, NVRTC and NCCL, loaded at run time (cudarc's
//! dynamic loading), so this builds where no CUDA is installed and opening a
//! device there is a clean `Unavailable`. Only cudarc's raw `sys` layer is
//! used: its safe layer, and the cross-stream event tracking it does, stay
//! out of the way, so every cross-stream wait is one the engine inserted.

mod driver;
mod nccl;
mod nvrtc;

/// The cudarc crate this driver is built on, for foreign code that calls the driver itself.
pub use cudarc;
pub use driver::{list, Cuda};
pub use nccl::unique_id;
