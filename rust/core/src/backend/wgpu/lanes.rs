//! Logical streams ("lanes") on the device's one queue.
//!
//! On one queue, work submitted earlier is ordered before work submitted
//! later (wgpu inserts the barriers), so cross-stream order is submission
//! order. Each lane keeps:
//! - a *batch*: ops admitted but not yet recorded ([`Queued`]), recorded
//!   together into one encoder when the batch is submitted;
//! - *items*: what must be issued to the queue in lane order — a batch to
//!   submit, a read to map, a fence callback to register, or something that
//!   holds the lane: a wait for another lane, a gate, a delay.
//!
//! Issuing a batch does not submit it at once: the batches lanes issue wait,
//! in issue order, for one submission ([`Lanes::pending`]), made at the next
//! read or signal of any lane or once they hold [`BATCH_LIMIT`] ops. So a
//! wait of one lane for another (a cross-stream dependency) costs no
//! submission of its own, and ops of several lanes share a command buffer.
//!
//! An event is "lane S has issued its first n items". A wait on an event that
//! is already issued costs nothing; otherwise the waiting lane holds at that
//! point until the other lane gets there. That is how gates and delays on one
//! lane hold back exactly the lanes that depend on it, as on a real
//! multi-queue device. Everything that issues runs in [`Shared::pump`].
//!
//! A lane whose stream was dropped goes once its items are issued; its slot is
//! reused under a new generation. A mark of a gone lane is issued by then,
//! so a wait on it holds nothing; what it covered on the device is covered by
//! the highest submission any gone lane made ([`Lanes::gone_submit`]).
//!
//! A signal completes once the submission that covers it is done *and* every
//! read issued before it on its lane has delivered ([`Reads`]). Signals
//! complete in issue order as far as anyone can see: one that finds its work
//! done at once never completes before an earlier one that waits for the
//! same work ([`Submissions`]).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
#[cfg(feature = "test-support")]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
#[cfg(feature = "test-support")]
use std::sync::Weak;
use std::sync::{Arc, Mutex};

use super::poll::{once, PollState};
use super::queued::{record_runs, Queued};
use super::readback::{ReadContext, Readback, Reads};
use super::signals::{PendingSignal, Submissions};
#[cfg(feature = "test-support")]
use crate::backend::timer::Hold;
use crate::backend::{EnqueueError, FailureTally, SignalKind};
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

/// Names a lane: its slot, and which of the lanes that used the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneId {
    slot: usize,
    generation: u64,
}

pub(crate) enum Item {
    /// A batch, issued into the pending submission.
    Submit(Vec<Queued>),
    Read(Readback),
    /// Holds until lane `lane` has issued `upto` items.
    Wait {
        lane: LaneId,
        upto: u64,
    },
    /// Holds until the hold lets go (a gate opened, a delay elapsed), test
    /// support like every hold of a stream; polled first at the head, then
    /// watched through the flag its opening sets.
    #[cfg(feature = "test-support")]
    Hold(Hold, Option<Arc<AtomicBool>>),
    Signal(Arc<Completion>, SignalKind),
    /// An op failed to record: the lane fails here, after the work before it.
    Fail(Error),
}

pub(crate) struct Lane {
    /// The stream's number, for error messages.
    stream: u32,
    generation: u64,
    batch: Vec<Queued>,
    items: VecDeque<Item>,
    pushed: u64,
    issued: u64,
    /// The lane's first failure as issued: later work is dropped, fences and reads report it.
    status: Result<()>,
    /// The first failure as recorded: ops recorded after it are dropped at once.
    failed: Option<Error>,
    /// Ops that failed as their batch was recorded, for the next fence.
    tally: Arc<FailureTally>,
    /// Our submission count when this lane last submitted.
    last_submit: u64,
    /// Reads mapped but not yet delivered.
    reads: Arc<Reads>,
    /// Its stream was dropped: the lane goes once its items are issued.
    retiring: bool,
    /// In [`Lanes::active`].
    listed: bool,
}

