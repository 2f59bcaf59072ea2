//! When a lane's signal completes: once the submission that covers it is
//! done and the reads issued before it delivered ([`PendingSignal`]), in
//! issue order as far as anyone can see ([`Submissions`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::completion::Completion;
use crate::error::Failures;
use crate::lock::lock;

/// A signal waiting for its submission and for the reads before it.
pub(crate) struct PendingSignal {
    parts: AtomicUsize,
    completion: Arc<Completion>,
    status: Result<(), Failures>,
}

impl PendingSignal {
    /// A signal completing `completion` with `status` once `parts` parts are done.
    pub fn new(parts: usize, completion: Arc<Completion>, status: Result<(), Failures>) -> Arc<PendingSignal> {
        Arc::new(PendingSignal { parts: AtomicUsize::new(parts), completion, status })
    }

    /// One of its parts is done; the last one completes the signal.
    pub fn part_done(&self) {
        if self.parts.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.completion.report(self.status.clone());
        }
    }
}

/// How far the device got, as the lanes know it: the highest submission known
/// done, and the signals still waiting for theirs, in issue order.
///
/// Work-done callbacks and read map callbacks both learn that a submission is
/// done, from different polls in no order between them. Whoever learns it
/// first finishes every signal waiting for that submission or an earlier one,
/// and only then raises the count: a signal that finds the count covering it
/// completes at once, and must not complete before an earlier one whose
/// callback has not run yet (a runtime fence resolving while the drain of a
/// stream dropped before it still waits, and the stream still counts live).
#[derive(Default)]
pub(crate) struct Submissions {
    completed: AtomicU64,
    waiting: Mutex<VecDeque<(u64, Arc<PendingSignal>)>>,
}

impl Submissions {
    /// The highest submission known done.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::SeqCst)
    }

    /// Submission `submission`, and every one before it, is done.
    pub fn done(&self, submission: u64) {
        // Under the lock, so that no one sees the count raised before the
        // signals it covers finished. Finishing one only completes a cell,
        // whose wakers run on the delivery thread, not here.
        let mut waiting = lock(&self.waiting);
        waiting.retain(|(upto, join)| {
            let due = *upto <= submission;
            if due {
                join.part_done();
            }
            !due
        });
        self.completed.fetch_max(submission, Ordering::SeqCst);
    }

    /// Finishes the device part of `join` once `submission` is done: at once if it already is.
    pub fn wait_for(&self, submission: u64, join: Arc<PendingSignal>) {
        let mut waiting = lock(&self.waiting);
        // Raised meanwhile: the signals before this one were finished first.
        if self.completed() >= submission {
            join.part_done();
        } else {
            waiting.push_back((submission, join));
        }
    }

    /// Finishes the device part of `join` if it still waits (its callback was
    /// dropped uncalled: its submission is done, but the count stays as it is).
    pub fn give_up(&self, join: &Arc<PendingSignal>) {
        let mut waiting = lock(&self.waiting);
        if let Some(at) = waiting.iter().position(|(_, waiter)| Arc::ptr_eq(waiter, join)) {
            if let Some((_, join)) = waiting.remove(at) {
                join.part_done();
            }
        }
    }
}
