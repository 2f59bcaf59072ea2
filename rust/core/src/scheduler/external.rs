//! External writes: a closure run on the calling thread with raw access to
//! buffers, its stream reserved meanwhile so that every later user sees its
//! op as published.

use std::sync::Arc;

use super::state::State;
use super::{BufferKey, Engine, Scheduler};
use crate::backend::{Backend, OpOutcome, RawAccess, Span};
use crate::error::{Error, Result};
use crate::kernel::Access;
use crate::lock::lock;

thread_local! {
    /// The schedulers (by address) and streams whose external writes run on
    /// this thread, innermost last: a closure may make an external write on
    /// another runtime, and a call from inside that one may need any of them.
    static EXTERNAL_WRITERS: std::cell::RefCell<Vec<(usize, usize)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The innermost external write running on this thread whose scheduler
/// (by address) `of` accepts, as (scheduler, stream): a call made from
/// inside its closure that waits for it would wait for itself.
pub(super) fn running_write(of: impl Fn(usize) -> bool) -> Option<(usize, usize)> {
    EXTERNAL_WRITERS.with(|writers| writers.borrow().iter().rev().find(|&&(engine, _)| of(engine)).copied())
}

/// Clears an external write's reservation of its stream, also if the closure panics.
struct Reservation<'a, B: Backend> {
    scheduler: &'a Scheduler<B>,
    stream: usize,
    /// The op's outcome, which its writes were published with.
    outcome: Option<Arc<OpOutcome>>,
}

impl<B: Backend> Reservation<'_, B> {
    /// The closure failed: what it writes was published as written, so its
    /// readers must get this failure, not the bytes the op did not make;
    /// and the stream's next fence reports it.
    fn fail(&self, state: &State<B>, error: &Error) {
        let error = error.clone().into_op_failure(self.stream as u32, Some("external op"));
        if let Some(outcome) = &self.outcome {
            outcome.fail(error.clone());
        }
        // The runtime may have closed meanwhile (closing a lost one waits for no closure): its streams are gone.
        if let Some(slot) = state.streams.get(self.stream) {
            slot.unreported.record(&error);
        }
    }
}

impl<B: Backend> Drop for Reservation<'_, B> {
    fn drop(&mut self) {
        EXTERNAL_WRITERS.with(|writers| writers.borrow_mut().pop());
        let deferred = {
            let mut state = lock(&self.scheduler.state);
            if std::thread::panicking() {
                self.fail(&state, &Error::internal("the external op's closure panicked"));
            }
            if let Some(slot) = state.streams.get_mut(self.stream) {
                slot.busy = false;
            }
            state.busy_streams = state.busy_streams.saturating_sub(1);
            std::mem::take(&mut state.deferred_releases)
        };
        self.scheduler.unbusy.notify_all();
        for key in deferred {
            self.scheduler.release(key);
        }
    }
}

impl<B: Backend> Scheduler<B> {
    /// Runs `run` as an external op on `stream` over `accesses` (see [`Engine::external`]).
    pub(super) fn run_external(
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
            let (mut io, failed_input) = Self::op_io(&state, &spans, stream)?;
            if let Some(error) = failed_input {
                return Err(self.publish_failed(&mut state, stream, accesses, io.outcome, error));
            }
            // Counted in the queue as any op is, until the backend has it.
            io.credit = self.room.charge(0);
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
            EXTERNAL_WRITERS.with(|writers| writers.borrow_mut().push((self.address(), stream)));
            let outcome = io.outcome.clone();
            (raw, memories, Reservation { scheduler: self, stream, outcome }, io)
        };
        let memories: Vec<(&B::Memory, Access)> =
            memories.iter().map(|(memory, access)| (&**memory, *access)).collect();
        // SAFETY: the memories are held alive here and in the buffers' entries
        // until released, which frees them only after a signal on this stream
        // made after this op; the op was ordered after every other user
        // above, and no other op can be enqueued on this stream meanwhile.
        let ran = unsafe { self.backend.external(&raw, &memories, io, run) };
        if let Err(error) = &ran {
            reservation.fail(&lock(&self.state), error);
        }
        drop(reservation);
        ran
    }
}
