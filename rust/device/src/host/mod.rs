//! The host as a device: memory with a race detector, the built-in ops and
//! CPU kernels run over it, collectives (parts meeting in memory, or other
//! processes' ranks over the wire), and what the host is. The CPU engine
//! above (`weir-core`'s CPU backend) decides when and on which worker each
//! runs.

mod about;
pub mod collective;
mod memory;
mod ops;
pub mod wire;

pub use about::about;
pub use memory::{heap_copy, heap_zeroed, CpuMemory};
pub use ops::{run, with_kernel_args};
