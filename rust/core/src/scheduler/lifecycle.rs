//! Streams, memory and the runtime itself: how each is retired.
//!
//! - A stream whose last handle went is signalled; its backend stream drops
//!   on the release thread once that work is done. Until then, streams that
//!   depend on it record events on it and fences signal it as before; its slot
//!   is then reused by a new stream, which counts positions on from it.
//! - A released buffer's memory is freed by the completion of a signal on
//!   every stream in its history: when its last use completes, with no
//!   further call.
//! - `close()` marks the runtime closed, drains every stream, drops the
//!   backend streams, then the memory; every caller returns after that.
//! - Dropping the last handle drains and tears down the same way on a thread
//!   of its own, so no dropping thread (a JVM cleaner, a Swift `deinit`, a CPU
//!   worker whose kernel held the last handle) waits for device work.

use smallvec::{smallvec, SmallVec};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::state::{BufferEntry, State};
use super::streams::{Retired, StreamSlot};
use super::{BufferKey, Scheduler};
use crate::backend::{Backend, SignalKind};
use crate::completion::{flush_deliveries, on_delivery_thread, Completion};
use crate::diagnostics::Diagnostics;
use crate::error::{Error, Failures, Result};
use crate::lock::lock;

impl<B: Backend> Scheduler<B> {
    /// Retires `stream` (see the module doc). The default stream lives as long as the runtime.
    pub(super) fn retire(&self, stream: usize) {
        if stream == 0 {
            return;
        }
        let mut state = lock(&self.state);
        Self::sweep_retired(&mut state);
        if state.closed.is_some() {
            return;
        }
        let Some(slot) = state.streams.get_mut(stream) else { return };
        let Some(raw) = slot.raw.take() else { return };
        // Failures no fence of the stream reported go to the runtime's next
        // fence: those found at admission now; those found as its ops ran
        // through its last signal, which takes them once its work is done:
        // the next runtime fence, or the sweep of its slot, claims them.
        let unreported = slot.unreported.take();
        let done = Completion::new(1, self.live.clone());
        if self.backend.signal(&raw, done.clone(), SignalKind::Retire).is_err() {
            // A broken stream: drop it at once, its work will not finish anyway.
            done.complete(Ok(()));
        }
        slot.retired = Some(Retired { done: done.clone(), raw: Arc::downgrade(&raw), claimed: AtomicBool::new(false) });
        if let Err(failures) = unreported {
            state.orphaned.add(failures);
        }
        state.retiring.push(stream);
        drop(state);
        done.then_release(raw, || {});
    }

    /// Frees the slots of retired streams whose work is done.
    pub(super) fn sweep_retired(state: &mut State<B>) {
        let State { streams, retiring, free_slots, orphaned, .. } = state;
        retiring.retain(|&stream| {
            let slot = &mut streams[stream];
            let Some(retired) = slot.retired.as_mut() else { return false };
            if !retired.done.is_complete() {
                return true;
            }
            if retired.claim() {
                if let Some(Err(failures)) = retired.done.failures() {
                    orphaned.add(failures);
                }
            }
            // Its work is done: nothing will wait for it again, so what it had
            // seen can go, and a new stream can take the slot.
            slot.retired = None;
            slot.seen = Default::default();
            slot.done_up_to = slot.position;
            free_slots.push(stream);
            false
        });
    }

    /// Adds one part to `done` for `stream`'s work so far.
    fn signal_into(&self, slot: &StreamSlot<B>, done: &Arc<Completion>, kind: SignalKind) -> Result<()> {
        match (&slot.raw, &slot.retired) {
            (Some(raw), _) => self.backend.signal(raw, done.clone(), kind),
            (None, Some(retired)) => {
                retired.with_stream(|raw| self.backend.signal(raw, done.clone(), kind)).unwrap_or_else(|| {
                    // Dropped: it is dropped only once its work is done.
                    done.complete(Ok(()));
                    Ok(())
                })
            }
            (None, None) => {
                done.complete(Ok(()));
                Ok(())
            }
        }
    }

