//! Stream slots: what the scheduler knows of each stream (its position, what
//! it has waited for, what is known finished), and of a retired stream
//! whose work may still run.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::clock::VectorClock;
use crate::backend::{Backend, FailureTally};
use crate::completion::Completion;
use crate::error::{Error, Result};

/// A stream whose last handle went: its backend stream drops once `done`.
pub(super) struct Retired<B: Backend> {
    pub(super) done: Arc<Completion>,
    /// The backend stream until the release thread drops it (once `done`):
    /// meanwhile a dependent records an event on it, and a fence signals it,
    /// as on any stream, so no wait runs through the wake thread.
    pub(super) raw: std::sync::Weak<B::Stream>,
    /// The failures `done` completes with are taken: by a runtime fence,
    /// or into the runtime's tally as the slot is swept (see
    /// `Scheduler::retire`), whichever comes first.
    pub(super) claimed: AtomicBool,
}

impl<B: Backend> Retired<B> {
    /// True for the first caller: the failures `done` brings are its to report.
    pub(super) fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::SeqCst)
    }

    /// Runs `f` on the backend stream unless it was dropped already (which
    /// happens only once its work is done); the handle taken for it may be
    /// the last, so it drops on the release thread.
    pub(super) fn with_stream<T>(&self, f: impl FnOnce(&B::Stream) -> T) -> Option<T> {
        let raw = self.raw.upgrade()?;
        let outcome = f(&raw);
        crate::completion::release(move || drop(raw));
        Some(outcome)
    }
}

pub(super) struct StreamSlot<B: Backend> {
    /// The backend stream; `None` once retired.
    pub(super) raw: Option<Arc<B::Stream>>,
    /// Ops admitted so far; the last op's position. A reused slot goes on
    /// counting from where its previous stream stopped.
    pub(super) position: u64,
    /// Positions up to here belong to earlier streams of this slot, whose work
    /// is all done: nothing waits for them.
    pub(super) done_up_to: u64,
    pub(super) seen: VectorClock,
    /// Ops that failed at admission, for the stream's next fence.
    pub(super) unreported: FailureTally,
    /// An external write's closure is running on this stream.
    pub(super) busy: bool,
    pub(super) retired: Option<Retired<B>>,
    /// The latest fence's completion and the position it covers: a fence
    /// made while it is pending, with nothing admitted since, is the same
    /// fence (ten thousand awaits of one point cost one device event).
    pub(super) last_fence: Option<(u64, std::sync::Weak<Completion>)>,
    /// The latest fence's or timestamp's completion. The device may finish
    /// before the completion is delivered: until it is, the stream is not
    /// synced, so that after a sync every earlier fence and timestamp says
    /// it is complete.
    pub(super) last_signal: Option<std::sync::Weak<Completion>>,
    /// The position at which the backend last said the stream was settled:
    /// with nothing admitted since, it still is, and asking again (a driver
    /// call on CUDA) can be skipped.
    pub(super) settled_at: Option<u64>,
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
    pub(super) fn new(raw: B::Stream) -> Self {
        StreamSlot { raw: Some(Arc::new(raw)), ..Self::vacant() }
    }

    /// A slot whose stream is being made: no stream, nothing retiring.
    pub(super) fn vacant() -> Self {
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
    pub(super) fn has_finished(&mut self, position: u64) -> bool {
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
    pub(super) fn learn_from(&mut self, completion: &Arc<Completion>) {
        if self.recent_completions.len() == RECENT_COMPLETIONS {
            // The oldest goes; if it is done already, it still teaches.
            if let Some((covers, oldest)) = self.recent_completions.pop_front() {
                learnt(&mut self.finished, covers, &oldest);
            }
        }
        self.recent_completions.push_back((self.position, completion.clone()));
    }

    pub(super) fn raw(&self, index: usize) -> Result<&Arc<B::Stream>> {
        self.raw.as_ref().ok_or_else(|| Error::internal(format!("stream {index} was retired under a live handle")))
    }
}
