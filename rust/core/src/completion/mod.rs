//! The completion cell: the one primitive behind fences, reads, deferred frees
//! and cancel tokens.
//!
//! A backend's completion path (CPU worker, wgpu callback, CUDA/HIP waiter)
//! calls [`Completion::complete`] once per part it was handed. Blocked threads
//! wake at once; wakers and actions run on the delivery thread, never under
//! the lock of whoever completed the cell (see [`delivery`]). A cell that is
//! already complete answers at once, without any wake-up.

mod cell;
mod delivery;
pub(crate) mod paths;
pub(crate) mod spin;

/// The synchronisation primitives the cell is built on (`loom`'s in the model check).
mod sync {
    pub(super) use std::sync::atomic::{AtomicBool, Ordering};
    pub(super) use std::sync::{Condvar, Mutex, MutexGuard};
}

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use cell::{Cell, Registration};
pub(crate) use delivery::{deliver, flush as flush_deliveries, on_delivery_thread, release};
#[cfg(any(feature = "cuda", feature = "hip", test))]
pub(crate) use delivery::{watch, Held, Probe};

use crate::diagnostics::LiveCounters;
use crate::error::{Error, Failures, Result};

/// A one-shot completion made of `parts` signals; done when every part is.
/// The first error reported by any part wins, and the count of failed ops
/// is every part's together (a fence over several streams reports them all).
pub struct Completion {
    cell: Cell<Outcome>,
    counters: Arc<LiveCounters>,
    /// When the last part completed: what a wait that learns how long its
    /// stream's work takes counts to, not when its thread was woken.
    finished_at: OnceLock<Instant>,
}

/// The parts' outcome so far.
type Outcome = std::result::Result<(), Failures>;

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion").field("done", &self.is_complete()).finish()
    }
}

/// Adds `part` to `outcome`: the first failure stays first, every later one counts.
pub(crate) fn first_error_counting_all(outcome: &mut Outcome, part: Outcome) {
    match (&mut *outcome, part) {
        (Ok(()), Err(failures)) => *outcome = Err(failures),
        (Err(first), Err(later)) => first.add(later),
        (_, Ok(())) => {}
    }
}

/// What a waiter sees of `outcome`.
fn reported(outcome: Outcome) -> Result<()> {
    outcome.map_err(Failures::into_error)
}

thread_local! {
    /// Told as a blocking wait on this thread starts (`true`) and ends; set by
    /// a thread that runs streams' jobs (see [`on_blocking_waits`]).
    static BLOCKING_HOOK: std::cell::Cell<Option<fn(bool)>> = const { std::cell::Cell::new(None) };
}

/// Makes blocking waits on the current thread call `hook` as they start
/// (`true`) and end (`false`).
pub(crate) fn on_blocking_waits(hook: fn(bool)) {
    BLOCKING_HOOK.with(|current| current.set(Some(hook)));
}

/// Tells the calling thread's hook, if it has one, that a blocking wait
/// starts (`true`) or ended: on a thread that runs streams (a CPU pool
/// worker), its pool may start another meanwhile. Every wait of ours that
/// may block a job says so: a fence's, and a full queue's.
pub(crate) fn told_blocking(blocking: bool) {
    if let Some(hook) = BLOCKING_HOOK.with(std::cell::Cell::get) {
        hook(blocking);
    }
}

impl Completion {
    /// A completion that finishes after `parts` calls to [`Completion::complete`].
    pub(crate) fn new(parts: usize, counters: Arc<LiveCounters>) -> Arc<Self> {
        Arc::new(Completion {
            cell: Cell::new(parts, Ok(()), first_error_counting_all),
            counters,
            finished_at: OnceLock::new(),
        })
    }

    /// A completion that is already finished with `outcome`.
    pub(crate) fn finished(outcome: Result<()>, counters: Arc<LiveCounters>) -> Arc<Self> {
        let completion = Self::new(1, counters);
        completion.complete_here(outcome);
        completion
    }

    /// Reports one part done; extra calls after the last part are ignored.
    /// Wakers and actions run on the delivery thread, so the caller may hold
    /// its own locks.
    pub(crate) fn complete(&self, outcome: Result<()>) {
        self.report(outcome.map_err(Failures::from));
    }

    /// Reports one part done as [`Completion::complete`] does, with a
    /// fence's report of failed ops: their count adds to the other parts'.
    pub(crate) fn report(&self, outcome: Outcome) {
        if let Some(mut finished) = self.cell.complete(outcome) {
            let _ = self.finished_at.set(Instant::now());
            finished.settle();
            if !finished.is_empty() {
                delivery::deliver(move || finished.run());
            }
        }
    }

