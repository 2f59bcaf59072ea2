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

mod command;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
// Without CUDA or HIP, its tests still run, over the device layer's fake driver.
#[cfg(any(feature = "cuda", feature = "hip", test))]
pub mod gpu;
#[cfg(feature = "hip")]
pub mod hip;
mod lane;
mod outcome;
mod pool;
mod progress;
#[cfg(feature = "test-support")]
mod timer;
#[cfg(feature = "wgpu")]
pub mod wgpu;

/// The synchronisation primitives a lane and its progress are built on
/// (`loom`'s in their model checks, `tests/loom_lane.rs`, `tests/loom_progress.rs`).
mod sync {
    pub(super) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    pub(super) use std::sync::{Condvar, Mutex, MutexGuard};

    /// Locks `mutex`, ignoring poisoning (as `crate::lock::lock`).
    pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
        mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "test-support")]
pub use command::Spans;
pub use command::{Accesses, BinaryOp, Command, KernelArg, Span, UploadFrom};
pub(crate) use outcome::FailureTally;
pub use outcome::{HostSink, OpIo, OpOutcome, SignalKind};
#[cfg(feature = "test-support")]
pub use timer::Gate;

use crate::completion::Completion;
pub use crate::device::{BackendKind, DeviceInfo};
pub use crate::diagnostics::BackendCounters;
pub(crate) use crate::diagnostics::Counters;
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::kernel::Access;
pub use weir_device::collective::{Collective, CollectiveKind, ReduceOp, GROUP_ID_BYTES};
pub use weir_device::enqueue::EnqueueError;

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
        HostBuffer::zeroed(len)
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
    fn end_admissions(&self, _stream: &Self::Stream) {}

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
        let sub_io = if index == last { io.take() } else { io.clone() }.unwrap_or_default();
        // SAFETY: this function's contract.
        unsafe { backend.enqueue(stream, command, prepared, sub_io) }.map_err(|error| match error {
            EnqueueError::Rejected(error) if index > 0 => EnqueueError::Failed(error),
            error => error,
        })?;
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
