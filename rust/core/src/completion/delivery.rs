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
//! completion of cells: blocking waits are woken by the cell itself. Drops of
//! backend objects (freed memory, retired streams) run on a second thread,
//! `weir-release`, so that a driver call waiting on a device lock never
//! delays a wake-up.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::lock::lock;

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static ON_DELIVERY_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// GPU fences likely to complete soon, each with a task likely to await it
/// (see [`Awake`]): while there are any, and until [`SPIN_UNTIL`]
/// (nanoseconds since [`EPOCH`]), the wake thread spins for its next job
/// instead of sleeping, so the waker a GPU waiter hands on runs without a
/// thread wake-up of its own.
static AWAITED: AtomicUsize = AtomicUsize::new(0);
static SPIN_UNTIL: AtomicU64 = AtomicU64::new(0);
/// True while the wake thread sleeps for its next job.
static PARKED: AtomicBool = AtomicBool::new(false);
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn now_nanos() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Keeps the wake thread spinning, for at most the span given, until it is
/// dropped: made when a quick fence is signalled, dropped once its
/// completion was handed on. Wakes the wake thread at once if it sleeps,
/// while the device still works. Costs the wake thread at most that span
/// of CPU.
#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
pub(crate) struct Awake(());

#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
impl Awake {
    pub(crate) fn for_at_most(span: Duration) -> Awake {
        AWAITED.fetch_add(1, Ordering::SeqCst);
        SPIN_UNTIL.fetch_max(now_nanos() + span.as_nanos() as u64, Ordering::SeqCst);
        if PARKED.load(Ordering::SeqCst) {
            WAKE.run(Box::new(|| {}));
        }
        Awake(())
    }
}

impl Drop for Awake {
    fn drop(&mut self) {
        AWAITED.fetch_sub(1, Ordering::SeqCst);
    }
}

fn spin_for_next_job() -> bool {
    AWAITED.load(Ordering::SeqCst) > 0 && now_nanos() < SPIN_UNTIL.load(Ordering::SeqCst)
}

/// One long-lived thread and its queue.
struct Line {
    name: &'static str,
    /// Whether the thread spins while [`SPINNERS`] are about.
    spins: bool,
    queue: OnceLock<Option<Mutex<Sender<Job>>>>,
}

impl Line {
    const fn new(name: &'static str, spins: bool) -> Line {
        Line { name, spins, queue: OnceLock::new() }
    }

    fn sender(&self) -> Option<&Mutex<Sender<Job>>> {
        let spins = self.spins;
        self.queue
            .get_or_init(|| {
                let (sender, jobs) = channel::<Job>();
                std::thread::Builder::new()
                    .name(self.name.to_owned())
                    .spawn(move || {
                        ON_DELIVERY_THREAD.with(|flag| flag.set(true));
                        while let Some(job) = next_job(&jobs, spins) {
                            // A panicking waker or action must not end deliveries for everyone.
                            let _ = catch_unwind(AssertUnwindSafe(job));
                        }
                    })
                    .ok()
                    .map(|_| Mutex::new(sender))
            })
            .as_ref()
    }

    /// Runs `job` on this line's thread; where no thread could be started, on
    /// the calling thread (which then must hold no lock: every caller releases
    /// its guards before delivering).
    fn run(&self, job: Job) {
        let refused = match self.sender() {
            Some(sender) => lock(sender).send(job).err().map(|returned| returned.0),
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
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let signal = done.clone();
        self.run(Box::new(move || {
            *lock(&signal.0) = true;
            signal.1.notify_all();
        }));
        let mut flag = lock(&done.0);
        while !*flag {
            flag = done.1.wait(flag).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// The next job of a line, `None` once its queue closed: spinning for it
/// while `spins` and a quick fence is pending (see [`Awake`]), else
/// sleeping until it comes.
fn next_job(jobs: &Receiver<Job>, spins: bool) -> Option<Job> {
    loop {
        match jobs.try_recv() {
            Ok(job) => return Some(job),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if spins && spin_for_next_job() => std::hint::spin_loop(),
            Err(TryRecvError::Empty) => {
                PARKED.store(spins, Ordering::SeqCst);
                let job = jobs.recv().ok();
                PARKED.store(false, Ordering::SeqCst);
                return job;
            }
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
