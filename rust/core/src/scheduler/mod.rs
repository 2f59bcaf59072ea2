//! The scheduler: admission under one ordering boundary per runtime.
//!
//! Every op is prepared first (compiles, staging: [`Backend::prepare`]),
//! then admitted while holding the runtime's state lock: its dependencies
//! are read from the buffers' version histories, the minimal cross-stream
//! waits are inserted, the op is enqueued at its position and every buffer it
//! touches is published at that position — all before the lock is released.
//! The lock is never held while waiting for the device or while foreign code
//! runs: completions deliver on their own thread, and an external write's
//! closure runs with only its own stream reserved (see [`lifecycle`] for
//! streams, memory and teardown).

mod clock;
mod collective;
mod lifecycle;
mod peer;
mod recording;
mod versions;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use clock::VectorClock;
pub(crate) use collective::{CommunicatorSlot, PartKeys};
pub(crate) use recording::Recording;
use versions::{Dependencies, History};

#[cfg(feature = "test-support")]
use crate::backend::Gate;
use crate::backend::{
    Accesses, AnyTimestamp, Backend, Command, EnqueueError, FailureTally, OpIo, OpOutcome, RawAccess, SignalKind, Span,
};
use crate::completion::Completion;
use crate::device::{BackendKind, DeviceInfo, KernelLanguage};
use crate::diagnostics::{Diagnostics, LiveCounters};
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::kernel::Access;
use crate::key_map::KeyMap;
use crate::lock::lock;

/// Names a buffer inside one runtime. Keys are never reused.
pub(crate) type BufferKey = u64;

/// How a new buffer starts.
pub(crate) enum Init<'a> {
    /// No definition: contents unspecified until written.
    Empty,
    /// Zero-filled on the device, no host data involved.
    Zero,
    /// Host bytes uploaded, staged from the caller's bytes where the backend
    /// can (see [`Backend::prepare_upload`]).
    Data(&'a [u8]),
}

use crate::options::{Fault, QueueLimit};
use crate::room::{Room, RoomWait, WhenFull};

