//! The scheduler: admission under one ordering boundary per runtime.
//!
//! Every op is admitted while holding the runtime's state lock: its
//! dependencies are read from the buffers' version histories, the minimal
//! cross-stream waits are inserted, the op is enqueued at its position and
//! every buffer it touches is published at that position — all before the
//! lock is released. The lock is never held while waiting for the device.

mod clock;
mod versions;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use clock::VectorClock;
use versions::{Dependencies, History};

use crate::backend::{Backend, Command, Gate, RawAccess, Span};
use crate::completion::{lock, Completion, LiveCounters};
use crate::error::{Error, Result};
use crate::kernel::Access;
use crate::runtime::{BackendKind, DeviceInfo, Diagnostics};

/// Names a buffer inside one runtime. Keys are never reused.
pub(crate) type BufferKey = u64;

/// How a new buffer starts.
pub(crate) enum Init {
    /// No definition: contents unspecified until written.
    Empty,
    /// Zero-filled on the device, no host data involved.
    Zero,
    /// Host bytes uploaded.
    Data(Vec<u8>),
}

/// A deliberate scheduler bug, for tests that prove the suite catches it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Versions are keyed on the allocation position and writes publish
    /// nothing: the CubeCL write-cursor bug.
    KeyVersionsAtAllocation,
}

/// The runtime as the public handles see it, whatever the backend.
pub(crate) trait Engine: Send + Sync {
    fn kind(&self) -> BackendKind;
    fn info(&self) -> DeviceInfo;
    fn live(&self) -> &Arc<LiveCounters>;
    fn new_stream(&self) -> Result<usize>;
    fn create(&self, stream: usize, len: u64, init: Init) -> Result<BufferKey>;
    fn release(&self, buffer: BufferKey);
    fn submit(&self, stream: usize, command: Command<BufferKey>) -> Result<()>;
    fn fence(&self, stream: Option<usize>) -> Result<Arc<Completion>>;
    fn external_write(
        &self,
        stream: usize,
        buffers: &[BufferKey],
        write: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()>;
    fn hold(&self, stream: usize) -> Result<Arc<Gate>>;
    fn diagnostics(&self) -> Diagnostics;
    fn close(&self) -> Result<()>;
}

struct StreamSlot<S> {
    raw: S,
    /// Ops admitted so far; the last op's position.
    position: u64,
    seen: VectorClock,
    /// First enqueue failure: sticky.
    poisoned: Option<Error>,
}

struct BufferEntry<M> {
    memory: M,
    history: History,
}

struct State<B: Backend> {
    closed: bool,
    streams: Vec<StreamSlot<B::Stream>>,
    buffers: HashMap<BufferKey, BufferEntry<B::Memory>, BuildHasherDefault<KeyHasher>>,
    /// Memory of released buffers, freed once every stream that used it is done.
    retiring: Vec<(B::Memory, Arc<Completion>)>,
    next_key: BufferKey,
}

impl<B: Backend> State<B> {
    fn slot(&self, stream: usize) -> Result<&StreamSlot<B::Stream>> {
        self.streams.get(stream).ok_or_else(|| Error::invalid(format!("no stream {stream}")))
    }

    fn entry(&self, key: BufferKey) -> Result<&BufferEntry<B::Memory>> {
        self.buffers.get(&key).ok_or_else(|| Error::invalid("buffer was released"))
    }
}

/// The scheduler over one backend.
pub(crate) struct Scheduler<B: Backend> {
    backend: B,
    info: DeviceInfo,
    live: Arc<LiveCounters>,
    inserted_waits: AtomicU64,
    admitted_ops: AtomicU64,
    fault: Option<Fault>,
    state: Mutex<State<B>>,
}

impl<B: Backend> Scheduler<B> {
    pub fn new(backend: B, fault: Option<Fault>) -> Result<Self> {
        let default_stream = backend.create_stream()?;
        Ok(Scheduler {
            info: backend.info(),
            backend,
            live: Arc::new(LiveCounters::default()),
            inserted_waits: AtomicU64::new(0),
            admitted_ops: AtomicU64::new(0),
            fault,
            state: Mutex::new(State {
                closed: false,
                streams: vec![StreamSlot {
                    raw: default_stream,
                    position: 0,
                    seen: VectorClock::default(),
                    poisoned: None,
                }],
                buffers: HashMap::default(),
                retiring: Vec::new(),
                next_key: 1,
            }),
        })
    }

    fn open_state(&self) -> Result<std::sync::MutexGuard<'_, State<B>>> {
        let state = lock(&self.state);
        if state.closed {
            return Err(Error::Closed);
        }
        Ok(state)
    }

