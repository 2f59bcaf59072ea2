//! Where a GPU backend's stream-ordered driver calls are made (launches,
//! memsets, copies, event records and waits, completion hand-offs): by the
//! admitting thread, or by one issuing thread per device, always in the
//! order the ops were admitted (see [`Issuer::submit`]). They are the jobs
//! of one lane per device (`backend::lane`), run by a pool of one thread
//! (`backend::pool`).
//!
//! Why a thread: a CUDA launch costs the calling thread 2–4 µs in the
//! driver, several times Weir's whole admission. Admission still happens
//! under the scheduler's boundary, where each op's place, waits and
//! versions are fixed; only the driver calls it decided are [`Job`]s. While
//! ops come one at a time they run at once, on the admitting thread (a
//! hand-off would only add a wake-up to a fence's latency); once they come
//! in a streak they queue for the thread, so the admitting loop pays
//! admission and the thread the driver, side by side. A caller that waits
//! for each op's fence is never in a streak, however quick its waits.
//!
//! What follows from it:
//! - a driver call that fails on the thread fails its op as it runs: its
//!   versions carry the failure (`OpIo`), and the stream's next fence
//!   reports it;
//! - anything that must see the driver calls made so far (an external
//!   write's closure, a timestamp, a collective, a peer's event, a
//!   stream's or a graph's destruction) first [`Issuer::flush`]es the queue;
//! - the queue holds at most [`MAX_QUEUED`] jobs: beyond, the admitting
//!   thread waits for room, as it would in a full driver queue, until half
//!   of them ran; the thread counts its jobs done [`ISSUE_BATCH`] at a time,
//!   so it still has the other half to run while the admitting thread wakes;
//! - the thread watches for more work before it sleeps, about as long as
//!   the recent gaps between its jobs, if they were short (the one rule,
//!   [`SpinPolicy`]), since a sleeping thread takes 10–30 µs to wake; it
//!   retires after long idle, and the next streak starts another.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::device::{Device, LentToHost, Loan};
use super::owners::GpuEvent;
use super::prepare::ReadyLaunch;
use super::staging::Staged;
use super::stream::{StreamCore, StreamRef};
use crate::backend::lane::{Lane, Ran, Runner};
use crate::backend::pool::{Pool, Shape};
use crate::backend::{HostSink, OpIo, SignalKind};
use crate::completion::spin::SpinPolicy;
use crate::completion::{first_error_counting_all, Completion};
use crate::error::{Error, Failures, Result};
use crate::lock::lock;
use scopeguard::ScopeGuard;
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
    /// Runs the job; an op's [`OpIo`] comes back, spent.
    /// `bound`: the device's context is known to be current on this
    /// thread, so it need not be asked for (a `cuCtxGetCurrent` costs about
    /// 2% of a launch). A job leaves it set only when it ran no code that
    /// could make another context current: no failure, no completion (a
    /// waker may run anything), no peer's event let go.
    // Inlined into the lane's loop, as the runner's `run`: see `Lane::run_step`.
    #[inline(always)]
    fn run(self, bound: &mut bool) -> Option<OpIo> {
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
                    Ok(event) => unsafe { stream.device.driver.stream_wait_event(stream.raw, event) },
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
                let device = &*stream.device;
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
                let device = &*stream.device;
                // A fence reports the ops issued before it that failed, once.
                let report = stream.failed_ops.report(kind);
                let (refused, reported) = (completion.clone(), report.clone());
                let callback: Callback =
                    Box::new(move |status: Status| completion.report(status.map_err(Failures::from).and(report)));
                let awaited = kind == SignalKind::Fence;
                if let Err(error) = device.driver.bind().and_then(|()| stream.after(callback, awaited)) {
                    // The callback was dropped unrun: nobody else completes
                    // it, and the work before it may still run (what a drain
                    // frees, what a fence's reader reads). So it is waited
                    // for here, then the refusal reported after the failures
                    // this fence took.
                    device.driver.loss().record(&error);
                    // SAFETY: a live stream of this driver.
                    let _ = unsafe { device.driver.stream_synchronize(stream.raw) };
                    let mut failures = reported;
                    first_error_counting_all(&mut failures, Err(Failures::from(error)));
                    refused.report(failures);
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
            // Only jobs, which run one at a time, set it: unset above, so unset still.
            let _ = source.order_event.set(made);
            made
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
const MAX_QUEUED: u64 = 1024;

/// The jobs the thread counts done together: few against [`MAX_QUEUED`].
/// It takes the whole queue at once (moving part of it out would copy each
/// job once more); counting it all only once it had run, a caller waiting
/// for room woke to an empty queue and the thread sat idle until that
/// caller's next push.
const ISSUE_BATCH: usize = 128;

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

thread_local! {
    /// On an issuing thread: its device's context is current (see
    /// [`Job::run`]). Each issuing thread serves one device; a new one
    /// starts with nothing bound.
    static BOUND: Cell<bool> = const { Cell::new(false) };
    /// Jobs run and not yet counted on the lane's progress, and the
    /// [`OpIo`]s of the ops among them: both are handed on a batch at a time
    /// ([`Issuing::ran_taken`]).
    static RAN: Cell<u64> = const { Cell::new(0) };
    static SPENT: RefCell<Vec<OpIo>> = const { RefCell::new(Vec::new()) };
}

/// A device's lane of driver calls, in admission order, and the thread that
/// runs them.
pub(crate) struct Issuer<D: Driver> {
    lane: Arc<Lane<Issuing<D>>>,
}

/// The issuing lane's part: its thread, and what admissions share with it.
pub(crate) struct Issuing<D: Driver> {
    /// A pool of one thread.
    pool: Arc<Pool<Issuing<D>>>,
    streak: Mutex<Streak>,
    /// The [`OpIo`]s of ops the thread ran, for the next admission to drop.
    /// Their outcome cells are the admitting thread's: it made them, and the
    /// versions it publishes hold them too. Dropped on the thread, each would
    /// pull two of its cache lines across, then back; so in a streak the
    /// thread only hands them back, and drops them itself once idle.
    spent: Mutex<Vec<OpIo>>,
    /// `spent` has some: an admission takes its lock only then.
    has_spent: AtomicBool,
    /// No more jobs: the device is going.
    stopped: AtomicBool,
}

/// When the latest submission returned, and how many came in a row, each
/// within [`STREAK_GAP`] of the one before. Only admissions touch it, one at
/// a time (under the runtime's ordering boundary), so its lock is never
/// contended: the issuing thread's hand-back has a lock of its own.
#[derive(Default)]
struct Streak {
    last_submitted: Option<Instant>,
    count: u32,
    /// The latest fence submitted: done by the next submission, the caller
    /// (most likely) waited for it, and a caller that waits is not
    /// streaming, however short the wait (a small kernel's fence on a fast
    /// device ends within [`STREAK_GAP`]).
    fence: Option<Arc<Completion>>,
}

impl Streak {
    /// Counts a submission made at `now` (`fence`: the one it makes, if
    /// any); true once admissions stream: [`STREAK`] in a row, each within
    /// [`STREAK_GAP`] of the one before, with no wait for a fence between.
    fn submitted(&mut self, now: Instant, fence: Option<&Arc<Completion>>) -> bool {
        let waited = self.fence.take().is_some_and(|fence| fence.is_complete());
        let close = self.last_submitted.is_some_and(|last| now.duration_since(last) < STREAK_GAP);
        self.count = if close && !waited { self.count.saturating_add(1) } else { 0 };
        self.last_submitted = Some(now);
        self.fence = fence.cloned();
        self.count >= STREAK
    }
}

impl<D: Driver> Runner for Issuing<D> {
    type Job = Job<D>;
    // One lane per thread: it runs until it runs out.
    const BATCH: usize = ISSUE_BATCH;

    // Inlined into the lane's loop: see `Lane::run_step`.
    #[inline(always)]
    fn run(lane: &Arc<Lane<Self>>, job: Job<D>) -> Ran<Job<D>> {
        // Nothing but jobs runs on the issuing thread, so the context an op
        // bound stays current for the next, unless a job runs other code.
        // Elsewhere (a caller running the lane, with no thread to be had)
        // nobody knows the current context.
        let mut bound = lane.runner.pool.is_own_thread() && BOUND.with(Cell::get);
        // A panicking job must not end the jobs behind it.
        let spent = catch_unwind(AssertUnwindSafe(|| job.run(&mut bound))).unwrap_or_else(|_| {
            bound = false;
            None
        });
        BOUND.with(|cell| cell.set(bound));
        RAN.with(|ran| ran.set(ran.get() + 1));
        if let Some(io) = spent {
            SPENT.with(|kept| kept.borrow_mut().push(io));
        }
        Ran::Done
    }

    /// Counts the batch's jobs done, and hands their [`OpIo`]s to the next
    /// admission; once the lane is idle, drops them here (nothing to overlap
    /// with, and an admission waiting for the room they hold may wait for them).
    fn ran_taken(lane: &Arc<Lane<Self>>) {
        let issuing = &lane.runner;
        let mut spent = SPENT.with(RefCell::take);
        if !spent.is_empty() {
            lock(&issuing.spent).append(&mut spent);
            issuing.has_spent.store(true, Ordering::Release);
        }
        SPENT.with(|kept| *kept.borrow_mut() = spent);
        lane.progress.advance(RAN.with(|ran| ran.replace(0)));
        if lane.surely_idle() {
            // Taken out first: dropped after the lock goes.
            let idle = issuing.take_spent();
            drop(idle);
        }
    }

    fn schedule(lane: Arc<Lane<Self>>) {
        lane.runner.pool.clone().schedule(lane);
    }
}

impl<D: Driver> Issuing<D> {
    /// The [`OpIo`]s handed back so far, without a lock while there are none.
    fn take_spent(&self) -> Vec<OpIo> {
        if !self.has_spent.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        std::mem::take(&mut *lock(&self.spent))
    }
}

impl<D: Driver> Issuer<D> {
    /// An issuer whose thread, once it has one, watches for work for up to `linger`.
    pub(crate) fn new(linger: Duration) -> Self {
        let shape = Shape {
            name: format!("weir-{}-issue", D::KIND.name()),
            size: Some(1),
            // Spinning, not yielding: the admitting thread has its own core.
            idle: SpinPolicy::new(linger.min(LINGER)),
            on_start: || {},
            // With no thread to be had, the caller makes the driver calls, in order.
            else_here: true,
        };
        let issuing = Issuing {
            pool: Pool::new(shape),
            streak: Mutex::default(),
            spent: Mutex::default(),
            has_spent: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        };
        Issuer { lane: Lane::new(issuing, None) }
    }

    /// Has `job` run in admission order: here, at once, while the lane is
    /// idle and admissions come one at a time (the thread would only add a
    /// hand-off, and a wake-up if it slept); on the thread once they come
    /// in a streak, or while it has jobs (behind them, so the order holds).
    /// A signal on an idle lane always runs here: a fence is waited for.
    ///
    /// Jobs are submitted under the runtime's ordering boundary, so while
    /// this caller runs one here nobody else queues one: the thread, idle,
    /// makes no driver call meanwhile.
    pub(crate) fn submit(&self, job: Job<D>) -> Result<()> {
        let issuing = &self.lane.runner;
        if issuing.stopped.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let fence = match &job {
            Job::Signal { completion, kind: SignalKind::Fence, .. } => Some(completion),
            _ => None,
        };
        let streaming = lock(&issuing.streak).submitted(Instant::now(), fence);
        let spent = issuing.take_spent();
        if self.lane.surely_idle() && (!streaming || matches!(job, Job::Signal { .. })) {
            // The caller's thread: any code may have made another context current.
            self.lane.run_here(|| drop(job.run(&mut false)));
            lock(&issuing.streak).last_submitted = Some(Instant::now());
            // The thread may have handed back its last batch after `spent`
            // was taken and, seeing this run, left it for an admission: were
            // none to follow, the batch would hold its share of the queue.
            drop(issuing.take_spent());
            return Ok(());
        }
        // Room: at most MAX_QUEUED jobs ahead (the thread itself never
        // waits). Full, it waits until half ran: one wake-up per half a
        // queue, and the thread has the rest to run meanwhile.
        let pushed = self.lane.pushed();
        let room_at = (pushed + 1).saturating_sub(MAX_QUEUED);
        if !self.lane.progress.surely_reached(room_at) && !Pool::runs_here(&self.lane) {
            self.lane.progress.wait_for((pushed + 1).saturating_sub(MAX_QUEUED / 2));
            // Waiting for room is no pause of the caller's either (see [`STREAK_GAP`]).
            lock(&issuing.streak).last_submitted = Some(Instant::now());
        }
        self.lane.push([job]);
        // After the push: the thread goes on meanwhile.
        drop(spent);
        Ok(())
    }

    /// Returns once every job queued so far has run. On the issuing thread
    /// itself (a job's drop) it returns at once.
    pub(crate) fn flush(&self) {
        Pool::drain(&self.lane);
    }

    /// True when no job is queued or running: every driver call of the ops
    /// admitted so far has been made. May answer `false` for a job finishing now.
    pub(crate) fn is_idle(&self) -> bool {
        self.lane.surely_idle()
    }

    /// Runs what is queued, then ends the thread: it lets the device go.
    pub(crate) fn stop(&self) {
        self.lane.runner.stopped.store(true, Ordering::Release);
        self.flush();
        self.lane.runner.pool.close();
    }
}

/// The driver calls of one admitted op, made on the issuing thread (or,
/// for a graph capture, on the capturing thread): every check was made at
/// admission, so what is left can only fail in the driver.
pub(crate) enum Issue<D: Driver> {
    Zero { to: u64, len: u64 },
    Copy { to: u64, from: u64, len: u64 },
    Upload { to: u64, len: u64, staged: Staged },
    Download { from: u64, len: u64, sink: Arc<HostSink>, loan: Loan },
    Launch(ReadyLaunch<D>),
    // A replay of a captured graph (a plain comment: a doc comment here
    // would make rustfmt spread every variant above over several lines).
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
        if let Err(error) = bind(driver, bound) {
            // A read's bytes will not come: its reader hears why, as from a failed copy.
            if let Issue::Download { sink, .. } = &self {
                sink.fail(error.clone());
            }
            return Err(error);
        }
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
                let staged = scopeguard::guard(staged, Staged::abandon);
                stream.after(Box::new(move |_| drop(ScopeGuard::into_inner(staged))), false)
            }
            Issue::Download { from, len, sink, loan } => {
                // SAFETY: as above; the loan holds `len` bytes and outlives
                // the copy (it is only touched again in the callback, after it).
                if let Err(error) = unsafe { driver.copy_d2h(loan.ptr(), from, len, stream.raw) } {
                    sink.fail(error.clone());
                    return Err(error);
                }
                stream.device.counters.device_to_host_copies.fetch_add(1, Ordering::SeqCst);
                let loan = scopeguard::guard(loan, Loan::abandon);
                let failed = sink.clone();
                let device = stream.device.clone();
                stream
                    .after(
                        Box::new(move |status| {
                            let loan = ScopeGuard::into_inner(loan);
                            match status {
                                // The reader gets the page-locked bytes as they are: any
                                // copy out of them is the reader's, off the stream's
                                // completion order.
                                // SAFETY: the stream passed the copy, and the loan holds `len` bytes.
                                Ok(()) => {
                                    sink.deliver_host(unsafe { LentToHost::host_buffer(loan, len as usize, device) })
                                }
                                Err(error) => sink.fail(error),
                            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::LiveCounters;

    fn fence() -> Arc<Completion> {
        Completion::new(1, Arc::new(LiveCounters::default()))
    }

    #[test]
    fn admissions_close_together_stream_unless_the_caller_waits_for_a_fence_between_them() {
        let (start, step) = (Instant::now(), STREAK_GAP / 4);
        let at = |n: u32| start + step * n;
        // Ops back to back: a streak once STREAK came in a row.
        let mut streak = Streak::default();
        let streaming: Vec<bool> = (0..=STREAK).map(|n| streak.submitted(at(n), None)).collect();
        assert_eq!(streaming.iter().filter(|&&on| on).count(), 1, "{streaming:?}");
        assert!(streaming[STREAK as usize]);
        // An op, then its fence, done before the next op: however close
        // together, a caller that waits for each op is not streaming.
        let mut streak = Streak::default();
        for n in 0..4 * STREAK {
            let fence = fence();
            assert!(!streak.submitted(at(2 * n), None), "op {n} streamed");
            assert!(!streak.submitted(at(2 * n + 1), Some(&fence)), "fence {n} streamed");
            fence.complete_here(Ok(()));
        }
        // Fences nobody waits for (still running at the next op) do not end a streak.
        let (mut streak, pending) = (Streak::default(), fence());
        let streaming = (0..=STREAK).any(|n| streak.submitted(at(n), Some(&pending)));
        assert!(streaming, "fences left running ended the streak");
    }
}
