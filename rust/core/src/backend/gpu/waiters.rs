//! The threads that wait for GPU streams' completions (`Wake::Waiter`).
//!
//! A stream's completions are a lane of their own (`backend::lane`): queued
//! in order, each run once its event is reached. While a stream has
//! completions queued, a thread of its device's waiter pool
//! (`backend::pool`, a thread per ready lane) runs them: it sleeps in each
//! event's synchronisation in turn (a blocking-sync event, so it does not
//! spin) and runs its completion, until the lane runs empty. So a stream
//! never waits behind another stream's work, as with a thread per stream,
//! but the device has only as many waiting threads as streams with
//! completions pending at once: a stream made, used and dropped starts
//! none, however many come and go, and a thread left with nothing to run
//! retires.
//!
//! A fence the wake thread's probe watches (see `stream`) has its waiter
//! blocked in the driver beside the probe, and the waiter mostly wakes to
//! find it completed. Keeping the waiter out of the driver while the probe
//! watches (it waited on a condition variable for the probe, at most the
//! probe's budget) was measured on an H100 against this: it did not change
//! how many processes await their fences at 43–53 µs instead of 12–25
//! (12 of 48 with it, 6 of 48 without), nor the others' figures, so the
//! simpler rule stays.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::owners::GpuEvent;
use crate::backend::lane::{Lane, Ran, Runner};
use crate::backend::pool::{Pool, Shape};
use crate::completion::paths::{self, WaitPath};
use crate::completion::spin::SpinPolicy;
use crate::lock::lock;
use weir_device::driver::{Callback, Driver, Status};

/// A completion taken by whichever of its waiter and the wake thread's
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

/// One completion: its event, and whether the wake thread watches it too.
pub(crate) struct Entry<D: Driver> {
    pub(super) event: Arc<GpuEvent<D>>,
    pub(super) claim: Claim,
    pub(super) watched: bool,
}

/// A stream's part of its completions' lane.
pub(crate) struct Waits<D: Driver> {
    driver: Arc<D>,
    pool: Arc<WaiterPool<D>>,
    /// Completions run so far, by the waiter or a probe.
    pub(super) ran: Arc<AtomicU64>,
    /// Whether recent events were reached within the spin budget.
    pub(super) spin: SpinPolicy,
}

/// A stream's completions, in order.
pub(super) type Completions<D> = Lane<Waits<D>>;
/// A device's waiting threads.
pub(crate) type WaiterPool<D> = Pool<Waits<D>>;

/// The waiter pool of a device.
pub(super) fn waiter_pool<D: Driver>() -> Arc<WaiterPool<D>> {
    let name = format!("weir-{}-waiter", D::KIND.name());
    // With no thread to be had, the completions run here: late, as the
    // thread waits for the device, but never lost.
    let idle = SpinPolicy::new(Duration::ZERO);
    Pool::new(Shape { name, size: None, idle, on_start: || {}, else_here: true })
}

/// The completions of a stream of `driver`, run by `pool`'s threads, which
/// spin for up to `spin_budget` per event.
pub(super) fn completions<D: Driver>(
    driver: Arc<D>,
    pool: &Arc<WaiterPool<D>>,
    spin_budget: Duration,
) -> Arc<Completions<D>> {
    let waits = Waits { driver, pool: pool.clone(), ran: Arc::default(), spin: SpinPolicy::new(spin_budget) };
    Lane::new(waits, None)
}

impl<D: Driver> Runner for Waits<D> {
    type Job = Entry<D>;
    // Its jobs wait for the device: a thread keeps its lane until it runs out.
    const TURN: usize = usize::MAX;

    fn run(lane: &Arc<Completions<D>>, Entry { event, claim, watched }: Entry<D>) -> Ran<Entry<D>> {
        let waits = &lane.runner;
        // Not taken already by the wake thread, which saw it done.
        if lock(&claim).is_some() {
            // Once the context is lost its events may be gone with it.
            let status = match waits.driver.bind().and_then(|()| waits.driver.loss().check()) {
                // SAFETY: the event was made and recorded by this driver and
                // stays alive until after this call (dropped below).
                Ok(()) => unsafe { wait_for_event(&waits.spin, &*waits.driver, event.raw, watched) },
                Err(error) => Err(error),
            };
            // Off the live events before completing, so a caller woken by
            // the completion sees no event of it still alive.
            event.uncount();
            drop(event);
            // Its place among the stream's completions: they run in order, each counted as it ends.
            if run_claimed(&claim, lane.progress.finished(), &waits.ran, status) && watched {
                paths::count(WaitPath::WaiterBeatProbe);
            }
        }
        lane.progress.advance(1);
        Ran::Done
    }

    fn schedule(lane: Arc<Completions<D>>) {
        lane.runner.pool.clone().schedule(lane);
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
    // A watched one is counted once it is known who completed it (`run`).
    match (&reached, watched) {
        (Some(_), _) => paths::count(WaitPath::WaiterSpun),
        (None, false) => paths::count(WaitPath::WaiterBlocked),
        (None, true) => {}
    }
    // SAFETY: this function's contract.
    let status = reached.unwrap_or_else(|| unsafe { driver.event_synchronize(event) });
    spin.learn(start);
    status
}