/// The runtime as the public handles see it, whatever the backend.
pub(crate) trait Engine: Send + Sync {
    fn kind(&self) -> BackendKind;
    fn info(&self) -> DeviceInfo;
    fn kernel_language(&self) -> KernelLanguage;
    fn live(&self) -> &Arc<LiveCounters>;
    fn new_stream(&self) -> Result<usize>;
    /// The last handle of `stream` went: retire it once its work is done.
    fn retire_stream(&self, stream: usize);
    fn create(&self, stream: usize, len: u64, init: Init<'_>) -> Result<BufferKey>;
    fn release(&self, buffer: BufferKey);
    fn submit(&self, stream: usize, command: Command<BufferKey>) -> Result<()>;
    /// Admits an upload of `bytes` into `dst`, staged by the backend from the
    /// caller's bytes where it can (see [`Backend::prepare_upload`]).
    fn submit_upload(&self, stream: usize, dst: Span<BufferKey>, bytes: &[u8]) -> Result<()>;
    /// Admits an upload of `host` into `dst`, copied from it directly where
    /// the backend locked it (see [`Backend::prepare_host_upload`]).
    fn submit_host_upload(&self, stream: usize, dst: Span<BufferKey>, host: &HostBuffer) -> Result<()>;
    /// A host buffer holding a copy of `bytes`; see [`crate::Runtime::host_buffer`].
    fn host_buffer(&self, bytes: &[u8]) -> Result<HostBuffer>;
    /// A host buffer of `len` bytes to fill; see [`crate::Stream::staging_buffer`].
    fn staging_buffer(&self, len: usize) -> Result<HostBuffer>;
    /// Admits `commands` on `stream` in order, each its own op, in one
    /// critical section; see [`crate::Stream::batch`].
    fn submit_batch(&self, stream: usize, commands: Vec<Command<BufferKey>>) -> Result<()>;
    /// Admits `recording`'s ops on `stream` as one op whose reads and
    /// writes are the union of theirs; see [`crate::Stream::replay`].
    fn replay(&self, stream: usize, recording: &Recording) -> Result<()>;
    /// The recording `id` will not be replayed again.
    fn forget_graph(&self, id: u64);
    /// Keeps the buffers of `keys` past their last handle until unpinned.
    fn pin(&self, keys: &[BufferKey]) -> Result<()>;
    fn unpin(&self, keys: &[BufferKey]);
    /// The scheduler itself, for the ops that span two runtimes of one backend.
    fn as_any(&self) -> &dyn std::any::Any;
    /// Copies all of `src`, a buffer of `from`, into `dst` on `stream`,
    /// ordered by the versions of both; see [`crate::Stream::copy_from_peer`].
    fn copy_from_peer(&self, stream: usize, from: &dyn Engine, src: BufferKey, dst: BufferKey) -> Result<()>;
    /// Admits `collective` over `members` (this runtime first, then the
    /// rest of its group in rank order), one part per member; see
    /// [`crate::DeviceGroup::all_reduce`].
    fn collective(
        &self,
        members: &[&dyn Engine],
        slot: &CommunicatorSlot,
        collective: &crate::backend::Collective,
        parts: &[PartKeys],
    ) -> Result<()>;
    /// Makes this runtime rank `rank` of `ranks` of the group `id` names
    /// (its ranks in several processes), storing the communicator in `slot`;
    /// see [`crate::DeviceGroup::join`].
    fn join_group(
        &self,
        slot: &CommunicatorSlot,
        id: &[u8; crate::backend::GROUP_ID_BYTES],
        ranks: usize,
        rank: usize,
    ) -> Result<()>;
    fn fence(&self, stream: Option<usize>) -> Result<Arc<Completion>>;
    /// Enqueues a timestamp on `stream`: its completion, the backend's
    /// timestamp, and its position (a place of its own in the stream).
    fn timestamp(&self, stream: usize) -> Result<(Arc<Completion>, Box<dyn AnyTimestamp>, u64)>;
    /// True if a fence on `stream` now would complete at once with `Ok`;
    /// takes no failure (see [`Backend::is_settled`]).
    fn is_synced(&self, stream: usize) -> bool;
    /// An error if waiting on the calling thread for `stream` (or all streams)
    /// would wait for itself: a CPU kernel waiting for its own stream.
    fn check_can_wait(&self, stream: Option<usize>) -> Result<()>;
    fn external(
        &self,
        stream: usize,
        accesses: &[(BufferKey, Access)],
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()>;
    #[cfg(feature = "test-support")]
    fn hold(&self, stream: usize) -> Result<Arc<Gate>>;
    /// Admits an op on `stream` that writes `buffer` and fails with `message`.
    #[cfg(feature = "test-support")]
    fn fail_write(&self, stream: usize, buffer: BufferKey, message: &str) -> Result<()>;
    fn diagnostics(&self) -> Diagnostics;
    /// Returns once the runtime's queue has room for another admission, or
    /// (`WhenFull::Refuse`) fails with [`Error::QueueFull`] when it has none.
    fn make_room(&self, when_full: WhenFull) -> Result<()>;
    /// Resolves once the runtime's queue has room.
    fn room(&self) -> RoomWait;
    fn queue_limit(&self) -> QueueLimit;
    fn close(&self) -> Result<()>;
}

/// A stream whose last handle went: its backend stream drops once `done`.
struct Retired<B: Backend> {
    done: Arc<Completion>,
    /// The backend stream until the release thread drops it (once `done`):
    /// meanwhile a dependent records an event on it, and a fence signals it,
    /// as on any stream, so no wait runs through the wake thread.
    raw: std::sync::Weak<B::Stream>,
}

impl<B: Backend> Retired<B> {
    /// Runs `f` on the backend stream unless it was dropped already (which
    /// happens only once its work is done); the handle taken for it may be
    /// the last, so it drops on the release thread.
    fn with_stream<T>(&self, f: impl FnOnce(&B::Stream) -> T) -> Option<T> {
        let raw = self.raw.upgrade()?;
        let outcome = f(&raw);
        crate::completion::release(move || drop(raw));
        Some(outcome)
    }
}

struct StreamSlot<B: Backend> {
    /// The backend stream; `None` once retired.
    raw: Option<Arc<B::Stream>>,
    /// Ops admitted so far; the last op's position. A reused slot goes on
    /// counting from where its previous stream stopped.
    position: u64,
    /// Positions up to here belong to earlier streams of this slot, whose work
    /// is all done: nothing waits for them.
    done_up_to: u64,
    seen: VectorClock,
    /// Ops that failed at admission, for the stream's next fence.
    unreported: FailureTally,
    /// An external write's closure is running on this stream.
    busy: bool,
    retired: Option<Retired<B>>,
    /// The latest fence's completion and the position it covers: a fence
    /// made while it is pending, with nothing admitted since, is the same
    /// fence (ten thousand awaits of one point cost one device event).
    last_fence: Option<(u64, std::sync::Weak<Completion>)>,
    /// The latest fence's or timestamp's completion. The device may finish
    /// before the completion is delivered: until it is, the stream is not
    /// synced, so that after a sync every earlier fence and timestamp says
    /// it is complete.
    last_signal: Option<std::sync::Weak<Completion>>,
    /// The position at which the backend last said the stream was settled:
    /// with nothing admitted since, it still is, and asking again (a driver
    /// call on CUDA) can be skipped.
    settled_at: Option<u64>,
    /// Ops up to here are known finished on the device: a fence after them,
    /// or a read after them, completed. Another stream needs no wait for them.
    finished: u64,
    /// The latest fences and reads of this stream not yet seen complete,
    /// oldest first, with the positions they cover (at most
    /// [`RECENT_COMPLETIONS`]): one seen to have succeeded moves
    /// [`StreamSlot::finished`] on. Held, not watched: whether its caller
    /// still holds it or not, it is known complete as soon as it is.
    recent_completions: VecDeque<(u64, Arc<Completion>)>,
}

/// Completions kept per stream to learn from: a pipeline that reuses its
/// buffers in a ring awaits the fence or read of the chunk a ring before,
/// while newer ones are pending.
const RECENT_COMPLETIONS: usize = 16;

/// True once `completion`, covering ops up to `covers`, is complete; moves
/// `finished` to `covers` if it succeeded. Only a success teaches: a read
/// refused at admission fails at once, with the device nowhere near it.
fn learnt(finished: &mut u64, covers: u64, completion: &Completion) -> bool {
    match completion.outcome() {
        None => false,
        Some(outcome) => {
            if outcome.is_ok() {
                *finished = (*finished).max(covers);
            }
            true
        }
    }
}

impl<B: Backend> StreamSlot<B> {
    fn new(raw: B::Stream) -> Self {
        StreamSlot { raw: Some(Arc::new(raw)), ..Self::vacant() }
    }

    /// A slot whose stream is being made: no stream, nothing retiring.
    fn vacant() -> Self {
        StreamSlot {
            raw: None,
            position: 0,
            done_up_to: 0,
            seen: VectorClock::default(),
            unreported: FailureTally::default(),
            busy: false,
            retired: None,
            last_fence: None,
            last_signal: None,
            settled_at: None,
            finished: 0,
            recent_completions: VecDeque::new(),
        }
    }

    /// True when op `position` is known finished on the device: by an
    /// earlier stream of this slot, or by a completion after it.
    fn has_finished(&mut self, position: u64) -> bool {
        if position <= self.done_up_to.max(self.finished) {
            return true;
        }
        let finished = &mut self.finished;
        self.recent_completions.retain(|(covers, completion)| !learnt(finished, *covers, completion));
        position <= self.finished
    }

    /// Learns from `completion`, which completes once the device passed
    /// every op admitted on this stream so far: a fence, or a read's
    /// delivery (the stream runs its ops in order).
    fn learn_from(&mut self, completion: &Arc<Completion>) {
        if self.recent_completions.len() == RECENT_COMPLETIONS {
            // The oldest goes; if it is done already, it still teaches.
            if let Some((covers, oldest)) = self.recent_completions.pop_front() {
                learnt(&mut self.finished, covers, &oldest);
            }
        }
        self.recent_completions.push_back((self.position, completion.clone()));
    }

    fn raw(&self, index: usize) -> Result<&Arc<B::Stream>> {
        self.raw.as_ref().ok_or_else(|| Error::internal(format!("stream {index} was retired under a live handle")))
    }
}

struct BufferEntry<M> {
    memory: Arc<M>,
    len: u64,
    history: History,
    /// Recorded graphs that name the buffer: it stays while any does.
    pins: u32,
    /// Its last handle went while pinned: released once unpinned.
    released: bool,
}

struct State<B: Backend> {
    /// Set by the first `close()`; completes once teardown is over.
    closed: Option<Arc<Completion>>,
    streams: Vec<StreamSlot<B>>,
    buffers: KeyMap<BufferKey, BufferEntry<B::Memory>>,
    next_key: BufferKey,
    /// Streams with an external write in flight.
    busy_streams: usize,
    /// Releases that arrived while a stream they need was busy.
    deferred_releases: Vec<BufferKey>,
    /// Retired streams whose work may still be running.
    retiring: Vec<usize>,
    /// Slots of retired streams whose work is done, for new streams: clocks
    /// and slot lists then grow with the streams alive, not ever made.
    free_slots: Vec<usize>,
    /// The stream that carries this runtime's side of its outgoing peer
    /// copies (see `peer`), once there was one.
    link: Option<usize>,
}

impl<B: Backend> State<B> {
    fn slot(&self, stream: usize) -> Result<&StreamSlot<B>> {
        self.streams.get(stream).ok_or_else(|| Error::internal(format!("no stream {stream}")))
    }

    fn entry(&self, key: BufferKey) -> Result<&BufferEntry<B::Memory>> {
        self.buffers.get(&key).ok_or_else(|| Error::internal("a buffer with a live handle has no entry"))
    }

    fn is_busy(&self, stream: usize) -> bool {
        self.streams.get(stream).is_some_and(|slot| slot.busy)
    }

    /// The foreign dependencies of `accesses` for an op on `stream`.
    fn dependencies(&self, accesses: &[(BufferKey, Access)]) -> Result<Dependencies> {
        let mut deps = Dependencies::default();
        for &(key, access) in accesses {
            self.entry(key)?.history.dependencies(access, &mut deps);
        }
        Ok(deps)
    }

    /// True when an op on `stream` over `accesses` needs a stream whose
    /// external write is in flight.
    fn needs_busy(&self, stream: usize, accesses: &[(BufferKey, Access)]) -> bool {
        if self.busy_streams == 0 {
            return false;
        }
        if self.is_busy(stream) {
            return true;
        }
        self.dependencies(accesses)
            .map(|deps| deps.foreign(stream).any(|(source, _)| self.is_busy(source)))
            .unwrap_or(false)
    }
}

/// A recording's commands, each with what the backend prepared for it.
type PreparedCommands<B> = Vec<(Command<BufferKey>, <B as Backend>::Prepared)>;

/// The scheduler over one backend.
pub(crate) struct Scheduler<B: Backend> {
    backend: Arc<B>,
    info: DeviceInfo,
    live: Arc<LiveCounters>,
    inserted_waits: AtomicU64,
    admitted_ops: AtomicU64,
    retiring_buffers: Arc<AtomicU64>,
    /// The bound on queued work and those waiting for it.
    room: Arc<Room>,
    /// A deliberate bug (test support: a build without the hooks has none to check).
    #[cfg(feature = "test-support")]
    fault: Option<Fault>,
    state: Mutex<State<B>>,
    /// Signalled when an external write's closure returns.
    unbusy: Condvar,
}

thread_local! {
    /// The scheduler (by address) and stream whose external write runs on this thread.
    static EXTERNAL_WRITER: std::cell::Cell<Option<(usize, usize)>> = const { std::cell::Cell::new(None) };
}

impl<B: Backend> Scheduler<B> {
    pub fn new(backend: B, queue_limit: QueueLimit, fault: Option<Fault>) -> Result<Self> {
        #[cfg(not(feature = "test-support"))]
        let _ = fault;
        let default_stream = backend.create_stream(0)?;
        let info = backend.info();
        let backend = Arc::new(backend);
        let held = Arc::downgrade(&backend);
        let flush = Box::new(move || {
            if let Some(backend) = held.upgrade() {
                backend.flush_queued();
            }
        });
        Ok(Scheduler {
            info,
            backend,
            live: Arc::new(LiveCounters::default()),
            inserted_waits: AtomicU64::new(0),
            admitted_ops: AtomicU64::new(0),
            retiring_buffers: Arc::new(AtomicU64::new(0)),
            room: Room::new(queue_limit, flush),
            #[cfg(feature = "test-support")]
            fault,
            state: Mutex::new(State {
                closed: None,
                streams: vec![StreamSlot::new(default_stream)],
                buffers: KeyMap::default(),
                next_key: 1,
                busy_streams: 0,
                deferred_releases: Vec::new(),
                retiring: Vec::new(),
                free_slots: Vec::new(),
                link: None,
            }),
            unbusy: Condvar::new(),
        })
    }

    /// True when the calling thread runs the work of `stream` (or of any
    /// stream): a wait there for it would wait for itself.
    fn runs_on_this_thread(&self, state: &State<B>, stream: Option<usize>) -> bool {
        let own = |slot: &StreamSlot<B>| slot.raw.as_deref().is_some_and(|raw| self.backend.is_current_thread(raw));
        match stream {
            Some(stream) => state.streams.get(stream).is_some_and(own),
            None => state.streams.iter().any(own),
        }
    }

    fn address(&self) -> usize {
        self as *const Self as usize
    }

    /// The state of an open runtime on a device that is not lost.
    fn open_state(&self) -> Result<MutexGuard<'_, State<B>>> {
        let state = lock(&self.state);
        if state.closed.is_some() {
            return Err(Error::Closed);
        }
        if let Some(lost) = self.backend.lost() {
            return Err(lost);
        }
        Ok(state)
    }

    /// The state, open, once `blocked` says no stream it needs is busy with an
    /// external write. Refuses (rather than waits for itself) when called from
    /// inside the closure of the very write it would wait for.
    fn open_state_when(&self, blocked: impl Fn(&State<B>) -> bool) -> Result<MutexGuard<'_, State<B>>> {
        let mut state = self.open_state()?;
        while state.busy_streams > 0 && blocked(&state) {
            if let Some((engine, stream)) = EXTERNAL_WRITER.with(std::cell::Cell::get) {
                if engine == self.address() {
                    return Err(Error::invalid(format!(
                        "this call needs stream {stream}, whose external write is the closure it was made from"
                    )));
                }
            }
            state = self.unbusy.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
            if state.closed.is_some() {
                return Err(Error::Closed);
            }
        }
        Ok(state)
    }

