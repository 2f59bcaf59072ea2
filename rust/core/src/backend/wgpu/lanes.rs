//! Logical streams on the device's one queue: each a lane of the host-side
//! engine (`backend::lane`), run at once on the thread that schedules it.
//!
//! On one queue, work submitted earlier is ordered before work submitted
//! later (wgpu inserts the barriers), so cross-stream order is submission
//! order. Each stream keeps:
//! - a *batch*: ops admitted but not yet recorded ([`Queued`]), recorded
//!   together into one encoder when the batch is submitted;
//! - its lane's *jobs* ([`Item`]): what must be issued to the queue in
//!   stream order — a batch to submit, a read to map, a fence callback to
//!   register, or something that holds the lane: a wait for another lane, a
//!   gate, a delay.
//!
//! Issuing a batch does not submit it at once: the batches lanes issue wait,
//! in issue order, for one submission ([`Pending`]), made at the next read
//! or signal of any lane or once they hold [`BATCH_LIMIT`] ops. So a wait of
//! one lane for another (a cross-stream dependency) costs no submission of
//! its own, and ops of several lanes share a command buffer.
//!
//! An event is "lane S has issued its first n jobs" (the lane's progress).
//! A wait on an event that is already issued costs nothing; otherwise the
//! waiting lane parks at that point until the other lane gets there, and
//! the other lane's progress wakes it. That is how gates and delays on one
//! lane hold back exactly the lanes that depend on it, as on a real
//! multi-queue device.
//!
//! A lane runs on whichever thread schedules it: the admitting thread, a
//! gate's opener, the thread whose lane's progress woke it. A lane woken
//! while its thread runs another runs after it, on the same thread
//! ([`OnQueue::schedule`]), so waking never nests. A dropped stream's lane
//! counts as gone once its jobs are issued.
//!
//! A signal completes once the submission that covers it is done *and* every
//! read issued before it on its lane has delivered ([`Reads`]). Signals
//! complete in issue order as far as anyone can see: one that finds its work
//! done at once never completes before an earlier one that waits for the
//! same work ([`Submissions`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::poll::{once, PollState};
use super::queued::{record_runs, Queued};
use super::readback::{Readback, Reads};
use crate::backend::lane::{Lane, LaneEvent, Ran, Runner, Step};
use crate::backend::{FailureTally, SignalKind};
use crate::completion::Completion;
use crate::error::{Error, Failures, Result};
use crate::lock::lock;
use weir_device::wgpu::scope::scoped;
use weir_device::wgpu::WgpuDevice;

/// A lane issues its batch once it holds this many ops, and the pending
/// submission is made once it holds this many, so long streams of work start
/// running before anyone waits for them; they are recorded into one command
/// buffer. A lane that cannot issue (held behind a gate or a wait) keeps its
/// ops queued, unrecorded, at a few hundred bytes each (`queued_bytes`),
/// until it can.
const BATCH_LIMIT: usize = 32;

/// A stream's lane on the queue.
pub(crate) type WgpuLane = Lane<OnQueue>;

/// One job of a lane (besides the waits for other lanes and the holds,
/// which the lane keeps itself: `lane::Step`).
pub(crate) enum Item {
    /// A batch, issued into the pending submission.
    Submit(Vec<Queued>),
    Read(Readback),
    Signal(Arc<Completion>, SignalKind),
    /// An op failed to record: the lane fails here, after the work before it.
    Fail(Error),
    /// The stream was dropped: the lane counts as gone once this is issued.
    Retire,
}

/// A lane's part of the wgpu engine: its stream, batch, failures and
/// submissions.
#[derive(Default)]
pub(crate) struct OnQueue {
    /// The stream's number, for error messages.
    pub stream: u32,
    shared: Weak<Shared>,
    /// Ops admitted but not yet recorded. Its lock also orders the lane's
    /// pushes: whoever issues a batch pushes it before letting go.
    batch: Mutex<Vec<Queued>>,
    /// The first failure as recorded: ops recorded after it are refused at once.
    failed: OnceLock<Error>,
    /// The first failure as issued: later work is dropped, fences and reads report it.
    status: OnceLock<Error>,
    /// Ops that failed as their batch was recorded, for the next fence.
    pub tally: Arc<FailureTally>,
    /// Our submission count when this lane last submitted (or learnt, by a
    /// wait, that what it waits for did).
    last_submit: AtomicU64,
    /// Our submission count when this lane's own work was last submitted:
    /// what a read's copy went in. A wait never raises it, so a read
    /// delivered tells no later submission done than its own.
    own_submit: AtomicU64,
    /// Reads mapped but not yet delivered.
    reads: Arc<Reads>,
}

