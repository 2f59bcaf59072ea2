//! The one engine: a lane of jobs, run in order, one at a time, each
//! counted done on the lane's [`Progress`].
//!
//! A job that waits for something else (another stream's progress, a gate,
//! a delay, a collective's other parts) parks the lane: it stays first in
//! the queue, no thread waits for it, and its waker schedules the lane
//! again. What a job is and where a scheduled lane runs is its [`Runner`]'s
//! choice, mostly a pool's thread (`backend::pool`):
//! - a CPU stream's jobs are host work: a bounded pool of workers runs
//!   lanes (`cpu::worker`);
//! - a wgpu stream's jobs only record, submit and register callbacks: a
//!   lane runs at once on the thread that scheduled it (`wgpu::lanes`);
//! - a GPU device's driver calls are one lane in admission order, run by
//!   a pool of one or at once by the admitting thread (`gpu::issue`), and
//!   each GPU stream's completions are a lane its device's waiting threads
//!   run (`gpu::waiters`).
//!
//! Either way the rules are these, written once: jobs run in push order;
//! an event is "the lane finished its first n jobs" ([`Progress`]); a wake
//! while the lane runs makes it poll its parked job again before it lets
//! go, so no wake is lost.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Instant;

pub(crate) use super::progress::Progress;
use super::sync::{lock, AtomicU64, Mutex, MutexGuard, Ordering};
#[cfg(feature = "test-support")]
use super::{timer::Hold, OpIo};
use crate::completion::spin::SpinPolicy;
use crate::diagnostics::Counters;

/// What running a job came to.
pub(crate) enum Ran<J> {
    /// Run and counted on the lane's progress.
    Done,
    /// The job waits for something else; it stays first in the queue.
    Parked(J),
}

/// One entry of a lane's queue: a job of its runner, or ordering that
/// every engine's lanes keep alike, so the lane runs it itself.
pub(crate) enum Step<R: Runner> {
    Job(R::Job),
    /// Holds the lane until `lane` finished its first `upto` jobs (a
    /// [`LaneEvent`]), then tells the runner ([`Runner::reached`]).
    Reach(Arc<Lane<R>>, u64),
    /// Holds the lane until a gate opens or a delay elapsed (test support);
    /// the op's share of the runtime's queue goes back as it passes.
    #[cfg(feature = "test-support")]
    Hold(Hold, OpIo),
}

/// What a lane's jobs are, how one runs, and where a scheduled lane runs.
pub(crate) trait Runner: Send + Sync + Sized + 'static {
    type Job: Send;
    /// Jobs one run of a lane takes before it lets other lanes have a turn:
    /// by default, all it has.
    const TURN: usize = usize::MAX;
    /// Jobs run before [`Runner::ran_taken`] counts them. Everything taken
    /// under one lock, by default; a runner whose pushers wait for room in a
    /// long queue counts more often, so that they see room while it still
    /// has work taken, not only once it ran everything and waits for them.
    /// (It still takes the whole queue at once: moving part of it out would
    /// copy every job once more.)
    const BATCH: usize = usize::MAX;
    /// Runs `job`, the first of `lane`'s, and counts it on the lane's
    /// progress ([`Progress::advance`]), or hands it back to wait,
    /// the lane's waker ([`Lane::waker`]) registered where it waits.
    fn run(lane: &Arc<Lane<Self>>, job: Self::Job) -> Ran<Self::Job>;
    /// Has [`Lane::run_jobs`] called for `lane`, which has jobs and no thread.
    fn schedule(lane: Arc<Lane<Self>>);
    /// True when other lanes wait for a thread: a lane lingering for its
    /// next job lets its thread go.
    fn others_waiting() -> bool {
        false
    }
    /// Called once the jobs [`Lane::run_jobs`] took at once have run (up to
    /// one that parked), and after every [`Runner::BATCH`] of them, on the
    /// same thread: for a runner that counts its progress, or lets go of
    /// what its jobs held, a batch at a time.
    fn ran_taken(_lane: &Arc<Lane<Self>>) {}
    /// `lane` waited for `source`'s point ([`Step::Reach`]) and it came:
    /// for a runner whose lanes' later work covers what the source's did.
    fn reached(_lane: &Lane<Self>, _source: &Lane<Self>) {}
}

