//! # weir-ffi
//!
//! The UniFFI surface of Weir, for Kotlin and Swift. Conversion only: every
//! behaviour lives in `weir-core`.
//!
//! - **Objects** ([`WeirRuntime`], [`WeirStream`], [`Buffer`], [`Fence`], [`Timestamp`], [`Kernel`], [`DeviceGroup`],
//!   [`CancelToken`], and `Hold` with `test-support`) each wrap one core
//!   handle; one file each.
//! - **Records and enums** ([`Backend`], [`Access`], [`Arg`], [`Grid`],
//!   [`DeviceInfo`], [`LaunchLimits`], [`Diagnostics`]) are plain data, converted field by field.
//! - **Batches** (`WeirStream::submit_batch`) come packed in bytes, which the
//!   Kotlin and Swift `Stream.batch` write; `batch.rs` says why and how.
//! - **One op by one call** (`encoded.rs`): the Kotlin binding's `execute`
//!   encodes the op as one of a batch and admits it with
//!   [`Java_dev_weir_NativeExecute_execute`], lending its handles, because a
//!   JNA structure passed by value (a record, a sequence) and a JNA call per
//!   handle cost several times the op; the Swift binding's built-in ops do
//!   the same through the C entry [`weir_ffi_execute_encoded`], where the
//!   generated call would serialise two `RustBuffer`s for Rust to parse.
//! - **Bulk data** (`bulk.rs`) borrows the caller's memory for uploads and
//!   hands reads back in a [`HostBytes`], with no `RustBuffer` in between.
//! - **CPU kernels in Kotlin and Swift** (`host_kernel.rs`): a foreign
//!   [`CpuKernelBody`] that the CPU backend's worker calls with the launch's
//!   memory lent by address in a [`CpuKernelCall`].
//! - **One error enum**, [`WeirError`]: a typed variant per core error, whose
//!   message is the core error's text.
//! - **Async exports are runtime-agnostic.** They await core futures, which are
//!   woken on Weir's wake thread (`weir-wake`), to which every completion
//!   path hands its wake-ups. No tokio, no thread per waiter. A wait whose work is already
//!   done resolves on its first poll, without a wake-up.
//! - **Cancellation.** Dropping the foreign future (Kotlin coroutine
//!   cancellation) drops the Rust wait. Every async export also takes an
//!   optional [`CancelToken`]; cancelling it ends the wait with
//!   [`WeirError::Cancelled`] and drops the Rust wait at once (Swift's
//!   `Task.cancel()` does not reach Rust futures, so the Swift layer uses it).
//!   Cancelling ends a *wait*, never the work: an admitted op still runs.
//! - **Nothing panics across the FFI**: bad input is a [`WeirError`].

mod array_copy;
mod batch;
mod blas;
mod buffer;
mod bulk;
mod cancel;
mod encoded;
mod error;
mod fence;
mod graph;
mod group;
mod host_kernel;
mod jni_link;
mod jvm_kernel;
mod jvm_threads;
mod kernel;
mod lock;
mod records;
mod runtime;
mod stream;
mod timeline;
mod timestamp;

pub use array_copy::{
    Java_dev_weir_NativeCopy_stageFloats, Java_dev_weir_NativeCopy_stageInts, Java_dev_weir_NativeCopy_toBytes,
    Java_dev_weir_NativeCopy_toDirect, Java_dev_weir_NativeCopy_toFloats, Java_dev_weir_NativeCopy_toInts,
};
pub use blas::{Blas, Gemm};
pub use buffer::Buffer;
pub use bulk::{HostBytes, PendingRead};
pub use cancel::CancelToken;
pub use encoded::{take_execute_refusal, weir_ffi_execute_encoded, Java_dev_weir_NativeExecute_execute};
#[cfg(feature = "test-support")]
pub use error::debug_error_probe;
pub use error::WeirError;
pub use fence::Fence;
pub use graph::Graph;
pub use group::{DeviceGroup, GroupId};
pub use host_kernel::{CpuKernelBody, CpuKernelCall};
pub use kernel::{BuiltinOp, Kernel, KernelModule, KernelSource};
pub use records::{
    grid_linear, Access, Arg, Backend, BackendKind, DeviceInfo, Diagnostics, ElementType, GpuWake, Grid, LaunchLimits,
    RuntimeOptions,
};
pub use runtime::{devices, WeirRuntime};
#[cfg(feature = "test-support")]
pub use stream::Hold;
pub use stream::WeirStream;
pub use timeline::{timeline_svg, Timeline, TimelineBar, TimelineWait};
pub use timestamp::Timestamp;

uniffi::setup_scaffolding!("weir");