impl OnQueue {
    /// The lane's last submission, for a read or signal issued once
    /// `submits` were made: no later one. A wait admitted meanwhile on
    /// another thread may have raised it ([`Runner::reached`]) to a run
    /// issued since, which this read or signal, issued before the wait, need
    /// not cover (and whose submission may be long in coming).
    fn last_submit(&self, submits: u64) -> u64 {
        self.last_submit.load(Ordering::SeqCst).min(submits)
    }

    /// Fails the lane now (at issue time).
    fn fail(&self, error: Error) {
        let _ = self.failed.set(error.clone());
        let _ = self.status.set(error);
    }
}

thread_local! {
    /// The lanes woken while this thread runs lanes, to run once it is done
    /// with the one it runs: `None` while it runs none.
    static WOKEN: RefCell<Option<VecDeque<Arc<WgpuLane>>>> = const { RefCell::new(None) };
}

impl Runner for OnQueue {
    type Job = Item;
    // Its jobs only record and submit: a lane runs until it parks or runs out.

    fn run(lane: &Arc<WgpuLane>, item: Item) -> Ran<Item> {
        match lane.runner.shared.upgrade() {
            Some(shared) => shared.issue(lane, item),
            None => closed(item),
        }
        lane.progress.advance(1);
        Ran::Done
    }

    fn reached(lane: &WgpuLane, source: &WgpuLane) {
        // A fence on this lane now also covers what it waited for, as on other backends.
        let source_submit = source.runner.last_submit.load(Ordering::SeqCst);
        lane.runner.last_submit.fetch_max(source_submit, Ordering::SeqCst);
    }

    /// Runs the lane now, on this thread; or, if this thread already runs
    /// one, once that one is done.
    fn schedule(lane: Arc<WgpuLane>) {
        let first = WOKEN.with(|woken| {
            let mut woken = woken.borrow_mut();
            if let Some(later) = woken.as_mut() {
                later.push_back(lane.clone());
                return false;
            }
            *woken = Some(VecDeque::new());
            true
        });
        if !first {
            return;
        }
        // Ends this thread's turn at running lanes, however it ends.
        let _running = scopeguard::guard((), |()| drop(WOKEN.with(|woken| woken.borrow_mut().take())));
        lane.run_jobs();
        while let Some(next) = WOKEN.with(|woken| woken.borrow_mut().as_mut().and_then(VecDeque::pop_front)) {
            next.run_jobs();
        }
    }
}

/// What becomes of a job whose device is gone.
fn closed(item: Item) {
    match item {
        Item::Signal(completion, _) => completion.complete(Err(Error::Closed)),
        Item::Read(readback) => readback.sink.fail(Error::Closed),
        _ => {}
    }
}

/// The runs issued and not yet submitted, each with its lane, in issue
/// order: submitted together at the next read or signal, or once they hold
/// [`BATCH_LIMIT`] ops.
#[derive(Default)]
struct Pending {
    runs: Vec<(Arc<WgpuLane>, Vec<Queued>)>,
    /// Ops in `runs`.
    ops: usize,
    /// Queue submissions made so far.
    submits: u64,
}

/// The device state the lanes share.
pub(crate) struct Shared {
    pub gpu: WgpuDevice,
    pub poll: Arc<PollState>,
    pending: Mutex<Pending>,
    /// Every lane made, for what concerns them all (flushing, closing).
    lanes: Mutex<Vec<Weak<WgpuLane>>>,
    /// Submissions known complete (from fence and read callbacks), and the signals waiting for them.
    progress: Arc<Submissions>,
}