    /// Reports one part done and runs what it finished on the calling thread,
    /// which must hold no Weir lock and owe Weir no progress (a user's thread).
    pub(crate) fn complete_here(&self, outcome: Result<()>) {
        if let Some(finished) = self.cell.complete(outcome.map_err(Failures::from)) {
            let _ = self.finished_at.set(Instant::now());
            finished.run();
        }
    }

    /// How long after `start` the last part completed (zero if before it);
    /// `None` while parts are missing.
    pub(crate) fn finished_since(&self, start: Instant) -> Option<Duration> {
        self.finished_at.get().map(|at| at.saturating_duration_since(start))
    }

    /// True once every part completed. Never blocks.
    pub fn is_complete(&self) -> bool {
        self.cell.is_complete()
    }

    /// The outcome if complete.
    pub fn outcome(&self) -> Option<Result<()>> {
        self.cell.outcome().map(reported)
    }

    /// Blocks the calling thread until complete.
    pub fn wait(&self) -> Result<()> {
        // Unbounded, the cell's wait returns only once complete.
        let outcome = self.cell.wait(None, |blocking| self.blocking(blocking));
        outcome.map_or_else(|| Err(Error::internal("a completion's wait ended before it completed")), reported)
    }

    /// Blocks the calling thread until complete or until `most` has passed;
    /// true if complete. Woken by the completing thread itself.
    pub(crate) fn wait_at_most(&self, most: Duration) -> bool {
        self.cell.wait(Some(most), |blocking| self.blocking(blocking)).is_some()
    }

    /// Told as a blocking wait on the calling thread starts and ends.
    fn blocking(&self, blocking: bool) {
        told_blocking(blocking);
        self.count(if blocking { Registration::Added } else { Registration::Removed });
    }

    /// Runs `action` with the outcome once complete, on the wake thread (at
    /// once there if already complete). It must be quick and must not block.
    pub(crate) fn then(&self, action: impl FnOnce(&Result<()>) + Send + 'static) {
        let action = move |outcome: &Outcome| action(&reported(outcome.clone()));
        if let Some((action, outcome)) = self.cell.then(Box::new(action)) {
            delivery::deliver(move || action(&outcome));
        }
    }

    /// The outcome as its parts brought it (the failures, counted), if complete.
    pub(crate) fn failures(&self) -> Option<Outcome> {
        self.cell.outcome()
    }

    /// Runs `settle` with the outcome as its parts brought it (the failures,
    /// counted) once complete, on the completing thread, or at once if
    /// complete: for what only settles Weir's own state (a part of another
    /// completion, a tally), taking no lock but its own, so that nothing it
    /// settles waits for the wake thread.
    pub(crate) fn then_settle(&self, settle: impl FnOnce(&Outcome) + Send + 'static) {
        if let Some((settle, outcome)) = self.cell.then_at_once(Box::new(settle)) {
            settle(&outcome);
        }
    }

    /// Drops `owned` (memory, a retired stream) once complete, on the release
    /// thread, where driver calls delay no wake-up.
    pub(crate) fn then_release<T: Send + 'static>(&self, owned: T, after: impl FnOnce() + Send + 'static) {
        self.then(move |_| {
            delivery::release(move || {
                drop(owned);
                after();
            })
        });
    }

    fn count(&self, registration: Registration) {
        match registration {
            Registration::Added => self.counters.waiters.fetch_add(1, Ordering::SeqCst),
            Registration::Removed => self.counters.waiters.fetch_sub(1, Ordering::SeqCst),
            Registration::Unchanged => 0,
        };
    }

    /// Polls for completion, registering `cx`'s waker in `slot` while pending.
    pub(crate) fn poll_wait(&self, cx: &mut Context<'_>, slot: &mut Option<usize>) -> Poll<Result<()>> {
        let (poll, registration) = self.cell.poll(cx, slot);
        self.count(registration);
        poll.map(reported)
    }

    /// Drops the waker registered in `slot`, if any (a future dropped mid-wait).
    pub(crate) fn forget_waker(&self, slot: &mut Option<usize>) {
        let registration = self.cell.forget(slot);
        self.count(registration);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_wait_ends_when_the_cell_completes_or_its_time_is_up() {
        let counters = Arc::new(LiveCounters::default());
        let completion = Completion::new(1, counters.clone());
        let start = Instant::now();
        assert!(!completion.wait_at_most(Duration::from_millis(20)), "nothing completed it");
        assert!(start.elapsed() >= Duration::from_millis(20), "it waited its time");
        assert_eq!(counters.waiters.load(Ordering::SeqCst), 0, "the waiter is counted off");
        let completer = completion.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            completer.complete(Ok(()));
        });
        let start = Instant::now();
        assert!(completion.wait_at_most(Duration::from_secs(30)), "the completion ended it");
        assert!(start.elapsed() < Duration::from_secs(10), "woken by the completion, not by the time");
        let _ = thread.join();
        assert_eq!(counters.waiters.load(Ordering::SeqCst), 0);
    }
}
