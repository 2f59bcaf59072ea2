//! One worker thread per CPU stream.
//!
//! Jobs run in order. A failed job fails itself and the ops that read what it
//! wrote (each work job checks the outcomes of the versions it reads), not the
//! stream: later work that does not depend on it runs. Failures are tallied
//! for the stream's next fence.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::backend::{Counters, FailureTally, OpIo};
use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::lock::lock;

thread_local! {
    /// The progress of the stream whose worker this thread is (by address).
    static WORKER_OF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How far a stream has got: the number of jobs it finished.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    finished: Mutex<u64>,
    advanced: Condvar,
}

impl Progress {
    fn finished(&self) -> u64 {
        *lock(&self.finished)
    }

    /// Runs `finish` and counts one more job done, as one step for anyone who
    /// reads the count: a reader that sees the job unfinished sees `finish`
    /// not yet run, and one that sees it finished sees it run.
    fn advance_after(&self, finish: impl FnOnce()) {
        let mut finished = lock(&self.finished);
        finish();
        *finished += 1;
        drop(finished);
        self.advanced.notify_all();
    }

    /// Blocks until at least `jobs` jobs finished.
    pub fn wait_for(&self, jobs: u64) {
        let mut finished = lock(&self.finished);
        while *finished < jobs {
            finished = self.advanced.wait(finished).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

pub(crate) type Work = Box<dyn FnOnce() -> Result<(), String> + Send>;
pub(crate) type Sync = Box<dyn FnOnce() + Send>;

enum Job {
    /// Device work: skipped (and failed) if a version it reads failed.
    Work(Work, OpIo),
    /// Ordering (waits, gates): always runs.
    Sync(Sync),
    /// Completion of signals and reads: always runs, and counts as done in
    /// the same step as it runs (see [`CpuStream::settled`]). Must not block.
    Complete(Sync),
    /// Jobs held back while a batch was admitted, run in order: each counts
    /// as one job, as if sent alone.
    Run(Vec<Job>),
}

/// Runs `job` on stream `index`'s worker and counts it (each job of a run) done.
fn run(job: Job, index: u32, progress: &Progress, tally: &FailureTally) {
    match job {
        Job::Work(work, io) => {
            let failure = io.failed_input(index).or_else(|| {
                let ran = catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| Err(panic_message(&panic)));
                ran.err().map(|message| Error::OpFailed { stream: index, message })
            });
            if let Some(error) = failure {
                io.fail(error, tally);
            }
            progress.advance_after(|| {});
        }
        Job::Sync(sync) => {
            // Keep the worker alive if a sync job panics.
            let _ = catch_unwind(AssertUnwindSafe(sync));
            progress.advance_after(|| {});
        }
        Job::Complete(complete) => progress.advance_after(|| {
            let _ = catch_unwind(AssertUnwindSafe(complete));
        }),
        Job::Run(jobs) => {
            for job in jobs {
                run(job, index, progress, tally);
            }
        }
    }
}

/// How long an idle worker keeps asking for its next job before it sleeps.
const LINGER: Duration = Duration::from_micros(50);

/// The worker's next job; `None` once its stream is gone. A stream fed op
/// by op (an `…AndWait` loop, a pipeline's stages) gets its next job within
/// microseconds, while a worker that went to sleep takes 10–30 µs to wake on
/// a busy host. So an idle worker whose recent idle spells were short (a
/// moving average in `recent_idle`, below [`LINGER`]) first lingers for
/// `LINGER`, yielding its core to any thread that wants it, then sleeps
/// until a job comes; one fed sparsely sleeps at once and costs nothing.
fn next_job(jobs: &Receiver<Job>, recent_idle: &mut Duration) -> Option<Job> {
    let idle = Instant::now();
    let lingers = *recent_idle < LINGER;
    let job = loop {
        match jobs.try_recv() {
            Ok(job) => break Some(job),
            Err(TryRecvError::Disconnected) => break None,
            Err(TryRecvError::Empty) if lingers && idle.elapsed() < LINGER => std::thread::yield_now(),
            Err(TryRecvError::Empty) => break jobs.recv().ok(),
        }
    };
    *recent_idle = (*recent_idle * 3 + idle.elapsed()) / 4;
    job
}

/// A CPU stream: a queue of jobs and the thread that runs them.
pub struct CpuStream {
    pub(crate) index: u32,
    sender: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    pub(crate) progress: Arc<Progress>,
    enqueued: AtomicU64,
    /// Jobs held back while a batch is admitted ([`CpuStream::hold_back`]).
    held: Mutex<Option<Vec<Job>>>,
    /// Failures not yet reported by a fence, counted before the failed job
    /// counts as finished.
    pub(crate) tally: Arc<FailureTally>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for CpuStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuStream({})", self.index)
    }
}

impl CpuStream {
    pub(crate) fn spawn(index: u32, counters: &Arc<Counters>) -> Result<CpuStream> {
        let (sender, jobs) = channel::<Job>();
        let progress = Arc::new(Progress::default());
        let worker_progress = progress.clone();
        let tally: Arc<FailureTally> = Arc::default();
        let worker_tally = tally.clone();
        let thread = std::thread::Builder::new()
            .name(format!("weir-cpu-stream-{index}"))
            .spawn(move || {
                WORKER_OF.with(|worker| worker.set(Arc::as_ptr(&worker_progress) as usize));
                let mut recent_idle = Duration::ZERO;
                while let Some(job) = next_job(&jobs, &mut recent_idle) {
                    run(job, index, &worker_progress, &worker_tally);
                }
            })
            .map_err(|e| Error::backend(BackendKind::Cpu, format!("cannot start a stream thread: {e}")))?;
        counters.live_streams.fetch_add(1, Ordering::SeqCst);
        Ok(CpuStream {
            index,
            sender: Some(sender),
            thread: Some(thread),
            progress,
            enqueued: AtomicU64::new(0),
            held: Mutex::new(None),
            tally,
            counters: counters.clone(),
        })
    }

