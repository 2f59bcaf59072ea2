//! CPU streams run on a bounded pool of worker threads, not a thread each.
//!
//! Each stream is a lane of the host-side engine (`backend::lane`): its
//! jobs run in order, one at a time, and a lane with queued jobs is
//! scheduled onto an idle worker. The pool has as many workers as the
//! host has cores (at least 2), started as work comes and retired when idle,
//! so the thread count stays bounded whatever the stream churn.
//!
//! No job blocks a worker waiting for another stream: a stream whose next
//! job waits for another stream's progress, a gate or a collective's other
//! parts parks (its job stays first in its queue) and is rescheduled when
//! what it waits for happens. A user kernel may still block in a Weir wait;
//! while it does, the pool may start a compensating worker (see
//! [`blocking`]), retired once the pool is back at its size.
//!
//! A failed job fails itself and the ops that read what it wrote (each work
//! job checks the outcomes of the versions it reads), not the stream: later
//! work that does not depend on it runs. Failures are tallied for the
//! stream's next fence.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use crate::backend::lane::{Lane, Progress, Ran, Runner};
use crate::backend::{Counters, FailureTally, OpIo};
use crate::completion::spin::SpinPolicy;
use crate::error::{Error, Result};
use crate::lock::lock;

thread_local! {
    /// The progress of the stream this worker is running now (by address).
    static WORKER_OF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// True on a pool worker.
    static IN_POOL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(crate) type Work = Box<dyn FnOnce() -> Result<(), String> + Send>;
pub(crate) type Sync = Box<dyn FnOnce() + Send>;
/// Ordering that may have to wait for another stream: polled until ready,
/// never blocking.
pub(crate) type Until = Box<dyn FnMut(&Waker) -> Poll<()> + Send>;
/// Device work that meets other streams' parts (a collective): polled
/// until it has its outcome, never blocking.
pub(crate) type Meet = Box<dyn FnMut(&Waker) -> Poll<Result<(), String>> + Send>;

pub(crate) enum Job {
    /// Device work: skipped (and failed) if a version it reads failed.
    Work(Work, OpIo),
    /// Device work polled to its outcome (its parts check their inputs).
    Meet(Meet, OpIo),
    /// Ordering (waits, gates): always runs, parking the stream until ready.
    Until(Until),
    /// Completion of signals and reads: always runs, and counts as done in
    /// the same step as it runs (see [`CpuStream::is_idle`]). Must not block.
    Complete(Sync),
}

/// A CPU stream's part of its lane: its number and its failures.
pub(crate) struct HostJobs {
    index: u32,
    tally: Arc<FailureTally>,
}

/// A CPU stream's lane, as the pool runs it.
type HostLane = Lane<HostJobs>;

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
                progress.advance_after(|| {});
            }
            Job::Meet(mut meet, io) => {
                let polled = catch_unwind(AssertUnwindSafe(|| meet(&lane.waker())))
                    .unwrap_or_else(|panic| Poll::Ready(Err(panic_message(&*panic))));
                match polled {
                    Poll::Pending => return Ran::Parked(Job::Meet(meet, io)),
                    Poll::Ready(Err(message)) => io.fail(Error::OpFailed { stream: index, message }, tally),
                    Poll::Ready(Ok(())) => {}
                }
                progress.advance_after(|| {});
            }
            Job::Until(mut until) => {
                // A panicking poll counts as ready: the stream goes on.
                if catch_unwind(AssertUnwindSafe(|| until(&lane.waker()))).unwrap_or(Poll::Ready(())).is_pending() {
                    return Ran::Parked(Job::Until(until));
                }
                progress.advance_after(|| {});
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
        pool().ready_hint.load(Ordering::Acquire) != 0
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
/// How long a sleeping worker waits for work before it retires.
const RETIRE: Duration = Duration::from_millis(200);

/// The workers that run every CPU stream of the process.
struct Pool {
    state: Mutex<PoolState>,
    /// `ready.len()`, for a lingering worker to watch without the lock: it
    /// would otherwise take the lock between yields, against every admission.
    ready_hint: AtomicUsize,
    /// Workers the pool keeps while there is work: the host's cores, at least 2.
    size: usize,
}

#[derive(Default)]
struct PoolState {
    /// Streams with jobs to run, none of them running.
    ready: VecDeque<Arc<HostLane>>,
    workers: usize,
    /// Workers looking for a stream (lingering or asleep).
    free: usize,
    /// Workers asleep, the last to fall asleep at the end: a stream ready
    /// for a worker rings that one's [`Bell`]. With none asleep, nothing is
    /// rung (a wake-up is a system call, even with nobody to wake).
    sleepers: Vec<Arc<Bell>>,
    /// A worker is lingering: the others sleep at once, so that idle workers
    /// never spin on every core while the threads they wait for want one.
    lingering: bool,
    /// Workers blocked in a Weir wait inside a kernel (see [`blocking`]).
    blocked: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(PoolState::default()),
        ready_hint: AtomicUsize::new(0),
        size: std::thread::available_parallelism().map_or(2, |cores| cores.get()).max(2),
    })
}