    /// Every command prepared, or the first refusal.
    fn prepare_all(&self, commands: &[Command<BufferKey>]) -> Result<Vec<B::Prepared>> {
        commands.iter().map(|command| self.backend.prepare(command)).collect()
    }

    /// The state, open, once no stream any of `commands` on `stream` needs
    /// is busy with an external write (see [`Scheduler::open_state_when`]).
    fn open_state_for_all(&self, stream: usize, commands: &[Command<BufferKey>]) -> Result<MutexGuard<'_, State<B>>> {
        self.open_state_when(|state| commands.iter().any(|command| state.needs_busy(stream, &command.accesses())))
    }

    /// Runs `f` on `slot`'s stream if any work admitted on it may still
    /// run: not for a retired stream whose work is done, or a free slot.
    fn if_running<T>(slot: &StreamSlot<B>, f: impl FnOnce(&B::Stream) -> Result<T>) -> Result<Option<T>> {
        match (&slot.raw, &slot.retired) {
            (Some(raw), _) => f(raw).map(Some),
            (None, Some(retired)) if !retired.done.is_complete() => retired.with_stream(f).transpose(),
            _ => Ok(None),
        }
    }

    /// An event after all work admitted so far on `slot`'s stream, if any of
    /// it may still run.
    fn event_after(&self, slot: &StreamSlot<B>) -> Result<Option<B::Event>> {
        Self::if_running(slot, |raw| self.backend.record_event(raw))
    }

    /// Makes `target` wait for every foreign dependency it has not yet seen.
    fn order_after(&self, streams: &mut [StreamSlot<B>], target: usize, deps: &Dependencies) -> Result<()> {
        for (source, position) in deps.foreign(target) {
            if streams[target].seen.covers(source, position) || streams[source].has_finished(position) {
                continue;
            }
            let (source_slot, target_slot) = pick_two(streams, source, target);
            let target_raw = target_slot.raw(target)?;
            Self::if_running(source_slot, |raw| self.backend.wait_for_stream(target_raw, raw))?;
            target_slot.seen.observe(source, source_slot.position, &source_slot.seen);
            self.inserted_waits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Orders `stream` after everything the accesses depend on.
    fn wait_for_dependencies(
        &self,
        state: &mut State<B>,
        stream: usize,
        accesses: &[(BufferKey, Access)],
    ) -> Result<()> {
        state.slot(stream)?.raw(stream)?;
        let deps = state.dependencies(accesses)?;
        self.order_after(&mut state.streams, stream, &deps)
    }

    /// What `command` reads and publishes: the outcomes of the versions it
    /// reads (a partial write reads what it leaves in place), and a cell for
    /// its own outcome if it writes.
    fn op_io(state: &State<B>, spans: &[(Span<BufferKey>, Access)], stream: usize) -> Result<(OpIo, Option<Error>)> {
        let mut io = OpIo::default();
        let mut writes = false;
        let mut failed = None;
        for &(span, access) in spans {
            let entry = state.entry(span.buffer)?;
            let partial = span.offset != 0 || span.len != entry.len;
            writes |= access.writes();
            if access.reads() || partial {
                if let Some(outcome) = entry.history.outcome() {
                    if failed.is_none() {
                        failed = outcome.failure().map(|cause| Error::dependency_failed(stream as u32, cause));
                    }
                    if !io.inputs.iter().any(|known| Arc::ptr_eq(known, outcome)) {
                        io.inputs.push(outcome.clone());
                    }
                }
            }
        }
        io.outcome = writes.then(|| Arc::new(OpOutcome::default()));
        Ok((io, failed))
    }

    /// Takes the boundary and admits one prepared `command` on `stream`.
    fn admit_prepared(&self, stream: usize, command: Command<BufferKey>, prepared: B::Prepared) -> Result<()> {
        // Only while an external write is in flight does admission look at what a command needs.
        let mut state = self.open_state_when(|state| state.needs_busy(stream, &command.accesses()))?;
        self.admit(&mut state, stream, command, prepared)
    }

    /// Admits a prepared `command` on `stream`: waits, enqueue and publication
    /// in one critical section. An op that reads a failed version does not
    /// run; it, and an op the backend failed, publishes failed versions.
    fn admit(
        &self,
        state: &mut State<B>,
        stream: usize,
        command: Command<BufferKey>,
        prepared: B::Prepared,
    ) -> Result<()> {
        let spans = command.spans();
        // A read's delivery shows how far its stream got, as a fence does.
        let read = match &command {
            Command::Download { sink, .. } => Some(sink.completion.clone()),
            _ => None,
        };
        let accesses: Accesses<BufferKey> = spans.iter().map(|(span, access)| (span.buffer, *access)).collect();
        // Even an op that will not run is ordered: a later writer that waits
        // for its (failed) version must also be after the readers before it.
        self.wait_for_dependencies(state, stream, &accesses)?;
        let (mut io, failed_input) = Self::op_io(state, &spans, stream)?;
        if let Some(error) = failed_input {
            return Err(self.publish_failed(state, stream, &accesses, io.outcome, error));
        }
        // Its share of the queue, given back when the backend drops `io`.
        io.credit = self.room.charge(command.host_bytes());
        let command = command.try_map(|key| state.entry(key).map(|entry| &*entry.memory))?;
        let raw = state.slot(stream)?.raw(stream)?;
        let outcome = io.outcome.clone();
        // SAFETY: the memory the command names stays alive in `state.buffers`
        // until it is released, and a released buffer's memory is freed only
        // once a signal on every stream in its history completed (`release`);
        // conflicting users were ordered by `wait_for_dependencies` above.
        let enqueued = unsafe { self.backend.enqueue(raw, command, prepared, io) };
        match enqueued {
            Ok(()) => {
                state.streams[stream].position += 1;
                self.publish(state, stream, &accesses, outcome.as_ref());
                if let Some(read) = read {
                    state.streams[stream].learn_from(&read);
                }
                Ok(())
            }
            Err(EnqueueError::Rejected(error)) => Err(error),
            Err(EnqueueError::Failed(error)) => {
                let error = error.into_op_failure(stream as u32, None);
                Err(self.publish_failed(state, stream, &accesses, outcome, error))
            }
        }
    }

    /// Admits `recording` on `stream` as one op: ordered after everything
    /// any of its ops depends on, enqueued back to back (with `commands`, the
    /// prepared ops, unless the backend keeps the recording captured), and
    /// published once with the union of their accesses.
    fn admit_as_one(
        &self,
        state: &mut State<B>,
        stream: usize,
        recording: &Recording,
        commands: Option<PreparedCommands<B>>,
    ) -> Result<()> {
        let accesses = recording.accesses();
        let inputs = recording.inputs(|key| state.entry(key).map(|entry| entry.len))?;
        self.wait_for_dependencies(state, stream, accesses)?;
        let (mut io, failed_input) = Self::op_io(state, inputs, stream)?;
        if let Some(error) = failed_input {
            return Err(self.publish_failed(state, stream, accesses, io.outcome, error));
        }
        io.credit = self.room.charge(0);
        let outcome = io.outcome.clone();
        let pairs = match commands {
            Some(commands) => commands
                .into_iter()
                .map(|(command, prepared)| {
                    command
                        .try_map(|key| state.entry(key).map(|entry| &*entry.memory))
                        .map(|command| (command, prepared))
                })
                .collect::<Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        let raw = state.slot(stream)?.raw(stream)?;
        // SAFETY: as in `admit`: the memories stay alive in `state.buffers`
        // (a graph pins them) until a signal after this op completed, and
        // every conflicting user was ordered before the replay above.
        let failure = match unsafe { self.backend.enqueue_replay(raw, recording.id(), pairs, io) } {
            Ok(()) => None,
            // Nothing of the replay was enqueued: a plain refusal.
            Err(EnqueueError::Rejected(error)) => return Err(error),
            Err(EnqueueError::Failed(error)) => Some(error),
        };
        if let Some(error) = failure {
            let error = error.into_op_failure(stream as u32, Some("replay"));
            return Err(self.publish_failed(state, stream, accesses, outcome, error));
        }
        state.streams[stream].position += 1;
        self.publish(state, stream, accesses, outcome.as_ref());
        Ok(())
    }

    /// Publishes an op that did not run as written, with `error` in every
    /// version it writes, and counts it for its stream's next fence.
    fn publish_failed(
        &self,
        state: &mut State<B>,
        stream: usize,
        accesses: &[(BufferKey, Access)],
        outcome: Option<Arc<OpOutcome>>,
        error: Error,
    ) -> Error {
        // An op refused before `op_io` (a busy or failed input) has no cell yet.
        let writes = accesses.iter().any(|(_, access)| access.writes());
        let outcome = outcome.or_else(|| writes.then(|| Arc::new(OpOutcome::default())));
        if let Some(outcome) = &outcome {
            outcome.fail(error.clone());
        }
        state.streams[stream].unreported.record(&error);
        state.streams[stream].position += 1;
        self.publish(state, stream, accesses, outcome.as_ref());
        error
    }

    fn publish(
        &self,
        state: &mut State<B>,
        stream: usize,
        accesses: &[(BufferKey, Access)],
        outcome: Option<&Arc<OpOutcome>>,
    ) {
        let at = (stream, state.streams[stream].position);
        // A build without the test hooks always publishes (the seed's bug is test support).
        #[cfg(feature = "test-support")]
        let publish_writes = self.fault != Some(Fault::KeyVersionsAtAllocation);
        #[cfg(not(feature = "test-support"))]
        let publish_writes = true;
        for &(key, access) in accesses {
            if let Some(entry) = state.buffers.get_mut(&key) {
                entry.history.publish(at, access, publish_writes, outcome);
            }
        }
        self.admitted_ops.fetch_add(1, Ordering::Relaxed);
    }
}

fn pick_two<T>(items: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    debug_assert_ne!(a, b);
    if a < b {
        let (low, high) = items.split_at_mut(b);
        (&mut low[a], &mut high[0])
    } else {
        let (low, high) = items.split_at_mut(a);
        (&mut high[0], &mut low[b])
    }
}

/// Clears an external write's reservation of its stream, also if the closure panics.
struct Reservation<'a, B: Backend> {
    scheduler: &'a Scheduler<B>,
    stream: usize,
    previous_writer: Option<(usize, usize)>,
}

impl<B: Backend> Drop for Reservation<'_, B> {
    fn drop(&mut self) {
        EXTERNAL_WRITER.with(|writer| writer.set(self.previous_writer));
        let deferred = {
            let mut state = lock(&self.scheduler.state);
            state.streams[self.stream].busy = false;
            state.busy_streams -= 1;
            std::mem::take(&mut state.deferred_releases)
        };
        self.scheduler.unbusy.notify_all();
        for key in deferred {
            self.scheduler.release(key);
        }
    }
}