/// "The lane finished its first `upto` jobs": a point another lane of the
/// same runner can wait for, with no device object. Counted among the
/// live events while it lives.
pub(crate) struct LaneEvent<R: Runner> {
    lane: Arc<Lane<R>>,
    upto: u64,
    counters: Arc<Counters>,
}

impl<R: Runner> LaneEvent<R> {
    /// The point after every job pushed on `lane` so far.
    pub(crate) fn now(lane: &Arc<Lane<R>>, counters: &Arc<Counters>) -> Self {
        counters.live_events.fetch_add(1, Ordering::SeqCst);
        LaneEvent { lane: lane.clone(), upto: lane.pushed(), counters: counters.clone() }
    }

    /// What `waiting` queues to wait for this point: nothing once the point
    /// is reached (the runner is told at once), else a step that parks it.
    pub(crate) fn wait_step(&self, waiting: &Lane<R>) -> Option<Step<R>> {
        if self.lane.progress.finished() >= self.upto {
            R::reached(waiting, &self.lane);
            return None;
        }
        Some(Step::Reach(self.lane.clone(), self.upto))
    }
}

impl<R: Runner> Drop for LaneEvent<R> {
    fn drop(&mut self) {
        self.counters.live_events.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A lane: its jobs, whether a thread has it, and how far it got.
pub(crate) struct Lane<R: Runner> {
    queue: Mutex<Queue<Step<R>>>,
    /// Jobs pushed so far: the count an event recorded now covers, and what a
    /// thread lingering on the lane watches without its lock.
    pushed: AtomicU64,
    pub(crate) progress: Arc<Progress>,
    /// The gaps from the queue running empty to its next job, for lanes
    /// whose thread keeps them a moment for it: the thread keeps the lane,
    /// watching for the next, about as long while they are short (jobs fed
    /// op by op), and lets it go at once once they are not.
    gaps: Option<SpinPolicy>,
    pub(crate) runner: R,
}

struct Queue<J> {
    jobs: VecDeque<J>,
    /// Waiting for a thread, or running on one.
    scheduled: bool,
    /// Woken while scheduled: the parked job is polled again before the
    /// thread lets the lane go.
    woken: bool,
    /// The first job waits for something else: only its waker schedules
    /// the lane again, not the jobs queued behind it (each would cost a
    /// futile poll).
    parked: bool,
    /// Since when the queue is empty, for the next push to tell `gaps`.
    empty_since: Option<Instant>,
    /// Pushes do not schedule the lane ([`Lane::defer`]).
    deferred: bool,
}

impl<R: Runner> Wake for Lane<R> {
    fn wake(self: Arc<Self>) {
        self.schedule();
    }
}

impl<R: Runner> Lane<R> {
    /// A lane with no jobs; `gaps` as the field says.
    pub(crate) fn new(runner: R, gaps: Option<SpinPolicy>) -> Arc<Self> {
        let queue = Queue {
            jobs: VecDeque::new(),
            scheduled: false,
            woken: false,
            parked: false,
            empty_since: None,
            deferred: false,
        };
        Arc::new(Lane { queue: Mutex::new(queue), pushed: AtomicU64::new(0), progress: Arc::default(), gaps, runner })
    }

    /// What schedules the lane again once what its first job waits for happens.
    pub(crate) fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(self.clone())
    }

    /// Jobs pushed so far.
    pub(crate) fn pushed(&self) -> u64 {
        self.pushed.load(Ordering::SeqCst)
    }

    /// Has the lane run if it has jobs and no thread has it.
    fn schedule(self: Arc<Self>) {
        let mut queue = lock(&self.queue);
        queue.parked = false;
        if queue.scheduled {
            queue.woken = true;
            return;
        }
        if queue.jobs.is_empty() {
            return;
        }
        // To the runner even when the first step only orders: polled here,
        // a step that comes ready counts, which may wake the next lane, and
        // so on down a chain of waits, on this thread's stack.
        queue.scheduled = true;
        drop(queue);
        R::schedule(self);
    }

    /// Queues `jobs`, in order, and has the lane run unless a thread has it
    /// or its first job is parked. Returns how many jobs were pushed before
    /// them: the first one's place in the lane.
    pub(crate) fn push(self: &Arc<Self>, jobs: impl IntoIterator<Item = R::Job>) -> u64 {
        self.push_steps(jobs.into_iter().map(Step::Job))
    }

    /// As [`Lane::push`], for steps of any kind.
    pub(crate) fn push_steps(self: &Arc<Self>, steps: impl IntoIterator<Item = Step<R>>) -> u64 {
        let mut queue = lock(&self.queue);
        let before = queue.jobs.len();
        queue.jobs.extend(steps);
        let place = self.pushed.fetch_add((queue.jobs.len() - before) as u64, Ordering::SeqCst);
        if let (Some(since), Some(gaps)) = (queue.empty_since.take(), &self.gaps) {
            gaps.learn(since);
        }
        if !queue.deferred {
            self.schedule_if_ready(queue);
        }
        place
    }

    /// Pushes queue their jobs without having the lane run, until
    /// [`Lane::resume`]: a batch of pushes schedules it once, not once per
    /// job. Its caller resumes before anything may wait for those jobs.
    pub(crate) fn defer(&self) {
        lock(&self.queue).deferred = true;
    }

    /// Ends [`Lane::defer`]: the lane runs if it has jobs and no thread.
    pub(crate) fn resume(self: &Arc<Self>) {
        let mut queue = lock(&self.queue);
        queue.deferred = false;
        self.schedule_if_ready(queue);
    }

    /// Has the lane run, as a push does, if it has jobs, no thread and no
    /// parked job. A first step that only orders (a wait for another lane,
    /// a hold) is polled here at once ([`Lane::order_here`]): a lane that
    /// would only park takes no thread, and no thread is woken for it.
    fn schedule_if_ready(self: &Arc<Self>, mut queue: MutexGuard<'_, Queue<Step<R>>>) {
        if queue.scheduled || queue.parked || queue.jobs.is_empty() {
            return;
        }
        queue.scheduled = true;
        let orders_first = !matches!(queue.jobs.front(), Some(Step::Job(_)));
        drop(queue);
        match orders_first {
            true => self.clone().order_here(),
            false => R::schedule(self.clone()),
        }
    }

    /// Runs the lane's first steps here, this thread having the lane, while
    /// they only order (polls, no job's code): until one parks it, the
    /// queue runs empty, or a job comes first, which goes to the runner.
    fn order_here(self: Arc<Self>) {
        loop {
            let step = {
                let mut queue = lock(&self.queue);
                queue.woken = false;
                match queue.jobs.front() {
                    None => {
                        queue.scheduled = false;
                        return;
                    }
                    Some(Step::Job(_)) => break,
                    Some(_) => queue.jobs.pop_front(),
                }
            };
            if let Some(parked) = step.and_then(|step| self.run_step(step)) {
                if self.park(parked, &mut VecDeque::new()) {
                    return;
                }
            }
        }
        R::schedule(self);
    }

    /// Puts `parked` back in front of the queue, then `rest` (what was taken
    /// behind it), before what came meanwhile, and parks the lane: true. Only
    /// these move, never the queue behind them: a lane far behind its pushes
    /// (a chain of streams, each waiting for the last) parks once per job, and
    /// moving its whole queue each time would make every park slower the
    /// further behind it is. False, parking nothing, if the lane was woken
    /// between the poll and now: the caller polls again, or the wake is lost.
    fn park(&self, parked: Step<R>, rest: &mut VecDeque<Step<R>>) -> bool {
        let mut queue = lock(&self.queue);
        while let Some(step) = rest.pop_back() {
            queue.jobs.push_front(step);
        }
        queue.jobs.push_front(parked);
        if queue.woken {
            return false;
        }
        queue.scheduled = false;
        queue.parked = true;
        true
    }

    /// True if every job pushed so far has surely finished (see
    /// [`Progress::surely_reached`]): without a lock, so it may answer
    /// `false` for a lane finishing its last job.
    // What the wgpu lanes and the GPU issuer ask: their jobs may run on the pushing thread.
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda", feature = "hip", test)), allow(dead_code))]
    pub(crate) fn surely_idle(&self) -> bool {
        self.progress.surely_reached(self.pushed())
    }

    /// Counts one job pushed and, once `run` ran it here, done: for a lane
    /// with nothing queued whose every push the caller keeps out meanwhile,
    /// and a job that never parks, which a queue round trip would only
    /// delay by its locks.
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda", feature = "hip", test)), allow(dead_code))]
    pub(crate) fn run_here(&self, run: impl FnOnce()) {
        self.pushed.fetch_add(1, Ordering::SeqCst);
        run();
        self.progress.advance(1);
    }

    /// Takes every job not yet run, for an engine that is going away.
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))]
    pub(crate) fn take_jobs(&self) -> impl Iterator<Item = R::Job> {
        std::mem::take(&mut lock(&self.queue).jobs).into_iter().filter_map(|step| match step {
            Step::Job(job) => Some(job),
            _ => None,
        })
    }

    /// Runs `step`, the lane's first, and counts it done; or hands it back to wait.
    // Inlined, as its runner's `run`: a job (some 200 bytes) passed down
    // by value is otherwise copied once more per call.
    #[inline(always)]
    fn run_step(self: &Arc<Self>, step: Step<R>) -> Option<Step<R>> {
        match step {
            Step::Job(job) => {
                return match R::run(self, job) {
                    Ran::Done => None,
                    Ran::Parked(job) => Some(Step::Job(job)),
                }
            }
            Step::Reach(source, upto) => {
                if source.progress.poll_reached(upto, &self.waker()).is_pending() {
                    return Some(Step::Reach(source, upto));
                }
                R::reached(self, &source);
            }
            #[cfg(feature = "test-support")]
            Step::Hold(mut hold, io) => {
                if hold.poll_open(&self.waker()).is_pending() {
                    return Some(Step::Hold(hold, io));
                }
            }
        }
        self.progress.advance(1);
        None
    }

    /// Runs the lane's jobs in order until it has none or its next parks, or
    /// its turn ([`Runner::TURN`]) is over: then it is scheduled again, so
    /// lanes fed without end cannot keep every thread from the others. It
    /// takes what is queued, up to the turn, under one lock, and runs it
    /// without: pushes meanwhile do not wait behind each job.
    pub(crate) fn run_jobs(self: Arc<Self>) {
        let mut lingered = false;
        let mut turn = 0;
        // Taken jobs; its buffer goes back and forth with the queue's.
        let mut taken: VecDeque<Step<R>> = VecDeque::new();
        while turn < R::TURN {
            {
                let mut queue = lock(&self.queue);
                queue.woken = false;
                if queue.jobs.is_empty() {
                    // The queue gets back the buffer it lent, so a push
                    // need not allocate.
                    if queue.jobs.capacity() < taken.capacity() {
                        std::mem::swap(&mut queue.jobs, &mut taken);
                    }
                    let Some(gaps) = &self.gaps else {
                        queue.scheduled = false;
                        return;
                    };
                    // Timed whether or not it lingers: the next push learns the gap.
                    let since = *queue.empty_since.get_or_insert_with(Instant::now);
                    if lingered || !gaps.is_quick() {
                        queue.scheduled = false;
                        return;
                    }
                    // A lane fed op by op gets its next job within
                    // microseconds: keep it (still scheduled, so a push
                    // is one lock and no round trip) for about its recent
                    // gaps, unless other lanes wait for a thread.
                    let seen = self.pushed();
                    drop(queue);
                    gaps.spin_as_recent(since, || self.pushed() != seen || R::others_waiting());
                    lingered = true;
                    continue;
                }
                let take = queue.jobs.len().min(R::TURN - turn);
                match take == queue.jobs.len() {
                    true => std::mem::swap(&mut queue.jobs, &mut taken),
                    false => taken.extend(queue.jobs.drain(..take)),
                }
            }
            lingered = false;
            let (mut parked, mut uncounted) = (None, 0);
            while let Some(step) = taken.pop_front() {
                turn += 1;
                parked = self.run_step(step);
                if parked.is_some() {
                    break;
                }
                uncounted += 1;
                if uncounted == R::BATCH {
                    R::ran_taken(&self);
                    uncounted = 0;
                }
            }
            if uncounted > 0 || parked.is_some() {
                R::ran_taken(&self);
            }
            if let Some(job) = parked {
                if self.park(job, &mut taken) {
                    return;
                }
            }
        }
        R::schedule(self);
    }
}

