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
//! - `prepare` does everything slow, before the boundary; `enqueue`,
//!   `record_event`, `wait_event` and `signal` only make (or queue, in
//!   order, for a thread of the backend's) ordered driver calls and never
//!   wait for the device;
//! - `enqueue` says what happened: done, rejected (bad input, the stream is
//!   untouched) or failed (see [`EnqueueError`]), never by an error's variant;
//! - a [`Completion`] handed to `signal` is completed exactly once, from the
//!   backend's completion path, with the stream's first failure if it has one;
//! - **no foreign code runs on a backend thread or under a backend lock**:
//!   completing a cell only settles it, and its wakers and actions run on the
//!   delivery thread (`crate::completion`), so a woken task may call any Weir
//!   API at once, on any stream;
//! - threads a backend owns (workers, poll and waiter threads) contain panics:
//!   one panicking callback never stops the completion path;
//! - dropping an `Event` releases it (it may already be waited on); dropping
//!   a `Stream` retires it after its work, and dropping `Memory` frees it.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
// Without CUDA or HIP, its tests still run, over the device layer's fake driver.
#[cfg(any(feature = "cuda", feature = "hip", test))]
pub mod gpu;
#[cfg(feature = "hip")]
pub mod hip;
#[cfg(feature = "test-support")]
mod timer;
#[cfg(feature = "wgpu")]
pub mod wgpu;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::completion::Completion;
pub use crate::device::{BackendKind, DeviceInfo};
pub use crate::diagnostics::BackendCounters;
pub(crate) use crate::diagnostics::Counters;
use crate::error::{Error, Failures, Result};
use crate::host::HostBuffer;
use crate::kernel::{Access, CustomKernel, Grid, ScalarArg};
use crate::lock::lock;
use crate::room::Credit;
pub use weir_device::collective::{Collective, CollectiveKind, ReduceOp, GROUP_ID_BYTES};
pub use weir_device::enqueue::EnqueueError;

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

impl<R: Copy> KernelArg<R> {
    /// The buffer range and access of a buffer argument.
    pub fn span(&self) -> Option<(Span<R>, Access)> {
        match self {
            KernelArg::Buffer(span, access) => Some((*span, *access)),
            KernelArg::Scalar(_) => None,
        }
    }
}

/// The byte ranges one command touches: a few, kept inline.
pub type Spans<R> = smallvec::SmallVec<[(Span<R>, Access); 4]>;
/// The buffers one command touches, with their access: a few, kept inline.
pub type Accesses<R> = smallvec::SmallVec<[(R, Access); 4]>;

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
    /// Host bytes copied into `dst`. `data` is empty where the backend
    /// staged the bytes while preparing it ([`Backend::prepare_upload`]):
    /// then its preparation holds them.
    Upload { dst: Span<R>, data: Vec<u8> },
    /// `src` copied to the host; the backend fills `sink` when the bytes are there.
    Download { src: Span<R>, sink: Arc<HostSink> },
    /// out = a ∘ b over f32.
    Binary { op: BinaryOp, a: Span<R>, b: Span<R>, out: Span<R> },
    /// out = alpha·x over f32.
    Scale { x: Span<R>, out: Span<R>, alpha: f32 },
    /// y = alpha·x + y over f32.
    Axpy { x: Span<R>, y: Span<R>, alpha: f32 },
    /// `out[i] = start + i` over u32.
    Iota { out: Span<R>, start: u32 },
    /// Holds the stream for `duration` (test support only: a build without
    /// the hooks has no such command).
    #[cfg(feature = "test-support")]
    Delay { duration: Duration },
    /// A user kernel.
    Custom { kernel: Arc<CustomKernel>, grid: Grid, args: Vec<KernelArg<R>> },
}

impl<R> Command<R> {
    /// The host bytes the op holds while queued: an upload's data, staged or
    /// not (see [`crate::room`]).
    pub(crate) fn host_bytes(&self) -> u64 {
        match self {
            Command::Upload { dst, .. } => dst.len,
            _ => 0,
        }
    }