impl Lane {
    fn flush(&mut self) {
        if !self.batch.is_empty() {
            // Sized for a full batch: grown op by op, it would be copied four times.
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH_LIMIT));
            self.push(Item::Submit(batch));
        }
    }

    fn push(&mut self, item: Item) {
        self.items.push_back(item);
        self.pushed += 1;
    }

    /// Fails the lane now (at issue time).
    fn fail(&mut self, error: Error) {
        self.failed.get_or_insert(error.clone());
        if self.status.is_ok() {
            self.status = Err(error);
        }
    }

    /// Fails the lane after the work recorded so far.
    fn fail_after(&mut self, error: Error) {
        if self.failed.is_none() {
            self.failed = Some(error.clone());
            self.flush();
            self.push(Item::Fail(error));
        }
    }
}

#[derive(Default)]
pub(crate) struct Lanes {
    /// Lanes by slot; `None` is a free slot.
    slots: Vec<Option<Lane>>,
    free: Vec<usize>,
    /// Generations handed out so far.
    generations: u64,
    /// Slots of lanes whose stream was dropped.
    retiring: Vec<usize>,
    /// Slots of the lanes with items to issue (see [`Lanes::note`]): what
    /// `pump` looks at, so that idle streams cost it nothing.
    active: Vec<usize>,
    /// Queue submissions made so far.
    submits: u64,
    /// Runs issued but not yet submitted, in issue order: submitted together
    /// at the next read or signal, or once they hold [`BATCH_LIMIT`] ops.
    pending: Vec<PendingRun>,
    /// Ops in `pending`.
    pending_ops: usize,
    /// The highest `last_submit` of a lane that has gone.
    gone_submit: u64,
}

impl Lanes {
    fn get(&self, id: LaneId) -> Option<&Lane> {
        self.slots.get(id.slot)?.as_ref().filter(|lane| lane.generation == id.generation)
    }

    /// Lists lane `id` among the active ones if it has items to issue.
    fn note(&mut self, id: LaneId) {
        let Some(lane) = self.slots.get_mut(id.slot).and_then(Option::as_mut) else { return };
        if !lane.listed && !lane.items.is_empty() {
            lane.listed = true;
            self.active.push(id.slot);
        }
    }

    fn get_mut(&mut self, id: LaneId) -> Result<&mut Lane> {
        self.slots
            .get_mut(id.slot)
            .and_then(Option::as_mut)
            .filter(|lane| lane.generation == id.generation)
            .ok_or_else(|| Error::invalid(format!("no wgpu lane {}", id.slot)))
    }

    /// (items issued, last submission) of the lane `id`; a gone lane issued all of
    /// its items, and its submissions are covered by `gone_submit`.
    fn progress(&self, id: LaneId) -> (u64, u64) {
        self.get(id).map_or((u64::MAX, self.gone_submit), |lane| (lane.issued, lane.last_submit))
    }
}

/// A lane's run, issued and waiting for the submission that carries it.
pub(crate) struct PendingRun {
    slot: usize,
    generation: u64,
    stream: u32,
    tally: Arc<FailureTally>,
    run: Vec<Queued>,
}

/// A point in a lane another lane can wait for.
pub(crate) struct Mark {
    pub lane: LaneId,
    pub upto: u64,
}

/// The device state shared with the poll thread and with gate openers.
pub(crate) struct Shared {
    pub gpu: WgpuDevice,
    pub poll: Arc<PollState>,
    lanes: Mutex<Lanes>,
    /// Submissions known complete (from fence and read callbacks), and the signals waiting for them.
    progress: Arc<Submissions>,
    /// A device-wide failure (device lost, an error outside any scope): fails every lane.
    device_error: Arc<Mutex<Option<Error>>>,
    /// For a gate's opening, to pump once it opened.
    #[cfg(feature = "test-support")]
    me: Weak<Shared>,
}

