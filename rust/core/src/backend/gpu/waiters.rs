//! The threads that wait for GPU streams' completions (`Wake::Waiter`).
//!
//! A stream's completions queue on the stream, in order ([`Completions`]).
//! While a stream has completions queued, one thread of its device's pool
//! ([`WaiterPool`]) serves it: it sleeps in each event's synchronisation in
//! turn (a blocking-sync event, so it does not spin) and runs its
//! completion, until the queue runs empty. So a stream never waits behind
//! another stream's work, as with a thread per stream, but the device has
//! only as many waiting threads as streams with completions pending at
//! once: a stream made, used and dropped starts none, however many come
//! and go, and a thread left with nothing to serve for [`RETIRE`] exits.

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::owners::GpuEvent;
use crate::completion::spin::SpinPolicy;
use crate::error::{Error, Result};
use crate::lock::lock;
use weir_device::driver::{Callback, Driver, Status};

/// How long a thread waits for a stream to serve before it exits (as the
/// CPU pool's workers do).
const RETIRE: Duration = Duration::from_millis(200);

thread_local! {
    /// The queue this thread is serving (its address; 0: none), so that a
    /// stream dropped by one of its own completions does not wait for itself.
    static SERVING: Cell<usize> = const { Cell::new(0) };
    /// The pool this thread belongs to (its address; 0: none), so that a
    /// device dropped on one of its own threads does not wait for itself.
    static POOL_OF: Cell<usize> = const { Cell::new(0) };
}

/// A completion taken by whichever of its server and the wake thread's
/// probe comes first.
pub(super) type Claim = Arc<Mutex<Option<Callback>>>;

/// Runs `claim`'s completion if nobody took it yet, once the completions
/// before `place` ran; counts it as run either way it ends. False if it was
/// taken already.
pub(super) fn run_claimed(claim: &Claim, place: u64, ran: &AtomicU64, status: Status) -> bool {
    let Some(callback) = lock(claim).take() else { return false };
    while ran.load(Ordering::SeqCst) < place {
        // The one before is being run by the other side: a completion's moment.
        std::thread::yield_now();
    }
    // A panicking callback must not end the completions behind it.
    let _ = catch_unwind(AssertUnwindSafe(move || callback(status)));
    ran.fetch_add(1, Ordering::SeqCst);
    true
}

/// One completion: its place among the stream's completions, its event,
/// and whether the wake thread watches it too.
struct Entry<D: Driver> {
    place: u64,
    event: Arc<GpuEvent<D>>,
    claim: Claim,
    watched: bool,
}

struct Queue<D: Driver> {
    entries: VecDeque<Entry<D>>,
    /// Completions queued so far: the next one's place.
    queued: u64,
    /// A thread of the pool has this queue, or is about to.
    served: bool,
    /// The stream is going: nothing more is queued.
    closed: bool,
}

/// A stream's completions, in order, and what its server needs to wait for them.
pub(super) struct Completions<D: Driver> {
    driver: Arc<D>,
    queue: Mutex<Queue<D>>,
    /// Told when a served queue runs empty, for the stream's drop.
    drained: Condvar,
    /// Completions run so far, by the server or a probe.
    pub(super) ran: Arc<AtomicU64>,
    /// Whether recent events were reached within the spin budget.
    pub(super) spin: SpinPolicy,
}

impl<D: Driver> Completions<D> {
    pub(super) fn new(driver: Arc<D>, spin_budget: Duration) -> Arc<Self> {
        Arc::new(Completions {
            driver,
            queue: Mutex::new(Queue { entries: VecDeque::new(), queued: 0, served: false, closed: false }),
            drained: Condvar::new(),
            ran: Arc::default(),
            spin: SpinPolicy::new(spin_budget),
        })
    }

    /// Queues `claim`'s completion, run once `event` is reached, and
    /// returns its place; the pool serves the queue if nobody does.
    /// `watched`: the wake thread watches it too.
    pub(super) fn push(
        self: &Arc<Self>,
        pool: &WaiterPool<D>,
        event: Arc<GpuEvent<D>>,
        claim: Claim,
        watched: bool,
    ) -> Result<u64> {
        let mut queue = lock(&self.queue);
        if queue.closed {
            return Err(Error::Closed);
        }
        if !queue.served {
            // Under the queue's lock, so a failure leaves nothing queued (the
            // pool never takes a queue's lock under its own).
            pool.schedule(self.clone())?;
            queue.served = true;
        }
        let place = queue.queued;
        queue.entries.push_back(Entry { place, event, claim, watched });
        queue.queued += 1;
        Ok(place)
    }

