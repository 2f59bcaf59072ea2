//! Where a GPU backend's stream-ordered driver calls are made (launches,
//! memsets, copies, event records and waits, completion hand-offs): by the
//! admitting thread, or by one issuing thread per device, always in the
//! order the ops were admitted (see [`Issuer::submit`]).
//!
//! Why a thread: a CUDA launch costs the calling thread 2–4 µs in the
//! driver, several times Weir's whole admission. Admission still happens
//! under the scheduler's boundary, where each op's place, waits and
//! versions are fixed; only the driver calls it decided are [`Job`]s. While
//! ops come one at a time they run at once, on the admitting thread (a
//! hand-off would only add a wake-up to a fence's latency); once they come
//! in a streak they queue for the thread, so the admitting loop pays
//! admission and the thread the driver, side by side.
//!
//! What follows from it:
//! - a driver call that fails on the thread fails its op as it runs: its
//!   versions carry the failure (`OpIo`), and the stream's next fence
//!   reports it;
//! - anything that must see the driver calls made so far (an external
//!   write's closure, a timestamp, a collective, a peer's event, a
//!   stream's or a graph's destruction) first [`Issuer::flush`]es the queue;
//! - the queue holds at most [`MAX_QUEUED`] jobs: beyond, the admitting
//!   thread waits for room, as it would in a full driver queue;
//! - the thread watches for more work before it sleeps, about as long as
//!   the recent gaps between its jobs, if they were short (the one rule,
//!   [`SpinPolicy`]), since a sleeping thread takes 10–30 µs to wake.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use super::device::{Device, LentToHost, Loan};
use super::owners::GpuEvent;
use super::prepare::ReadyLaunch;
use super::staging::{InFlight, Staged};
use super::stream::{StreamCore, StreamRef};
use crate::backend::{HostSink, OpIo, SignalKind};
use crate::completion::spin::SpinPolicy;
use crate::completion::Completion;
use crate::error::{Error, Failures, Result};
use crate::lock::lock;
use weir_device::driver::{Callback, Driver, EventUse, GraphExec, Launch, Status};

/// One job: the driver calls of one admitted op, event or signal. Jobs
/// are values in the queue, not boxes: a queue taken whole and handed back
/// empty allocates nothing per job (so an op's size is every job's).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Job<D: Driver> {
    /// An op's driver calls; `io` says whether it may run and what its failure fails.
    Op { stream: StreamRef<D>, issue: Issue<D>, io: OpIo },
    /// Makes later work on `stream` wait for the work queued on `source`
    /// (a stream of this device) so far, through `source`'s ordering event.
    Order { source: StreamRef<D>, stream: StreamRef<D> },
    /// Makes and records `event` after the work queued on `stream` so far,
    /// for another runtime's stream to wait for (a peer copy; a runtime's
    /// own streams are ordered by [`Job::Order`]).
    Record { stream: StreamRef<D>, event: Arc<QueuedEvent<D>> },
    /// Makes later work on `stream` wait for `event`, which a peer copy's
    /// other runtime, on this device or another, recorded.
    Wait { stream: StreamRef<D>, event: Arc<QueuedEvent<D>> },
    /// Completes `completion` once the work queued on `stream` so far is done.
    Signal { stream: StreamRef<D>, completion: Arc<Completion>, kind: SignalKind },
}