    /// True on this stream's worker thread.
    pub(crate) fn is_current_thread(&self) -> bool {
        WORKER_OF.with(|worker| worker.get() == Arc::as_ptr(&self.progress) as usize)
    }

    /// True if every job enqueued on the stream has finished. Exact only
    /// while nobody enqueues concurrently (the scheduler's lock). Once a
    /// completion has run, this sees its job finished, so a fence made after
    /// an earlier one resolved is complete at once.
    pub(crate) fn is_idle(&self) -> bool {
        self.progress.finished() >= self.enqueued()
    }

    /// Jobs enqueued so far: the position an event recorded now covers.
    pub(crate) fn enqueued(&self) -> u64 {
        self.enqueued.load(Ordering::SeqCst)
    }

    fn send(&self, job: Job) -> Result<()> {
        if let Some(held) = lock(&self.held).as_mut() {
            held.push(job);
        } else {
            self.hand(job)?;
        }
        self.enqueued.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn hand(&self, job: Job) -> Result<()> {
        let sender = self.sender.as_ref().ok_or(Error::Closed)?;
        sender
            .send(job)
            .map_err(|_| Error::backend(BackendKind::Cpu, format!("stream {} worker has stopped", self.index)))
    }

    /// Holds back the jobs enqueued from now on, which count as enqueued,
    /// until [`CpuStream::hand_over`]: a batch wakes its worker once, not
    /// once per op. Only under the scheduler's lock, which hands over before
    /// it lets go, so nothing waits for a held job.
    pub(crate) fn hold_back(&self) {
        lock(&self.held).get_or_insert_with(Vec::new);
    }

    /// Hands the worker the jobs held back since [`CpuStream::hold_back`], as one run.
    pub(crate) fn hand_over(&self) -> Result<()> {
        match lock(&self.held).take() {
            Some(jobs) if !jobs.is_empty() => self.hand(Job::Run(jobs)),
            _ => Ok(()),
        }
    }

    pub(crate) fn work(&self, work: Work, io: OpIo) -> Result<()> {
        self.send(Job::Work(work, io))
    }

    pub(crate) fn sync(&self, sync: Sync) -> Result<()> {
        self.send(Job::Sync(sync))
    }

    pub(crate) fn complete(&self, complete: Sync) -> Result<()> {
        self.send(Job::Complete(complete))
    }
}

impl Drop for CpuStream {
    fn drop(&mut self) {
        // Closing the channel lets the worker finish what is queued and stop.
        self.sender.take();
        if let Some(thread) = self.thread.take() {
            // A worker never joins itself; it stops on its own once the queue is closed.
            if !self.is_current_thread() {
                let _ = thread.join();
            }
        }
        self.counters.live_streams.fetch_sub(1, Ordering::SeqCst);
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    format!("kernel panicked: {text}")
}
