//! The model check of a lane: every interleaving of threads that push jobs,
//! run the lane and wake it, explored by loom over the real source
//! (`backend/lane.rs`, on `backend/progress.rs`).
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p weir-core --no-default-features --test loom_lane --release
//! ```
//!
//! The lane's rules, each checked in every interleaving: every job pushed
//! runs exactly once and in push order; a lane with jobs is never left
//! with no thread to run it (a push racing the end of a run, a wake racing
//! the park of the job it wakes, a wait for another lane polled where it
//! is pushed as that lane gets there, a batch deferred and resumed); and its
//! progress counts every job run. The runner here runs a scheduled lane at
//! once on the scheduling thread, as the wgpu lanes and a GPU issuer with
//! no thread to be had do, so every thread of a model may run the lane.
#![cfg(loom)]
// The lane's source serves every engine; each model uses part of it.
#![allow(dead_code)]

#[path = "support/loom_sync.rs"]
mod sync;

/// The parts of the crate `lane.rs` names that no model uses.
mod completion {
    pub(crate) mod spin {
        use std::time::Instant;

        /// A lane of these models has no gaps to learn (`Lane::new(.., None)`).
        pub(crate) struct SpinPolicy;

        impl SpinPolicy {
            pub(crate) fn learn(&self, _start: Instant) {}
            pub(crate) fn is_quick(&self) -> bool {
                false
            }
            pub(crate) fn spin_as_recent(&self, _start: Instant, _done: impl FnMut() -> bool) -> bool {
                false
            }
        }
    }
}

mod diagnostics {
    #[derive(Default)]
    pub(crate) struct Counters {
        pub(crate) live_events: std::sync::atomic::AtomicU64,
    }
}

#[path = "../src/backend/lane.rs"]
mod lane;
#[path = "../src/backend/progress.rs"]
mod progress;

use std::sync::Arc;
use std::task::{Poll, Waker};

use lane::{Lane, Ran, Runner, Step};
use loom::sync::Mutex;
use loom::thread;
use sync::lock;

/// A gate as a test holds a stream: a job polls it, its opener wakes the poller.
#[derive(Default)]
struct Gate {
    state: Mutex<(bool, Option<Waker>)>,
}

impl Gate {
    fn open(&self) {
        let waker = {
            let mut state = lock(&self.state);
            state.0 = true;
            state.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn poll_open(&self, waker: &Waker) -> Poll<()> {
        let mut state = lock(&self.state);
        if state.0 {
            return Poll::Ready(());
        }
        state.1 = Some(waker.clone());
        Poll::Pending
    }
}

/// Jobs that log their number, or hold the lane at a gate.
#[derive(Default)]
struct Logged {
    log: Mutex<Vec<u32>>,
}

enum Job {
    Log(u32),
    Held(Arc<Gate>),
}

impl Runner for Logged {
    type Job = Job;
    // Short turns: a lane fed past one goes back in line, here on the same thread.
    const TURN: usize = 2;

    fn run(lane: &Arc<Lane<Self>>, job: Job) -> Ran<Job> {
        match job {
            Job::Log(number) => lock(&lane.runner.log).push(number),
            Job::Held(gate) => {
                if gate.poll_open(&lane.waker()).is_pending() {
                    return Ran::Parked(Job::Held(gate));
                }
            }
        }
        lane.progress.advance(1);
        Ran::Done
    }

    fn schedule(lane: Arc<Lane<Self>>) {
        lane.run_jobs();
    }
}

fn log(lane: &Lane<Logged>) -> Vec<u32> {
    lock(&lane.runner.log).clone()
}

/// Two threads push while either may be running the lane: a push that
/// comes as a run ends is run, by that run or by its own thread.
#[test]
fn a_push_racing_the_end_of_a_run_is_never_stranded() {
    loom::model(|| {
        let lane = Lane::new(Logged::default(), None);
        let other = {
            let lane = lane.clone();
            thread::spawn(move || {
                lane.push([Job::Log(10)]);
            })
        };
        lane.push([Job::Log(1)]);
        lane.push([Job::Log(2), Job::Log(3)]);
        other.join().unwrap();
        let mut ran = log(&lane);
        assert_eq!(ran.len(), 4, "a job was lost or run twice: {ran:?}");
        ran.retain(|&number| number < 10);
        assert_eq!(ran, [1, 2, 3], "one thread's jobs ran out of order");
        assert_eq!(lane.progress.finished(), 4);
    });
}

/// A job parked at a gate, and the gate opened by another thread while the
/// lane polls it or runs: the wake is never lost, and the job behind the
/// gate (pushed as the gate opens) runs after it, once.
#[test]
fn a_wake_racing_a_park_is_never_lost() {
    loom::model(|| {
        let lane = Lane::new(Logged::default(), None);
        let gate = Arc::new(Gate::default());
        let opener = {
            let gate = gate.clone();
            thread::spawn(move || gate.open())
        };
        lane.push([Job::Held(gate), Job::Log(1)]);
        lane.push([Job::Log(2)]);
        opener.join().unwrap();
        assert_eq!(log(&lane), [1, 2], "the lane stayed parked, or ran a job twice");
        assert_eq!(lane.progress.finished(), 3);
    });
}

/// A batch deferred and resumed on one thread while another wakes the lane:
/// the batch's jobs run once, in order, whoever runs them.
#[test]
fn a_deferred_batch_runs_once_whoever_schedules_it() {
    loom::model(|| {
        let lane = Lane::new(Logged::default(), None);
        let waker = lane.waker();
        let other = thread::spawn(move || waker.wake());
        lane.defer();
        lane.push([Job::Log(1)]);
        lane.push([Job::Log(2)]);
        lane.resume();
        other.join().unwrap();
        assert_eq!(log(&lane), [1, 2]);
        assert_eq!(lane.progress.finished(), 2);
    });
}

/// A wait for another lane's point, pushed (and so polled on the pushing
/// thread, the lane having nothing before it) while that lane gets there on
/// another thread: the waiting lane runs its job once, after the point.
#[test]
fn a_wait_polled_where_it_is_pushed_is_never_left_parked() {
    loom::model(|| {
        let (source, waiting) = (Lane::new(Logged::default(), None), Lane::new(Logged::default(), None));
        let other = {
            let source = source.clone();
            thread::spawn(move || {
                source.push([Job::Log(1)]);
            })
        };
        waiting.push_steps([Step::Reach(source.clone(), 1), Step::Job(Job::Log(2))]);
        other.join().unwrap();
        assert_eq!(log(&waiting), [2], "the waiting lane stayed parked, or ran its job twice");
        assert_eq!(waiting.progress.finished(), 2);
        assert_eq!(log(&source), [1]);
    });
}
