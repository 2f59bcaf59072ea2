//! # Weir core
//!
//! A GPU compute runtime whose ordering follows the data, and whose every
//! completion can be awaited without blocking a thread.
//!
//! The scheduling contract, per runtime:
//! - **One ordering boundary.** Each op is admitted under the runtime's lock
//!   (never held while waiting for the device or while foreign code runs;
//!   only a [`Stream::copy_from_peer`] between the devices of a
//!   [`DeviceGroup`] takes two runtimes' locks, and a collective
//!   ([`DeviceGroup::all_reduce`] and its kin) every member's, always in one
//!   order, by address). What is
//!   slow — compiling, pipeline lookup, staging host data — is prepared
//!   before the lock is taken. [`Stream::batch`] admits many ops in one
//!   crossing; a [`Graph`] ([`Stream::record`], [`Stream::replay`]) is
//!   admitted as one op whose reads and writes are the union of its ops'.
//! - **Declared access.** Every op declares each buffer it touches as
//!   [`Access::Read`], [`Access::Write`] or [`Access::ReadWrite`].
//! - **Dependencies.** A read depends on the buffer's latest write; a write on
//!   the latest write and on every read since it, one entry per stream.
//! - **Minimal waits.** A stream waits for another only if it has not already
//!   seen a position at or past the dependency; what it learns passes on along
//!   chains of streams (a vector clock). Ops on one stream need no events.
//! - **Enqueue and publish together.** The op is enqueued at position *n* and
//!   its buffers are published as written / read at *n* before the boundary is
//!   released. Every write publishes: kernels, uploads, memsets, `zeros`,
//!   admitted external ops ([`Stream::external`]: foreign code, such as a
//!   library call, that declares what it reads and writes).
//! - **Fresh memory.** [`Stream::empty`] has no definition; [`Stream::zeros`] is
//!   allocate + zero + publish in one admission, with no host data.
//! - **Memory reuse.** A released buffer's memory is freed as soon as every
//!   stream that used it has finished those ops, with no further call.
//! - **Completions run outside every lock.** Blocked waits wake at once; wakers
//!   run on one delivery thread per process that holds no Weir lock, so a woken
//!   task may call any Weir API at once. A call that would wait for itself (a
//!   CPU kernel waiting for its own stream, an external write's closure using
//!   its own stream) is [`Error::InvalidArgument`], never a hang.
//! - **Lifetimes.** Every handle (runtime, stream, buffer, fence, pending read)
//!   keeps its runtime alive; [`Runtime::close`] is the explicit end and every
//!   caller of it waits for the work. A stream retires when its last handle
//!   goes, once its work is done; when the last handle of a runtime goes, its
//!   work completes and the device is released in the background. No drop
//!   waits for device work.
//! - **Errors follow the data.** A failed op publishes *failed versions* of
//!   what it writes: every later op or read of them, on any stream, fails with
//!   an error naming the original failure and passes it on to what it writes;
//!   a full overwrite makes a buffer healthy again. The op's stream is not
//!   poisoned: its next fence reports the failures since the previous one (the
//!   first, with a count; a runtime's fence every stream's, with their total,
//!   and those of dropped streams that no fence of theirs reported) and later
//!   work runs. An op that fails for a failed input fails on its own
//!   stream, naming it. Bad input
//!   ([`Error::InvalidArgument`], [`Error::OutOfRange`], …) is refused at
//!   admission and changes nothing. A device-fatal fault (a CUDA or HIP
//!   kernel that traps or touches an illegal address, a lost wgpu device)
//!   is different: every later call of the runtime fails with
//!   [`Error::DeviceLost`] and its driver status; close it and open a new one.
//!
//! Choosing a device and profiling:
//! - **Devices.** [`devices`] lists every device of every backend compiled
//!   in (CUDA, HIP, wgpu adapters, the CPU), each with its memory and
//!   [`LaunchLimits`], as [`Runtime::open_device`] opens it and
//!   [`Runtime::info`] then reports it. It never fails and opens nothing; a
//!   backend that cannot run here lists no device.
//! - **Timestamps.** [`Stream::timestamp`] takes the device's clock once the
//!   stream's work before it is done; [`Timestamp::elapsed_since`] of two of
//!   one stream is the device time between them (CUDA/HIP timing events,
//!   wgpu timestamp queries, the CPU worker's clock). A timestamp is a point,
//!   not a fence: it takes no failure from the stream's next fence.
//! - **Collectives.** [`DeviceGroup::all_reduce`], [`DeviceGroup::broadcast`],
//!   [`DeviceGroup::all_gather`] and [`DeviceGroup::reduce_scatter`] take one
//!   stream and buffer per member; each member's part is an op on its
//!   stream, ordered by the versions there like any op, and all parts are
//!   admitted under every member's boundary at once, so every device sees a
//!   group's collectives in one order (CPU rendezvous, CUDA NCCL).
//!
//! ```
//! use weir_core::{BackendKind, ElementType, Runtime};
//! let runtime = Runtime::open(BackendKind::Cpu)?;
//! let (s, t) = (runtime.default_stream(), runtime.new_stream()?);
//! let x = s.upload(&[1.0f32, 2.0, 3.0])?;
//! let y = s.zeros(ElementType::F32, 3)?;
//! s.axpy(2.0, &x, &y)?;                          // y = 2x + y, on s
//! let out = t.empty(ElementType::F32, 3)?;
//! t.add(&x, &y, &out)?;                          // on t: waits for s's write of y
//! assert_eq!(t.read_as::<f32>(&out)?, vec![3.0, 6.0, 9.0]);
//! # Ok::<(), weir_core::Error>(())
//! ```
//!
//! # Architecture
//!
//! ```text
//! bindings (Kotlin, Java, Swift) -> weir-ffi (conversions) -> weir-core
//! weir-core   handles    Runtime, Stream, Buffer, Fence, Graph, DeviceGroup (stream.rs, ops.rs, …)
//!             scheduler  versions, vector clocks, admission: WHAT waits for WHAT (scheduler/)
//!             engines    HOW it runs, behind the `Backend` trait (backend/):
//!                          lane  the one engine: a queue of steps run in order, each
//!                                counted done (backend/progress.rs: no lock unless
//!                                someone waits); the lane itself runs a wait for
//!                                another lane's point (a host engine's event is a
//!                                `LaneEvent`) and a gate or delay, parking until
//!                                woken, and defers its scheduling for a batch
//!                                (backend/lane.rs); both model-checked; its
//!                                `Runner` says what a job is and where a lane runs:
//!                          pool  threads that run lanes (backend/pool.rs): bounded,
//!                                or a thread per ready lane; started as lanes come,
//!                                the warmest woken first, retired when idle
//!                          cpu     a stream is a lane of host work, run by a bounded
//!                                  pool of workers
//!                          wgpu    a stream is a lane recording and submitting on the
//!                                  one queue, run at once on the pushing thread;
//!                                  batched submissions, a poll thread
//!                          gpu     a device's driver calls are one lane in admission
//!                                  order, run by a pool of one (its issuing thread)
//!                                  or at once by the admitting thread; a stream's
//!                                  completions are a lane, run by the device's pool
//!                                  of waiting threads; generic over the `Driver`
//!                        written once for all three: the failure tally, the
//!                        counters; for the host engines, events, waits and
//!                        (test support) gates, which their delays are too
//!                        (backend/lane.rs, backend/timer.rs)
//!             completion the cell behind fences and reads, the delivery thread
//!                        where wakers run, and the one spin rule of every wait
//!                        (completion/spin.rs): a device's waiter thread, an
//!                        awaited stream fence while the stream's waits are short,
//!                        and every thread idling between jobs (issuing, wake, pool)
//! weir-device the device layer (rust/device): device calls only, unsafe where
//!             the driver is, no scheduling meaning; the command IR, kernel
//!             descriptions, errors, kinds, counters, element types and launch
//!             shapes every layer shares
//!               driver::Driver   cuda (cudarc's result layer: driver, NVRTC; NCCL loaded by its runtime name)
//!                                | hip (hip-sys; code objects read by `object` and `rmp-serde`) | fake (tests)
//!               modules          a driver's kernels: built-ins from one C source, users'
//!                                compiled once per process, loaded once per context;
//!                                `of_context`: what a context's runtimes share (these
//!                                modules, and the GPU engine's page-locked staging)
//!               wgpu::WgpuDevice one queue: adapters, memory in shared buffers, WGSL
//!                                pipelines checked against their arguments, command
//!                                plans, bind groups, recording into one encoder
//!               host             the host: memory with a race detector, the ops and CPU
//!                                kernels run over it, collectives (in memory, or across
//!                                processes over loopback TCP: serde, MessagePack)
//! ```
//!
//! One op's path, a CUDA kernel: [`Stream::execute`] checks the arguments
//! against the kernel (`ops::kernel`) and submits a `Command`; the
//! scheduler has the engine prepare it outside the lock (compiled and
//! loaded by the device layer's `modules`, parameters packed), then under the runtime's lock admits it: its
//! dependencies from the buffers' versions, a cross-stream wait only where
//! the vector clock says the stream has not seen them, its writes
//! published at its position, and the engine's `enqueue`, which makes the
//! driver calls on the admitting thread while ops come one at a time, or
//! hands them as a job to the device's issuing thread in a streak. There
//! `Driver::launch` (`weir_device::cuda::Cuda`: `cuLaunchKernel`) runs and
//! the events the scheduler asked for are recorded; the stream's waiter
//! thread sees them pass and completes the fence's cell. A thread waiting
//! for that fence, while the stream's waits are short, is watching the cell
//! and sees it at once (`completion/spin.rs`); otherwise its waker runs on
//! the delivery thread, outside every lock.
//!
//! Where the move stands: every backend runs on the device layer (the
//! engines keep only ordering, submission, completion and counting). Every
//! queue of jobs is a lane (`backend/lane.rs`) and every thread that runs
//! them belongs to one kind of pool (`backend/pool.rs`): in-order running,
//! progress counting, parking on another lane's progress, gates and delays,
//! wake-ups, lingering and retiring are written once; each engine keeps
//! only its jobs and where a lane runs (the CPU workers; the pushing thread
//! on wgpu; on a GPU, its issuing thread, and its waiting threads for the
//! streams' completions). The `Backend` trait asks 27
//! methods of an engine (31 before): what follows from the backend's kind
//! (its kernel language) and what is the same for all (a host buffer is a
//! filled staging buffer; one upload preparation, told where the bytes
//! come from) is no longer asked. Why a GPU device's driver calls are one
//! lane and not a lane per stream: the device orders each stream's work
//! itself, and a cross-stream wait is an event it waits for on the device,
//! so the host only has to make the driver calls in admission order; a
//! wait then records its source's one ordering event at its place in that
//! order, with no parking and no event per wait. A lane per stream would
//! park each wait on its source's record, with an event per wait from a
//! pool (the bench's raw pipeline with an event made per wait costs 7.10
//! against 6.77 µs a round), for the one thing the device's lane cannot
//! do: host-side gates (test support) on CUDA and HIP streams, which a
//! gate on the device itself cannot stand in for (it stalls every driver
//! call that synchronises the shared primary context).