impl Shared {
    pub fn new(gpu: WgpuDevice, poll: Arc<PollState>) -> Arc<Shared> {
        Arc::new(Shared { gpu, poll, pending: Mutex::default(), lanes: Mutex::default(), progress: Arc::default() })
    }

    /// A new lane for stream `stream` (the runtime's number of it).
    pub fn add_lane(self: &Arc<Self>, stream: u32) -> Arc<WgpuLane> {
        // The lanes issue through the shared part while it lives.
        let on_queue = OnQueue {
            stream,
            shared: Arc::downgrade(self),
            batch: Mutex::new(Vec::with_capacity(BATCH_LIMIT)),
            ..OnQueue::default()
        };
        let lane = Lane::new(on_queue, None);
        let mut lanes = lock(&self.lanes);
        lanes.retain(|lane| lane.strong_count() > 0);
        lanes.push(Arc::downgrade(&lane));
        drop(lanes);
        self.gpu.counters.live_streams.fetch_add(1, Ordering::SeqCst);
        lane
    }

    /// Pushes the lane's batch, if it has one, then `then`, as one push;
    /// `batch` is the lane's, locked, which every push holds. A lane with
    /// nothing queued issues them at once, on this thread, unless `then`
    /// may hold it: what its run would do, without the queue's round trip.
    fn flush(&self, lane: &Arc<WgpuLane>, batch: &mut Vec<Queued>, then: Option<Step<OnQueue>>) {
        let run = (!batch.is_empty())
            // Sized for a full batch: grown op by op, it would be copied four times.
            .then(|| Step::Job(Item::Submit(std::mem::replace(batch, Vec::with_capacity(BATCH_LIMIT)))));
        let may_hold = then.as_ref().is_some_and(|then| !matches!(then, Step::Job(_)));
        let steps = run.into_iter().chain(then);
        if !may_hold && lane.surely_idle() {
            for step in steps {
                if let Step::Job(item) = step {
                    lane.run_here(|| self.issue(lane, item));
                }
            }
        } else {
            lane.push_steps(steps);
        }
    }

    /// The stream of `lane` was dropped: its batch is issued, and the lane
    /// counts as gone once everything on it is. Nothing, if the device is gone.
    pub fn retire(lane: &Arc<WgpuLane>) {
        if let Some(shared) = lane.runner.shared.upgrade() {
            let mut batch = lock(&lane.runner.batch);
            shared.flush(lane, &mut batch, Some(Step::Job(Item::Retire)));
        }
    }

    /// Adds queued work to the lane's batch; a read is mapped once its copy
    /// is submitted. On a failed lane the work is dropped, the read fails, and
    /// the lane's failure is the op's.
    pub fn record(&self, lane: &Arc<WgpuLane>, queued: Queued, readback: Option<Readback>) -> Result<(), Error> {
        let mut batch = lock(&lane.runner.batch);
        if let Some(error) = lane.runner.failed.get() {
            if let Some(readback) = readback {
                readback.sink.fail(error.clone());
            }
            return Err(error.clone());
        }
        batch.push(queued);
        match readback {
            Some(readback) => self.flush(lane, &mut batch, Some(Step::Job(Item::Read(readback)))),
            None if batch.len() >= BATCH_LIMIT => self.flush(lane, &mut batch, None),
            None => {}
        }
        Ok(())
    }

    /// Fails `lane` with `error` after the work recorded so far (its first failure wins).
    pub fn fail(&self, lane: &Arc<WgpuLane>, error: Error) {
        let mut batch = lock(&lane.runner.batch);
        if lane.runner.failed.set(error.clone()).is_ok() {
            self.flush(lane, &mut batch, Some(Step::Job(Item::Fail(error))));
        }
    }

    /// Adds a lane-level step after everything recorded so far.
    pub fn push(&self, lane: &Arc<WgpuLane>, step: Step<OnQueue>) {
        let mut batch = lock(&lane.runner.batch);
        self.flush(lane, &mut batch, Some(step));
    }