impl Pool {
    /// Queues a stream that has jobs, and starts a worker for it if none is
    /// free and the pool is below its size (plus one per blocked worker).
    fn schedule(&'static self, lane: Arc<HostLane>) {
        let mut state = lock(&self.state);
        state.ready.push_back(lane);
        self.ready_hint.store(state.ready.len(), Ordering::Release);
        if state.ready.len() > state.free && state.workers < self.size + state.blocked {
            self.start(&mut state);
        }
        // A lingering worker takes the first ready stream itself: a sleeper
        // is woken only for what it cannot (a system call, and a thread
        // that would find nothing).
        let lingerer = usize::from(state.lingering);
        let woken = if state.ready.len() > lingerer { state.sleepers.pop() } else { None };
        if let Some(bell) = &woken {
            bell.rung.store(true, Ordering::Release);
        }
        drop(state);
        if let Some(bell) = woken {
            bell.worker.unpark();
        }
    }

    fn start(&'static self, state: &mut PoolState) {
        let started = std::thread::Builder::new().name(WORKER_NAME.to_owned()).spawn(move || self.serve());
        // With no worker to spare, a stream waits for a running one to be free.
        if started.is_ok() {
            state.workers += 1;
            state.free += 1;
        }
    }

    /// A worker's life: runs streams until none comes for [`RETIRE`], or the
    /// pool has more workers than it needs.
    fn serve(&'static self) {
        IN_POOL.with(|in_pool| in_pool.set(true));
        crate::threads::started(WORKER_NAME);
        crate::completion::on_blocking_waits(blocking_edge);
        let idle = SpinPolicy::yielding(LINGER);
        let bell = Arc::new(Bell { rung: AtomicBool::new(false), worker: std::thread::current() });
        while let Some(lane) = self.next_lane(&idle, &bell) {
            WORKER_OF.with(|worker| worker.set(Arc::as_ptr(&lane.progress) as usize));
            lane.run_jobs();
            WORKER_OF.with(|worker| worker.set(0));
            lock(&self.state).free += 1;
        }
    }

    /// The next stream to run; `None` once this worker retires. A stream fed
    /// op by op (an `…AndWait` loop, a pipeline's stages) gets its next job
    /// within microseconds, while a worker that went to sleep takes 10–30 µs
    /// to wake on a busy host. So an idle worker whose recent idle spells
    /// were short (`idle` learns them) first lingers about as long as they
    /// were, yielding its core to any thread that wants it, then sleeps until
    /// a stream comes; one fed sparsely sleeps at once.
    fn next_lane(&self, idle: &SpinPolicy, bell: &Arc<Bell>) -> Option<Arc<HostLane>> {
        let since = Instant::now();
        let mut lingered = false;
        let mut state = lock(&self.state);
        let lane = loop {
            if state.workers > self.size + state.blocked {
                break None;
            }
            if let Some(lane) = state.ready.pop_front() {
                self.ready_hint.store(state.ready.len(), Ordering::Release);
                break Some(lane);
            }
            if !lingered && !state.lingering && idle.is_quick() {
                // Watches the hint, not the lock, then looks again under it.
                (lingered, state.lingering) = (true, true);
                drop(state);
                idle.spin_as_recent(since, || self.ready_hint.load(Ordering::Acquire) != 0);
                state = lock(&self.state);
                state.lingering = false;
                if !state.ready.is_empty() {
                    continue;
                }
            }
            bell.rung.store(false, Ordering::Relaxed);
            state.sleepers.push(bell.clone());
            drop(state);
            bell.sleep(RETIRE);
            state = lock(&self.state);
            // Rung under the lock, so read under it: not rung, the bell is
            // still listed and the sleep timed out.
            if !bell.rung.load(Ordering::Acquire) {
                state.sleepers.retain(|listed| !Arc::ptr_eq(listed, bell));
                if state.ready.is_empty() {
                    break None;
                }
            }
        };
        state.free -= 1;
        if lane.is_none() {
            state.workers -= 1;
        }
        drop(state);
        idle.learn(since);
        lane
    }
}

/// How a sleeping worker is woken. Each worker has its own, and a new
/// stream rings the bell of the worker that went to sleep last: a stream fed
/// one op at a time keeps to the one worker that ran its last op (its
/// caches and its core still warm), while the others sleep on and retire.
/// Woken in turn instead (one condition variable), every op of such a
/// stream would run on another sleeping worker, and none would ever sleep
/// long enough to retire.
struct Bell {
    /// Set, under the pool's lock, by the admission that hands this worker a stream.
    rung: AtomicBool,
    worker: std::thread::Thread,
}

impl Bell {
    /// Sleeps until rung, or for `most`.
    fn sleep(&self, most: Duration) {
        let deadline = Instant::now() + most;
        // `park` may return without an `unpark`: the flag says whether it was rung.
        while !self.rung.load(Ordering::Acquire) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::park_timeout(left);
        }
    }
}

