//! The host as a device: memory with a race detector, the built-in ops and
//! CPU kernels run over it, and what the host is. The CPU engine above
//! (`weir-core`'s CPU backend) decides when and on which worker each runs.

mod about;
mod memory;
mod ops;

pub use about::{memory_bytes, name};
pub use memory::{AccessGuard, CpuMemory, FRESH_BYTE};
pub use ops::{run, with_kernel_args};
