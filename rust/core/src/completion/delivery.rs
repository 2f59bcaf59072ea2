//! The delivery thread: where wakers and completion actions run.
//!
//! Backends complete cells on their own threads (a CPU stream's worker, the
//! wgpu poll thread, a CUDA/HIP waiter) and often under their own locks. A
//! waker may run foreign code at once (a Kotlin continuation on
//! `Dispatchers.Unconfined`, an executor that polls inline) and that code may
//! call any Weir API, wait on a fence of the very stream that woke it, or drop
//! the last handle of its runtime. So no waker and no action runs where it was
//! completed: each goes to this one long-lived thread per process, which holds
//! no Weir lock and owes Weir no progress. Few long-lived waking threads are
//! also what the JVM wants (JNA keeps such a thread attached).
//!
//! A waker that blocks delays other wake-ups, never device progress or the
//! completion of cells: blocking waits are woken by the cell itself. (The
//! quick path for GPU fences, [`watch`], completes a cell on this thread
//! too; what a busy wake thread leaves undone there, the fence's stream
//! waiter completes as usual.) Drops of
//! backend objects (freed memory, retired streams) run on a second thread,
//! `weir-release`, so that a driver call waiting on a device lock never
//! delays a wake-up.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::paths::{self, WaitPath};
use super::spin::SpinPolicy;
use crate::lock::lock;

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static ON_DELIVERY_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Checks the wake thread runs while it spins, each until it says it is done
/// (see [`watch`]); [`WATCHED`] counts them, so the spin loop takes the lock
/// only when there are any.
static PROBES: Mutex<Watching> = Mutex::new(Watching { probes: Vec::new(), in_job: false });
static WATCHED: AtomicUsize = AtomicUsize::new(0);
/// Until when (nanoseconds since [`EPOCH`]) the wake thread lingers,
/// spinning with no probe, for the next quick fence to come.
static LINGER_UNTIL: AtomicU64 = AtomicU64::new(0);
/// When the last probe was registered (nanoseconds since [`EPOCH`]).
static LAST_WATCH: AtomicU64 = AtomicU64::new(0);
/// The gaps between registrations, learnt by the one spin rule.
static WATCH_GAPS: LazyLock<SpinPolicy> = LazyLock::new(|| SpinPolicy::new(MAX_LINGER));
/// True while the wake thread sleeps for its next job.
static PARKED: AtomicBool = AtomicBool::new(false);
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Bounds the wake thread's lingering after a quick fence: it lingers only
/// while quick fences came closer together than this, and then about as
/// long as their recent gaps ([`SpinPolicy::recent_span`]), this at most.
const MAX_LINGER: Duration = Duration::from_micros(300);

fn now_nanos() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A check run on the wake thread: it returns true once it has nothing
/// left to do (it ran its completion, someone else did, or it gave up).
#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
pub(crate) type Probe = Box<dyn FnMut() -> bool + Send>;

/// What a probe holds back while the wake thread watches for it (a
/// stream's waiting thread, left asleep): let go by its drop.
#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
pub(crate) type Held = Box<dyn Send>;

/// The probes registered, each with what it holds back, and whether the
/// wake thread runs a job (whatever it holds back waits for no probe then).
struct Watching {
    probes: Vec<(Probe, Option<Held>)>,
    in_job: bool,
}

/// Has the wake thread run `probe` as it spins, until the probe says it is
/// done (a probe bounds its own time): how a GPU fence likely to complete
/// soon is seen done and its waker run by one thread that is already awake,
/// with no hand-over between threads. The wake thread wakes at once if it
/// sleeps (while the device works), and after a probe finished it lingers,
/// spinning, for about the recent gaps between probes while they are below
/// [`MAX_LINGER`], so that the next fence of an app awaiting one after
/// another finds it awake. What a probe gives up on, its stream's waiter
/// finishes as before.
///
/// `held` is let go once the probe is done, so that the stream's waiter
/// only wakes to a fence the probe gave up on (or to count one it ran);
/// but at once where the wake thread may not run probes for a while: when
/// it runs a job (a waker may block, even on this fence), before each
/// job, and where no wake thread could be started.
#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
pub(crate) fn watch(probe: Probe, held: Held) {
    let now = now_nanos();
    let last = LAST_WATCH.swap(now, Ordering::Relaxed);
    WATCH_GAPS.learn_took(Duration::from_nanos(now.saturating_sub(last)));
    let sender = WAKE.sender();
    let mut watching = lock(&PROBES);
    let (kept, let_go) = match sender.is_some() && !watching.in_job {
        true => (Some(held), None),
        false => (None, Some(held)),
    };
    watching.probes.push((probe, kept));
    // Let go after the lock: letting go wakes a stream's waiting thread.
    drop(watching);
    drop(let_go);
    WATCHED.fetch_add(1, Ordering::SeqCst);
    // Wakes the thread if it sleeps; a wake-up is no job, so lets go of nothing.
    if let Some(sender) = sender.filter(|_| PARKED.load(Ordering::SeqCst)) {
        let _ = sender.send(None);
    }
}

/// Marks the wake thread as running a job (`true`) or back to its probes,
/// letting go of what every probe holds back as a job starts.
fn running_job(in_job: bool) {
    let mut watching = lock(&PROBES);
    watching.in_job = in_job;
    let let_go: Vec<Held> = match in_job {
        true => watching.probes.iter_mut().filter_map(|(_, held)| held.take()).collect(),
        false => Vec::new(),
    };
    // As in `watch`: let go after the lock.
    drop(watching);
    drop(let_go);
}