impl Shared {
    pub fn new(gpu: WgpuDevice, poll: Arc<PollState>) -> Arc<Shared> {
        let device_error = gpu.device_error.clone();
        #[cfg_attr(not(feature = "test-support"), allow(unused_variables))]
        Arc::new_cyclic(|me| Shared {
            gpu,
            poll,
            lanes: Mutex::new(Lanes::default()),
            progress: Arc::default(),
            device_error,
            #[cfg(feature = "test-support")]
            me: me.clone(),
        })
    }

    /// A new lane for stream `stream` (the runtime's number of it).
    pub fn add_lane(&self, stream: u32) -> LaneId {
        let mut lanes = lock(&self.lanes);
        lanes.generations += 1;
        let generation = lanes.generations;
        let lane = Lane {
            stream,
            generation,
            batch: Vec::new(),
            items: VecDeque::new(),
            pushed: 0,
            issued: 0,
            status: Ok(()),
            failed: None,
            tally: Arc::default(),
            last_submit: 0,
            reads: Arc::new(Reads::default()),
            retiring: false,
            listed: false,
        };
        let slot = match lanes.free.pop() {
            Some(slot) => {
                lanes.slots[slot] = Some(lane);
                slot
            }
            None => {
                lanes.slots.push(Some(lane));
                lanes.slots.len() - 1
            }
        };
        self.gpu.counters.live_streams.fetch_add(1, Ordering::SeqCst);
        LaneId { slot, generation }
    }

    /// The stream of `lane` was dropped: flush its batch and let it go once
    /// everything on it is issued (at once if it already is).
    pub fn retire(&self, lane: LaneId) {
        let mut lanes = lock(&self.lanes);
        let Ok(slot) = lanes.get_mut(lane) else { return };
        if slot.retiring {
            return;
        }
        slot.flush();
        slot.retiring = true;
        lanes.retiring.push(lane.slot);
        lanes.note(lane);
        self.pump(&mut lanes);
    }

    /// Runs `f` on lane `lane` under the lanes lock, then issues what can be issued.
    fn with_lane<T>(&self, lane: LaneId, f: impl FnOnce(&mut Lane) -> T) -> Result<T> {
        let mut lanes = lock(&self.lanes);
        let value = f(lanes.get_mut(lane)?);
        lanes.note(lane);
        self.pump(&mut lanes);
        Ok(value)
    }

    /// Adds queued work to the lane's batch; a read is mapped once its copy
    /// is submitted. On a failed lane the work is dropped, the read fails, and
    /// the lane's failure is the op's.
    pub fn record(&self, lane: LaneId, queued: Queued, readback: Option<Readback>) -> Result<(), EnqueueError> {
        let recorded = self.with_lane(lane, |lane| {
            if let Some(error) = &lane.failed {
                if let Some(readback) = readback {
                    readback.fail(error.clone());
                }
                return Err(EnqueueError::Failed(error.clone()));
            }
            lane.batch.push(queued);
            match readback {
                Some(readback) => {
                    lane.flush();
                    lane.push(Item::Read(readback));
                }
                None if lane.batch.len() >= BATCH_LIMIT => lane.flush(),
                None => {}
            }
            Ok(())
        });
        recorded.map_err(EnqueueError::Rejected)?
    }

    /// Fails lane `lane` with `error` after the work recorded so far (its first failure wins).
    pub fn fail(&self, lane: LaneId, error: Error) -> Result<()> {
        self.with_lane(lane, |lane| lane.fail_after(error))
    }

    /// Adds a lane-level item after everything recorded so far.
    pub fn push(&self, lane: LaneId, item: Item) -> Result<()> {
        self.with_lane(lane, |lane| {
            lane.flush();
            lane.push(item);
        })
    }

