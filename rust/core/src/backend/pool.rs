//! Threads that run lanes (`backend::lane`): one kind of pool, in two
//! shapes.
//! - **Bounded**: the CPU engine's workers, as many as the host has cores,
//!   since its jobs are host work (a lane waits for a free one); a GPU
//!   device's issuing thread, and the thread of a driver whose free waits
//!   for the device: one each.
//! - **One thread per ready lane** (a GPU device's completion waiters):
//!   their jobs sleep in the driver until the device gets somewhere, so a
//!   lane must never wait behind another lane's wait.
//!
//! Either way threads start as lanes come and retire after [`RETIRE`] with
//! nothing to run, so the thread count follows the work, not the number of
//! streams ever made. A ready lane rings the thread that fell asleep last:
//! a lane fed one job at a time keeps to one warm thread while the others
//! sleep on and retire (woken in turn, each would be woken every few
//! milliseconds and none would ever retire). A pool whose shape says so
//! first lets an idle thread watch for its next lane about as long as its
//! recent idle spells were (the one spin rule, [`SpinPolicy`]), since a
//! sleeping thread takes 10–30 µs to wake.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::lane::{Lane, Runner};
use crate::completion::spin::SpinPolicy;
use crate::lock::lock;

/// How long a sleeping thread waits for a lane before it retires.
const RETIRE: Duration = Duration::from_millis(200);