    /// Every byte range the command touches, with its access.
    pub fn spans(&self) -> Spans<R>
    where
        R: Copy,
    {
        use Access::*;
        let list = |spans: &[(Span<R>, Access)]| Spans::from_slice(spans);
        match self {
            Command::Zero { dst } | Command::Fill { dst, .. } | Command::Upload { dst, .. } => list(&[(*dst, Write)]),
            Command::Copy { src, dst } => list(&[(*src, Read), (*dst, Write)]),
            Command::Download { src, .. } => list(&[(*src, Read)]),
            Command::Binary { a, b, out, .. } => list(&[(*a, Read), (*b, Read), (*out, Write)]),
            Command::Scale { x, out, .. } => list(&[(*x, Read), (*out, Write)]),
            Command::Axpy { x, y, .. } => list(&[(*x, Read), (*y, ReadWrite)]),
            Command::Iota { out, .. } => list(&[(*out, Write)]),
            #[cfg(feature = "test-support")]
            Command::Delay { .. } => Spans::new(),
            Command::Custom { args, .. } => args.iter().filter_map(KernelArg::span).collect(),
        }
    }

    /// Every buffer the command touches, with its access.
    pub fn accesses(&self) -> Accesses<R>
    where
        R: Copy,
    {
        self.spans().into_iter().map(|(span, access)| (span.buffer, access)).collect()
    }

    /// A copy of the command to run again (a recorded graph's replay); `None`
    /// for a download, whose result goes to one reader only.
    pub fn replayable(&self) -> Option<Command<R>>
    where
        R: Copy,
    {
        Some(match self {
            Command::Zero { dst } => Command::Zero { dst: *dst },
            Command::Fill { dst, word } => Command::Fill { dst: *dst, word: *word },
            Command::Copy { src, dst } => Command::Copy { src: *src, dst: *dst },
            Command::Upload { dst, data } => Command::Upload { dst: *dst, data: data.clone() },
            Command::Download { .. } => return None,
            Command::Binary { op, a, b, out } => Command::Binary { op: *op, a: *a, b: *b, out: *out },
            Command::Scale { x, out, alpha } => Command::Scale { x: *x, out: *out, alpha: *alpha },
            Command::Axpy { x, y, alpha } => Command::Axpy { x: *x, y: *y, alpha: *alpha },
            Command::Iota { out, start } => Command::Iota { out: *out, start: *start },
            #[cfg(feature = "test-support")]
            Command::Delay { duration } => Command::Delay { duration: *duration },
            Command::Custom { kernel, grid, args } => {
                Command::Custom { kernel: kernel.clone(), grid: *grid, args: args.clone() }
            }
        })
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
            #[cfg(feature = "test-support")]
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

/// One member's part of a collective, as [`Backend::enqueue_collective`]
/// gets it: its backend, the stream it runs on, its memory, and what it
/// reads and publishes (as [`Backend::enqueue`]'s `io`).
pub struct CollectivePart<'a, B: Backend> {
    // Read by the GPU engine; a build with neither CUDA nor HIP has none.
    #[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
    pub backend: &'a B,
    pub stream: &'a B::Stream,
    /// What the member contributes; for the in-place collectives the one buffer.
    pub send: &'a B::Memory,
    /// Where its result lands; `None` for the in-place collectives.
    pub receive: Option<&'a B::Memory>,
    pub io: OpIo,
}

/// Where a download lands: the bytes, plus the completion a reader awaits.
#[derive(Debug)]
pub struct HostSink {
    bytes: Mutex<Option<HostBuffer>>,
    pub(crate) completion: Arc<Completion>,
}

impl HostSink {
    pub(crate) fn new(completion: Arc<Completion>) -> Arc<Self> {
        Arc::new(HostSink { bytes: Mutex::new(None), completion })
    }

    /// Delivers the downloaded bytes and completes the read.
    pub fn deliver(&self, bytes: Vec<u8>) {
        self.deliver_host(HostBuffer::heap(bytes));
    }

    /// Delivers the host memory the bytes were downloaded into, as it is,
    /// and completes the read.
    pub(crate) fn deliver_host(&self, bytes: HostBuffer) {
        *lock(&self.bytes) = Some(bytes);
        self.completion.complete(Ok(()));
    }