impl<D: Driver> Job<D> {
    /// Runs the job; an op's [`OpIo`] comes back, spent (see [`Queue::spent`]).
    /// `bound`: the device's context is known to be current on this
    /// thread, so it need not be asked for (a `cuCtxGetCurrent` costs about
    /// 2% of a launch). A job leaves it set only when it ran no code that
    /// could make another context current: no failure, no completion (a
    /// waker may run anything), no peer's event let go.
    fn run(self, device: &Device<D>, bound: &mut bool) -> Option<OpIo> {
        match self {
            Job::Op { stream, issue, io } => {
                issue.run(stream.get(), &io, bound);
                return Some(io);
            }
            Job::Order { source, stream } => {
                let (source, stream) = (source.get(), stream.get());
                let waited = match record_order(source, bound) {
                    // SAFETY: both handles are alive (the source's event lives
                    // as long as the source, which outlives this job).
                    Ok(event) => unsafe { device.driver.stream_wait_event(stream.raw, event) },
                    Err(error) => {
                        fail_stream(source, Err(error));
                        Err(unrecorded::<D>())
                    }
                };
                *bound = waited.is_ok();
                fail_stream(stream, waited);
            }
            Job::Record { stream, event } => {
                let stream = stream.get();
                // Made here, not at admission: the admitting thread then makes
                // no driver call that would contend with this thread's.
                let recorded = record_for_peer(stream, bound).map(|made| {
                    let _ = event.recorded.set(made);
                });
                // The event is this device's: its drop binds nothing else.
                *bound = recorded.is_ok();
                fail_stream(stream, recorded);
            }
            Job::Wait { stream, event } => {
                let stream = stream.get();
                let waited = match event.recorded.get() {
                    // SAFETY: both handles are alive (the job holds the event);
                    // a peer's event was recorded before this wait was queued.
                    Some(recorded) => bind(&*device.driver, bound)
                        .and_then(|()| unsafe { device.driver.stream_wait_event(stream.raw, recorded.raw) }),
                    // Its record failed (and was reported there): this stream cannot be ordered after it.
                    None => Err(unrecorded::<D>()),
                };
                // A peer's event, dropped below, binds its own device.
                *bound = waited.is_ok() && std::ptr::eq(&*event.device, device);
                fail_stream(stream, waited);
            }
            Job::Signal { stream, completion, kind } => {
                *bound = false;
                let stream = stream.get();
                // A fence reports the ops issued before it that failed, once.
                let report = stream.failed_ops.report(kind);
                let refused = completion.clone();
                let callback: Callback =
                    Box::new(move |status: Status| completion.report(status.map_err(Failures::from).and(report)));
                let awaited = kind == SignalKind::Fence;
                if let Err(error) = device.driver.bind().and_then(|()| stream.after(callback, awaited)) {
                    // The callback was dropped unrun: nobody else completes it.
                    device.driver.loss().record(&error);
                    refused.complete(Err(error));
                }
            }
        }
        None
    }
}

/// `source`'s ordering event, recorded after the work queued on it so far
/// (`bound`: as in [`Job::run`]).
///
/// One event per source stream serves all its orders, as in a hand-written
/// pipeline: a stream wait takes the record made before it, so the event
/// may be recorded again at once; and only jobs, which run one at a time,
/// record it. No pool, no live count, no device clone per order.
fn record_order<D: Driver>(source: &StreamCore<D>, bound: &bool) -> Result<D::Event> {
    let driver = &*source.device.driver;
    bind(driver, bound)?;
    let event = match source.order_event.get() {
        Some(&event) => event,
        None => {
            let made = driver.event_create(EventUse::StreamOrder)?;
            let mut stored = false;
            let kept = *source.order_event.get_or_init(|| {
                stored = true;
                made
            });
            if !stored {
                // SAFETY: made just above by this driver, never recorded.
                unsafe { driver.event_destroy(made) };
            }
            kept
        }
    };
    // SAFETY: both handles are alive and belong to this driver.
    unsafe { driver.event_record(event, source.raw) }?;
    Ok(event)
}

/// A pooled event of `stream`'s device, recorded after the work queued on
/// `stream` so far, for a peer to wait for (`bound`: as in [`Job::run`]).
fn record_for_peer<D: Driver>(stream: &StreamCore<D>, bound: &bool) -> Result<GpuEvent<D>> {
    let driver = &*stream.device.driver;
    bind(driver, bound)?;
    let event = GpuEvent::new(&stream.device, EventUse::StreamOrder)?;
    // SAFETY: both handles are alive and belong to this driver.
    unsafe { driver.event_record(event.raw, stream.raw) }?;
    Ok(event)
}

