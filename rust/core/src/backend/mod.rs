//! The backend trait and the commands the scheduler hands to it.
//!
//! What the scheduler guarantees to a backend:
//! - every [`Command`] it enqueues is already ordered after everything it
//!   depends on: same-stream order is the stream's own order, and cross-stream
//!   order was established by [`Backend::record_event`] + [`Backend::wait_event`]
//!   before the command was enqueued;
//! - all calls for one runtime are made under that runtime's ordering boundary,
//!   so a backend needs no locking of its own for admission order;
//! - memory handed to a command outlives the command's execution: it is freed
//!   only after a [`Backend::signal`] on every stream that used it completed.
//!
//! What a backend guarantees to the scheduler:
//! - `enqueue`, `record_event`, `wait_event` and `signal` never wait for the device;
//! - a [`Completion`] handed to `signal` is completed exactly once, from the
//!   backend's completion path, with the stream's first failure if it has one;
//! - dropping an `Event` releases it (it may already be waited on).

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(any(feature = "cuda", feature = "hip"))]
pub mod gpu;
#[cfg(feature = "hip")]
pub mod hip;
#[cfg(feature = "wgpu")]
pub mod wgpu;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::completion::{lock, Completion};
use crate::error::Result;
use crate::kernel::{Access, CustomKernel, Grid, ScalarArg};
use crate::runtime::{BackendKind, DeviceInfo};

/// A byte range of one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span<R> {
    pub buffer: R,
    pub offset: u64,
    pub len: u64,
}

/// A kernel argument: a buffer with its declared access, or a scalar.
#[derive(Debug, Clone)]
pub enum KernelArg<R> {
    Buffer(Span<R>, Access),
    Scalar(ScalarArg),
}

/// Element-wise binary f32 ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Mul,
}

/// One op on a stream. `R` names buffers: buffer keys in the scheduler,
/// `&Backend::Memory` once handed to a backend.
#[derive(Debug)]
pub enum Command<R> {
    /// Every byte of `dst` zero.
    Zero { dst: Span<R> },
    /// `dst` filled with a 32-bit word.
    Fill { dst: Span<R>, word: u32 },
    /// `src` copied to `dst` (same length).
    Copy { src: Span<R>, dst: Span<R> },
    /// Host bytes copied into `dst`.
    Upload { dst: Span<R>, data: Vec<u8> },
    /// `src` copied to the host; the backend fills `sink` when the bytes are there.
    Download { src: Span<R>, sink: Arc<HostSink> },
    /// out = a ∘ b over f32.
    Binary { op: BinaryOp, a: Span<R>, b: Span<R>, out: Span<R> },
    /// out = alpha·x over f32.
    Scale { x: Span<R>, out: Span<R>, alpha: f32 },
    /// y = alpha·x + y over f32.
    Axpy { x: Span<R>, y: Span<R>, alpha: f32 },
    /// out[i] = start + i over u32.
    Iota { out: Span<R>, start: u32 },
    /// Holds the stream for `duration`.
    Delay { duration: Duration },
    /// A user kernel.
    Custom { kernel: Arc<CustomKernel>, grid: Grid, args: Vec<KernelArg<R>> },
}

impl<R> Command<R> {
    /// Every buffer the command touches, with its access.
    pub fn accesses(&self) -> Vec<(R, Access)>
    where
        R: Copy,
    {
        use Access::*;
        match self {
            Command::Zero { dst } | Command::Fill { dst, .. } | Command::Upload { dst, .. } => {
                vec![(dst.buffer, Write)]
            }
            Command::Copy { src, dst } => vec![(src.buffer, Read), (dst.buffer, Write)],
            Command::Download { src, .. } => vec![(src.buffer, Read)],
            Command::Binary { a, b, out, .. } => {
                vec![(a.buffer, Read), (b.buffer, Read), (out.buffer, Write)]
            }
            Command::Scale { x, out, .. } => vec![(x.buffer, Read), (out.buffer, Write)],
            Command::Axpy { x, y, .. } => vec![(x.buffer, Read), (y.buffer, ReadWrite)],
            Command::Iota { out, .. } => vec![(out.buffer, Write)],
            Command::Delay { .. } => Vec::new(),
            Command::Custom { args, .. } => args
                .iter()
                .filter_map(|arg| match arg {
                    KernelArg::Buffer(span, access) => Some((span.buffer, *access)),
                    KernelArg::Scalar(_) => None,
                })
                .collect(),
        }
    }