// Not in the model check, whose primitives are loom's (`tests/loom_lane.rs`).
#[cfg(all(test, not(loom)))]
mod tests {
    use std::cell::RefCell;
    use std::sync::atomic::AtomicBool;

    use super::*;

    thread_local! {
        /// The lanes scheduled on this thread and not yet run, in order.
        static SCHEDULED: RefCell<Vec<Arc<Lane<Logged>>>> = const { RefCell::new(Vec::new()) };
    }

    /// A runner whose jobs log their names, or wait for another lane's
    /// progress; a scheduled lane waits for the test to run it.
    #[derive(Default)]
    struct Logged {
        log: Mutex<Vec<&'static str>>,
    }

    enum Act {
        Log(&'static str),
        /// Wakes its own lane as it is polled the first time, then parks:
        /// a wake between the poll and the park, which must not be lost.
        WokenWhilePolled(bool),
        /// Parks the first time it is polled (until the test wakes the lane).
        ParksOnce(bool),
    }

    impl Runner for Logged {
        type Job = Act;
        const TURN: usize = 3;

        fn run(lane: &Arc<Lane<Self>>, job: Act) -> Ran<Act> {
            match job {
                Act::Log(name) => lock(&lane.runner.log).push(name),
                Act::WokenWhilePolled(false) => {
                    lane.waker().wake();
                    return Ran::Parked(Act::WokenWhilePolled(true));
                }
                Act::WokenWhilePolled(true) => lock(&lane.runner.log).push("re-polled"),
                Act::ParksOnce(false) => return Ran::Parked(Act::ParksOnce(true)),
                Act::ParksOnce(true) => lock(&lane.runner.log).push("parked"),
            }
            lane.progress.advance(1);
            Ran::Done
        }

