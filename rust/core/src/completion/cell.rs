//! The completion cell's state machine, apart from how its wake-ups are run.
//!
//! [`Cell::complete`] settles the cell and wakes blocked threads at once, but
//! it never runs a waker or an action: it hands them back as [`Finished`], so
//! that the caller runs them after releasing every guard it holds (or gives
//! them to the delivery thread). That split is what lets a woken task call
//! straight back into Weir, and what the loom model checks: this file builds
//! against `std::sync` in the library and against `loom::sync` in the model.

use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::sync::{AtomicBool, Condvar, Mutex, MutexGuard, Ordering};

/// Work to run once the cell completes, with its outcome.
pub(crate) type Action<T> = Box<dyn FnOnce(&T) + Send>;

struct State<T> {
    parts_left: usize,
    outcome: T,
    wakers: Vec<Option<Waker>>,
    free_slots: Vec<usize>,
    actions: Vec<Action<T>>,
    /// Actions that only settle Weir's own state: run by whoever completes
    /// the cell, at once (see [`Cell::then_at_once`]).
    settles: Vec<Action<T>>,
    /// Threads blocked in [`Cell::wait`]: only they need the condvar (a
    /// notification is a system call even with nobody to wake).
    blocked: usize,
}

/// A one-shot completion made of `parts` signals, done when every part is.
/// The outcome is `T`'s first "failure" as judged by the `merge` function.
pub(crate) struct Cell<T> {
    done: AtomicBool,
    state: Mutex<State<T>>,
    finished: Condvar,
    merge: fn(&mut T, T),
}

/// What a completion left to run: wakers to wake and actions to call, outside
/// every lock.
#[must_use = "wakers and actions run only when the finished set is run"]
pub(crate) struct Finished<T> {
    outcome: T,
    wakers: Vec<Waker>,
    actions: Vec<Action<T>>,
    settles: Vec<Action<T>>,
}

impl<T> Finished<T> {
    /// True when there is nothing to run.
    pub(crate) fn is_empty(&self) -> bool {
        self.wakers.is_empty() && self.actions.is_empty() && self.settles.is_empty()
    }

    /// Runs the actions that only settle Weir's state (see
    /// [`Cell::then_at_once`]), on the calling thread, whatever it holds.
    pub(crate) fn settle(&mut self) {
        for settle in std::mem::take(&mut self.settles) {
            settle(&self.outcome);
        }
    }

    /// Settles, wakes every waker, then runs every action, on the calling thread.
    pub(crate) fn run(mut self) {
        self.settle();
        for waker in self.wakers {
            waker.wake();
        }
        for action in self.actions {
            action(&self.outcome);
        }
    }
}