impl<B: Backend> Engine for Scheduler<B> {
    fn kind(&self) -> BackendKind {
        self.backend.kind()
    }

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn kernel_language(&self) -> KernelLanguage {
        self.backend.kernel_language()
    }

    fn live(&self) -> &Arc<LiveCounters> {
        &self.live
    }

    fn new_stream(&self) -> Result<usize> {
        // The slot first: the backend stream is made knowing the index its
        // failures name. Making it can take a while (a thread, a driver
        // call), so it is made outside the boundary, the slot kept vacant
        // (no stream, nothing retiring) and out of every other's reach.
        let index = {
            let mut state = self.open_state()?;
            Self::sweep_retired(&mut state);
            state.free_slots.pop().unwrap_or_else(|| {
                state.streams.push(StreamSlot::vacant());
                state.streams.len() - 1
            })
        };
        let made = u32::try_from(index)
            .map_err(|_| Error::invalid(format!("a runtime numbers at most {} streams", u32::MAX)))
            .and_then(|number| self.backend.create_stream(number));
        let raw = match made {
            Ok(raw) => raw,
            Err(error) => {
                lock(&self.state).free_slots.push(index);
                return Err(error);
            }
        };
        // Closed or lost meanwhile: the stream goes (its slot with the runtime).
        let mut state = self.open_state()?;
        // A reused slot goes on counting from where its previous stream stopped.
        let mut slot = StreamSlot::new(raw);
        let previous = &state.streams[index];
        slot.position = previous.position;
        slot.done_up_to = previous.position;
        state.streams[index] = slot;
        Ok(index)
    }