        fn schedule(lane: Arc<Lane<Self>>) {
            SCHEDULED.with(|scheduled| scheduled.borrow_mut().push(lane));
        }

        fn reached(lane: &Lane<Self>, _source: &Lane<Self>) {
            lock(&lane.runner.log).push("reached");
        }
    }

    fn scheduled() -> Vec<Arc<Lane<Logged>>> {
        SCHEDULED.with(|scheduled| std::mem::take(&mut *scheduled.borrow_mut()))
    }

    fn log(lane: &Lane<Logged>) -> Vec<&'static str> {
        lock(&lane.runner.log).clone()
    }

    #[test]
    fn jobs_run_in_push_order_a_lane_is_scheduled_once_and_a_turn_ends_after_its_jobs() {
        let lane = Lane::new(Logged::default(), None);
        lane.push([Act::Log("a"), Act::Log("b")]);
        lane.push([Act::Log("c"), Act::Log("d")]);
        let mut ready = scheduled();
        assert_eq!(ready.len(), 1, "a lane a thread has is not scheduled again");
        assert_eq!(lane.pushed(), 4);
        ready.remove(0).run_jobs();
        assert_eq!(log(&lane), ["a", "b", "c"], "one turn runs TURN jobs");
        assert_eq!(lane.progress.finished(), 3);
        assert!(lane.progress.surely_reached(3) && !lane.surely_idle());
        let mut ready = scheduled();
        assert_eq!(ready.len(), 1, "a lane whose turn ended goes back in line");
        ready.remove(0).run_jobs();
        assert_eq!(log(&lane), ["a", "b", "c", "d"]);
        assert!(lane.surely_idle() && scheduled().is_empty());
    }