    /// Frees `key`'s memory once every stream that used it is done with it.
    pub(super) fn release_buffer(&self, key: BufferKey) {
        let mut state = lock(&self.state);
        let Some(entry) = state.buffers.get_mut(&key) else { return };
        if entry.pins > 0 {
            // A recorded graph names it: it goes when the last such graph does.
            entry.released = true;
            return;
        }
        let Some(entry) = state.buffers.get(&key) else { return };
        if entry.history.streams().any(|stream| state.is_busy(stream)) {
            // An external write on a stream it needs is in flight (perhaps the
            // closure dropped this very buffer): release it when that returns.
            state.deferred_releases.push(key);
            return;
        }
        let Some(BufferEntry { memory, history, .. }) = state.buffers.remove(&key) else { return };
        // Uses by an earlier stream of a reused slot are done already.
        let mut users: Vec<usize> = history
            .uses()
            .filter(|&(stream, position)| position > state.streams[stream].done_up_to)
            .map(|(stream, _)| stream)
            .collect();
        users.sort_unstable();
        users.dedup();
        if users.is_empty() {
            drop(state);
            drop(memory);
            return;
        }
        let done = Completion::new(users.len(), self.live.clone());
        let retiring = self.retiring_buffers.clone();
        retiring.fetch_add(1, Ordering::SeqCst);
        // Registered before any part can complete, so it runs exactly once.
        done.then_release(memory, move || {
            retiring.fetch_sub(1, Ordering::SeqCst);
        });
        let mut unsignalled = 0;
        for stream in users {
            if self.signal_into(&state.streams[stream], &done, SignalKind::Drain).is_err() {
                unsignalled += 1;
            }
        }
        if unsignalled == 0 {
            return;
        }
        if self.backend.lost().is_some() {
            // Nothing runs on a lost device: the parts no stream will
            // complete are complete, and the memory goes on the release
            // thread, counted, as any other.
            drop(state);
            for _ in 0..unsignalled {
                done.complete(Ok(()));
            }
        } else {
            // A broken stream keeps the memory until the runtime goes: better
            // a leak than a free under work that may still run.
            state.held.push(done);
        }
    }

    /// A completion of all work admitted on `stream` (or every stream) so far;
    /// a fence also reports the failures since each stream's previous fence.
    pub(super) fn fence_locked(
        &self,
        state: &State<B>,
        stream: Option<usize>,
        kind: SignalKind,
    ) -> Result<Arc<Completion>> {
        // Inline for one stream: a stream's fence allocates nothing here.
        let targets: SmallVec<[usize; 1]> = match stream {
            Some(stream) => state.slot(stream).map(|_| smallvec![stream])?,
            None => (0..state.streams.len())
                .filter(|&index| {
                    let slot = &state.streams[index];
                    slot.raw.is_some() || slot.retired.as_ref().is_some_and(|retired| !retired.done.is_complete())
                })
                .collect(),
        };
        // Failures found at admission travel in one extra part per stream; the
        // fence still resolves only after the work queued before it.
        let reports = kind == SignalKind::Fence;
        let mut failed: SmallVec<[Failures; 1]> = if reports {
            targets.iter().filter_map(|&stream| state.streams[stream].unreported.take().err()).collect()
        } else {
            SmallVec::new()
        };
        // A runtime fence also reports what retired streams left: what
        // reached the runtime's tally, and what a retiring stream's last
        // signal will bring, in a part that waits for it.
        let mut claimed: SmallVec<[Arc<Completion>; 1]> = SmallVec::new();
        if reports && stream.is_none() {
            failed.extend(state.orphaned.take().err());
            let retired = state.streams.iter().filter_map(|slot| slot.retired.as_ref());
            claimed.extend(retired.filter(|retired| retired.claim()).map(|retired| retired.done.clone()));
        }
        let done = Completion::new(targets.len() + failed.len() + claimed.len(), self.live.clone());
        for failures in failed {
            done.report(Err(failures));
        }
        for retired in claimed {
            let part = done.clone();
            retired.then_settle(move |outcome| part.report(outcome.clone()));
        }
        for stream in targets {
            self.signal_into(&state.streams[stream], &done, kind)?;
        }
        Ok(done)
    }