/// Runs `wait`, a Weir wait that may block: see [`blocking_edge`].
pub(crate) fn blocking<T>(wait: impl FnOnce() -> T) -> T {
    blocking_edge(true);
    let waited = wait();
    blocking_edge(false);
    waited
}

/// Called as a Weir wait that may block starts (`true`) and ends
/// (`false`). On a pool worker, the pool counts the worker blocked and
/// starts a compensating one if streams are waiting for a worker, so a
/// kernel waiting on another stream's work cannot starve the pool of the
/// workers that would run it; the extra worker retires once the wait ends
/// and it is idle.
fn blocking_edge(starts: bool) {
    if !IN_POOL.with(std::cell::Cell::get) {
        return;
    }
    let pool = pool();
    let mut state = lock(&pool.state);
    if starts {
        state.blocked += 1;
        if state.ready.len() > state.free {
            pool.start(&mut state);
        }
    } else {
        state.blocked -= 1;
    }
}

/// A CPU stream: a queue of jobs the pool runs in order.
pub struct CpuStream {
    lane: Arc<HostLane>,
    enqueued: AtomicU64,
    /// Jobs held back while a batch is admitted ([`CpuStream::hold_back`]).
    held: Mutex<Option<Vec<Job>>>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for CpuStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuStream({})", self.index())
    }
}

impl CpuStream {
    pub(crate) fn new(index: u32, counters: &Arc<Counters>) -> CpuStream {
        let lane = Lane::new(HostJobs { index, tally: Arc::default() }, Some(SpinPolicy::yielding(LANE_LINGER)));
        counters.live_streams.fetch_add(1, Ordering::SeqCst);
        CpuStream { lane, enqueued: AtomicU64::new(0), held: Mutex::new(None), counters: counters.clone() }
    }

    /// The stream's number, which its failures name.
    pub(crate) fn index(&self) -> u32 {
        self.lane.runner.index
    }

    /// How far the stream has got: what its events count.
    pub(crate) fn progress(&self) -> &Arc<Progress> {
        &self.lane.progress
    }

    /// Failures not yet reported by a fence, counted before the failed job
    /// counts as finished.
    pub(crate) fn tally(&self) -> &Arc<FailureTally> {
        &self.lane.runner.tally
    }

    /// True while the current thread runs this stream's jobs.
    pub(crate) fn is_current_thread(&self) -> bool {
        WORKER_OF.with(|worker| worker.get() == Arc::as_ptr(self.progress()) as usize)
    }

    /// True if every job enqueued on the stream has finished. Exact only
    /// while nobody enqueues concurrently (the scheduler's lock). Once a
    /// completion has run, this sees its job finished, so a fence made after
    /// an earlier one resolved is complete at once.
    pub(crate) fn is_idle(&self) -> bool {
        self.progress().finished() >= self.enqueued()
    }

    /// Jobs enqueued so far: the position an event recorded now covers.
    pub(crate) fn enqueued(&self) -> u64 {
        self.enqueued.load(Ordering::SeqCst)
    }

    fn send(&self, job: Job) -> Result<()> {
        if let Some(held) = lock(&self.held).as_mut() {
            held.push(job);
        } else {
            self.lane.push([job]);
        }
        self.enqueued.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Holds back the jobs enqueued from now on, which count as enqueued,
    /// until [`CpuStream::hand_over`]: a batch schedules its stream once, not
    /// once per op. Only under the scheduler's lock, which hands over before
    /// it lets go, so nothing waits for a held job.
    pub(crate) fn hold_back(&self) {
        lock(&self.held).get_or_insert_with(Vec::new);
    }

    /// Queues the jobs held back since [`CpuStream::hold_back`], in order.
    pub(crate) fn hand_over(&self) -> Result<()> {
        match lock(&self.held).take() {
            Some(jobs) if !jobs.is_empty() => self.lane.push(jobs),
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn work(&self, work: Work, io: OpIo) -> Result<()> {
        self.send(Job::Work(work, io))
    }

    pub(crate) fn meet(&self, meet: Meet, io: OpIo) -> Result<()> {
        self.send(Job::Meet(meet, io))
    }

    pub(crate) fn until(&self, until: Until) -> Result<()> {
        self.send(Job::Until(until))
    }

    pub(crate) fn complete(&self, complete: Sync) -> Result<()> {
        self.send(Job::Complete(complete))
    }
}

impl Drop for CpuStream {
    fn drop(&mut self) {
        // The stream's queued jobs still run; as when each stream was a
        // thread joined here, the drop returns once they have (unless it
        // runs on the stream's own jobs, which would wait for itself).
        if !self.is_current_thread() {
            let (progress, enqueued) = (self.progress(), self.enqueued());
            blocking(|| progress.wait_for(enqueued));
        }
        self.counters.live_streams.fetch_sub(1, Ordering::SeqCst);
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    format!("kernel panicked: {}", crate::error::panic_text(panic))
}