    fn retire_stream(&self, stream: usize) {
        self.retire(stream);
    }

    fn create(&self, stream: usize, len: u64, init: Init<'_>) -> Result<BufferKey> {
        if len == 0 {
            return Err(Error::invalid("a buffer needs at least one byte"));
        }
        let max = self.info.max_buffer_bytes;
        if len > max {
            return Err(Error::invalid(format!("{len} bytes exceed the device's buffer limit of {max} bytes")));
        }
        drop(self.open_state()?);
        let span = Span { buffer: (), offset: 0, len };
        // Prepare and allocate outside the boundary: nobody can see the buffer yet.
        let initialise = match init {
            Init::Empty => None,
            Init::Zero => {
                let command = Command::Zero { dst: span };
                let prepared = self.backend.prepare(&command)?;
                Some((command, prepared))
            }
            Init::Data(bytes) => Some(self.backend.prepare_upload(span, bytes)?),
        };
        let memory = Arc::new(self.backend.allocate(len)?);
        let mut state = self.open_state_when(|state| state.is_busy(stream))?;
        let key = state.next_key;
        state.next_key += 1;
        // The stream is checked open whatever the history.
        let position = state.slot(stream)?.position;
        #[cfg(feature = "test-support")]
        let history = match self.fault {
            Some(Fault::KeyVersionsAtAllocation) => History::written_at((stream, position)),
            None => History::default(),
        };
        #[cfg(not(feature = "test-support"))]
        let history = {
            let _ = position;
            History::default()
        };
        state.buffers.insert(key, BufferEntry { memory, len, history, pins: 0, released: false });
        if let Some((command, prepared)) = initialise {
            if let Err(error) = self.admit(&mut state, stream, command.map(|()| key), prepared) {
                let entry = state.buffers.remove(&key);
                drop(state);
                drop(entry);
                return Err(error);
            }
        }
        Ok(key)
    }

