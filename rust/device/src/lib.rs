//! # Weir's device layer
//!
//! The names every layer of Weir shares (errors, backends and devices,
//! element types, how an op touches a buffer, launch shapes, the commands
//! an engine hands a device, kernel descriptions, counters, collectives),
//! and every device Weir drives: device calls only, `unsafe` where the
//! driver is, no scheduling meaning. The engine above (`weir-core`) orders
//! ops, signals completions and decides which thread makes each call; this
//! crate only talks to the device.
//!
//! - `host`: the host as a device: memory with a race detector, the ops and
//!   CPU kernels run over it, collectives (in memory, or across processes).
//! - [`driver::Driver`]: a GPU API's calls (streams, events, memory, copies,
//!   launches, host callbacks), with `modules`, its kernel cache:
//!   - `cuda` (feature `cuda`): the CUDA driver API, NVRTC and NCCL (cudarc, loaded at run time);
//!   - `hip` (feature `hip`): the HIP runtime and hiprtc (hip-sys);
//!   - `fake` (feature `fake`): a driver of no GPU API for the engine's tests,
//!     which records every call and fails, stalls or delays the ones a test picks.
//! - `wgpu` (feature `wgpu`): wgpu as a one-queue device: adapters, memory
//!   in shared buffers, WGSL pipelines checked against their arguments,
//!   command plans, bind groups, recording into one encoder.

pub mod builtin;
pub mod collective;
pub mod command;
pub mod counters;
pub mod driver;
pub mod element;
pub mod enqueue;
pub mod error;
pub mod host;
#[cfg(any(feature = "cuda", feature = "hip", test))]
pub(crate) mod image;
pub mod info;
pub mod kernel;
mod launch;
pub mod lock;
#[cfg(any(feature = "cuda", feature = "hip", feature = "fake"))]
pub mod modules;
pub mod raw;
pub mod rtc;
#[cfg(any(feature = "cuda", feature = "hip", feature = "fake"))]
pub mod symbols;

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "fake")]
pub mod fake;
#[cfg(feature = "hip")]
pub mod hip;
#[cfg(feature = "wgpu")]
pub mod wgpu;

pub use element::{Element, ElementType};
pub use error::{DriverStatus, Error, QueueLimit, Result};
pub use info::{BackendKind, DeviceInfo, KernelLanguage, LaunchLimits};
pub use launch::{Access, Grid};
