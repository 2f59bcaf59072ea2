//! wgpu as a one-queue device: choosing and opening an adapter, memory
//! (small allocations and scalar blocks share buffers), the WGSL pipelines
//! Weir compiles (built-ins and users' kernels, checked against what their
//! arguments bind), what a command is planned as before it is admitted,
//! bind groups kept across launches, error scopes, and recording planned
//! commands into one encoder.
//!
//! The engine above (`weir-core`'s wgpu backend) orders ops on logical
//! lanes of the one queue, submits, and completes fences and reads.

pub mod adapter;
pub mod bind_groups;
pub mod builtin;
mod device;
pub mod interface;
pub mod memory;
pub mod pipelines;
pub mod plan;
pub mod record;
pub mod scope;
pub mod slabs;
pub mod uniform_fill;

pub use device::WgpuDevice;
pub use record::Recorder;