/// Runs every registered probe once, keeping those not yet done; after one
/// finished, lingers as [`watch`] says.
fn run_probes() {
    if WATCHED.load(Ordering::SeqCst) == 0 {
        return;
    }
    // Out of the lock while they run, so registering a probe never waits for them.
    let mut probes = std::mem::take(&mut lock(&PROBES).probes);
    let before = probes.len();
    // A finished probe goes with what it held back.
    probes.retain_mut(|(probe, _)| !catch_unwind(AssertUnwindSafe(&mut *probe)).unwrap_or(true));
    let finished = before - probes.len();
    if finished > 0 {
        WATCHED.fetch_sub(finished, Ordering::SeqCst);
        if let Some(span) = WATCH_GAPS.recent_span() {
            LINGER_UNTIL.fetch_max(now_nanos() + span.as_nanos() as u64, Ordering::SeqCst);
        }
    }
    lock(&PROBES).probes.append(&mut probes);
}

/// Whether the wake thread spins for its next job, running probes.
fn spin_for_next_job() -> bool {
    WATCHED.load(Ordering::SeqCst) > 0 || now_nanos() < LINGER_UNTIL.load(Ordering::SeqCst)
}

/// One long-lived thread and its queue.
struct Line {
    name: &'static str,
    /// Whether the thread spins for quick fences (see [`watch`]).
    spins: bool,
    /// Jobs, and `None`s that only wake the thread (see [`watch`]).
    queue: OnceLock<Option<Sender<Option<Job>>>>,
}

impl Line {
    const fn new(name: &'static str, spins: bool) -> Line {
        Line { name, spins, queue: OnceLock::new() }
    }

    fn sender(&self) -> Option<&Sender<Option<Job>>> {
        let (name, spins) = (self.name, self.spins);
        self.queue
            .get_or_init(|| {
                let (sender, jobs) = channel::<Option<Job>>();
                std::thread::Builder::new()
                    .name(self.name.to_owned())
                    .spawn(move || {
                        ON_DELIVERY_THREAD.with(|flag| flag.set(true));
                        crate::threads::started(name);
                        while let Some(job) = next_job(&jobs, spins) {
                            if spins {
                                running_job(true);
                            }
                            // A panicking waker or action must not end deliveries for everyone.
                            let _ = catch_unwind(AssertUnwindSafe(job));
                            if spins {
                                running_job(false);
                            }
                        }
                    })
                    .ok()
                    .map(|_| sender)
            })
            .as_ref()
    }

    /// Runs `job` on this line's thread; where no thread could be started, on
    /// the calling thread (which then must hold no lock: every caller releases
    /// its guards before delivering).
    fn run(&self, job: Job) {
        let refused = match self.sender() {
            Some(sender) => sender.send(Some(job)).err().and_then(|returned| returned.0),
            None => Some(job),
        };
        if let Some(job) = refused {
            let _ = catch_unwind(AssertUnwindSafe(job));
        }
    }

    /// Returns once everything this line was given before the call has run.
    fn flush(&self) {
        if self.queue.get().is_none() {
            return;
        }
        // The job holds the one sender: the receive ends once it ran (and
        // dropped it), or once it is gone unrun.
        let (done, flushed) = channel::<()>();
        self.run(Box::new(move || drop(done)));
        let _ = flushed.recv();
    }
}

/// The next job of a line, `None` once its queue closed: spinning for it,
/// running probes, while `spins` and a quick fence is pending or the thread
/// lingers (see [`watch`]), else sleeping until it comes.
fn next_job(jobs: &Receiver<Option<Job>>, spins: bool) -> Option<Job> {
    loop {
        match jobs.try_recv() {
            Ok(Some(job)) => return Some(job),
            // Only woken: back to the probes.
            Ok(None) => {}
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if spins && spin_for_next_job() => {
                run_probes();
                // Yielding: the thread whose next fence it lingers for may
                // be queued on this core, as a fence's waiter yields to it.
                std::thread::yield_now();
            }
            // The flag is the wake thread's alone: the release line sleeping
            // must not make a probe believe the wake thread awake.
            Err(TryRecvError::Empty) if spins => {
                PARKED.store(true, Ordering::SeqCst);
                if WATCHED.load(Ordering::SeqCst) > 0 {
                    // A probe came after the check, and saw no sleeper to wake.
                    PARKED.store(false, Ordering::SeqCst);
                    continue;
                }
                paths::count(WaitPath::WakeThreadSlept);
                let received = jobs.recv();
                PARKED.store(false, Ordering::SeqCst);
                match received {
                    Ok(None) => {}
                    received => return received.ok().flatten(),
                }
            }
            Err(TryRecvError::Empty) => match jobs.recv() {
                Ok(None) => {}
                received => return received.ok().flatten(),
            },
        }
    }
}

/// Wakers and the actions that complete other cells: latency matters here.
static WAKE: Line = Line::new("weir-wake", true);
/// Dropping backend objects (memory, retired streams): driver calls that may
/// wait on a device lock, kept off the line that wakes tasks.
static RELEASE: Line = Line::new("weir-release", false);

/// Runs `job` on the wake thread (see the module doc).
pub(crate) fn deliver(job: impl FnOnce() + Send + 'static) {
    WAKE.run(Box::new(job));
}

/// Runs `job`, which drops backend objects, on the release thread.
pub(crate) fn release(job: impl FnOnce() + Send + 'static) {
    RELEASE.run(Box::new(job));
}

/// True on a delivery thread (where waiting for a delivery could wait for itself).
pub(crate) fn on_delivery_thread() -> bool {
    ON_DELIVERY_THREAD.with(Cell::get)
}

/// Returns once everything delivered or released before this call has run.
/// On a delivery thread itself it returns at once.
pub(crate) fn flush() {
    if on_delivery_thread() {
        return;
    }
    // Wake-ups can hand releases on (a fence chained to a retired stream), not the reverse.
    WAKE.flush();
    RELEASE.flush();
}