/// Why a stream waiting for an event whose record failed is not ordered.
fn unrecorded<D: Driver>() -> Error {
    Error::backend(D::KIND, "a cross-stream wait's event could not be recorded")
}

/// Makes `driver`'s device current on this thread, unless `bound` says it
/// is (see [`Job::run`]); either way, a lost device refuses.
fn bind<D: Driver>(driver: &D, bound: &bool) -> Result<()> {
    match *bound {
        true => driver.loss().check(),
        false => driver.bind(),
    }
}

/// An event another stream may wait for, made and recorded by a
/// [`Job::Record`] where it runs (see [`Issuer::submit`]).
pub(crate) struct QueuedEvent<D: Driver> {
    /// The device whose issuing thread records it.
    pub(crate) device: Arc<Device<D>>,
    recorded: OnceLock<GpuEvent<D>>,
}

impl<D: Driver> QueuedEvent<D> {
    pub(crate) fn new(device: &Arc<Device<D>>) -> Self {
        QueuedEvent { device: device.clone(), recorded: OnceLock::new() }
    }
}

/// A failed event record or wait: the stream's next fence reports it (and
/// a fault loses the device).
fn fail_stream<D: Driver>(stream: &StreamCore<D>, result: Result<()>) {
    if let Err(error) = result {
        stream.device.driver.loss().record(&error);
        stream.failed_ops.record(&error.into_op_failure(stream.index, None));
    }
}

/// The most jobs queued before admission waits for room: enough to keep
/// the thread busy, few enough that admission runs only a little ahead.
const MAX_QUEUED: usize = 1024;

/// Admissions this close together are a streak: the caller is streaming ops.
/// The gap runs from the end of the previous submission, not its start: a
/// job run here may wait in the driver (a launch blocks while the device's
/// own queue is full), and that wait is no pause of the caller's. Counted
/// from the start, a backlogged device would keep each op on the caller,
/// which then waits in the driver op after op, as if no thread issued.
pub(super) const STREAK_GAP: Duration = Duration::from_micros(10);

/// Admissions in a streak before their driver calls move to the thread.
const STREAK: u32 = 4;

/// How long the idle thread watches for its next job before it sleeps, at most.
const LINGER: Duration = Duration::from_micros(50);

struct Queue<D: Driver> {
    jobs: Vec<Job<D>>,
    /// The thread is running a batch taken from `jobs`.
    busy: bool,
    /// The thread sleeps on `work`: a push must wake it.
    sleeping: bool,
    /// No more jobs: the thread ends once the queue is empty.
    stopped: bool,
    /// The thread ran its last job and ended.
    ended: bool,
    /// When the latest submission returned, and how many came in a row,
    /// each within [`STREAK_GAP`] of the one before.
    last_submitted: Option<Instant>,
    streak: u32,
    /// The [`OpIo`]s of ops the thread ran, for the next admission to drop.
    /// Their outcome cells are the admitting thread's: it made them, and the
    /// versions it publishes hold them too. Dropped on the thread, each
    /// would pull two of its cache lines across, then back; so in a streak
    /// the thread only hands them back, and drops them itself once idle.
    spent: Vec<OpIo>,
}

struct Shared<D: Driver> {
    queue: Mutex<Queue<D>>,
    /// Signalled when a job arrives for a sleeping thread, or on stop.
    work: Condvar,
    /// Signalled when the thread takes a batch (room) or goes idle.
    progress: Condvar,
    /// Jobs pushed and not yet taken, read without the lock while polling.
    queued: AtomicUsize,
}

/// The issuing thread of one device and its queue.
pub(crate) struct Issuer<D: Driver> {
    shared: Arc<Shared<D>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The thread's id, so that it never waits for itself.
    id: OnceLock<ThreadId>,
}