    /// Fails the read.
    pub fn fail(&self, error: crate::Error) {
        self.completion.complete(Err(error));
    }

    pub(crate) fn take(&self) -> Option<HostBuffer> {
        lock(&self.bytes).take()
    }
}

/// A host-controlled barrier in a stream (test support): work behind it
/// waits until it is opened.
///
/// One mechanism for every engine: an engine that holds a stream at a gate
/// polls it with a waker, and the opening wakes it (a CPU stream is
/// rescheduled onto the pool, a wgpu lane issues on). No thread blocks on a gate.
#[cfg(feature = "test-support")]
#[derive(Debug, Default)]
pub struct Gate {
    /// Whether it is open, and the wakers of the engines held at it.
    state: Mutex<(bool, Vec<std::task::Waker>)>,
}

#[cfg(feature = "test-support")]
impl Gate {
    /// Lets the stream run past the gate.
    pub fn open(&self) {
        let held = {
            let mut state = lock(&self.state);
            state.0 = true;
            std::mem::take(&mut state.1)
        };
        // Out of the lock: a waker may poll the gate again.
        held.into_iter().for_each(std::task::Waker::wake);
    }

    /// Ready once open; else `waker` is woken when it opens. Never blocks.
    pub(crate) fn poll_open(&self, waker: &std::task::Waker) -> std::task::Poll<()> {
        let mut state = lock(&self.state);
        if state.0 {
            return std::task::Poll::Ready(());
        }
        state.1.push(waker.clone());
        std::task::Poll::Pending
    }
}

/// Whether one admitted op failed. The scheduler gives each op that writes
/// a cell, and every version it publishes carries it, so that the failure
/// travels with the data: set at admission when the op cannot run, or by
/// the backend as the op runs.
#[derive(Debug, Default)]
pub struct OpOutcome {
    failure: OnceLock<Error>,
}

/// Set before the first failure of any op in this process. Until then no
/// op's input can have failed, so an op about to run need not read its
/// inputs' cells: on a GPU's issuing thread those are cache lines the
/// admitting thread keeps writing, and reading each costs a transfer.
static ANY_OP_FAILED: AtomicBool = AtomicBool::new(false);

impl OpOutcome {
    /// Records that the op failed; the first failure stays.
    pub fn fail(&self, error: Error) {
        // Before the failure itself: whoever sees the failure sees the flag.
        ANY_OP_FAILED.store(true, Ordering::SeqCst);
        let _ = self.failure.set(error);
    }

    /// The op's failure, once known.
    pub fn failure(&self) -> Option<&Error> {
        self.failure.get()
    }
}

/// What an op reads and what it publishes, for failures found as it runs.
#[derive(Debug, Default)]
pub struct OpIo {
    /// The outcomes of the versions the op reads (a partial write reads what
    /// it leaves in place). If one of them failed, the op must not run: it
    /// fails with an error naming that failure.
    pub inputs: smallvec::SmallVec<[Arc<OpOutcome>; 2]>,
    /// The op's own outcome, which the versions it writes carry.
    pub outcome: Option<Arc<OpOutcome>>,
    /// The op's share of the runtime's queue: the backend drops the `OpIo`
    /// once the op has left its host-side queue, and the share goes back.
    pub(crate) credit: Credit,
}

impl Clone for OpIo {
    /// The same inputs and outcome, without the queue share: the original
    /// gives that back when it drops.
    fn clone(&self) -> Self {
        OpIo { inputs: self.inputs.clone(), outcome: self.outcome.clone(), credit: Credit::default() }
    }
}

impl OpIo {
    /// The first failure among the inputs, as the error of an op that depends on it.
    pub fn failed_input(&self, stream: u32) -> Option<Error> {
        if !ANY_OP_FAILED.load(Ordering::SeqCst) {
            return None;
        }
        self.inputs.iter().find_map(|input| input.failure()).map(|cause| Error::dependency_failed(stream, cause))
    }

