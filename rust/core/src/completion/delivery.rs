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
//! completion of cells: blocking waits are woken by the cell itself.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::lock::lock;

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static ON_DELIVERY_THREAD: Cell<bool> = const { Cell::new(false) };
}

fn queue() -> Option<&'static Mutex<Sender<Job>>> {
    static QUEUE: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (sender, jobs) = channel::<Job>();
            std::thread::Builder::new()
                .name("weir-wake".to_owned())
                .spawn(move || {
                    ON_DELIVERY_THREAD.with(|flag| flag.set(true));
                    for job in jobs {
                        // A panicking waker or action must not end deliveries for everyone.
                        let _ = catch_unwind(AssertUnwindSafe(job));
                    }
                })
                .ok()
                .map(|_| Mutex::new(sender))
        })
        .as_ref()
}

/// Runs `job` on the delivery thread; where no thread could be started, on
/// the calling thread (which then must hold no lock: every caller releases
/// its guards before delivering).
pub(crate) fn deliver(job: impl FnOnce() + Send + 'static) {
    let job: Job = Box::new(job);
    let refused = match queue() {
        Some(sender) => lock(sender).send(job).err().map(|returned| returned.0),
        None => Some(job),
    };
    if let Some(job) = refused {
        let _ = catch_unwind(AssertUnwindSafe(job));
    }
}

/// True on the delivery thread (where waiting for a delivery would wait for itself).
pub(crate) fn on_delivery_thread() -> bool {
    ON_DELIVERY_THREAD.with(Cell::get)
}

/// Returns once everything delivered before this call has run. On the
/// delivery thread itself it returns at once.
pub(crate) fn flush() {
    if on_delivery_thread() {
        return;
    }
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let signal = done.clone();
    deliver(move || {
        *lock(&signal.0) = true;
        signal.1.notify_all();
    });
    let mut flag = lock(&done.0);
    while !*flag {
        flag = done.1.wait(flag).unwrap_or_else(|poisoned| poisoned.into_inner());
    }
}
