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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::lock::lock;

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static ON_DELIVERY_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Threads spinning on device work that is about to complete (a GPU
/// waiter): while there are any, the wake thread spins for its next job
/// instead of sleeping, so the wakers they hand on run at once.
static SPINNERS: AtomicUsize = AtomicUsize::new(0);

/// Marks the calling thread as spinning until dropped (see [`SPINNERS`]).
#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
pub(crate) struct Spinning(());

#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
impl Spinning {
    pub(crate) fn start() -> Spinning {
        if SPINNERS.fetch_add(1, Ordering::SeqCst) == 0 {
            // Wake the wake thread now, while the device works, so that it
            // is spinning when the waker arrives.
            WAKE.run(Box::new(|| {}));
        }
        Spinning(())
    }
}

impl Drop for Spinning {
    fn drop(&mut self) {
        SPINNERS.fetch_sub(1, Ordering::SeqCst);
    }
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
/// while `spins` and a spinner is about, else sleeping until it comes.
fn next_job(jobs: &Receiver<Job>, spins: bool) -> Option<Job> {
    loop {
        match jobs.try_recv() {
            Ok(job) => return Some(job),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if spins && SPINNERS.load(Ordering::SeqCst) > 0 => std::hint::spin_loop(),
            Err(TryRecvError::Empty) => return jobs.recv().ok(),
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