    fn release(&self, key: BufferKey) {
        self.release_buffer(key);
    }

    fn submit(&self, stream: usize, command: Command<BufferKey>) -> Result<()> {
        let prepared = self.backend.prepare(&command)?;
        self.admit_prepared(stream, command, prepared)
    }

    fn submit_upload(&self, stream: usize, dst: Span<BufferKey>, bytes: &[u8]) -> Result<()> {
        let (command, prepared) = self.backend.prepare_upload(dst, bytes)?;
        self.admit_prepared(stream, command, prepared)
    }

    fn submit_host_upload(&self, stream: usize, dst: Span<BufferKey>, host: &HostBuffer) -> Result<()> {
        let (command, prepared) = self.backend.prepare_host_upload(dst, host)?;
        self.admit_prepared(stream, command, prepared)
    }

    fn host_buffer(&self, bytes: &[u8]) -> Result<HostBuffer> {
        self.backend.host_buffer(bytes)
    }

    fn staging_buffer(&self, len: usize) -> Result<HostBuffer> {
        self.backend.staging_buffer(len)
    }

    fn submit_batch(&self, stream: usize, commands: Vec<Command<BufferKey>>) -> Result<()> {
        // All prepared first: a refusal there admits none of them.
        let prepared = self.prepare_all(&commands)?;
        let mut state = self.open_state_for_all(stream, &commands)?;
        // One hand-over to the device for the whole batch, before the lock goes.
        let raw = state.slot(stream)?.raw(stream)?.clone();
        self.backend.begin_admissions(&raw);
        // Each op as if admitted alone: a failed or refused one does not stop
        // the others; the first error comes back once all are admitted.
        let mut first_error = None;
        for (command, prepared) in commands.into_iter().zip(prepared) {
            if let Err(error) = self.admit(&mut state, stream, command, prepared) {
                first_error.get_or_insert(error);
            }
        }
        let handed = self.backend.end_admissions(&raw);
        drop(state);
        match (first_error, handed) {
            (Some(error), _) | (None, Err(error)) => Err(error),
            (None, Ok(())) => Ok(()),
        }
    }