    /// True if a signal pushed on `lane` now would complete at once with `Ok`
    /// (see `complete_after`): nothing recorded or queued on it, its submissions done,
    /// its reads delivered, nothing failed. A probe: it pushes nothing.
    pub fn is_settled(&self, lane: &Arc<WgpuLane>) -> bool {
        let on_queue = &lane.runner;
        // Idle first: a job counts as issued after its effects.
        lane.surely_idle()
            && lock(&on_queue.batch).is_empty()
            && on_queue.failed.get().is_none()
            && on_queue.status.get().is_none()
            && on_queue.tally.is_clear()
            && on_queue.last_submit.load(Ordering::SeqCst) <= self.progress.completed()
            && on_queue.reads.idle()
            && lock(&self.gpu.device_error).is_none()
    }

    /// A point covering everything recorded on `lane` so far.
    pub fn mark(&self, lane: &Arc<WgpuLane>) -> LaneEvent<OnQueue> {
        let mut batch = lock(&lane.runner.batch);
        self.flush(lane, &mut batch, None);
        LaneEvent::now(lane, &self.gpu.counters)
    }

    /// Makes `lane` hold until `event`'s point is issued (at once if it already was).
    pub fn wait(&self, lane: &Arc<WgpuLane>, event: &LaneEvent<OnQueue>) {
        if let Some(wait) = event.wait_step(lane) {
            self.push(lane, wait);
        }
    }

    /// Issues every lane's unrecorded batch and submits what was issued: a
    /// producer waits for room in the runtime's queue, which these ops fill
    /// until a read, a signal or [`BATCH_LIMIT`] would have issued them.
    pub fn flush_all(&self) {
        let lanes: Vec<Arc<WgpuLane>> = lock(&self.lanes).iter().filter_map(Weak::upgrade).collect();
        for lane in &lanes {
            let mut batch = lock(&lane.runner.batch);
            if !batch.is_empty() {
                self.flush(lane, &mut batch, None);
            }
        }
        self.submit_pending(&mut lock(&self.pending));
    }

