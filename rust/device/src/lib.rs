//! # Weir's device layer
//!
//! The names every layer of Weir shares (errors, backends and devices,
//! element types, how an op touches a buffer, launch shapes, collectives),
//! and the calls of each GPU API behind one trait, [`driver::Driver`]:
//! device calls only, `unsafe` where the driver is, no scheduling meaning.
//! The engine above (`weir-core`) orders ops, signals completions and counts;
//! this crate only talks to the device.
//!
//! - `host`: the host as a device (memory with a race detector, the ops run over it).
//! - `cuda` (feature `cuda`): the CUDA driver API, NVRTC and NCCL (cudarc, loaded at run time).
//! - `hip` (feature `hip`): the HIP runtime and hiprtc (hip-sys).
//! - `wgpu` (feature `wgpu`): wgpu as a one-queue device (adapters, WGSL
//!   pipelines, shared buffers, bind groups, recording).
//! - `fake` (feature `fake`): a driver of no GPU API for the engine's tests,
//!   which records every call and fails, stalls or delays the ones a test picks.

pub mod builtin;
pub mod collective;
pub mod command;
pub mod counters;
pub mod driver;
pub mod element;
pub mod enqueue;
pub mod error;
pub mod host;
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