    /// The same command with every buffer name mapped through `f`.
    pub fn map<T>(self, mut f: impl FnMut(R) -> T) -> Command<T> {
        match self.try_map(|r| Ok::<T, std::convert::Infallible>(f(r))) {
            Ok(command) => command,
            Err(never) => match never {},
        }
    }

    /// The same command with every buffer name mapped through `f`, or `f`'s first error.
    pub fn try_map<T, E>(self, mut f: impl FnMut(R) -> Result<T, E>) -> Result<Command<T>, E> {
        let mut span =
            |s: Span<R>| -> Result<Span<T>, E> { Ok(Span { buffer: f(s.buffer)?, offset: s.offset, len: s.len }) };
        Ok(match self {
            Command::Zero { dst } => Command::Zero { dst: span(dst)? },
            Command::Fill { dst, word } => Command::Fill { dst: span(dst)?, word },
            Command::Copy { src, dst } => Command::Copy { src: span(src)?, dst: span(dst)? },
            Command::Upload { dst, data } => Command::Upload { dst: span(dst)?, data },
            Command::Download { src, sink } => Command::Download { src: span(src)?, sink },
            Command::Binary { op, a, b, out } => Command::Binary { op, a: span(a)?, b: span(b)?, out: span(out)? },
            Command::Scale { x, out, alpha } => Command::Scale { x: span(x)?, out: span(out)?, alpha },
            Command::Axpy { x, y, alpha } => Command::Axpy { x: span(x)?, y: span(y)?, alpha },
            Command::Iota { out, start } => Command::Iota { out: span(out)?, start },
            Command::Delay { duration } => Command::Delay { duration },
            Command::Custom { kernel, grid, args } => Command::Custom {
                kernel,
                grid,
                args: args
                    .into_iter()
                    .map(|arg| match arg {
                        KernelArg::Buffer(s, access) => Ok(KernelArg::Buffer(span(s)?, access)),
                        KernelArg::Scalar(scalar) => Ok(KernelArg::Scalar(scalar)),
                    })
                    .collect::<Result<_, E>>()?,
            },
        })
    }
}

/// Where a download lands: the bytes, plus the completion a reader awaits.
#[derive(Debug)]
pub struct HostSink {
    bytes: Mutex<Option<Vec<u8>>>,
    pub(crate) completion: Arc<Completion>,
}

impl HostSink {
    pub(crate) fn new(completion: Arc<Completion>) -> Arc<Self> {
        Arc::new(HostSink { bytes: Mutex::new(None), completion })
    }

    /// Delivers the downloaded bytes and completes the read.
    pub fn deliver(&self, bytes: Vec<u8>) {
        *lock(&self.bytes) = Some(bytes);
        self.completion.complete(Ok(()));
    }

    /// Fails the read.
    pub fn fail(&self, error: crate::Error) {
        self.completion.complete(Err(error));
    }

    pub(crate) fn take(&self) -> Option<Vec<u8>> {
        lock(&self.bytes).take()
    }
}

/// A host-controlled barrier in a stream (CPU backend): work behind it waits
/// until it is opened.
#[derive(Debug, Default)]
pub struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    /// Lets the stream run past the gate.
    pub fn open(&self) {
        *lock(&self.open) = true;
        self.opened.notify_all();
    }

    /// Blocks until the gate is open (called by the stream's worker).
    pub fn pass(&self) {
        let mut open = lock(&self.open);
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// Counters a backend keeps for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendCounters {
    /// Backend events (CUevent, hipEvent, …) alive now.
    pub live_events: u64,
    /// Device allocations alive now.
    pub live_allocations: u64,
    /// Host-to-device copies made so far.
    pub host_to_device_copies: u64,
    /// Device-to-host copies made so far.
    pub device_to_host_copies: u64,
    /// Page-locked host staging buffers allocated so far (CUDA, HIP).
    pub host_staging_buffers: u64,
    /// Conflicting overlapping accesses seen by a race detector (CPU backend).
    pub race_violations: u64,
}