    /// Makes `target` wait for every foreign dependency it has not yet seen.
    fn order_after(&self, streams: &mut [StreamSlot<B::Stream>], target: usize, deps: &Dependencies) -> Result<()> {
        for (source, position) in deps.foreign(target) {
            if streams[target].seen.covers(source, position) {
                continue;
            }
            let (source_slot, target_slot) = pick_two(streams, source, target);
            let event = self.backend.record_event(&source_slot.raw)?;
            self.backend.wait_event(&target_slot.raw, &event)?;
            target_slot.seen.observe(source, source_slot.position, &source_slot.seen);
            self.inserted_waits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Checks that `stream` takes work, then orders it after everything the
    /// accesses depend on.
    fn wait_for_dependencies(
        &self,
        state: &mut State<B>,
        stream: usize,
        accesses: &[(BufferKey, Access)],
    ) -> Result<()> {
        if let Some(error) = &state.slot(stream)?.poisoned {
            return Err(error.clone());
        }
        let mut deps = Dependencies::default();
        for &(key, access) in accesses {
            state.entry(key)?.history.dependencies(access, &mut deps);
        }
        self.order_after(&mut state.streams, stream, &deps)
    }

    /// Admits `command` on `stream`: waits, enqueue and publication in one critical section.
    fn admit(&self, state: &mut State<B>, stream: usize, command: Command<BufferKey>) -> Result<()> {
        let accesses: Vec<(BufferKey, Access)> = command.accesses();
        self.wait_for_dependencies(state, stream, &accesses)?;
        let command = command.try_map(|key| state.entry(key).map(|entry| &entry.memory))?;
        let enqueued = self.backend.enqueue(&state.streams[stream].raw, command);
        let slot = &mut state.streams[stream];
        if let Err(error) = enqueued {
            // Bad input leaves the stream usable; anything else failed the op on it.
            let error = match error {
                Error::InvalidArgument(_) | Error::Unsupported { .. } | Error::OutOfRange { .. } => error,
                Error::OpFailed { .. } => error,
                other => Error::OpFailed { stream: stream as u32, message: other.to_string() },
            };
            if let Error::OpFailed { .. } = error {
                slot.poisoned = Some(error.clone());
            }
            return Err(error);
        }
        slot.position += 1;
        self.publish(state, stream, &accesses);
        Ok(())
    }

    fn publish(&self, state: &mut State<B>, stream: usize, accesses: &[(BufferKey, Access)]) {
        let at = (stream, state.streams[stream].position);
        let publish_writes = self.fault != Some(Fault::KeyVersionsAtAllocation);
        for &(key, access) in accesses {
            if let Some(entry) = state.buffers.get_mut(&key) {
                entry.history.publish(at, access, publish_writes);
            }
        }
        self.admitted_ops.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes out the retiring memory whose users are all done.
    fn sweep(state: &mut State<B>) -> Vec<B::Memory> {
        let mut freed = Vec::new();
        let mut index = 0;
        while index < state.retiring.len() {
            if state.retiring[index].1.is_complete() {
                freed.push(state.retiring.swap_remove(index).0);
            } else {
                index += 1;
            }
        }
        freed
    }
}

/// Buffer keys are distinct counters chosen by the scheduler, not by users, so
/// a multiplicative hash spreads them well without SipHash's cost.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
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

impl<B: Backend> Engine for Scheduler<B> {
    fn kind(&self) -> BackendKind {
        self.backend.kind()
    }

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn live(&self) -> &Arc<LiveCounters> {
        &self.live
    }

    fn new_stream(&self) -> Result<usize> {
        let mut state = self.open_state()?;
        let raw = self.backend.create_stream()?;
        state.streams.push(StreamSlot { raw, position: 0, seen: VectorClock::default(), poisoned: None });
        Ok(state.streams.len() - 1)
    }

    fn create(&self, stream: usize, len: u64, init: Init) -> Result<BufferKey> {
        if len == 0 {
            return Err(Error::invalid("a buffer needs at least one byte"));
        }
        let max = self.info.max_buffer_bytes;
        if len > max {
            return Err(Error::invalid(format!("{len} bytes exceed the device's buffer limit of {max} bytes")));
        }
        drop(self.open_state()?);
        // Allocation happens outside the boundary: nobody can see the buffer yet.
        let memory = self.backend.allocate(len)?;
        let mut state = self.open_state()?;
        let freed = Self::sweep(&mut state);
        let key = state.next_key;
        state.next_key += 1;
        let slot = state.slot(stream)?;
        let history = match self.fault {
            Some(Fault::KeyVersionsAtAllocation) => History::written_at((stream, slot.position)),
            None => History::default(),
        };
        state.buffers.insert(key, BufferEntry { memory, history });
        let span = Span { buffer: key, offset: 0, len };
        let initialise = match init {
            Init::Empty => None,
            Init::Zero => Some(Command::Zero { dst: span }),
            Init::Data(data) => Some(Command::Upload { dst: span, data }),
        };
        if let Some(command) = initialise {
            if let Err(error) = self.admit(&mut state, stream, command) {
                let entry = state.buffers.remove(&key);
                drop(state);
                drop(entry);
                return Err(error);
            }
        }
        drop(state);
        drop(freed);
        Ok(key)
    }

    fn release(&self, key: BufferKey) {
        let mut state = lock(&self.state);
        let mut freed = Self::sweep(&mut state);
        if let Some(entry) = state.buffers.remove(&key) {
            let users: Vec<usize> = entry.history.streams().collect();
            if users.is_empty() {
                freed.push(entry.memory);
            } else {
                let done = Completion::new(users.len(), self.live.clone());
                for stream in users {
                    if let Err(error) = self.backend.signal(&state.streams[stream].raw, done.clone()) {
                        // The stream is broken; keep the memory until the runtime goes.
                        state.streams[stream].poisoned.get_or_insert(error);
                    }
                }
                state.retiring.push((entry.memory, done));
            }
        }
        drop(state);
        drop(freed);
    }

    fn submit(&self, stream: usize, command: Command<BufferKey>) -> Result<()> {
        let mut state = self.open_state()?;
        self.admit(&mut state, stream, command)
    }

    fn fence(&self, stream: Option<usize>) -> Result<Arc<Completion>> {
        let state = self.open_state()?;
        let targets: Vec<usize> = match stream {
            Some(stream) => state.slot(stream).map(|_| vec![stream])?,
            None => (0..state.streams.len()).collect(),
        };
        // A poisoned stream's fence still resolves only after the work queued on
        // it, then reports the poison: one extra part carries the error.
        let poisoned = targets.iter().filter(|&&stream| state.streams[stream].poisoned.is_some()).count();
        let done = Completion::new(targets.len() + poisoned, self.live.clone());
        for stream in targets {
            let slot = &state.streams[stream];
            if let Some(error) = &slot.poisoned {
                done.complete(Err(error.clone()));
            }
            self.backend.signal(&slot.raw, done.clone())?;
        }
        Ok(done)
    }

    fn external_write(
        &self,
        stream: usize,
        buffers: &[BufferKey],
        write: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut state = self.open_state()?;
        let accesses: Vec<(BufferKey, Access)> = buffers.iter().map(|&key| (key, Access::Write)).collect();
        self.wait_for_dependencies(&mut state, stream, &accesses)?;
        let memories =
            buffers.iter().map(|&key| state.entry(key).map(|entry| &entry.memory)).collect::<Result<Vec<_>>>()?;
        let outcome = self.backend.external_write(&state.streams[stream].raw, &memories, write);
        // Whatever the closure managed to enqueue is now ordered before later users.
        state.streams[stream].position += 1;
        self.publish(&mut state, stream, &accesses);
        outcome
    }

    fn hold(&self, stream: usize) -> Result<Arc<Gate>> {
        let state = self.open_state()?;
        let slot = state.slot(stream)?;
        let gate = Arc::new(Gate::default());
        self.backend.hold(&slot.raw, gate.clone())?;
        Ok(gate)
    }

    fn diagnostics(&self) -> Diagnostics {
        let state = lock(&self.state);
        Diagnostics {
            backend: self.backend.counters(),
            live_fences: self.live.fences() as u64,
            live_waiters: self.live.waiters() as u64,
            live_buffers: state.buffers.len() as u64,
            retiring_buffers: state.retiring.len() as u64,
            inserted_waits: self.inserted_waits.load(Ordering::Relaxed),
            admitted_ops: self.admitted_ops.load(Ordering::Relaxed),
        }
    }

    fn close(&self) -> Result<()> {
        let drained = {
            let mut state = lock(&self.state);
            if state.closed {
                return Ok(());
            }
            let done = Completion::new(state.streams.len(), self.live.clone());
            for slot in &state.streams {
                if self.backend.signal(&slot.raw, done.clone()).is_err() {
                    done.complete(Ok(()));
                }
            }
            state.closed = true;
            done
        };
        // Wait outside the boundary; per-stream errors were reported to their fences.
        let _ = drained.wait();
        let (streams, buffers, retiring) = {
            let mut state = lock(&self.state);
            (
                std::mem::take(&mut state.streams),
                std::mem::take(&mut state.buffers),
                std::mem::take(&mut state.retiring),
            )
        };
        drop(buffers);
        drop(retiring);
        drop(streams);
        Ok(())
    }
}