//!
//! # Custom kernels, written once per backend
//!
//! A custom kernel has a source per backend ([`Kernel::custom`]): a Rust
//! closure for the CPU, WGSL for wgpu, CUDA C, HIP C. One launch runs on
//! every backend with the same [`Grid`] and the same arguments when the
//! sources keep two rules:
//! - **Arguments: buffers first, in order, then scalars, in order.** CUDA and
//!   HIP take them as parameters in that order; WGSL binds the buffers at
//!   group 0, bindings `0..n`, and the scalars as one uniform struct at
//!   binding `n` with one 4-byte field per scalar (a shader with its own
//!   groups, bindings and uniforms is matched in `@group`/`@binding` order
//!   instead: [`CustomKernelBuilder::wgsl`]); either is checked against the
//!   source before anything runs; a CPU closure reads `f32s(i)`/`scalar(j)`.
//!   Scalars come in every width ([`ScalarArg`]: `u8` to `u64`, half bits,
//!   `f32`, `f64`) and as a struct's bytes ([`Arg::bytes`]); CUDA and HIP
//!   check each against the size the kernel declares for its parameter.
//! - **The block is the grid's.** CUDA and HIP launch `grid.block`; a CPU
//!   closure reads `args.grid`; WGSL declares its size with `override`
//!   constants, which Weir sets from the grid:
//!   `override block_x: u32 = 64; @compute @workgroup_size(block_x)`. A WGSL
//!   size written as a number must equal the block, or the launch is refused
//!   with [`Error::InvalidArgument`] saying so.
#[cfg(feature = "test-support")]
pub mod backend;
#[cfg(not(feature = "test-support"))]
mod backend;
#[cfg(feature = "cuda")]
mod blas;
mod buffer;
mod builder;
mod cancel;
mod collective;
mod completion;
mod device;
mod diagnostics;
mod element;
mod error;
mod fence;
mod graph;
mod group;
mod host;
mod kernel;
mod lock;
mod ops;
mod options;
mod room;
mod runtime;
mod scheduler;
mod stream;
mod threads;
mod timeline;
mod timestamp;