    /// The op failed with `error`: its versions carry it, and `tally` (its
    /// stream's) hands it to the stream's next fence.
    pub(crate) fn fail(&self, error: Error, tally: &FailureTally) {
        tally.record(&error);
        if let Some(outcome) = &self.outcome {
            outcome.fail(error);
        }
    }
}

/// The failures of a stream not yet reported by a fence: the first, and how many.
#[derive(Debug, Default)]
pub(crate) struct FailureTally(Mutex<Option<(Error, u64)>>);

impl FailureTally {
    /// Counts one more failure.
    pub(crate) fn record(&self, error: &Error) {
        let mut tally = lock(&self.0);
        match &mut *tally {
            Some((_, count)) => *count += 1,
            None => *tally = Some((error.clone(), 1)),
        }
    }

    /// True if no failure waits to be reported. Takes nothing.
    pub(crate) fn is_clear(&self) -> bool {
        lock(&self.0).is_none()
    }

    /// What a fence reports: the first failure since the last take, with the count.
    pub(crate) fn take(&self) -> Result<(), Failures> {
        match lock(&self.0).take() {
            Some((first, count)) => Err(Failures::new(first, count)),
            None => Ok(()),
        }
    }

    /// What a signal of `kind` reports of them: a fence takes them (each
    /// failure is reported once), a drain none.
    pub(crate) fn report(&self, kind: SignalKind) -> Result<(), Failures> {
        match kind {
            SignalKind::Fence => self.take(),
            SignalKind::Drain => Ok(()),
        }
    }
}

/// What a [`Backend::signal`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// A fence: the first failure, with a count, among the ops that failed on
    /// the stream since its previous fence signal (each failure is reported
    /// by one fence); `Ok` if none did.
    Fence,
    /// Internal bookkeeping (freeing memory, retiring a stream, draining):
    /// completes `Ok` once the work is done, and reports nothing.
    Drain,
}

/// Raw access handed to an [`external`](crate::Stream::external) op's closure.
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

/// A point in a stream whose device time is known once the stream passed
/// it: what [`Backend::timestamp`] enqueues. Released on drop, taken or not.
pub trait DeviceTimestamp: Send + Sync + 'static {
    /// The device time from `earlier` to this one, two timestamps of one
    /// stream, `earlier` enqueued first, both complete.
    fn elapsed_since(&self, earlier: &Self) -> Result<Duration>;
}

/// A backend's timestamp, whatever the backend.
pub(crate) trait AnyTimestamp: Send + Sync {
    fn as_any(&self) -> &dyn std::any::Any;
    /// As [`DeviceTimestamp::elapsed_since`], for a timestamp of the same backend.
    fn elapsed_since(&self, earlier: &dyn AnyTimestamp) -> Result<Duration>;
}

impl<T: DeviceTimestamp> AnyTimestamp for T {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn elapsed_since(&self, earlier: &dyn AnyTimestamp) -> Result<Duration> {
        let earlier = earlier
            .as_any()
            .downcast_ref::<T>()
            .ok_or_else(|| Error::internal("two timestamps of one runtime come from different backends"))?;
        DeviceTimestamp::elapsed_since(self, earlier)
    }
}