    pub(super) fn diagnostics_now(&self) -> Diagnostics {
        // Let frees and stream drops already due run first, so counts are settled.
        flush_deliveries();
        let mut state = lock(&self.state);
        Self::sweep_retired(&mut state);
        let live_streams = state.streams.iter().filter(|slot| slot.raw.is_some()).count();
        let (ops_in_queue, host_bytes_in_queue) = self.room.queued();
        Diagnostics {
            backend: self.backend.counters(),
            live_fences: self.live.fences() as u64,
            live_waiters: self.live.waiters() as u64,
            live_buffers: state.buffers.len() as u64,
            retiring_buffers: self.retiring_buffers.load(Ordering::SeqCst),
            live_streams: live_streams as u64,
            retiring_streams: state.retiring.len() as u64,
            inserted_waits: self.inserted_waits.load(Ordering::Relaxed),
            admitted_ops: self.admitted_ops.load(Ordering::Relaxed),
            ops_in_queue,
            host_bytes_in_queue,
            peak_ops_in_queue: self.room.peak_ops(),
        }
    }

    /// `close()`: the first caller tears down; every caller returns after that.
    pub(super) fn close_and_wait(&self) -> Result<()> {
        let (closed, drained) = {
            // Closing a lost runtime is how its user lets go of it.
            let mut state = self.open_state_when(|state| state.busy_streams > 0).or_else(|error| match error {
                Error::Closed | Error::DeviceLost { .. } => Ok(lock(&self.state)),
                other => Err(other),
            })?;
            // Before waiting for another caller's close too: it drains this
            // very kernel, so waiting for it would be waiting for itself.
            if self.runs_on_this_thread(&state, None) {
                return Err(Error::invalid("close() from inside a kernel of this runtime would wait for itself"));
            }
            if let Some(closed) = &state.closed {
                let closed = closed.clone();
                drop(state);
                return closed.wait();
            }
            // Nothing runs on a lost device any more: there is nothing to drain.
            let drained = match self.fence_locked(&state, None, SignalKind::Drain) {
                Err(_) if self.backend.lost().is_some() => Completion::finished(Ok(()), self.live.clone()),
                drained => drained?,
            };
            let closed = Completion::new(1, self.live.clone());
            state.closed = Some(closed.clone());
            (closed, drained)
        };
        self.unbusy.notify_all();
        // Per-stream errors were reported to their fences; this only drains.
        let _ = drained.wait();
        let state = std::mem::replace(&mut *lock(&self.state), State::closed_with(closed.clone()));
        Self::tear_down(state);
        closed.complete_here(Ok(()));
        Ok(())
    }

    /// Drops what a drained runtime holds: streams first, then memory.
    fn tear_down(state: State<B>) {
        let State { streams, buffers, held, .. } = state;
        drop(streams);
        drop(buffers);
        drop(held);
        // Frees and stream drops already handed to the delivery thread.
        if !on_delivery_thread() {
            flush_deliveries();
        }
    }
}

impl<B: Backend> State<B> {
    fn closed_with(closed: Arc<Completion>) -> Self {
        State {
            closed: Some(closed),
            streams: Vec::new(),
            buffers: Default::default(),
            next_key: 0,
            busy_streams: 0,
            deferred_releases: Vec::new(),
            retiring: Vec::new(),
            free_slots: Vec::new(),
            link: None,
            held: Vec::new(),
            orphaned: Default::default(),
        }
    }
}

impl<B: Backend> Drop for Scheduler<B> {
    /// The last handle went: drain and tear down in the background (see the module doc).
    fn drop(&mut self) {
        let state = std::mem::replace(
            &mut *lock(&self.state),
            State::closed_with(Completion::finished(Ok(()), self.live.clone())),
        );
        if state.closed.is_some() {
            return;
        }
        let drained = Completion::new(state.streams.len(), self.live.clone());
        for slot in &state.streams {
            if self.signal_into(slot, &drained, SignalKind::Drain).is_err() {
                drained.complete(Ok(()));
            }
        }
        // The backend (device, context) outlives its streams and memory.
        let backend = self.backend.clone();
        let tear_down = move || {
            let _ = drained.wait();
            Self::tear_down(state);
            drop(backend);
        };
        // Without a thread to spare, the refused closure drops here: the
        // streams then drain as they drop, on this thread, rather than leak.
        let _ = std::thread::Builder::new().name("weir-teardown".to_owned()).spawn(tear_down);
    }
}