thread_local! {
    /// The pool this thread belongs to and the lane it runs now (their
    /// addresses; 0: none), so that nothing waits for itself.
    static CURRENT: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// What kind of pool it is.
pub(crate) struct Shape {
    /// The threads' name.
    pub(crate) name: String,
    /// Threads kept while there is work; `None`: one per ready lane.
    pub(crate) size: Option<usize>,
    /// How an idle thread watches for its next lane before it sleeps
    /// (each thread learns its own idle spells); a zero budget sleeps at once.
    pub(crate) idle: SpinPolicy,
    /// Run on each thread as it starts.
    pub(crate) on_start: fn(),
    /// With no thread running and none to be had, a ready lane runs on the
    /// thread that scheduled it; else it waits for a thread to free up.
    pub(crate) else_here: bool,
}

/// A pool of threads running lanes of `R`; see the module doc.
pub(crate) struct Pool<R: Runner> {
    state: Mutex<PoolState<R>>,
    /// `ready.len()`, for a lingering thread to watch without the lock: it
    /// would otherwise take the lock between yields, against every push.
    ready_hint: AtomicUsize,
    /// Told as a thread exits, for [`Pool::close`].
    gone: Condvar,
    shape: Shape,
}

struct PoolState<R: Runner> {
    /// Lanes with jobs to run, none of them running.
    ready: VecDeque<Arc<Lane<R>>>,
    threads: usize,
    /// Threads looking for a lane (lingering or asleep).
    free: usize,
    /// Threads asleep, the last to fall asleep at the end. With none
    /// asleep, nothing is rung (a wake-up is a system call, even with
    /// nobody to wake).
    sleepers: Vec<Arc<Bell>>,
    /// A thread is lingering: the others sleep at once, so that idle
    /// threads never spin on every core while the threads they wait for
    /// want one.
    lingering: bool,
    /// Threads blocked in a wait inside a job (see [`Pool::blocking`]).
    blocked: usize,
    /// No more threads: those left exit once nothing is ready.
    closed: bool,
}

impl<R: Runner> Pool<R> {
    pub(crate) fn new(shape: Shape) -> Arc<Self> {
        let state = PoolState {
            ready: VecDeque::new(),
            threads: 0,
            free: 0,
            sleepers: Vec::new(),
            lingering: false,
            blocked: 0,
            closed: false,
        };
        Arc::new(Pool { state: Mutex::new(state), ready_hint: AtomicUsize::new(0), gone: Condvar::new(), shape })
    }

    /// Queues a lane that has jobs, and starts a thread for it if none is
    /// free and the shape allows one more (plus one per blocked thread).
    /// Where no thread runs and none can start, see [`Shape::else_here`].
    pub(crate) fn schedule(self: &Arc<Self>, lane: Arc<Lane<R>>) {
        let mut state = lock(&self.state);
        let room = self.shape.size.is_none_or(|size| state.threads < size + state.blocked);
        // A thread started here finds the lane: it takes the lock after this.
        if state.ready.len() >= state.free
            && room
            && !self.start(&mut state)
            && state.threads == 0
            && self.shape.else_here
        {
            drop(state);
            lane.run_jobs();
            return;
        }
        state.ready.push_back(lane);
        self.ready_hint.store(state.ready.len(), Ordering::Release);
        // A lingering thread takes the first ready lane itself: a sleeper
        // is rung only for what it cannot (a system call, and a thread that
        // would find nothing).
        let lingerer = usize::from(state.lingering);
        let rung = if state.ready.len() > lingerer { state.sleepers.pop() } else { None };
        Bell::ring(state, rung);
    }

    /// Starts a thread; false if the system has none to give.
    fn start(self: &Arc<Self>, state: &mut PoolState<R>) -> bool {
        let pool = self.clone();
        let started = std::thread::Builder::new().name(self.shape.name.clone()).spawn(move || pool.serve());
        if started.is_ok() {
            state.threads += 1;
            state.free += 1;
        }
        started.is_ok()
    }

    /// A thread's life: runs lanes until none comes for [`RETIRE`], the
    /// pool has more threads than it needs, or it closes.
    fn serve(self: Arc<Self>) {
        let me = Arc::as_ptr(&self) as usize;
        CURRENT.with(|current| current.set((me, 0)));
        (self.shape.on_start)();
        let idle = self.shape.idle.renewed();
        let bell = Arc::new(Bell { rung: AtomicBool::new(false), thread: std::thread::current() });
        while let Some(lane) = self.next_lane(&idle, &bell) {
            CURRENT.with(|current| current.set((me, Arc::as_ptr(&lane) as usize)));
            lane.run_jobs();
            CURRENT.with(|current| current.set((me, 0)));
            lock(&self.state).free += 1;
        }
        CURRENT.with(|current| current.set((0, 0)));
        self.gone.notify_all();
    }

    /// The next lane to run; `None` once this thread retires. A lane fed
    /// job by job gets its next within microseconds, so an idle thread
    /// whose recent idle spells were short (`idle` learns them) first
    /// lingers about as long as they were, yielding its core to any thread
    /// that wants it, then sleeps until a lane comes; one fed sparsely
    /// sleeps at once.
    fn next_lane(&self, idle: &SpinPolicy, bell: &Arc<Bell>) -> Option<Arc<Lane<R>>> {
        let since = Instant::now();
        let mut lingered = false;
        // A sleeper this thread rings as it retires (see below).
        let mut passed_on = None;
        let mut state = lock(&self.state);
        let lane = loop {
            if self.shape.size.is_some_and(|size| state.threads > size + state.blocked) {
                // One too many (a blocked thread's stand-in, the wait over):
                // it retires. It may have been rung, or be the lingerer, for
                // a ready lane: that wake goes on to a sleeper, else the lane
                // would wait for the sleeper's own timeout.
                if !state.ready.is_empty() {
                    passed_on = state.sleepers.pop();
                }
                break None;
            }
            if let Some(lane) = state.ready.pop_front() {
                self.ready_hint.store(state.ready.len(), Ordering::Release);
                break Some(lane);
            }
            if state.closed {
                break None;
            }
            if !lingered && !state.lingering && idle.is_quick() {
                // Watches the hint, not the lock, then looks again under it.
                (lingered, state.lingering) = (true, true);
                drop(state);
                idle.spin_as_recent(since, || self.ready_hint.load(Ordering::Acquire) != 0);
                state = lock(&self.state);
                state.lingering = false;
                continue;
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
            state.threads -= 1;
        }
        Bell::ring(state, passed_on);
        idle.learn(since);
        lane
    }

    /// Called as a wait that may block starts (`true`) and ends (`false`) in
    /// a job of this pool's, on its thread: the pool counts the thread
    /// blocked and, if lanes wait for a thread, starts one more, so a job
    /// waiting for another lane's work cannot starve the pool of the
    /// threads that would run it. The extra thread retires once the wait
    /// ended and it is idle. Elsewhere, nothing.
    pub(crate) fn blocking(self: &Arc<Self>, starts: bool) {
        if !self.is_own_thread() {
            return;
        }
        let mut state = lock(&self.state);
        if starts {
            state.blocked += 1;
            if state.ready.len() > state.free {
                self.start(&mut state);
            }
        } else {
            state.blocked -= 1;
        }
    }

    /// True when lanes wait for a thread: a thread lingering on a lane for
    /// its next job lets it go.
    pub(crate) fn others_waiting(&self) -> bool {
        self.ready_hint.load(Ordering::Acquire) != 0
    }

    /// True on one of this pool's threads.
    pub(crate) fn is_own_thread(&self) -> bool {
        CURRENT.with(Cell::get).0 == self as *const Self as usize
    }

    /// True while the current thread runs `lane`'s jobs.
    pub(crate) fn runs_here(lane: &Lane<R>) -> bool {
        CURRENT.with(Cell::get).1 == lane as *const Lane<R> as usize
    }

    /// Returns once the jobs pushed on `lane` so far ran; at once on the
    /// thread running it, which would wait for itself.
    // The GPU engine's (a build with neither CUDA nor HIP has none, but for its tests).
    #[cfg_attr(not(any(feature = "cuda", feature = "hip", test)), allow(dead_code))]
    pub(crate) fn drain(lane: &Lane<R>) {
        if !Self::runs_here(lane) {
            lane.progress.wait_for(lane.pushed());
        }
    }

    /// Threads alive.
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        lock(&self.state).threads
    }

    /// Threads running a lane, or about to.
    #[cfg(test)]
    pub(crate) fn serving(&self) -> usize {
        let state = lock(&self.state);
        state.threads - state.free + state.ready.len()
    }

    /// Lets the threads exit once what is ready ran, and waits for them (but
    /// for the calling thread, if it is one).
    #[cfg_attr(not(any(feature = "cuda", feature = "hip", test)), allow(dead_code))]
    pub(crate) fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        for bell in std::mem::take(&mut state.sleepers) {
            bell.rung.store(true, Ordering::Release);
            bell.thread.unpark();
        }
        let mine = usize::from(self.is_own_thread());
        while state.threads > mine {
            state = self.gone.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// How a sleeping thread is woken: each has its own (see the module doc).
struct Bell {
    /// Set under the pool's lock, by whoever hands this thread a lane or
    /// closes the pool: read under it, it tells a ring from a timeout.
    rung: AtomicBool,
    thread: std::thread::Thread,
}

impl Bell {
    /// Rings `bell`, if any: marked under the pool's lock (`state`), woken
    /// after it is let go.
    fn ring<T>(state: MutexGuard<'_, T>, bell: Option<Arc<Bell>>) {
        if let Some(bell) = &bell {
            bell.rung.store(true, Ordering::Release);
        }
        drop(state);
        if let Some(bell) = bell {
            bell.thread.unpark();
        }
    }

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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::backend::lane::Ran;

    /// A lane whose jobs count how many run at once, each for `hold`, on
    /// `pool`'s threads.
    struct Counted {
        pool: Arc<Pool<Counted>>,
        running: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        ran: Arc<AtomicUsize>,
    }

    impl Runner for Counted {
        type Job = Duration;

        fn run(lane: &Arc<Lane<Self>>, hold: Duration) -> Ran<Duration> {
            let counted = &lane.runner;
            let now = counted.running.fetch_add(1, Ordering::SeqCst) + 1;
            counted.most.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(hold);
            counted.running.fetch_sub(1, Ordering::SeqCst);
            counted.ran.fetch_add(1, Ordering::SeqCst);
            lane.progress.advance(1);
            Ran::Done
        }

        fn schedule(lane: Arc<Lane<Self>>) {
            lane.runner.pool.clone().schedule(lane);
        }
    }

    /// `lanes` lanes of `jobs` jobs each on a pool of `size`: the most that
    /// ran at once, and the pool, once every job ran.
    fn run_lanes(size: Option<usize>, lanes: usize, jobs: usize) -> (usize, Arc<Pool<Counted>>) {
        let shape = Shape {
            name: "weir-test-pool".into(),
            size,
            idle: SpinPolicy::new(Duration::ZERO),
            on_start: || {},
            else_here: true,
        };
        let pool = Pool::new(shape);
        let (running, most, ran) = (Arc::default(), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let made: Vec<_> = (0..lanes)
            .map(|_| {
                let runner =
                    Counted { pool: pool.clone(), running: Arc::clone(&running), most: most.clone(), ran: ran.clone() };
                Lane::new(runner, None)
            })
            .collect();
        for lane in &made {
            lane.push((0..jobs).map(|_| Duration::from_millis(20)));
        }
        for lane in &made {
            lane.progress.wait_for(jobs as u64);
        }
        assert_eq!(ran.load(Ordering::SeqCst), lanes * jobs);
        (most.load(Ordering::SeqCst), pool)
    }

    #[test]
    fn a_bounded_pool_runs_at_most_its_size_of_lanes_at_once() {
        let (most, pool) = run_lanes(Some(2), 6, 2);
        assert_eq!(most, 2, "two threads ran the six lanes, two at a time");
        assert!(pool.threads() <= 2);
    }

    #[test]
    fn an_unbounded_pool_gives_each_ready_lane_a_thread() {
        let (most, pool) = run_lanes(None, 6, 2);
        assert_eq!(most, 6, "no lane waited behind another's job");
        assert!(pool.threads() >= 6);
    }

    #[test]
    fn closing_a_pool_waits_for_its_threads_to_exit() {
        let (_, pool) = run_lanes(None, 3, 1);
        assert!(pool.threads() > 0, "idle threads stay a while, for the next lane");
        pool.close();
        assert_eq!(pool.threads(), 0);
    }

    /// A lane whose jobs are closures given its pool.
    struct Closures(Arc<Pool<Closures>>);

    type Closure = Box<dyn FnOnce(&Arc<Pool<Closures>>) + Send>;

    impl Runner for Closures {
        type Job = Closure;

        fn run(lane: &Arc<Lane<Self>>, job: Closure) -> Ran<Closure> {
            job(&lane.runner.0);
            lane.progress.advance(1);
            Ran::Done
        }

        fn schedule(lane: Arc<Lane<Self>>) {
            lane.runner.0.clone().schedule(lane);
        }
    }

    #[test]
    fn a_thread_too_many_that_retires_passes_its_wake_on_to_a_sleeper() {
        let shape = Shape {
            name: "weir-test-pool".into(),
            size: Some(2),
            idle: SpinPolicy::new(Duration::ZERO),
            on_start: || {},
            else_here: false,
        };
        let pool = Pool::new(shape);
        let lane = || Lane::new(Closures(pool.clone()), None);
        let (unblock, unblocked) = std::sync::mpsc::channel::<()>();
        let (finish, finished) = std::sync::mpsc::channel::<()>();
        // One job blocks (a stand-in thread may start), then stays busy.
        let busy = lane();
        busy.push([Box::new(move |pool: &Arc<Pool<Closures>>| {
            pool.blocking(true);
            let _ = unblocked.recv();
            pool.blocking(false);
            let _ = finished.recv();
        }) as Closure]);
        std::thread::sleep(Duration::from_millis(20));
        let others = [lane(), lane()];
        for other in &others {
            other.push([Box::new(|_: &Arc<Pool<Closures>>| std::thread::sleep(Duration::from_millis(30))) as Closure]);
        }
        for other in &others {
            other.progress.wait_for(1);
        }
        assert_eq!(pool.threads(), 3, "the blocked job's stand-in started");
        // The wait is over: one thread too many, and both idle ones asleep.
        unblock.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let late = lane();
        let start = Instant::now();
        late.push([Box::new(|_: &Arc<Pool<Closures>>| {}) as Closure]);
        late.progress.wait_for(1);
        let waited = start.elapsed();
        finish.send(()).unwrap();
        // The thread rung for it retires; without passing the wake on, the
        // lane waited for the other sleeper's timeout (RETIRE).
        assert!(waited < RETIRE / 2, "a ready lane waited {waited:?} while a thread of the pool slept");
    }

    #[test]
    fn idle_threads_retire() {
        let (_, pool) = run_lanes(Some(4), 4, 1);
        let deadline = Instant::now() + RETIRE * 10;
        while pool.threads() > 0 && Instant::now() < deadline {
            std::thread::sleep(RETIRE / 4);
        }
        assert_eq!(pool.threads(), 0, "threads with nothing to run retire");
    }
}