    /// Takes no more completions, and returns once those queued ran
    /// (at once on the thread running them).
    pub(super) fn close(&self) {
        let mut queue = lock(&self.queue);
        queue.closed = true;
        if SERVING.with(Cell::get) == self as *const Self as usize {
            return;
        }
        while queue.served {
            queue = self.drained.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Runs the queued completions in order, each once its event is
    /// reached, until the queue is empty.
    fn serve(&self) {
        SERVING.with(|serving| serving.set(self as *const Self as usize));
        let bound = self.driver.bind();
        loop {
            let Entry { place, event, claim, watched } = {
                let mut queue = lock(&self.queue);
                match queue.entries.pop_front() {
                    Some(entry) => entry,
                    None => {
                        queue.served = false;
                        self.drained.notify_all();
                        break;
                    }
                }
            };
            if lock(&claim).is_none() {
                // The wake thread saw it done and ran it.
                continue;
            }
            // Once the context is lost its events may be gone with it.
            let status = match bound.clone().and_then(|()| self.driver.loss().check()) {
                // SAFETY: the event was made and recorded by this driver and
                // stays alive until after this call (dropped below).
                Ok(()) => unsafe { wait_for_event(&self.spin, &*self.driver, event.raw, watched) },
                Err(error) => Err(error),
            };
            // Off the live events before completing, so a caller woken by
            // the completion sees no event of it still alive.
            event.uncount();
            drop(event);
            run_claimed(&claim, place, &self.ran, status);
        }
        SERVING.with(|serving| serving.set(0));
    }
}

/// Waits for `event` by the spin policy: querying while recent events were
/// reached within the budget, then blocking. A fence the wake thread
/// watches it does not spin for: one spinning thread is enough.
///
/// # Safety
/// `event` was made and recorded by `driver` and stays alive for the call.
unsafe fn wait_for_event<D: Driver>(spin: &SpinPolicy, driver: &D, event: D::Event, watched: bool) -> Status {
    let start = Instant::now();
    let reached = if watched {
        None
    } else {
        // Some(None): the driver cannot query it, so block.
        // SAFETY: this function's contract.
        spin.spin(start, || match unsafe { driver.event_query(event) } {
            Some(Ok(false)) => None,
            Some(done) => Some(Some(done.map(drop))),
            None => Some(None),
        })
        .flatten()
    };
    // SAFETY: this function's contract.
    let status = reached.unwrap_or_else(|| unsafe { driver.event_synchronize(event) });
    spin.learn(start);
    status
}

struct PoolState<D: Driver> {
    /// Queues with completions and no thread yet.
    ready: VecDeque<Arc<Completions<D>>>,
    threads: usize,
    /// Threads looking for a queue to serve.
    free: usize,
    /// The device is going: threads exit once nothing is ready.
    closed: bool,
}

struct PoolShared<D: Driver> {
    state: Mutex<PoolState<D>>,
    /// Told when a queue is ready, or the pool closes.
    work: Condvar,
    /// Told when a thread exits.
    gone: Condvar,
    name: String,
}

/// A device's waiting threads; see the module doc.
pub(crate) struct WaiterPool<D: Driver> {
    shared: Arc<PoolShared<D>>,
}

impl<D: Driver> WaiterPool<D> {
    pub(super) fn new() -> Self {
        WaiterPool {
            shared: Arc::new(PoolShared {
                state: Mutex::new(PoolState { ready: VecDeque::new(), threads: 0, free: 0, closed: false }),
                work: Condvar::new(),
                gone: Condvar::new(),
                name: format!("weir-{}-waiter", D::KIND.name()),
            }),
        }
    }

    /// Has a thread serve `queue`: a free one, else a new one.
    fn schedule(&self, queue: Arc<Completions<D>>) -> Result<()> {
        let shared = &self.shared;
        let mut state = lock(&shared.state);
        state.ready.push_back(queue);
        if state.ready.len() <= state.free {
            drop(state);
            shared.work.notify_one();
            return Ok(());
        }
        let pool = shared.clone();
        let started = std::thread::Builder::new().name(shared.name.clone()).spawn(move || pool.run());
        match started {
            Ok(_) => {
                state.threads += 1;
                state.free += 1;
                Ok(())
            }
            // A running thread serves it once its queue is done.
            Err(_) if state.threads > 0 => Ok(()),
            Err(e) => {
                state.ready.pop_back();
                Err(Error::backend(D::KIND, format!("cannot start a completion thread: {e}")))
            }
        }
    }

    /// Threads alive.
    #[cfg(test)]
    pub(super) fn threads(&self) -> usize {
        lock(&self.shared.state).threads
    }

    /// Threads serving a stream, or about to.
    #[cfg(test)]
    pub(super) fn serving(&self) -> usize {
        let state = lock(&self.shared.state);
        state.threads - state.free + state.ready.len()
    }

    /// Lets the threads exit once what is queued ran, and waits for them
    /// (but for the calling thread, if it is one).
    pub(super) fn close(&self) {
        let shared = &self.shared;
        let mut state = lock(&shared.state);
        state.closed = true;
        shared.work.notify_all();
        let mine = usize::from(POOL_OF.with(Cell::get) == Arc::as_ptr(shared) as usize);
        while state.threads > mine {
            state = shared.gone.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

impl<D: Driver> PoolShared<D> {
    /// A thread's life: serves queues until none comes for [`RETIRE`] or the pool closes.
    fn run(self: Arc<Self>) {
        POOL_OF.with(|pool| pool.set(Arc::as_ptr(&self) as usize));
        let mut state = lock(&self.state);
        loop {
            if let Some(queue) = state.ready.pop_front() {
                state.free -= 1;
                drop(state);
                queue.serve();
                drop(queue);
                state = lock(&self.state);
                state.free += 1;
                continue;
            }
            if state.closed {
                break;
            }
            let (woken, timeout) =
                self.work.wait_timeout(state, RETIRE).unwrap_or_else(|poisoned| poisoned.into_inner());
            state = woken;
            if timeout.timed_out() && state.ready.is_empty() {
                break;
            }
        }
        state.free -= 1;
        state.threads -= 1;
        drop(state);
        self.gone.notify_all();
    }
}