/// A device backend. See the module doc for the contract between it and the scheduler.
pub trait Backend: Send + Sync + Sized + 'static {
    /// A queue of device work; dropping it retires it once its work is done.
    type Stream: Send + Sync;
    /// A point in a stream another stream can wait for; released on drop.
    type Event: Send + Sync;
    /// A device allocation; released on drop.
    /// Equal where it is the same allocation: [`Backend::prepare`] tells
    /// ranges of one buffer apart from ranges of two.
    type Memory: Send + Sync + PartialEq + 'static;
    /// What [`Backend::prepare`] made for one command.
    type Prepared: Send;
    /// A timestamp in a stream.
    type Timestamp: DeviceTimestamp;
    /// What a group's collectives share across its members (an NCCL
    /// communicator per member), made at a group's first collective by
    /// [`Backend::communicator`].
    type Communicator: Send + Sync + 'static;

    /// Which backend this is.
    const KIND: BackendKind;
    /// The device this backend drives.
    fn info(&self) -> DeviceInfo;
    /// True when one instance's stream can copy from another instance's
    /// memory and wait for its events (the devices of a group): host memory
    /// on the CPU, device pointers and events across contexts on CUDA.
    const PEER_COPIES: bool = false;
    /// Allocates `bytes` of device memory with unspecified contents.
    fn allocate(&self, bytes: u64) -> Result<Self::Memory>;
    /// Creates a stream, numbered `index`: the runtime's index of it
    /// ([`Stream::index`](crate::Stream::index)), which the failures of its
    /// ops name.
    fn create_stream(&self, index: u32) -> Result<Self::Stream>;
    /// Everything slow a command needs that does not depend on its buffers'
    /// memory (compiling, pipeline lookup, staging host data, uniform data).
    /// Called before the ordering boundary is taken, from any thread; an error
    /// refuses the command (nothing is admitted).
    fn prepare<R: PartialEq>(&self, command: &Command<R>) -> Result<Self::Prepared>;
    /// An upload into `dst` from `from`, prepared: by default an owned copy
    /// of its bytes, prepared as any command. A backend whose `prepare`
    /// stages host bytes stages these at once instead, so the caller's bytes
    /// are copied once; one that page-locks host memory copies from a
    /// [`UploadFrom::Host`] it locked directly, holding a clone of it until
    /// the copy is done.
    fn prepare_upload<R: PartialEq>(&self, dst: Span<R>, from: UploadFrom<'_>) -> Result<(Command<R>, Self::Prepared)> {
        let command = Command::Upload { dst, data: from.bytes().to_vec() };
        let prepared = self.prepare(&command)?;
        Ok((command, prepared))
    }
    /// A [`HostBuffer`] of `len` bytes to fill before uploading it:
    /// page-locked where the backend copies from such memory directly; by
    /// default, plain memory. Its bytes are whatever the memory held (zeros
    /// by default).
    fn staging_buffer(&self, len: usize) -> Result<HostBuffer> {
        Ok(HostBuffer::heap(vec![0; len]))
    }
    /// Enqueues a prepared command: only the ordered driver calls. Must not
    /// wait for the device.
    ///
    /// # Safety
    /// The caller keeps every memory the command names alive, and unused by any
    /// conflicting command, until a [`Backend::signal`] on `stream` made after
    /// this call has completed. `prepared` came from [`Backend::prepare`] on
    /// this backend for this command.
    ///
    /// Ops may fail as they run (a CPU kernel, a GPU driver call made on the
    /// issuing thread), so the backend checks `io` when the op runs: an op
    /// whose input failed does not run, and a failure sets `io.outcome` and
    /// counts for the stream's next fence.
    unsafe fn enqueue(
        &self,
        stream: &Self::Stream,
        command: Command<&Self::Memory>,
        prepared: Self::Prepared,
        io: OpIo,
    ) -> Result<(), EnqueueError>;
    /// Enqueues the commands of one replay of a recorded graph (`id` names
    /// the recording; its buffers and arguments never change), back to
    /// back. The default enqueues them one by one, each with `io`; a backend
    /// with a faster way (CUDA graphs) overrides it, capturing a recording
    /// on its first replay.
    ///
    /// # Safety
    /// As for [`Backend::enqueue`], for every command.
    unsafe fn enqueue_replay(
        &self,
        stream: &Self::Stream,
        _id: u64,
        commands: Vec<(Command<&Self::Memory>, Self::Prepared)>,
        io: OpIo,
    ) -> Result<(), EnqueueError> {
        // SAFETY: this function's contract.
        unsafe { enqueue_in_order(self, stream, commands, io) }
    }
    /// Hands every op admitted so far on to the device, where the backend
    /// would otherwise hold some back for a later read or fence (wgpu
    /// records ops in batches): a producer waits for the queue they fill.
    fn flush_queued(&self) {}
    /// False once the replays of `id` need no prepared commands (the
    /// backend captured the recording whole); the default always prepares.
    fn prepares_replay(&self, _id: u64) -> bool {
        true
    }
    /// The recording `id` is gone: drop what the backend kept for it.
    fn forget_replay(&self, _id: u64) {}
    /// The scheduler is about to admit several ops on `stream` back to back
    /// under one hold of its lock (a batch): the backend may hold back what
    /// it hands its device (a CPU worker's wake-up per op) until
    /// [`Backend::end_admissions`], which the scheduler calls before it lets
    /// the lock go. Waits, events and signals of the run count as enqueued
    /// meanwhile.
    fn begin_admissions(&self, _stream: &Self::Stream) {}

    /// Hands the device what [`Backend::begin_admissions`] held back.
    fn end_admissions(&self, _stream: &Self::Stream) -> Result<()> {
        Ok(())
    }

    /// Records an event covering all work enqueued on `stream` so far.
    fn record_event(&self, stream: &Self::Stream) -> Result<Self::Event>;
    /// Makes later work on `stream` wait for `event`.
    fn wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;
    /// Makes later work on `stream` wait for all work enqueued on `source`
    /// (a stream of this backend) so far. The default records an event and
    /// waits for it; a backend that can do both in one step overrides it.
    fn wait_for_stream(&self, stream: &Self::Stream, source: &Self::Stream) -> Result<()> {
        let event = self.record_event(source)?;
        self.wait_event(stream, &event)
    }
    /// Enqueues a timestamp on `stream`, after all work enqueued on it so
    /// far: the device's clock once that work is done. Completes
    /// `completion` once the time is taken, as a [`SignalKind::Drain`]
    /// signal does: `Ok`, or a device-fatal failure; never an op's failure.
    /// [`Error::Unsupported`] where the device cannot take times.
    fn timestamp(&self, stream: &Self::Stream, completion: Arc<Completion>) -> Result<Self::Timestamp>;
    /// Completes one part of `completion` once all work enqueued on `stream`
    /// so far finished, with what `kind` says. May complete it at once (an idle
    /// stream); never runs a waker itself. A device-fatal failure is reported
    /// by every signal of either kind.
    fn signal(&self, stream: &Self::Stream, completion: Arc<Completion>, kind: SignalKind) -> Result<()>;
    /// True if a fence signal on `stream` now would complete at once with
    /// `Ok`: all work enqueued so far finished and no failure waits to be
    /// reported. A probe: it takes no failure and enqueues nothing; `false` is
    /// always a safe answer (the caller then makes a real fence), and the
    /// default for backends without a cheap one.
    fn is_settled(&self, _stream: &Self::Stream) -> bool {
        false
    }
    /// Runs `run` with raw handles on `stream` and `buffers`, in admission
    /// order, unless a version it reads (`io`) failed by the time its work
    /// would start: then it fails with that failure. The caller holds no
    /// runtime-wide lock while it runs.
    ///
    /// # Safety
    /// As for [`Backend::enqueue`], for every memory in `buffers`, which the
    /// caller has ordered after every other user.
    unsafe fn external(
        &self,
        stream: &Self::Stream,
        buffers: &[(&Self::Memory, Access)],
        io: OpIo,
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()>;
    /// True when the calling thread runs `stream`'s work (a CPU kernel):
    /// waiting there for that stream would wait for itself.
    fn is_current_thread(&self, _stream: &Self::Stream) -> bool {
        false
    }
    /// The device-fatal failure, once one happened (see [`Error::DeviceLost`]):
    /// the runtime then fails every call with it. Backends whose failures
    /// are all per op never report one.
    fn lost(&self) -> Option<Error> {
        None
    }
    /// Puts a gate in `stream`: later work waits until it is opened.
    #[cfg(feature = "test-support")]
    fn hold(&self, _stream: &Self::Stream, _gate: Arc<Gate>) -> Result<()> {
        Err(crate::Error::unsupported(Self::KIND, "stream gates"))
    }
    /// The backend's counters now.
    fn counters(&self) -> BackendCounters;
    /// The communicator of a group whose members are `members`, in rank
    /// order: slow (it may talk to every device), so made before any
    /// ordering boundary is taken, once per group. `Unsupported` where the
    /// backend has no collectives, saying why.
    fn communicator(members: &[&Self]) -> Result<Self::Communicator> {
        let _ = members;
        Err(Error::unsupported(Self::KIND, "collectives over a device group"))
    }
    /// The communicator of `member` as rank `rank` of a group of `ranks`
    /// ranks in several processes, met through `id` (made by rank 0's
    /// process): returns once every rank has joined. `Unsupported` where the
    /// backend has no such groups.
    fn joined_communicator(
        member: &Self,
        id: &[u8; GROUP_ID_BYTES],
        ranks: usize,
        rank: usize,
    ) -> Result<Self::Communicator> {
        let _ = (member, id, ranks, rank);
        Err(Error::unsupported(Self::KIND, "groups whose ranks live in several processes"))
    }
    /// Enqueues every member's part of `collective`, in rank order, on
    /// their streams: only the ordered driver calls, as [`Backend::enqueue`].
    /// The parts run together (each may wait for the others on the device);
    /// a rejection enqueued none of them; a failure fails them all.
    ///
    /// # Safety
    /// As for [`Backend::enqueue`], for every part's memory on its stream;
    /// `parts` has one part per member of the group `communicator` was made for.
    unsafe fn enqueue_collective(
        _communicator: &Self::Communicator,
        collective: &Collective,
        parts: Vec<CollectivePart<'_, Self>>,
    ) -> Result<(), EnqueueError> {
        let _ = parts;
        Err(EnqueueError::Rejected(Error::unsupported(
            Self::KIND,
            format!("{} over a device group", collective.name()),
        )))
    }
}