    /// A runner told of its jobs two at a time, which notes how many of
    /// them had run each time it was told a batch ran.
    #[derive(Default)]
    struct Batched {
        ran: AtomicU64,
        told: Mutex<Vec<u64>>,
    }

    impl Runner for Batched {
        type Job = ();
        const BATCH: usize = 2;

        fn run(lane: &Arc<Lane<Self>>, (): ()) -> Ran<()> {
            lane.runner.ran.fetch_add(1, Ordering::SeqCst);
            Ran::Done
        }

        fn schedule(_lane: Arc<Lane<Self>>) {}

        fn ran_taken(lane: &Arc<Lane<Self>>) {
            let ran = lane.runner.ran.load(Ordering::SeqCst);
            lane.progress.advance(ran - lane.progress.finished());
            lock(&lane.runner.told).push(ran);
        }
    }

    #[test]
    fn a_runner_with_a_batch_is_told_after_each_batch_it_ran() {
        let lane = Lane::new(Batched::default(), None);
        lane.push([(); 5]);
        lane.clone().run_jobs();
        assert_eq!(*lock(&lane.runner.told), [2, 4, 5], "jobs counted a batch at a time, all in one turn");
        assert!(lane.surely_idle());
    }

    #[test]
    fn a_lane_parks_on_another_lanes_event_and_its_progress_wakes_it() {
        let (first, second) = (Lane::new(Logged::default(), None), Lane::new(Logged::default(), None));
        let counters = Arc::new(Counters::default());
        // Its job is pushed, not yet run: the lane is held back meanwhile.
        first.defer();
        first.push([Act::Log("first")]);
        let event = LaneEvent::now(&first, &counters);
        assert_eq!(counters.live_events.load(Ordering::SeqCst), 1);
        let wait = event.wait_step(&second).expect("the point is not reached yet");
        second.push_steps([wait, Step::Job(Act::Log("after"))]);
        assert!(scheduled().is_empty(), "a lane whose first step waits parks at once, asking no thread");
        assert!(log(&second).is_empty(), "the lane waits for the other's first job");
        second.push([Act::Log("later")]);
        assert!(scheduled().is_empty(), "a push behind a parked job does not schedule the lane");
        first.resume();
        scheduled().remove(0).run_jobs();
        let mut woken = scheduled();
        assert_eq!(woken.len(), 1, "the other lane's progress woke the parked one");
        woken.remove(0).run_jobs();
        assert_eq!(log(&second), ["reached", "after", "later"]);
        assert_eq!(second.progress.finished(), 3);
        // A point already reached needs no step; the runner hears of it at once.
        assert!(event.wait_step(&second).is_none());
        assert_eq!(log(&second).last(), Some(&"reached"));
        drop(event);
        assert_eq!(counters.live_events.load(Ordering::SeqCst), 0, "a dropped event is no longer live");
    }