    fn replay(&self, stream: usize, recording: &Recording) -> Result<()> {
        // A backend that keeps this recording captured needs neither its
        // commands nor their preparation: the replay costs the same for any
        // number of recorded ops.
        let commands = match self.backend.prepares_replay(recording.id()) {
            true => {
                let commands = recording.commands()?;
                let prepared = self.prepare_all(&commands)?;
                Some(commands.into_iter().zip(prepared).collect())
            }
            false => None,
        };
        let mut state = self.open_state_when(|state| state.needs_busy(stream, recording.accesses()))?;
        self.admit_as_one(&mut state, stream, recording, commands)
    }

    fn forget_graph(&self, id: u64) {
        self.backend.forget_replay(id);
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn copy_from_peer(&self, stream: usize, from: &dyn Engine, src: BufferKey, dst: BufferKey) -> Result<()> {
        match from.as_any().downcast_ref::<Scheduler<B>>() {
            Some(from) => Scheduler::copy_from_peer(self, stream, from, src, dst),
            None => Err(Error::unsupported(self.backend.kind(), "a copy from a runtime of another backend")),
        }
    }

    fn collective(
        &self,
        members: &[&dyn Engine],
        slot: &CommunicatorSlot,
        collective: &crate::backend::Collective,
        parts: &[PartKeys],
    ) -> Result<()> {
        let members = members
            .iter()
            .map(|member| {
                member.as_any().downcast_ref::<Scheduler<B>>().ok_or_else(|| {
                    Error::unsupported(self.backend.kind(), "a collective over runtimes of several backends")
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if !members.first().is_some_and(|first| std::ptr::eq(*first, self)) {
            return Err(Error::internal("a collective admitted through a runtime that is not its first member"));
        }
        Scheduler::collective(&members, slot, collective, parts)
    }

    fn join_group(
        &self,
        slot: &CommunicatorSlot,
        id: &[u8; crate::backend::GROUP_ID_BYTES],
        ranks: usize,
        rank: usize,
    ) -> Result<()> {
        // A closed runtime joins nothing; joining is slow (it waits for
        // every rank), so it runs under no lock of this runtime.
        drop(self.open_state()?);
        slot.fill(B::joined_communicator(&self.backend, id, ranks, rank)?);
        Ok(())
    }

    fn pin(&self, keys: &[BufferKey]) -> Result<()> {
        let mut state = self.open_state()?;
        if keys.iter().any(|key| !state.buffers.contains_key(key)) {
            return Err(Error::internal("a buffer with a live handle has no entry"));
        }
        for key in keys {
            if let Some(entry) = state.buffers.get_mut(key) {
                entry.pins += 1;
            }
        }
        Ok(())
    }

    fn unpin(&self, keys: &[BufferKey]) {
        let mut due = Vec::new();
        {
            let mut state = lock(&self.state);
            for key in keys {
                if let Some(entry) = state.buffers.get_mut(key) {
                    entry.pins = entry.pins.saturating_sub(1);
                    if entry.pins == 0 && entry.released {
                        due.push(*key);
                    }
                }
            }
        }
        for key in due {
            self.release_buffer(key);
        }
    }

    fn fence(&self, stream: Option<usize>) -> Result<Arc<Completion>> {
        let mut state = self.open_state_when(|state| match stream {
            Some(stream) => state.is_busy(stream),
            None => true,
        })?;
        let Some(stream) = stream else {
            let fence = self.fence_locked(&state, None, SignalKind::Fence)?;
            for slot in state.streams.iter_mut().filter(|slot| slot.raw.is_some()) {
                slot.learn_from(&fence);
            }
            return Ok(fence);
        };
        let slot = state.slot(stream)?;
        let pending = slot.last_fence.as_ref().and_then(|(position, last)| {
            let last = last.upgrade()?;
            (*position == slot.position && !last.is_complete()).then_some(last)
        });
        if let Some(last) = pending {
            if slot.unreported.is_clear() {
                return Ok(last);
            }
        }
        let fence = self.fence_locked(&state, Some(stream), SignalKind::Fence)?;
        let slot = &mut state.streams[stream];
        slot.last_fence = Some((slot.position, Arc::downgrade(&fence)));
        slot.last_signal = Some(Arc::downgrade(&fence));
        slot.learn_from(&fence);
        Ok(fence)
    }

    fn timestamp(&self, stream: usize) -> Result<(Arc<Completion>, Box<dyn AnyTimestamp>, u64)> {
        let mut state = self.open_state_when(|state| state.is_busy(stream))?;
        let completion = Completion::new(1, self.live.clone());
        let taken = self.backend.timestamp(state.slot(stream)?.raw(stream)?, completion.clone())?;
        // A place of its own in the stream: a fence made after it is a new
        // fence (not a pending one it would share), so it covers the timestamp.
        let slot = &mut state.streams[stream];
        slot.position += 1;
        slot.last_signal = Some(Arc::downgrade(&completion));
        Ok((completion, Box::new(taken), slot.position))
    }

    fn is_synced(&self, stream: usize) -> bool {
        // Under the lock nothing is admitted meanwhile, so the answer holds
        // until it is released; a stream busy with an external write is not
        // done, and a failure found at admission waits for a real fence.
        let Ok(mut state) = self.open_state() else { return false };
        let Ok(slot) = state.slot(stream) else { return false };
        let ready = !slot.busy
            && slot.unreported.is_clear()
            && slot.last_signal.as_ref().and_then(std::sync::Weak::upgrade).is_none_or(|last| last.is_complete());
        if !ready {
            return false;
        }
        // A lost device fails the next sync even of a settled stream.
        if slot.settled_at == Some(slot.position) && self.backend.lost().is_none() {
            return true;
        }
        let settled = slot.raw.as_deref().is_some_and(|raw| self.backend.is_settled(raw));
        if settled {
            state.streams[stream].settled_at = Some(state.streams[stream].position);
        }
        settled
    }

    fn check_can_wait(&self, stream: Option<usize>) -> Result<()> {
        if self.runs_on_this_thread(&lock(&self.state), stream) {
            return Err(Error::invalid("a wait from inside a kernel of the stream it waits for would wait for itself"));
        }
        Ok(())
    }

    fn external(
        &self,
        stream: usize,
        accesses: &[(BufferKey, Access)],
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        let (raw, memories, reservation, io) = {
            let mut state = self.open_state_when(|state| state.needs_busy(stream, accesses))?;
            // Even an op that will not run is ordered (see `admit`).
            self.wait_for_dependencies(&mut state, stream, accesses)?;
            let spans = accesses
                .iter()
                .map(|&(key, access)| {
                    state.entry(key).map(|entry| (Span { buffer: key, offset: 0, len: entry.len }, access))
                })
                .collect::<Result<Vec<_>>>()?;
            let (io, failed_input) = Self::op_io(&state, &spans, stream)?;
            if let Some(error) = failed_input {
                return Err(self.publish_failed(&mut state, stream, accesses, io.outcome, error));
            }
            let memories = accesses
                .iter()
                .map(|&(key, access)| state.entry(key).map(|entry| (entry.memory.clone(), access)))
                .collect::<Result<Vec<_>>>()?;
            let raw = state.slot(stream)?.raw(stream)?.clone();
            // The op takes its position now; until the closure returns, every
            // call that needs this stream (to enqueue on it, record an event on
            // it or signal it) waits, so later users see the op as published.
            state.streams[stream].position += 1;
            self.publish(&mut state, stream, accesses, io.outcome.as_ref());
            state.streams[stream].busy = true;
            state.busy_streams += 1;
            let previous_writer = EXTERNAL_WRITER.with(|writer| writer.replace(Some((self.address(), stream))));
            (raw, memories, Reservation { scheduler: self, stream, previous_writer }, io)
        };
        let memories: Vec<(&B::Memory, Access)> =
            memories.iter().map(|(memory, access)| (&**memory, *access)).collect();
        let outcome = io.outcome.clone();
        // SAFETY: the memories are held alive here and in the buffers' entries
        // until released, which frees them only after a signal on this stream
        // made after this op; the op was ordered after every other user
        // above, and no other op can be enqueued on this stream meanwhile.
        let ran = unsafe { self.backend.external(&raw, &memories, io, run) };
        if let Err(error) = &ran {
            // What it writes was published as written here: its readers must
            // get this failure, not the bytes the op did not make.
            let error = error.clone().into_op_failure(stream as u32, Some("external op"));
            if let Some(outcome) = outcome {
                outcome.fail(error.clone());
            }
            lock(&self.state).streams[stream].unreported.record(&error);
        }
        drop(reservation);
        ran
    }

    #[cfg(feature = "test-support")]
    fn hold(&self, stream: usize) -> Result<Arc<Gate>> {
        let state = self.open_state_when(|state| state.is_busy(stream))?;
        let raw = state.slot(stream)?.raw(stream)?;
        let gate = Arc::new(Gate::default());
        self.backend.hold(raw, gate.clone())?;
        Ok(gate)
    }

    #[cfg(feature = "test-support")]
    fn fail_write(&self, stream: usize, buffer: BufferKey, message: &str) -> Result<()> {
        let accesses = [(buffer, Access::Write)];
        let mut state = self.open_state_when(|state| state.needs_busy(stream, &accesses))?;
        self.wait_for_dependencies(&mut state, stream, &accesses)?;
        let error = Error::OpFailed { stream: stream as u32, message: message.to_owned() };
        Err(self.publish_failed(&mut state, stream, &accesses, Some(Arc::new(OpOutcome::default())), error))
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics_now()
    }

    fn make_room(&self, when_full: WhenFull) -> Result<()> {
        // A thread that runs this runtime's work, or delivers completions,
        // could be what the queue waits on: it admits past the limit.
        self.room.make(when_full, || {
            crate::completion::on_delivery_thread() || self.runs_on_this_thread(&lock(&self.state), None)
        })
    }

    fn room(&self) -> RoomWait {
        self.room.wait()
    }

    fn queue_limit(&self) -> QueueLimit {
        self.room.limit()
    }

    fn close(&self) -> Result<()> {
        let closed = self.close_and_wait();
        self.room.close();
        closed
    }
}