/// Where an upload's bytes come from.
#[derive(Clone, Copy)]
pub enum UploadFrom<'a> {
    /// The caller's bytes.
    Bytes(&'a [u8]),
    /// Host memory of the runtime's (see [`crate::Stream::write_host`]).
    Host(&'a HostBuffer),
}

impl UploadFrom<'_> {
    /// The bytes to upload, wherever they are.
    pub fn bytes(&self) -> &[u8] {
        match self {
            UploadFrom::Bytes(bytes) => bytes,
            UploadFrom::Host(host) => host,
        }
    }
}

/// Enqueues `commands` on `stream` one by one, each with a copy of `io`:
/// the replay of a backend without a faster way. A rejection of the first
/// command is a rejection (nothing was enqueued); any later one fails the
/// replay, whose earlier commands are already in the stream.
///
/// # Safety
/// As for [`Backend::enqueue`], for every command.
pub(crate) unsafe fn enqueue_in_order<B: Backend>(
    backend: &B,
    stream: &B::Stream,
    commands: Vec<(Command<&B::Memory>, B::Prepared)>,
    io: OpIo,
) -> Result<(), EnqueueError> {
    let last = commands.len().saturating_sub(1);
    let mut io = Some(io);
    for (index, (command, prepared)) in commands.into_iter().enumerate() {
        // The last command takes the replay's queue share: it goes back
        // once the whole replay has left the queue.
        let sub_io = match index == last {
            true => io.take().unwrap_or_default(),
            false => io.clone().unwrap_or_default(),
        };
        // SAFETY: this function's contract.
        match unsafe { backend.enqueue(stream, command, prepared, sub_io) } {
            Ok(()) => {}
            Err(EnqueueError::Rejected(error)) if index > 0 => return Err(EnqueueError::Failed(error)),
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Test support: drives a backend directly, as the benchmarks' raw baselines do.
#[cfg(feature = "test-support")]
pub mod direct {
    use std::sync::Arc;

    use super::{Backend, Command, EnqueueError};
    use crate::completion::Completion;
    use crate::diagnostics::LiveCounters;

    /// A completion of `parts` signals, to hand to [`Backend::signal`].
    pub fn completion(parts: usize) -> Arc<Completion> {
        Completion::new(parts, Arc::new(LiveCounters::default()))
    }

    /// Prepares `command`, then enqueues it on `stream`.
    ///
    /// # Safety
    /// As for [`Backend::enqueue`].
    pub unsafe fn submit<B: Backend>(
        backend: &B,
        stream: &B::Stream,
        command: Command<&B::Memory>,
    ) -> Result<(), EnqueueError> {
        let prepared = backend.prepare(&command).map_err(EnqueueError::Rejected)?;
        // SAFETY: the caller upholds `enqueue`'s contract.
        unsafe { backend.enqueue(stream, command, prepared, super::OpIo::default()) }
    }
}