impl<D: Driver> Issuer<D> {
    /// An issuer with no thread yet: [`Issuer::start`] gives it one.
    pub(crate) fn new() -> Self {
        let queue = Queue {
            jobs: Vec::new(),
            busy: false,
            sleeping: false,
            stopped: false,
            ended: false,
            last_submitted: None,
            streak: 0,
            spent: Vec::new(),
        };
        Issuer {
            shared: Arc::new(Shared {
                queue: Mutex::new(queue),
                work: Condvar::new(),
                progress: Condvar::new(),
                queued: AtomicUsize::new(0),
            }),
            thread: Mutex::new(None),
            id: OnceLock::new(),
        }
    }

    /// Starts the thread over `device`, which it holds until [`Issuer::stop`].
    pub(crate) fn start(&self, device: Arc<Device<D>>, linger: Duration) -> Result<()> {
        let shared = self.shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("weir-{}-issue", D::KIND.name()))
            .spawn(move || run(&shared, &device, &SpinPolicy::new(linger.min(LINGER))))
            .map_err(|e| Error::backend(D::KIND, format!("cannot start the issuing thread: {e}")))?;
        let _ = self.id.set(thread.thread().id());
        *lock(&self.thread) = Some(thread);
        Ok(())
    }

    /// Has `job` run in admission order: here, at once, while the thread
    /// is idle and admissions come one at a time (the thread would only add
    /// a hand-off, and a wake-up if it slept); on the thread once they come
    /// in a streak, or while it has jobs (behind them, so the order holds).
    /// A signal on an idle thread always runs here: a fence is waited for.
    ///
    /// Jobs are submitted under the runtime's ordering boundary, so while
    /// this caller runs one here nobody else queues one: the thread, idle,
    /// makes no driver call meanwhile.
    pub(crate) fn submit(&self, job: Job<D>, device: &Device<D>) -> Result<()> {
        let mut queue = lock(&self.shared.queue);
        let now = Instant::now();
        let close = queue.last_submitted.is_some_and(|last| now.duration_since(last) < STREAK_GAP);
        queue.streak = if close { queue.streak.saturating_add(1) } else { 0 };
        queue.last_submitted = Some(now);
        let spent = std::mem::take(&mut queue.spent);
        let idle = !queue.busy && queue.jobs.is_empty();
        if idle && (queue.streak < STREAK || matches!(job, Job::Signal { .. })) {
            drop(queue);
            // The caller's thread: any code may have made another context current.
            job.run(device, &mut false);
            lock(&self.shared.queue).last_submitted = Some(Instant::now());
            return Ok(());
        }
        let pushed = self.push_locked(queue, job);
        // After the push: the thread goes on meanwhile.
        drop(spent);
        pushed
    }

    /// Queues `job` behind every job queued before it; waits while the
    /// queue is full. A stopped issuer refuses it.
    fn push_locked(&self, mut queue: MutexGuard<'_, Queue<D>>, job: Job<D>) -> Result<()> {
        let mut waited = false;
        while queue.jobs.len() >= MAX_QUEUED && !queue.stopped && !self.is_own_thread() {
            queue = self.shared.progress.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
            waited = true;
        }
        if waited {
            // Waiting for room is no pause of the caller's either (see [`STREAK_GAP`]).
            queue.last_submitted = Some(Instant::now());
        }
        if queue.stopped {
            return Err(Error::Closed);
        }
        queue.jobs.push(job);
        self.shared.queued.fetch_add(1, Ordering::Release);
        if queue.sleeping {
            queue.sleeping = false;
            self.shared.work.notify_one();
        }
        Ok(())
    }

    /// Returns once every job queued so far has run. On the issuing thread
    /// itself (a job's drop) it returns at once.
    pub(crate) fn flush(&self) {
        if self.is_own_thread() {
            return;
        }
        let mut queue = lock(&self.shared.queue);
        while (queue.busy || !queue.jobs.is_empty()) && !queue.ended {
            queue = self.shared.progress.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// True when no job is queued or running: every driver call of the ops
    /// admitted so far has been made.
    pub(crate) fn is_idle(&self) -> bool {
        let queue = lock(&self.shared.queue);
        !queue.busy && queue.jobs.is_empty()
    }

    /// Runs what is queued, then ends the thread and lets the device go.
    pub(crate) fn stop(&self) {
        {
            let mut queue = lock(&self.shared.queue);
            queue.stopped = true;
            self.shared.work.notify_one();
        }
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
        self.shared.progress.notify_all();
    }

    fn is_own_thread(&self) -> bool {
        self.id.get() == Some(&std::thread::current().id())
    }
}

/// The thread: takes every queued job at once and runs them in order.
/// `idle` learns the gaps between the thread's jobs.
fn run<D: Driver>(shared: &Shared<D>, device: &Device<D>, idle: &SpinPolicy) {
    let mut batch: Vec<Job<D>> = Vec::new();
    let mut spent: Vec<OpIo> = Vec::new();
    loop {
        {
            let mut queue = lock(&shared.queue);
            // Since when the thread found nothing to do, and whether it watched for work since.
            let mut idle_since: Option<Instant> = None;
            let mut watched = false;
            loop {
                if !queue.jobs.is_empty() {
                    if let Some(since) = idle_since {
                        idle.learn(since);
                    }
                    std::mem::swap(&mut queue.jobs, &mut batch);
                    match queue.spent.is_empty() {
                        true => std::mem::swap(&mut queue.spent, &mut spent),
                        false => queue.spent.append(&mut spent),
                    }
                    shared.queued.store(0, Ordering::Relaxed);
                    queue.busy = true;
                    shared.progress.notify_all();
                    break;
                }
                if queue.busy {
                    queue.busy = false;
                    shared.progress.notify_all();
                }
                if !spent.is_empty() || !queue.spent.is_empty() {
                    // Idle: nothing to overlap with, so the thread drops them.
                    spent.append(&mut queue.spent);
                    drop(queue);
                    spent.clear();
                    queue = lock(&shared.queue);
                    continue;
                }
                if queue.stopped {
                    queue.ended = true;
                    shared.progress.notify_all();
                    return;
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if !watched {
                    // Without the lock, so admissions push freely.
                    watched = true;
                    drop(queue);
                    idle.spin_as_recent(since, || shared.queued.load(Ordering::Acquire) != 0);
                    queue = lock(&shared.queue);
                    continue;
                }
                queue.sleeping = true;
                queue = shared.work.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
                queue.sleeping = false;
            }
        }
        // Nothing but jobs runs on this thread, so the context an op bound
        // stays current for the next, unless a job runs other code.
        let mut bound = false;
        // One allocation a batch, not one per doubling: the admitting thread
        // frees these vectors, and a realloc here may wait for that free's
        // lock on the allocator (seen in a profile of the pipeline).
        spent.reserve(batch.len());
        for job in batch.drain(..) {
            // A panicking job must not end the jobs behind it.
            match catch_unwind(AssertUnwindSafe(|| job.run(device, &mut bound))) {
                Ok(Some(io)) => spent.push(io),
                Ok(None) => {}
                Err(_) => bound = false,
            }
        }
    }
}

/// The driver calls of one admitted op, made on the issuing thread (or,
/// for a graph capture, on the capturing thread): every check was made at
/// admission, so what is left can only fail in the driver.
pub(crate) enum Issue<D: Driver> {
    Zero {
        to: u64,
        len: u64,
    },
    Copy {
        to: u64,
        from: u64,
        len: u64,
    },
    Upload {
        to: u64,
        len: u64,
        staged: Staged,
    },
    Download {
        from: u64,
        len: u64,
        sink: Arc<HostSink>,
        loan: Loan,
    },
    Launch(ReadyLaunch<D>),
    /// A replay of a captured graph.
    Graph(GraphExec),
}

impl<D: Driver> Issue<D> {
    /// Runs the op unless an input failed; a failure fails what it writes
    /// (`io.outcome`) and is reported by the stream's next fence.
    pub(crate) fn run(self, stream: &StreamCore<D>, io: &OpIo, bound: &mut bool) {
        let failure = match io.failed_input(stream.index) {
            Some(error) => {
                if let Issue::Download { sink, .. } = &self {
                    sink.fail(error.clone());
                }
                Some(error)
            }
            None => self.issue(stream, bound).err().map(|error| {
                stream.device.driver.loss().record(&error);
                error.into_op_failure(stream.index, None)
            }),
        };
        if let Some(error) = failure {
            *bound = false;
            io.fail(error, &stream.failed_ops);
        }
    }

    /// The driver calls, on `stream`. `bound`: as in [`Job::run`]; an
    /// upload's or download's completion hand-off may drop or wake what is
    /// not ours, so only the other ops leave it set.
    pub(crate) fn issue(self, stream: &StreamCore<D>, bound: &mut bool) -> Result<()> {
        let driver = &*stream.device.driver;
        bind(driver, bound)?;
        *bound = matches!(self, Issue::Zero { .. } | Issue::Copy { .. } | Issue::Launch(_) | Issue::Graph(_));
        match self {
            // The widest memset the alignment allows: 32-bit stores fill faster.
            // SAFETY (all arms): every address range was checked to lie in a
            // live allocation at admission, and the scheduler keeps it alive
            // and ordered until a signal after this op completes.
            Issue::Zero { to, len } if to.is_multiple_of(4) && len.is_multiple_of(4) => unsafe {
                driver.memset_d32(to, 0, len / 4, stream.raw)
            },
            Issue::Zero { to, len } => unsafe { driver.memset_d8(to, 0, len, stream.raw) },
            Issue::Copy { to, from, len } => unsafe { driver.copy_d2d(to, from, len, stream.raw) },
            Issue::Upload { to, len, staged } => {
                // SAFETY: as above; `staged` holds `len` bytes (checked at
                // prepare) and stays alive, unwritten, until the callback
                // below, which runs after the copy.
                unsafe { driver.copy_h2d(to, staged.ptr(), len, stream.raw)? };
                stream.device.counters.host_to_device_copies.fetch_add(1, Ordering::SeqCst);
                let staged = InFlight::new(staged);
                stream.after(Box::new(move |_| drop(staged.release())), false)
            }
            Issue::Download { from, len, sink, loan } => {
                // SAFETY: as above; the loan holds `len` bytes and outlives
                // the copy (it is only touched again in the callback, after it).
                if let Err(error) = unsafe { driver.copy_d2h(loan.ptr(), from, len, stream.raw) } {
                    sink.fail(error.clone());
                    return Err(error);
                }
                stream.device.counters.device_to_host_copies.fetch_add(1, Ordering::SeqCst);
                let loan = InFlight::new(loan);
                let failed = sink.clone();
                let device = stream.device.clone();
                stream
                    .after(
                        Box::new(move |status| match (status, loan.release()) {
                            // The reader gets the page-locked bytes as they are: any
                            // copy out of them is the reader's, off the stream's
                            // completion order.
                            // SAFETY: the stream passed the copy, and the loan holds `len` bytes.
                            (Ok(()), Some(loan)) => {
                                sink.deliver_host(unsafe { LentToHost::host_buffer(loan, len as usize, device) })
                            }
                            (Ok(()), None) => sink.fail(Error::backend(D::KIND, "a download lost its staging buffer")),
                            (Err(error), _) => sink.fail(error),
                        }),
                        true,
                    )
                    // Nobody else will complete the read: fail it here.
                    .inspect_err(|error| failed.fail(error.clone()))
            }
            Issue::Launch(mut launch) => {
                let mut pointers = launch.params.pointers();
                // SAFETY: `function` was loaded by this driver and lives as long
                // as the device; the pointers point into `launch.params`, which
                // outlives the call; every buffer address was range-checked.
                unsafe {
                    driver.launch(Launch {
                        function: launch.function,
                        grid: &launch.grid,
                        stream: stream.raw,
                        params: &mut pointers,
                    })
                }
            }
            // SAFETY: `exec` was captured by this driver, and its recording is
            // forgotten (the instance destroyed) only after a flush, so after
            // this call.
            Issue::Graph(exec) => unsafe { driver.graph_launch(exec, stream.raw) },
        }
    }
}
