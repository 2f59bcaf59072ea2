//! CPU streams run on a bounded pool of worker threads, not a thread each.
//!
//! Each stream is a lane of the host-side engine (`backend::lane`): its
//! jobs run in order, one at a time, and a lane with queued jobs is
//! scheduled onto an idle worker of a bounded pool (`backend::pool`): as
//! many workers as the host has cores (at least 2), started as work comes
//! and retired when idle, so the thread count stays bounded whatever the
//! stream churn.
//!
//! No job blocks a worker waiting for another stream: a stream whose next
//! job waits for another stream's progress, a gate or a collective's other
//! parts parks (its job stays first in its queue) and is rescheduled when
//! what it waits for happens. A user kernel may still block in a Weir wait
//! (a fence; room in another runtime's full queue); while it does, the pool
//! may start a compensating worker (see [`blocking`]), retired once the
//! pool is back at its size.
//!
//! A failed job fails itself and the ops that read what it wrote (each work
//! job checks the outcomes of the versions it reads), not the stream: later
//! work that does not depend on it runs. Failures are tallied for the
//! stream's next fence.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::task::{Poll, Waker};
use std::time::Duration;

use crate::backend::lane::{Lane, Ran, Runner};
use crate::backend::pool::{Pool, Shape};
use crate::backend::{Counters, FailureTally, OpIo};
use crate::completion::spin::SpinPolicy;
use crate::error::{Error, Result};

pub(crate) type Work = Box<dyn FnOnce() -> Result<(), String> + Send>;
pub(crate) type Sync = Box<dyn FnOnce() + Send>;
/// Device work that meets other streams' parts (a collective): polled
/// until it has its outcome, never blocking.
pub(crate) type Meet = Box<dyn FnMut(&Waker) -> Poll<Result<(), String>> + Send>;

pub(crate) enum Job {
    /// Device work: skipped (and failed) if a version it reads failed.
    Work(Work, OpIo),
    /// Device work polled to its outcome (its parts check their inputs).
    Meet(Meet, OpIo),
    /// Completion of signals and reads: always runs, and counts as done in
    /// the same step as it runs (see [`CpuStream::is_idle`]). Must not block.
    Complete(Sync),
}

/// A CPU stream's part of its lane: its number and its failures.
pub(crate) struct HostJobs {
    /// The stream's number, which its failures name.
    pub(super) index: u32,
    /// Failures not yet reported by a fence, counted before the failed job
    /// counts as finished.
    pub(super) tally: Arc<FailureTally>,
}

/// A CPU stream's lane, as the pool runs it.
pub(crate) type HostLane = Lane<HostJobs>;

impl Runner for HostJobs {
    type Job = Job;
    const TURN: usize = TURN;

    fn run(lane: &Arc<HostLane>, job: Job) -> Ran<Job> {
        let (index, progress, tally) = (lane.runner.index, &lane.progress, &lane.runner.tally);
        match job {
            Job::Work(work, io) => {
                let failure = io.failed_input(index).or_else(|| {
                    let ran = catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| Err(panic_message(&*panic)));
                    ran.err().map(|message| Error::OpFailed { stream: index, message })
                });
                if let Some(error) = failure {
                    io.fail(error, tally);
                }
                progress.advance(1);
            }
            Job::Meet(mut meet, io) => {
                let polled = catch_unwind(AssertUnwindSafe(|| meet(&lane.waker())))
                    .unwrap_or_else(|panic| Poll::Ready(Err(panic_message(&*panic))));
                match polled {
                    Poll::Pending => return Ran::Parked(Job::Meet(meet, io)),
                    Poll::Ready(Err(message)) => io.fail(Error::OpFailed { stream: index, message }, tally),
                    Poll::Ready(Ok(())) => {}
                }
                progress.advance(1);
            }
            Job::Complete(complete) => progress.advance_after(|| {
                let _ = catch_unwind(AssertUnwindSafe(complete));
            }),
        }
        Ran::Done
    }

    fn schedule(lane: Arc<HostLane>) {
        pool().schedule(lane);
    }

    fn others_waiting() -> bool {
        pool().others_waiting()
    }
}

/// How long an idle worker keeps asking for its next stream before it sleeps, at most.
const LINGER: Duration = Duration::from_micros(50);
/// How long a worker keeps a stream whose queue ran empty, for its next job, at most.
const LANE_LINGER: Duration = Duration::from_micros(20);
/// Jobs a worker runs of one stream before it lets the next ready stream have a turn.
const TURN: usize = 64;
/// The name of every worker thread.
const WORKER_NAME: &str = "weir-cpu-worker";

/// The workers that run every CPU stream of the process: as many as the
/// host has cores, at least 2.
fn pool() -> &'static Arc<Pool<HostJobs>> {
    static POOL: OnceLock<Arc<Pool<HostJobs>>> = OnceLock::new();
    POOL.get_or_init(|| {
        Pool::new(Shape {
            name: WORKER_NAME.to_owned(),
            size: Some(std::thread::available_parallelism().map_or(2, |cores| cores.get()).max(2)),
            // Yielding: the threads it waits for may want its core.
            idle: SpinPolicy::yielding(LINGER),
            on_start: || {
                crate::threads::started(WORKER_NAME);
                // On a pool worker (a user kernel waiting on another stream's
                // work), the pool counts the worker blocked while a Weir wait
                // blocks, and may start a compensating one ([`Pool::blocking`]).
                crate::completion::on_blocking_waits(|starts| pool().blocking(starts));
            },
            // Host work never runs on the admitting thread (under the
            // runtime's lock, a kernel calling Weir would wait for itself):
            // with no worker to be had, a stream waits for one to be free.
            else_here: false,
        })
    })
}

/// Runs `wait`, a Weir wait that may block: on a pool worker, the pool may
/// start a compensating worker meanwhile ([`Pool::blocking`]).
pub(crate) fn blocking<T>(wait: impl FnOnce() -> T) -> T {
    pool().blocking(true);
    let waited = wait();
    pool().blocking(false);
    waited
}

/// A CPU stream: a queue of jobs the pool runs in order.
pub struct CpuStream {
    /// Its lane: its jobs, its progress (what its events count), its number
    /// and its failures.
    pub(super) lane: Arc<HostLane>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for CpuStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuStream({})", self.lane.runner.index)
    }
}

impl CpuStream {
    pub(crate) fn new(index: u32, counters: &Arc<Counters>) -> CpuStream {
        let lane = Lane::new(HostJobs { index, tally: Arc::default() }, Some(SpinPolicy::yielding(LANE_LINGER)));
        counters.live_streams.fetch_add(1, Ordering::SeqCst);
        CpuStream { lane, counters: counters.clone() }
    }

    /// True if every job enqueued on the stream has finished. Exact only
    /// while nobody enqueues concurrently (the scheduler's lock). Once a
    /// completion has run, this sees its job finished, so a fence made after
    /// an earlier one resolved is complete at once.
    pub(crate) fn is_idle(&self) -> bool {
        self.lane.progress.finished() >= self.lane.pushed()
    }
}

impl Drop for CpuStream {
    fn drop(&mut self) {
        // The stream's queued jobs still run; as when each stream was a
        // thread joined here, the drop returns once they have (unless it
        // runs on the stream's own jobs, which would wait for itself).
        if !Pool::runs_here(&self.lane) {
            let (progress, pushed) = (&self.lane.progress, self.lane.pushed());
            blocking(|| progress.wait_for(pushed));
        }
        self.counters.live_streams.fetch_sub(1, Ordering::SeqCst);
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    format!("kernel panicked: {}", crate::error::panic_text(panic))
}