    /// True if a signal pushed on `lane` now would complete at once with `Ok`
    /// (see `signal`): nothing recorded or queued on it, its submissions done,
    /// its reads delivered, nothing failed. A probe: it pushes nothing.
    pub fn is_settled(&self, lane: LaneId) -> bool {
        let lanes = lock(&self.lanes);
        let Some(slot) = lanes.get(lane) else { return false };
        slot.batch.is_empty()
            && slot.items.is_empty()
            && slot.status.is_ok()
            && slot.tally.is_clear()
            && slot.failed.is_none()
            && slot.last_submit <= self.progress.completed()
            && slot.reads.idle()
            && lock(&self.device_error).is_none()
    }

    /// A mark covering everything recorded on `lane` so far.
    pub fn mark(&self, lane: LaneId) -> Result<Mark> {
        self.with_lane(lane, |slot| {
            slot.flush();
            Mark { lane, upto: slot.pushed }
        })
    }

    /// Makes `lane` hold until `mark` is issued (at once if it already was).
    pub fn wait(&self, lane: LaneId, mark: &Mark) -> Result<()> {
        let mut lanes = lock(&self.lanes);
        let (issued, source_submit) = lanes.progress(mark.lane);
        let slot = lanes.get_mut(lane)?;
        if issued >= mark.upto {
            // A fence on this lane now also covers what it waited for, as on other backends.
            slot.last_submit = slot.last_submit.max(source_submit);
            return Ok(());
        }
        slot.flush();
        slot.push(Item::Wait { lane: mark.lane, upto: mark.upto });
        lanes.note(lane);
        self.pump(&mut lanes);
        Ok(())
    }

    /// Issues every lane's unrecorded batch and submits what was issued: a
    /// producer waits for room in the runtime's queue, which these ops fill
    /// until a read, a signal or [`BATCH_LIMIT`] would have issued them.
    pub fn flush_all(&self) {
        let mut lanes = lock(&self.lanes);
        for slot in 0..lanes.slots.len() {
            let Some(lane) = lanes.slots[slot].as_mut() else { continue };
            if lane.batch.is_empty() {
                continue;
            }
            lane.flush();
            let id = LaneId { slot, generation: lane.generation };
            lanes.note(id);
        }
        self.pump(&mut lanes);
        self.submit_pending(&mut lanes);
    }

    /// Issues every head item that is not held, until nothing moves; then
    /// lets retired lanes that issued everything go.
    fn pump(&self, lanes: &mut Lanes) {
        if let Some(error) = lock(&self.device_error).clone() {
            for lane in lanes.slots.iter_mut().flatten() {
                lane.fail(error.clone());
            }
        }
        loop {
            let mut moved = false;
            let mut at = 0;
            while let Some(&index) = lanes.active.get(at) {
                while self.head_ready(lanes, index) {
                    let Some(lane) = lanes.slots[index].as_mut() else { break };
                    let Some(item) = lane.items.pop_front() else { break };
                    lane.issued += 1;
                    self.issue(lanes, index, item);
                    moved = true;
                }
                match lanes.slots[index].as_mut() {
                    Some(lane) if !lane.items.is_empty() => at += 1,
                    idle => {
                        if let Some(lane) = idle {
                            lane.listed = false;
                        }
                        lanes.active.swap_remove(at);
                    }
                }
            }
            if !moved {
                break;
            }
        }
        self.let_retired_go(lanes);
    }

    /// Frees the slots of retired lanes with nothing left to issue. Their
    /// callbacks in flight hold what they need (the reads, the completions).
    fn let_retired_go(&self, lanes: &mut Lanes) {
        if lanes.retiring.is_empty() {
            return;
        }
        let Lanes { slots, free, retiring, gone_submit, .. } = lanes;
        retiring.retain(|&slot| {
            let Some(lane) = slots[slot].as_ref() else { return false };
            if !lane.items.is_empty() || !lane.batch.is_empty() {
                return true;
            }
            if let Some(lane) = slots[slot].take() {
                *gone_submit = (*gone_submit).max(lane.last_submit);
                self.gpu.counters.live_streams.fetch_sub(1, Ordering::SeqCst);
                free.push(slot);
            }
            false
        });
    }

