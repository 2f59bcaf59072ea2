//! How far a lane has got: the number of jobs it finished, and who waits
//! for a number (parked lanes, blocked threads).
//!
//! Built on [`super::sync`]'s primitives, so that the model check
//! (`tests/loom_progress.rs`) explores this very source under loom.

use std::task::{Poll, Waker};

use super::sync::{lock, AtomicU64, AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};

/// How far a lane has got: the number of jobs it finished.
///
/// The count is an atomic, so a lane advancing with nobody waiting for it
/// (the usual case: a stream's work runs ahead of its fences) takes no lock;
/// only waiters, parked lanes and blocked threads, share the lock.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    finished: AtomicU64,
    /// Parked lanes plus blocked threads, kept under `state`'s lock and read
    /// by an advance without it: zero, and nobody needs waking.
    waiting: AtomicUsize,
    state: Mutex<Waiting>,
    advanced: Condvar,
}

/// Who waits for a lane's progress.
#[derive(Debug, Default)]
struct Waiting {
    /// Threads blocked in [`Progress::wait_for`]: only they need the condvar
    /// (a notification is a system call even with nobody to wake).
    blocked: usize,
    /// The least count a blocked thread waits for, since the last
    /// notification: an advance short of it wakes nobody (a thread waiting
    /// for room in a long queue is not woken at every batch run).
    blocked_until: u64,
    /// Parked lanes, each with the count it waits for.
    parked: Vec<(u64, Waker)>,
}

impl Progress {
    /// Jobs finished so far, read under the lock: a job whose `finish`
    /// ([`Progress::advance_after`]) is running is waited for.
    pub(crate) fn finished(&self) -> u64 {
        let _state = lock(&self.state);
        self.count()
    }

    fn count(&self) -> u64 {
        self.finished.load(Ordering::SeqCst)
    }

    /// Counts `jobs` more jobs done.
    pub(crate) fn advance(&self, jobs: u64) {
        // A waiter counts itself (a read-modify-write), then reads the
        // count; an advance adds to the count, then reads the waiters, by a
        // read-modify-write too: of two such writes to `waiting` the later
        // reads the earlier. So either the advance reads the waiter's
        // increment (and takes the lock, which the waiter holds until it has
        // parked or sleeps on the condvar), or the waiter's increment reads
        // the advance's, which then happened before the waiter reads the
        // count, and the waiter sees its jobs done. (Plain loads on both
        // sides would need the total order of `SeqCst`, which the model
        // check cannot explore.)
        self.finished.fetch_add(jobs, Ordering::SeqCst);
        if self.waiting.fetch_add(0, Ordering::SeqCst) > 0 {
            self.wake(lock(&self.state));
        }
    }

    /// Runs `finish` and counts one more job done, as one step under the
    /// lock (`finish` must not call into this progress): a reader of the
    /// count, with the lock or without, that sees the job done sees `finish`
    /// run, and one who sees `finish`'s effect and then reads the count
    /// under the lock ([`Progress::finished`]) sees the job done.
    pub(crate) fn advance_after(&self, finish: impl FnOnce()) {
        let state = lock(&self.state);
        finish();
        self.finished.fetch_add(1, Ordering::SeqCst);
        self.wake(state);
    }

    /// Wakes the waiters the count now satisfies.
    fn wake(&self, mut state: MutexGuard<'_, Waiting>) {
        let finished = self.count();
        let mut reached = Vec::new();
        if state.parked.iter().any(|(jobs, _)| *jobs <= finished) {
            (reached, state.parked) =
                std::mem::take(&mut state.parked).into_iter().partition(|(jobs, _)| *jobs <= finished);
            self.waiting.fetch_sub(reached.len(), Ordering::SeqCst);
        }
        let blocked = state.blocked > 0 && finished >= state.blocked_until;
        if blocked {
            // Each woken thread still short of its count sets it again.
            state.blocked_until = u64::MAX;
        }
        drop(state);
        if blocked {
            self.advanced.notify_all();
        }
        reached.into_iter().for_each(|(_, waker): (u64, Waker)| waker.wake());
    }

    /// True if at least `jobs` jobs finished, read without the lock: `false`
    /// may be out of date (a job finishing now), `true` never is.
    pub(crate) fn surely_reached(&self, jobs: u64) -> bool {
        self.count() >= jobs
    }

    /// Blocks until at least `jobs` jobs finished.
    pub(crate) fn wait_for(&self, jobs: u64) {
        if self.surely_reached(jobs) {
            return;
        }
        let mut state = lock(&self.state);
        if state.blocked == 0 {
            state.blocked_until = u64::MAX;
        }
        state.blocked += 1;
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while !self.surely_reached(jobs) {
            state.blocked_until = state.blocked_until.min(jobs);
            state = self.advanced.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        state.blocked -= 1;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Ready once at least `jobs` jobs finished; else `waker` is woken then.
    pub(crate) fn poll_reached(&self, jobs: u64, waker: &Waker) -> Poll<()> {
        if self.surely_reached(jobs) {
            return Poll::Ready(());
        }
        let mut state = lock(&self.state);
        self.waiting.fetch_add(1, Ordering::SeqCst);
        if self.surely_reached(jobs) {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Poll::Ready(());
        }
        state.parked.push((jobs, waker.clone()));
        Poll::Pending
    }
}