    #[test]
    fn a_deferred_lane_is_scheduled_once_it_resumes_with_its_jobs_counted_meanwhile() {
        let lane = Lane::new(Logged::default(), None);
        lane.defer();
        lane.push([Act::Log("a")]);
        lane.push([Act::Log("b")]);
        assert!(scheduled().is_empty(), "a push while deferred scheduled the lane");
        assert_eq!(lane.pushed(), 2, "deferred jobs count as pushed: events cover them");
        lane.resume();
        let mut ready = scheduled();
        assert_eq!(ready.len(), 1, "resuming schedules the lane once");
        ready.remove(0).run_jobs();
        assert_eq!(log(&lane), ["a", "b"]);
        lane.resume();
        assert!(scheduled().is_empty(), "an empty lane is not scheduled");
    }

    #[test]
    fn a_wake_between_a_poll_and_its_park_makes_the_lane_poll_again() {
        let lane = Lane::new(Logged::default(), None);
        lane.push([Act::WokenWhilePolled(false), Act::Log("then")]);
        scheduled().remove(0).run_jobs();
        assert_eq!(log(&lane), ["re-polled", "then"], "the wake during the run was not lost");
    }

    #[test]
    fn a_job_that_parks_keeps_its_place_before_the_jobs_taken_with_it_and_those_pushed_meanwhile() {
        let lane = Lane::new(Logged::default(), None);
        // One turn takes all three: the last two wait behind the parked one.
        lane.push([Act::ParksOnce(false), Act::Log("b"), Act::Log("c")]);
        scheduled().remove(0).run_jobs();
        assert!(log(&lane).is_empty(), "the lane parked at its first job");
        lane.push([Act::Log("d"), Act::Log("e")]);
        assert!(scheduled().is_empty(), "a push behind a parked job does not schedule the lane");
        lane.waker().wake();
        while let Some(ready) = scheduled().pop() {
            ready.run_jobs();
        }
        assert_eq!(log(&lane), ["parked", "b", "c", "d", "e"]);
        assert!(lane.surely_idle());
    }