    fn head_ready(&self, lanes: &mut Lanes, index: usize) -> bool {
        let Some(lane) = lanes.slots[index].as_mut() else { return false };
        let head = match lane.items.front_mut() {
            None => return false,
            Some(head) => head,
        };
        match head {
            Item::Wait { lane, upto } => {
                let (lane, upto) = (*lane, *upto);
                lanes.progress(lane).0 >= upto
            }
            #[cfg(feature = "test-support")]
            Item::Hold(_, Some(flag)) => flag.load(Ordering::Acquire),
            #[cfg(feature = "test-support")]
            Item::Hold(hold, unwatched) => {
                // First polled here, where the lane gets to it: a delay's time starts now.
                let flag = self.watch(hold);
                let open = flag.load(Ordering::Acquire);
                *unwatched = Some(flag);
                open
            }
            Item::Submit(_) | Item::Read(_) | Item::Signal(..) | Item::Fail(_) => true,
        }
    }

    /// The flag a lane holds at until `hold` lets go: the opening sets it
    /// and issues what waited, on the opening thread (which holds no lock of
    /// ours: a gate opens on its holder's thread or the timer's).
    #[cfg(feature = "test-support")]
    fn watch(&self, hold: &mut Hold) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        let opened = std::task::Waker::from(Arc::new(GateOpened { flag: flag.clone(), shared: self.me.clone() }));
        if hold.poll_open(&opened).is_ready() {
            flag.store(true, Ordering::Release);
        }
        flag
    }

    /// Issues what can be issued (after a gate opened or a delay elapsed).
    #[cfg(feature = "test-support")]
    pub fn pump_now(&self) {
        let mut lanes = lock(&self.lanes);
        self.pump(&mut lanes);
    }

    /// Issues `item`, the head of the lane in slot `index` (which is occupied).
    fn issue(&self, lanes: &mut Lanes, index: usize, item: Item) {
        // A read maps what is submitted, a signal waits for it.
        if matches!(item, Item::Read(_) | Item::Signal(..)) {
            self.submit_pending(lanes);
        }
        let Lanes { slots, submits, gone_submit, pending, pending_ops, .. } = lanes;
        let Some(lane) = slots[index].as_mut() else { return };
        let mut full = false;
        match item {
            Item::Submit(mut run) => {
                // The ops leave the runtime's queue here: what is issued is
                // submitted within BATCH_LIMIT ops, or by the next read or signal.
                for queued in &mut run {
                    if let Queued::Op(op) = queued {
                        op.give_back_credit();
                    }
                }
                if lane.status.is_err() {
                    return;
                }
                *pending_ops += run.iter().filter(|queued| matches!(queued, Queued::Op(_))).count();
                // The submission that will carry it: the next one.
                lane.last_submit = *submits + 1;
                pending.push(PendingRun {
                    slot: index,
                    generation: lane.generation,
                    stream: lane.stream,
                    tally: lane.tally.clone(),
                    run,
                });
                full = *pending_ops >= BATCH_LIMIT;
            }
            Item::Read(readback) => match &lane.status {
                Err(error) => readback.fail(error.clone()),
                Ok(()) => readback.start(ReadContext {
                    poll: &self.poll,
                    reads: &lane.reads,
                    progress: &self.progress,
                    submission: lane.last_submit,
                }),
            },
            Item::Signal(completion, kind) => self.signal(lane, *submits, completion, kind),
            Item::Wait { lane: source, .. } => {
                let source_submit =
                    slots.get(source.slot).and_then(Option::as_ref).filter(|l| l.generation == source.generation);
                let source_submit = source_submit.map_or(*gone_submit, |l| l.last_submit);
                if let Some(waiter) = slots[index].as_mut() {
                    waiter.last_submit = waiter.last_submit.max(source_submit);
                }
            }
            Item::Fail(error) => {
                if let Some(lane) = slots[index].as_mut() {
                    lane.fail(error);
                }
            }
            #[cfg(feature = "test-support")]
            Item::Hold(..) => {}
        }
        if full {
            self.submit_pending(lanes);
        }
    }

    /// Records and submits the runs issued so far, as one submission: ops of
    /// several lanes, one after another in issue order, share its command
    /// buffer (the queue orders them as it would across submissions).
    fn submit_pending(&self, lanes: &mut Lanes) {
        if lanes.pending.is_empty() {
            return;
        }
        let gpu = &self.gpu;
        let runs = std::mem::take(&mut lanes.pending);
        lanes.pending_ops = 0;
        // A run issued before its lane failed still runs, as it would have
        // had it been submitted at once.
        let mut origins = Vec::with_capacity(runs.len());
        let mut kept = Vec::with_capacity(runs.len());
        for run in runs {
            origins.push((run.slot, run.generation));
            kept.push((run.stream, run.tally, run.run));
        }
        let recording = record_runs(gpu, kept);
        // `submit` also fires the device's callbacks that are ready, on
        // this thread: a foreign one may panic. Unwinding stops at the
        // first, after the submission was made; the rest ran their drop
        // paths (see `poll::once`), so the lanes stay consistent.
        let outcome = catch_unwind(AssertUnwindSafe(|| scoped(&gpu.device, || gpu.queue.submit(recording.commands))));
        lanes.submits += 1;
        drop((recording.ops, recording.buffers));
        if let Ok(Err(failure)) = outcome {
            let message = failure.message();
            for (slot, generation) in origins {
                if let Some(lane) = lanes.slots.get_mut(slot).and_then(Option::as_mut) {
                    if lane.generation == generation {
                        let stream = lane.stream;
                        lane.fail(Error::OpFailed { stream, message: message.clone() });
                    }
                }
            }
        }
    }

    /// Completes `completion` with the lane's status (and for a fence, the
    /// failures of ops since the last one) once the lane's submissions so far
    /// (`submits` is the count made) are done and the reads it issued so far
    /// delivered: at once if both already are.
    fn signal(&self, lane: &Lane, submits: u64, completion: Arc<Completion>, kind: SignalKind) {
        let status = lane.status.clone().map_err(Failures::from).and_then(|()| lane.tally.report(kind));
        let device_busy = lane.last_submit > self.progress.completed();
        // No read can start meanwhile: reads start only here, under the lanes
        // lock. Idle reads and a raised count mean the signals before this
        // one that waited for them finished (see `Submissions`, `Reads`).
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
            progress.wait_for(lane.last_submit, join.clone());
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
            self.gpu.queue.on_submitted_work_done(move || body.call(()));
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // What was issued goes to the device, as it would have at once.
        let mut held = lock(&self.lanes);
        self.submit_pending(&mut held);
        // Whatever never got issued (a gate never opened) must still complete.
        let lanes = std::mem::take(&mut *held);
        drop(held);
        for lane in lanes.slots.into_iter().flatten() {
            for item in lane.items {
                match item {
                    Item::Signal(completion, _) => completion.complete(Err(Error::Closed)),
                    Item::Read(readback) => readback.fail(Error::Closed),
                    _ => {}
                }
            }
        }
    }
}

/// What a gate's opening does to the lane held at it: sets the lane's flag
/// and issues what waited.
#[cfg(feature = "test-support")]
struct GateOpened {
    flag: Arc<AtomicBool>,
    shared: Weak<Shared>,
}

#[cfg(feature = "test-support")]
impl std::task::Wake for GateOpened {
    fn wake(self: Arc<Self>) {
        self.flag.store(true, Ordering::Release);
        if let Some(shared) = self.shared.upgrade() {
            shared.pump_now();
        }
    }
}