pub use backend::cpu::CpuRawAccess;
#[cfg(feature = "cuda")]
pub use backend::cuda::cudarc;
#[cfg(any(feature = "cuda", feature = "hip"))]
pub use backend::gpu::DeviceBuffer;
#[cfg(feature = "hip")]
pub use backend::hip::hip_sys;
#[cfg(feature = "wgpu")]
pub use backend::wgpu::{wgpu, WgpuBufferRange, WgpuRawAccess};
pub use backend::{RawAccess, ReduceOp};
#[cfg(feature = "cuda")]
pub use blas::{Blas, Gemm};
pub use buffer::Buffer;
pub use builder::RuntimeBuilder;
pub use cancel::CancelToken;
#[cfg(feature = "test-support")]
pub use completion::paths::{wait_paths, WaitPaths};
pub use completion::Completion;
pub use device::{BackendKind, DeviceInfo, KernelLanguage, LaunchLimits};
pub use diagnostics::{BackendCounters, Diagnostics, LiveCounters};
pub use element::{Element, ElementType};
pub use error::{DriverStatus, Error, Result};
pub use fence::{CompletionWait, Fence, PendingHostRead, PendingRead};
pub use graph::Graph;
pub use group::{DeviceGroup, GroupId};
pub use host::HostBuffer;
pub use kernel::{
    Access, Builtin, CpuKernelArgs, CustomKernel, CustomKernelBuilder, DeviceCode, DeviceKernel, Grid, Kernel,
    KernelSource, ScalarArg,
};
pub use ops::Arg;
#[cfg(feature = "test-support")]
pub use options::Fault;
pub use options::{GpuWake, QueueLimit};
pub use room::RoomWait;
pub use runtime::{devices, Runtime};
#[cfg(feature = "test-support")]
pub use stream::Hold;
pub use stream::Stream;
pub use threads::on_thread_start;
pub use timeline::{Timeline, TimelineBar, TimelineWait};
pub use timestamp::Timestamp;