/// [`BackendCounters`] as a backend keeps them: bumped from any thread, read
/// back as a snapshot.
///
/// Every backend keeps the same set, so that a counter is added and read back
/// in one place rather than once per backend; one that does not apply to a
/// backend stays zero there, as `BackendCounters` documents.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub live_events: AtomicU64,
    pub live_allocations: AtomicU64,
    pub host_to_device_copies: AtomicU64,
    pub device_to_host_copies: AtomicU64,
    pub host_staging_buffers: AtomicU64,
    pub race_violations: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> BackendCounters {
        let load = |counter: &AtomicU64| counter.load(Ordering::SeqCst);
        BackendCounters {
            live_events: load(&self.live_events),
            live_allocations: load(&self.live_allocations),
            host_to_device_copies: load(&self.host_to_device_copies),
            device_to_host_copies: load(&self.device_to_host_copies),
            host_staging_buffers: load(&self.host_staging_buffers),
            race_violations: load(&self.race_violations),
        }
    }
}

/// Raw access handed to an [`external_write`](crate::Stream::external_write) closure.
#[non_exhaustive]
pub enum RawAccess<'a> {
    /// CPU: enqueue host work on the stream's worker, over the buffers' bytes.
    Cpu(&'a mut cpu::CpuRawAccess),
    /// wgpu: the device, the queue, the buffers, and an encoder whose commands
    /// run in the stream at the write's position.
    #[cfg(feature = "wgpu")]
    Wgpu(&'a mut self::wgpu::WgpuRawAccess),
    /// CUDA: the stream's `CUstream` and the buffers' device pointers, in the
    /// order given, with the device's context current on the calling thread.
    #[cfg(feature = "cuda")]
    Cuda { stream: cuda::cudarc::driver::sys::CUstream, buffers: &'a [gpu::DeviceBuffer] },
    /// HIP: the stream's `hipStream_t` and the buffers' device pointers, in
    /// the order given, with the device current on the calling thread.
    #[cfg(feature = "hip")]
    Hip { stream: hip::hip_sys::hiprt::hipStream_t, buffers: &'a [gpu::DeviceBuffer] },
}

/// A device backend. See the module doc for the contract between it and the scheduler.
pub trait Backend: Send + Sync + Sized + 'static {
    /// A queue of device work.
    type Stream: Send + Sync;
    /// A point in a stream another stream can wait for; released on drop.
    type Event: Send + Sync;
    /// A device allocation; released on drop.
    type Memory: Send + Sync;

    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// The device this backend drives.
    fn info(&self) -> DeviceInfo;
    /// Allocates `bytes` of device memory with unspecified contents.
    fn allocate(&self, bytes: u64) -> Result<Self::Memory>;
    /// Creates a stream.
    fn create_stream(&self) -> Result<Self::Stream>;
    /// Enqueues a command. Must not wait for the device.
    fn enqueue(&self, stream: &Self::Stream, command: Command<&Self::Memory>) -> Result<()>;
    /// Records an event covering all work enqueued on `stream` so far.
    fn record_event(&self, stream: &Self::Stream) -> Result<Self::Event>;
    /// Makes later work on `stream` wait for `event`.
    fn wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;
    /// Completes one part of `completion` once all work enqueued on `stream` so far finished.
    fn signal(&self, stream: &Self::Stream, completion: Arc<Completion>) -> Result<()>;
    /// Runs `write` with raw handles on `stream` and `buffers`, in admission order.
    fn external_write(
        &self,
        stream: &Self::Stream,
        buffers: &[&Self::Memory],
        write: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()>;
    /// Puts a gate in `stream`: later work waits until it is opened. Test support.
    fn hold(&self, _stream: &Self::Stream, _gate: Arc<Gate>) -> Result<()> {
        Err(crate::Error::unsupported(self.kind().name(), "stream gates"))
    }
    /// The backend's counters now.
    fn counters(&self) -> BackendCounters;
}