    /// A CPU read copies its bytes in its job's `finish`: a stream waiting
    /// for it must not see it done, and overwrite the bytes, before that.
    #[test]
    fn a_job_counted_with_its_finish_is_seen_done_only_after_the_finish() {
        let progress = Arc::new(Progress::default());
        let finished = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (progress, finished) = (progress.clone(), finished.clone());
            std::thread::spawn(move || {
                while !progress.surely_reached(1) {
                    std::hint::spin_loop();
                }
                finished.load(Ordering::SeqCst)
            })
        };
        progress.advance_after(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            finished.store(true, Ordering::SeqCst);
        });
        assert!(watcher.join().unwrap(), "the job was seen done before its finish ran");
        assert_eq!(progress.finished(), 1);
    }

    /// The count is advanced without the lock while nobody waits: a waiter
    /// that counts itself as the advance passes must still be woken.
    #[test]
    fn no_wake_is_lost_between_a_waiter_counting_itself_and_an_advance() {
        const JOBS: u64 = 20_000;
        let progress = Arc::new(Progress::default());
        let (done, finished) = std::sync::mpsc::channel();
        let blocked: Vec<_> = (0..2)
            .map(|offset| {
                let (progress, done) = (progress.clone(), done.clone());
                std::thread::spawn(move || {
                    for jobs in (1 + offset..=JOBS).step_by(7) {
                        progress.wait_for(jobs);
                    }
                    done.send(()).unwrap();
                })
            })
            .collect();
        // A parked "lane": a waker that polls again at once, until the end.
        let parked = {
            let (progress, done) = (progress.clone(), done.clone());
            std::thread::spawn(move || {
                let (woken, wakes) = std::sync::mpsc::channel::<()>();
                struct Ring(Mutex<std::sync::mpsc::Sender<()>>);
                impl Wake for Ring {
                    fn wake(self: Arc<Self>) {
                        let _ = lock(&self.0).send(());
                    }
                }
                let waker = Waker::from(Arc::new(Ring(Mutex::new(woken))));
                for jobs in (1..=JOBS).step_by(5) {
                    while progress.poll_reached(jobs, &waker).is_pending() {
                        wakes
                            .recv_timeout(std::time::Duration::from_secs(10))
                            .expect("a parked waiter was never woken");
                    }
                }
                done.send(()).unwrap();
            })
        };
        for job in 0..JOBS {
            progress.advance(1);
            // Paced, so the waiters meet the advances rather than find them all done.
            if job % 8 == 0 {
                std::thread::yield_now();
            }
        }
        for _ in 0..3 {
            finished.recv_timeout(std::time::Duration::from_secs(10)).expect("a blocked waiter was never woken");
        }
        blocked.into_iter().chain([parked]).for_each(|thread| thread.join().unwrap());
        assert_eq!(progress.finished(), JOBS);
    }

    #[test]
    fn a_job_run_here_counts_as_pushed_and_done() {
        let lane = Lane::new(Logged::default(), None);
        let waiter = Lane::new(Logged::default(), None);
        waiter.push_steps([Step::Reach(lane.clone(), 1), Step::Job(Act::Log("after"))]);
        assert!(scheduled().is_empty(), "the waiter parked at once");
        lane.run_here(|| lock(&lane.runner.log).push("here"));
        assert_eq!((lane.pushed(), lane.progress.finished()), (1, 1));
        assert!(lane.surely_idle());
        scheduled().remove(0).run_jobs();
        assert_eq!(log(&waiter), ["reached", "after"], "a job run here wakes the lanes waiting for it");
    }
}