/// What a poll registered or dropped, for the waiter count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Registration {
    Unchanged,
    Added,
    Removed,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<T: Clone> Cell<T> {
    /// A cell done after `parts` completions, starting from `outcome`; `merge`
    /// folds each part's outcome into the running one.
    pub(crate) fn new(parts: usize, outcome: T, merge: fn(&mut T, T)) -> Self {
        Cell {
            done: AtomicBool::new(parts == 0),
            state: Mutex::new(State {
                parts_left: parts,
                outcome,
                wakers: Vec::new(),
                free_slots: Vec::new(),
                actions: Vec::new(),
                settles: Vec::new(),
                blocked: 0,
            }),
            finished: Condvar::new(),
            merge,
        }
    }

    /// Reports one part done. On the last part, wakes blocked threads and
    /// returns the wakers and actions to run; extra calls return `None`.
    pub(crate) fn complete(&self, outcome: T) -> Option<Finished<T>> {
        let mut state = lock(&self.state);
        if state.parts_left == 0 {
            return None;
        }
        (self.merge)(&mut state.outcome, outcome);
        state.parts_left -= 1;
        if state.parts_left > 0 {
            return None;
        }
        self.done.store(true, Ordering::Release);
        state.free_slots.clear();
        let finished = Finished {
            outcome: state.outcome.clone(),
            wakers: std::mem::take(&mut state.wakers).into_iter().flatten().collect(),
            actions: std::mem::take(&mut state.actions),
            settles: std::mem::take(&mut state.settles),
        };
        let blocked = state.blocked > 0;
        drop(state);
        if blocked {
            self.finished.notify_all();
        }
        Some(finished)
    }

    /// True once every part completed. Never blocks.
    pub(crate) fn is_complete(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The outcome if complete.
    pub(crate) fn outcome(&self) -> Option<T> {
        self.is_complete().then(|| lock(&self.state).outcome.clone())
    }

    /// Blocks until complete, or until `most` has passed if given; the
    /// outcome if complete. `blocking` is told before and after the thread
    /// blocks.
    pub(crate) fn wait(&self, most: Option<Duration>, mut blocking: impl FnMut(bool)) -> Option<T> {
        let mut state = lock(&self.state);
        if state.parts_left > 0 && most != Some(Duration::ZERO) {
            blocking(true);
            state.blocked += 1;
            // An unbounded wait reads no clock.
            let deadline = most.map(|most| Instant::now() + most);
            while state.parts_left > 0 {
                let Some(deadline) = deadline else {
                    state = self.finished.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
                    continue;
                };
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                state = self.finished.wait_timeout(state, left).unwrap_or_else(|poisoned| poisoned.into_inner()).0;
            }
            state.blocked -= 1;
            blocking(false);
        }
        (state.parts_left == 0).then(|| state.outcome.clone())
    }

    /// Runs `action` once complete: returns it to the caller if the cell
    /// already is (so the caller runs it, outside its locks), else keeps it
    /// for the completing part's [`Finished`].
    pub(crate) fn then(&self, action: Action<T>) -> Option<(Action<T>, T)> {
        self.keep(action, |state| &mut state.actions)
    }

    /// As [`Cell::then`], for an action that only settles Weir's own state
    /// (another cell, a tally) and takes no lock but theirs: whoever
    /// completes the cell runs it at once, not on the delivery thread, so
    /// that a wait there for what it settles cannot wait for itself.
    pub(crate) fn then_at_once(&self, action: Action<T>) -> Option<(Action<T>, T)> {
        self.keep(action, |state| &mut state.settles)
    }

    /// Keeps `action` in the list `kept` picks, unless the cell is complete:
    /// then hands it back with the outcome.
    fn keep(&self, action: Action<T>, kept: fn(&mut State<T>) -> &mut Vec<Action<T>>) -> Option<(Action<T>, T)> {
        let mut state = lock(&self.state);
        if state.parts_left == 0 {
            return Some((action, state.outcome.clone()));
        }
        kept(&mut state).push(action);
        None
    }

    /// Polls for completion, registering `cx`'s waker in `slot` while pending.
    pub(crate) fn poll(&self, cx: &mut Context<'_>, slot: &mut Option<usize>) -> (Poll<T>, Registration) {
        if self.is_complete() {
            let removed = self.forget(slot);
            return (Poll::Ready(lock(&self.state).outcome.clone()), removed);
        }
        let mut state = lock(&self.state);
        if state.parts_left == 0 {
            // Completed between the check and the lock: its wakers were taken.
            let removed = if slot.take().is_some() { Registration::Removed } else { Registration::Unchanged };
            return (Poll::Ready(state.outcome.clone()), removed);
        }
        match *slot {
            Some(index) => {
                match &mut state.wakers[index] {
                    Some(waker) => waker.clone_from(cx.waker()),
                    entry => *entry = Some(cx.waker().clone()),
                }
                (Poll::Pending, Registration::Unchanged)
            }
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
                (Poll::Pending, Registration::Added)
            }
        }
    }

    /// Drops the waker registered in `slot`, if any (a future dropped mid-wait).
    pub(crate) fn forget(&self, slot: &mut Option<usize>) -> Registration {
        let Some(index) = slot.take() else { return Registration::Unchanged };
        let mut state = lock(&self.state);
        if state.parts_left > 0 {
            if let Some(entry) = state.wakers.get_mut(index) {
                *entry = None;
                state.free_slots.push(index);
            }
        }
        Registration::Removed
    }
}