    /// Issues `item`, the first job of `lane`.
    fn issue(&self, lane: &Arc<WgpuLane>, item: Item) {
        let on_queue = &lane.runner;
        // A device-wide failure (device lost, an error outside any scope) fails every lane.
        if let Some(error) = lock(&self.gpu.device_error).clone() {
            on_queue.fail(error);
        }
        match item {
            Item::Submit(mut run) => {
                // The ops leave the runtime's queue here: what is issued is
                // submitted within BATCH_LIMIT ops, or by the next read or signal.
                for queued in &mut run {
                    if let Queued::Op(op) = queued {
                        op.give_back_credit();
                    }
                }
                if let Some(error) = on_queue.status.get() {
                    // Never to run: what it would have written says so.
                    for queued in run {
                        queued.fail(error.clone(), &on_queue.tally);
                    }
                    return;
                }
                let mut pending = lock(&self.pending);
                pending.ops += run.iter().filter(|queued| matches!(queued, Queued::Op(_))).count();
                // The submission that will carry it: the next one.
                on_queue.last_submit.store(pending.submits + 1, Ordering::SeqCst);
                on_queue.own_submit.store(pending.submits + 1, Ordering::SeqCst);
                pending.runs.push((lane.clone(), run));
                if pending.ops >= BATCH_LIMIT {
                    self.submit_pending(&mut pending);
                }
            }
            Item::Read(readback) => {
                // A read maps what is submitted.
                let submits = self.submit_all();
                match on_queue.status.get() {
                    Some(error) => readback.sink.fail(error.clone()),
                    None => {
                        // Its copy's submission, not one a wait admitted
                        // meanwhile raised the lane's to (`reached`): the map
                        // says only that the copy's is done.
                        let submission = on_queue.own_submit.load(Ordering::SeqCst).min(submits);
                        readback.start(&self.poll, &on_queue.reads, &self.progress, submission)
                    }
                }
            }
            Item::Signal(completion, kind) => {
                // A signal waits for what is submitted.
                let submits = self.submit_all();
                self.complete_after(on_queue, submits, completion, kind);
            }
            Item::Fail(error) => on_queue.fail(error),
            Item::Retire => {
                self.gpu.counters.live_streams.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Submits the runs issued so far; the submissions made, this one included.
    fn submit_all(&self) -> u64 {
        let mut pending = lock(&self.pending);
        self.submit_pending(&mut pending);
        pending.submits
    }

    /// Records and submits the runs issued so far, as one submission: ops of
    /// several lanes, one after another in issue order, share its command
    /// buffer (the queue orders them as it would across submissions).
    fn submit_pending(&self, pending: &mut Pending) {
        if pending.runs.is_empty() {
            return;
        }
        let gpu = &self.gpu;
        pending.ops = 0;
        // A run issued before its lane failed still runs, as it would have
        // had it been submitted at once.
        let recording = record_runs(gpu, std::mem::take(&mut pending.runs));
        // `submit` also fires the device's callbacks that are ready, on
        // this thread: a foreign one may panic. Unwinding stops at the
        // first, after the submission was made; the rest ran their drop
        // paths (see `poll::once`), so the lanes stay consistent.
        let outcome = catch_unwind(AssertUnwindSafe(|| scoped(&gpu.device, || gpu.queue.submit(recording.commands))));
        pending.submits += 1;
        drop(recording.buffers);
        let Ok(Err(failure)) = outcome else { return };
        // Refused whole at submission (wgpu checks the command buffers
        // again: a buffer left mapped or destroyed by an external write, no
        // memory): none of it ran. Every op and external write in it fails,
        // so that what they would have written is never read as if they
        // had; and so does every lane whose work was in it, not knowing
        // whose commands were refused (`WgpuRawAccess`).
        let message = failure.message();
        let failed = |origin: usize| {
            let lane = &recording.lanes[origin].runner;
            (Error::OpFailed { stream: lane.stream, message: message.clone() }, &lane.tally)
        };
        for (origin, op) in recording.ops {
            let (error, tally) = failed(origin);
            op.fail(error, tally);
        }
        for (origin, io) in recording.written {
            let (error, tally) = failed(origin);
            io.fail(error, tally);
        }
        for (origin, lane) in recording.lanes.iter().enumerate() {
            lane.runner.fail(failed(origin).0);
        }
    }

    /// Completes `completion` with the lane's status (and for a fence, the
    /// failures of ops since the last one) once the lane's submissions so far
    /// (`submits` is the count made) are done and the reads it issued so far
    /// delivered: at once if both already are.
    fn complete_after(&self, lane: &OnQueue, submits: u64, completion: Arc<Completion>, kind: SignalKind) {
        let status = match lane.status.get() {
            Some(error) => Err(Failures::from(error.clone())),
            None => lane.tally.report(kind),
        };
        let last_submit = lane.last_submit(submits);
        let device_busy = last_submit > self.progress.completed();
        // No read of this lane can start meanwhile: its reads start only as
        // it runs, which is here. Idle reads and a raised count mean the
        // signals before this one that waited for them finished (see
        // `Submissions`, `Reads`).
        if !device_busy && lane.reads.idle() {
            // Already done: no callback, no wake-up.
            completion.report(status);
            return;
        }
        let join = PendingSignal::new(1 + usize::from(device_busy), completion, status);
        let after_reads = join.clone();
        if let Some(unrun) = lane.reads.after_started(move || after_reads.part_done()) {
            unrun();
        }
        if device_busy {
            let (poll, progress) = (self.poll.clone(), self.progress.clone());
            // Finished by whichever callback learns first that the lane's
            // submission is done: this one, or a read's of a later one.
            progress.wait_for(last_submit, join.clone());
            poll.register();
            // Runs once, also when wgpu drops it uncalled because a callback
            // fired before it panicked: its submission is done then as well.
            let body = once(move |called: Option<()>| {
                match called {
                    Some(()) => progress.done(submits),
                    None => progress.give_up(&join),
                }
                poll.done();
            });
            self.gpu.queue.on_submitted_work_done(move || body(()));
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // What was issued goes to the device, as it would have at once.
        self.submit_pending(&mut lock(&self.pending));
        // Whatever never got issued (a gate never opened) must still complete.
        let lanes = std::mem::take(&mut *lock(&self.lanes));
        for lane in lanes.iter().filter_map(Weak::upgrade) {
            lane.take_jobs().for_each(closed);
        }
    }
}

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
