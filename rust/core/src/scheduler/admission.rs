//! Admission: an op ordered after what it depends on (the minimal
//! cross-stream waits), enqueued at its position and published in the
//! versions of every buffer it touches, all in one critical section.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::state::State;
use super::streams::StreamSlot;
use super::versions::Dependencies;
use super::{BufferKey, Recording, Scheduler};
use crate::backend::{Accesses, Backend, Command, EnqueueError, OpIo, OpOutcome, Span};
use crate::error::{Error, Result};
use crate::kernel::Access;
#[cfg(feature = "test-support")]
use crate::options::Fault;

/// A recording's commands, each with what the backend prepared for it.
type PreparedCommands<B> = Vec<(Command<BufferKey>, <B as Backend>::Prepared)>;

impl<B: Backend> Scheduler<B> {
    /// Every command prepared, or the first refusal.
    pub(super) fn prepare_all(&self, commands: &[Command<BufferKey>]) -> Result<Vec<B::Prepared>> {
        commands.iter().map(|command| self.backend.prepare(command)).collect()
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
    pub(super) fn event_after(&self, slot: &StreamSlot<B>) -> Result<Option<B::Event>> {
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
    pub(super) fn wait_for_dependencies(
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
    pub(super) fn op_io(
        state: &State<B>,
        spans: &[(Span<BufferKey>, Access)],
        stream: usize,
    ) -> Result<(OpIo, Option<Error>)> {
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
    pub(super) fn admit_prepared(
        &self,
        stream: usize,
        command: Command<BufferKey>,
        prepared: B::Prepared,
    ) -> Result<()> {
        // Only while an external write is in flight does admission look at what a command needs.
        let mut state = self.open_state_when(|state| state.needs_busy(stream, &command.accesses()))?;
        self.admit(&mut state, stream, command, prepared)
    }

    /// Admits a prepared `command` on `stream`: waits, enqueue and publication
    /// in one critical section. An op that reads a failed version does not
    /// run; it, and an op the backend failed, publishes failed versions.
    pub(super) fn admit(
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
        // By push: a collect into a small vector takes its generic path, some 60 instructions more an op.
        let mut accesses = Accesses::new();
        for (span, access) in &spans {
            accesses.push((span.buffer, *access));
        }
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
    pub(super) fn admit_as_one(
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
    pub(super) fn publish_failed(
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

    pub(super) fn publish(
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
