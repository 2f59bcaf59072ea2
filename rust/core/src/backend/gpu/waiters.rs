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
//! A fence the wake thread's probe watches (see `stream`) holds its
//! stream's lane back until the probe ends: the admitting thread wakes no
//! waiting thread for it, and none sleeps in the driver beside the probe
//! to wake, mostly, to a fence completed already. Then a waiting thread
//! runs what queued, the watched fence first (done, or given up on: it
//! blocks for it then). On an H100 this took the caller's `fence()` from
//! 4.66 and 6.06 µs to 3.90 and 3.43 (medians of 300, two runs each; the
//! wake-up was 2.2 µs of it, now 0.5); a fence awaited one after another
//! took as long as before (1.365 and 1.352 times the spin floor, against
//! 1.352 and 1.426), as the device sets its pace.

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

/// One completion: its event, and since when the wake thread watches it
/// too, if it does.
pub(crate) struct Entry<D: Driver> {
    pub(super) event: Arc<GpuEvent<D>>,
    pub(super) claim: Claim,
    pub(super) watched: Option<Instant>,
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
            if run_claimed(&claim, lane.progress.finished(), &waits.ran, status) && watched.is_some() {
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
/// watches it does not spin for: one spinning thread is enough. What it
/// learns of a watched one is from when the watch began, as the probe
/// learns of one it completed: from when the fence was made, not from
/// when its waiting thread was let go.
///
/// # Safety
/// `event` was made and recorded by `driver` and stays alive for the call.
unsafe fn wait_for_event<D: Driver>(
    spin: &SpinPolicy,
    driver: &D,
    event: D::Event,
    watched: Option<Instant>,
) -> Status {
    let start = Instant::now();
    let reached = if watched.is_some() {
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
    match (&reached, watched.is_some()) {
        (Some(_), _) => paths::count(WaitPath::WaiterSpun),
        (None, false) => paths::count(WaitPath::WaiterBlocked),
        (None, true) => {}
    }
    // SAFETY: this function's contract.
    let status = reached.unwrap_or_else(|| unsafe { driver.event_synchronize(event) });
    spin.learn(watched.unwrap_or(start));
    status
}
