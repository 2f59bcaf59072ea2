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
mod bind_groups;
mod builtin;
mod interface;
pub mod memory;
mod pipelines;
pub mod plan;
pub mod record;
pub mod scope;
mod slabs;
mod uniform_fill;

pub use adapter::WgpuDevice;
pub use record::Recorder;
