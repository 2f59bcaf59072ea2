//! The model check of a lane's progress: every interleaving of a thread
//! that counts jobs done against threads that wait for a count, blocked or
//! parked, explored by loom over the real source (`backend/progress.rs`).
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p weir-core --no-default-features --test loom_progress --release
//! ```
//!
//! An advance takes no lock while nobody waits; each model asserts, in every
//! interleaving, that no wake-up is lost for it: a blocked `wait_for`
//! returns (loom fails a model that deadlocks), a parked lane is woken once
//! its count is reached, and a job counted with a `finish` is never seen
//! done before that `finish` ran.
#![cfg(loom)]

#[path = "support/loom_sync.rs"]
mod sync;

#[path = "support/counting_waker.rs"]
mod counting_waker;
#[path = "../src/backend/progress.rs"]
mod progress;

use std::task::Poll;

use counting_waker::Counter;
use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;
use progress::Progress;
use sync::Ordering::SeqCst;

/// A thread that counts two jobs done, one at a time.
fn advancing_twice(progress: &Arc<Progress>) -> thread::JoinHandle<()> {
    let progress = progress.clone();
    thread::spawn(move || {
        progress.advance(1);
        progress.advance(1);
    })
}

/// A thread blocked for a count returns once another counts the jobs.
#[test]
fn a_blocked_wait_returns_once_the_jobs_are_counted() {
    loom::model(|| {
        let progress = Arc::new(Progress::default());
        let advancer = advancing_twice(&progress);
        progress.wait_for(2);
        assert!(progress.surely_reached(2));
        advancer.join().unwrap();
        assert_eq!(progress.finished(), 2);
    });
}

/// Two threads blocked for different counts each return once theirs is
/// counted: an advance wakes the blocked only once it reaches the least
/// count among them, and the one still short of its count is woken later.
/// Three threads, explored up to two preemptions (unbounded, a quarter
/// hour): the lost wake-up it guards against, a woken thread still short of
/// its count that does not register it again, deadlocks within that bound.
#[test]
fn blocked_waits_for_different_counts_each_return() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let progress = Arc::new(Progress::default());
        let first = {
            let progress = progress.clone();
            thread::spawn(move || progress.wait_for(1))
        };
        let advancer = advancing_twice(&progress);
        progress.wait_for(2);
        first.join().unwrap();
        advancer.join().unwrap();
        assert_eq!(progress.finished(), 2);
    });
}

/// A lane that parks on a count is woken exactly once when it is reached,
/// or sees it reached as it polls.
#[test]
fn a_parked_lane_is_woken_once_its_count_is_reached() {
    loom::model(|| {
        let progress = Arc::new(Progress::default());
        let advancer = {
            let progress = progress.clone();
            thread::spawn(move || progress.advance(1))
        };
        let (counter, waker) = Counter::new();
        let parked = progress.poll_reached(1, &waker).is_pending();
        advancer.join().unwrap();
        let wakes = counter.wakes();
        match parked {
            true => assert_eq!(wakes, 1, "a parked lane is woken once its count is reached"),
            false => assert_eq!(wakes, 0, "a lane that saw its count reached is not woken"),
        }
        assert_eq!(progress.poll_reached(1, &waker), Poll::Ready(()));
    });
}

/// A job counted with its `finish` (a CPU read's copy) is seen done, with
/// the lock or without, only once the finish ran.
#[test]
fn a_job_counted_with_a_finish_is_seen_done_only_after_it() {
    loom::model(|| {
        let progress = Arc::new(Progress::default());
        let finished = Arc::new(AtomicBool::new(false));
        let advancer = {
            let (progress, finished) = (progress.clone(), finished.clone());
            thread::spawn(move || progress.advance_after(|| finished.store(true, SeqCst)))
        };
        if progress.surely_reached(1) {
            assert!(finished.load(SeqCst), "seen done without the lock before its finish ran");
        }
        if progress.finished() == 1 {
            assert!(finished.load(SeqCst), "seen done under the lock before its finish ran");
        }
        advancer.join().unwrap();
        assert!(finished.load(SeqCst) && progress.surely_reached(1));
    });
}
