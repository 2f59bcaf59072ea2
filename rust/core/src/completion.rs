//! The completion cell: the one primitive behind fences, reads and deferred frees.
//!
//! A backend's completion path (CPU worker, wgpu callback, CUDA/HIP waiter) calls
//! [`Completion::complete`] once per part it was handed; waiters either block on
//! a condvar or register a waker. A cell that is already complete answers at
//! once, without any wake-up.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::error::Result;

/// Locks a mutex, ignoring poisoning: every critical section in Weir leaves its
/// data consistent before anything that can panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Live-object counters of one runtime, for leak tests and diagnostics.
#[derive(Debug, Default)]
pub struct LiveCounters {
    pub(crate) fences: AtomicUsize,
    pub(crate) waiters: AtomicUsize,
}

impl LiveCounters {
    /// Fence handles alive now.
    pub fn fences(&self) -> usize {
        self.fences.load(Ordering::SeqCst)
    }
    /// Registered wakers plus threads blocked in a wait, now.
    pub fn waiters(&self) -> usize {
        self.waiters.load(Ordering::SeqCst)
    }
}

struct State {
    parts_left: usize,
    outcome: Result<()>,
    wakers: Vec<Option<Waker>>,
    free_slots: Vec<usize>,
}

/// A one-shot completion made of `parts` signals; done when every part is.
/// The first error reported by any part wins.
pub struct Completion {
    done: AtomicBool,
    state: Mutex<State>,
    finished: Condvar,
    counters: Arc<LiveCounters>,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion").field("done", &self.is_complete()).finish()
    }
}

impl Completion {
    /// A completion that finishes after `parts` calls to [`Completion::complete`].
    pub fn new(parts: usize, counters: Arc<LiveCounters>) -> Arc<Self> {
        Arc::new(Completion {
            done: AtomicBool::new(parts == 0),
            state: Mutex::new(State { parts_left: parts, outcome: Ok(()), wakers: Vec::new(), free_slots: Vec::new() }),
            finished: Condvar::new(),
            counters,
        })
    }

    /// A completion that is already finished with `outcome`.
    pub fn finished(outcome: Result<()>, counters: Arc<LiveCounters>) -> Arc<Self> {
        let completion = Self::new(1, counters);
        completion.complete(outcome);
        completion
    }

    /// Reports one part done. Called by backends from their completion path.
    /// Extra calls after the last part are ignored.
    pub fn complete(&self, outcome: Result<()>) {
        let wakers = {
            let mut state = lock(&self.state);
            if state.parts_left == 0 {
                return;
            }
            if let (Ok(()), Err(error)) = (&state.outcome, outcome) {
                state.outcome = Err(error);
            }
            state.parts_left -= 1;
            if state.parts_left > 0 {
                return;
            }
            self.done.store(true, Ordering::Release);
            state.free_slots.clear();
            std::mem::take(&mut state.wakers)
        };
        self.finished.notify_all();
        // Wake outside the lock: a waker may poll the future right away.
        for waker in wakers.into_iter().flatten() {
            waker.wake();
        }
    }

    /// True once every part completed. Never blocks.
    pub fn is_complete(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The outcome if complete.
    pub fn outcome(&self) -> Option<Result<()>> {
        if !self.is_complete() {
            return None;
        }
        Some(lock(&self.state).outcome.clone())
    }

    /// Blocks the calling thread until complete.
    pub fn wait(&self) -> Result<()> {
        let mut state = lock(&self.state);
        if state.parts_left > 0 {
            self.counters.waiters.fetch_add(1, Ordering::SeqCst);
            while state.parts_left > 0 {
                state = self.finished.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            self.counters.waiters.fetch_sub(1, Ordering::SeqCst);
        }
        state.outcome.clone()
    }

    /// Polls for completion, registering `cx`'s waker in `slot` while pending.
    pub(crate) fn poll_wait(&self, cx: &mut Context<'_>, slot: &mut Option<usize>) -> Poll<Result<()>> {
        if self.is_complete() {
            self.forget_waker(slot);
            return Poll::Ready(lock(&self.state).outcome.clone());
        }
        let mut state = lock(&self.state);
        if state.parts_left == 0 {
            if slot.take().is_some() {
                self.counters.waiters.fetch_sub(1, Ordering::SeqCst);
            }
            return Poll::Ready(state.outcome.clone());
        }
        match *slot {
            Some(index) => match &mut state.wakers[index] {
                Some(waker) => waker.clone_from(cx.waker()),
                entry => *entry = Some(cx.waker().clone()),
            },
            None => {
                let waker = Some(cx.waker().clone());
                let index = match state.free_slots.pop() {
                    Some(index) => {
                        state.wakers[index] = waker;
                        index
                    }
                    None => {
                        state.wakers.push(waker);
                        state.wakers.len() - 1
                    }
                };
                *slot = Some(index);
                self.counters.waiters.fetch_add(1, Ordering::SeqCst);
            }
        }
        Poll::Pending
    }

    /// Drops the waker registered in `slot`, if any (a future dropped mid-wait).
    pub(crate) fn forget_waker(&self, slot: &mut Option<usize>) {
        let Some(index) = slot.take() else { return };
        self.counters.waiters.fetch_sub(1, Ordering::SeqCst);
        let mut state = lock(&self.state);
        if state.parts_left == 0 {
            return;
        }
        if let Some(entry) = state.wakers.get_mut(index) {
            *entry = None;
            state.free_slots.push(index);
        }
    }
}
