//! The scheduler and the state behind its ordering boundary: buffer entries,
//! stream slots and the rest, under one lock per runtime, and how a call
//! takes that lock (open, and past any external write it needs).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::external::running_write;
use super::streams::StreamSlot;
use super::versions::{Dependencies, History};
use super::BufferKey;
use crate::backend::{Backend, Command, FailureTally};
use crate::completion::spin::SpinPolicy;
use crate::completion::Completion;
use crate::device::DeviceInfo;
use crate::diagnostics::LiveCounters;
use crate::error::{Error, Result};
use crate::kernel::Access;
use crate::lock::lock;
use crate::options::{Fault, QueueLimit};
use crate::room::Room;
use rustc_hash::FxHashMap;

pub(super) struct BufferEntry<M> {
    pub(super) memory: Arc<M>,
    pub(super) len: u64,
    pub(super) history: History,
    /// Recorded graphs that name the buffer: it stays while any does.
    pub(super) pins: u32,
    /// Its last handle went while pinned: released once unpinned.
    pub(super) released: bool,
}

pub(super) struct State<B: Backend> {
    /// Set by the first `close()`; completes once teardown is over.
    pub(super) closed: Option<Arc<Completion>>,
    pub(super) streams: Vec<StreamSlot<B>>,
    pub(super) buffers: FxHashMap<BufferKey, BufferEntry<B::Memory>>,
    pub(super) next_key: BufferKey,
    /// Streams with an external write in flight.
    pub(super) busy_streams: usize,
    /// Releases that arrived while a stream they need was busy.
    pub(super) deferred_releases: Vec<BufferKey>,
    /// Retired streams whose work may still be running.
    pub(super) retiring: Vec<usize>,
    /// Slots of retired streams whose work is done, for new streams: clocks
    /// and slot lists then grow with the streams alive, not ever made.
    pub(super) free_slots: Vec<usize>,
    /// The stream that carries this runtime's side of its outgoing peer
    /// copies (see `peer`), once there was one.
    pub(super) link: Option<usize>,
    /// Released buffers a stream could not signal for (a broken stream on a
    /// device not lost): their memory is kept until the runtime goes.
    pub(super) held: Vec<Arc<Completion>>,
    /// Failures of retired streams that no fence of theirs reported: the
    /// runtime's next fence reports them (see `Scheduler::retire`).
    pub(super) orphaned: FailureTally,
}

impl<B: Backend> State<B> {
    pub(super) fn slot(&self, stream: usize) -> Result<&StreamSlot<B>> {
        self.streams.get(stream).ok_or_else(|| Error::internal(format!("no stream {stream}")))
    }

    pub(super) fn entry(&self, key: BufferKey) -> Result<&BufferEntry<B::Memory>> {
        self.buffers.get(&key).ok_or_else(|| Error::internal("a buffer with a live handle has no entry"))
    }

    pub(super) fn is_busy(&self, stream: usize) -> bool {
        self.streams.get(stream).is_some_and(|slot| slot.busy)
    }

    /// The foreign dependencies of `accesses` for an op on `stream`.
    pub(super) fn dependencies(&self, accesses: &[(BufferKey, Access)]) -> Result<Dependencies> {
        let mut deps = Dependencies::default();
        for &(key, access) in accesses {
            self.entry(key)?.history.dependencies(access, &mut deps);
        }
        Ok(deps)
    }

    /// True when an op on `stream` over `accesses` needs a stream whose
    /// external write is in flight.
    pub(super) fn needs_busy(&self, stream: usize, accesses: &[(BufferKey, Access)]) -> bool {
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

/// The scheduler over one backend.
pub(crate) struct Scheduler<B: Backend> {
    pub(super) backend: Arc<B>,
    pub(super) info: DeviceInfo,
    /// How long a stream fence's wait may spin before it parks.
    /// How a stream fence's wait watches it: each stream has a renewed copy.
    pub(super) fence_waits: SpinPolicy,
    pub(super) live: Arc<LiveCounters>,
    pub(super) inserted_waits: AtomicU64,
    pub(super) admitted_ops: AtomicU64,
    pub(super) retiring_buffers: Arc<AtomicU64>,
    /// The bound on queued work and those waiting for it.
    pub(super) room: Arc<Room>,
    /// A deliberate bug (test support: a build without the hooks has none to check).
    #[cfg(feature = "test-support")]
    pub(super) fault: Option<Fault>,
    pub(super) state: Mutex<State<B>>,
    /// Signalled when an external write's closure returns.
    pub(super) unbusy: Condvar,
}

impl<B: Backend> Scheduler<B> {
    pub fn new(backend: B, queue_limit: QueueLimit, fence_waits: SpinPolicy, fault: Option<Fault>) -> Result<Self> {
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
            fence_waits,
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
                buffers: FxHashMap::default(),
                next_key: 1,
                busy_streams: 0,
                deferred_releases: Vec::new(),
                retiring: Vec::new(),
                free_slots: Vec::new(),
                link: None,
                held: Vec::new(),
                orphaned: FailureTally::default(),
            }),
            unbusy: Condvar::new(),
        })
    }

    /// True when the calling thread runs the work of `stream` (or of any
    /// stream): a wait there for it would wait for itself.
    pub(super) fn runs_on_this_thread(&self, state: &State<B>, stream: Option<usize>) -> bool {
        let own = |slot: &StreamSlot<B>| slot.raw.as_deref().is_some_and(|raw| self.backend.is_current_thread(raw));
        match stream {
            Some(stream) => state.streams.get(stream).is_some_and(own),
            None => state.streams.iter().any(own),
        }
    }

    pub(super) fn address(&self) -> usize {
        self as *const Self as usize
    }

    /// The state of an open runtime on a device that is not lost.
    pub(super) fn open_state(&self) -> Result<MutexGuard<'_, State<B>>> {
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
    pub(super) fn open_state_when(&self, blocked: impl Fn(&State<B>) -> bool) -> Result<MutexGuard<'_, State<B>>> {
        let mut state = self.open_state()?;
        let mut waiting = WaitingForWrites::default();
        while state.busy_streams > 0 && blocked(&state) {
            if let Some((_, stream)) = running_write(|engine| engine == self.address()) {
                return Err(Error::invalid(format!(
                    "this call needs stream {stream}, whose external write is the closure it was made from"
                )));
            }
            waiting.waiting();
            state = self.unbusy.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
            if state.closed.is_some() {
                return Err(Error::Closed);
            }
        }
        Ok(state)
    }

    /// The state, open, once no stream any of `commands` on `stream` needs
    /// is busy with an external write (see [`Scheduler::open_state_when`]).
    pub(super) fn open_state_for_all(
        &self,
        stream: usize,
        commands: &[Command<BufferKey>],
    ) -> Result<MutexGuard<'_, State<B>>> {
        self.open_state_when(|state| commands.iter().any(|command| state.needs_busy(stream, &command.accesses())))
    }
}

/// A thread that waits for an external write to end (this runtime's, or
/// another's for peer copies and collectives): told to the CPU pool once,
/// as fence waits are, so that a CPU kernel waiting so leaves a worker for
/// the write's own work (queued behind the waiting kernels, it could find
/// none). Told done on drop.
#[derive(Default)]
pub(super) struct WaitingForWrites(bool);

impl WaitingForWrites {
    pub(super) fn waiting(&mut self) {
        if !std::mem::replace(&mut self.0, true) {
            crate::completion::told_blocking(true);
        }
    }
}

impl Drop for WaitingForWrites {
    fn drop(&mut self) {
        if self.0 {
            crate::completion::told_blocking(false);
        }
    }
}
