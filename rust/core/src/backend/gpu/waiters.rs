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
//!
//! A watched fence records a light event (no blocking sync), as it costs
//! the admitting thread less to record. Should its waiting thread have to
//! block for it (the probe gave up, or was let go), it sleeps on its lane's
//! relay: a stream of the lane's own waits for the light event on the
//! device, and the lane's blocking-sync event is recorded after that wait.
//! Two more driver calls, on that path alone; the relay is made at the
//! lane's first such wait and destroyed with the lane.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::owners::GpuEvent;
use crate::backend::lane::{Lane, Ran, Runner};
use crate::backend::pool::{Pool, Shape};
use crate::completion::paths::{self, WaitPath};
use crate::completion::spin::SpinPolicy;
use crate::error::Result;
use crate::lock::lock;
use weir_device::driver::{Callback, Driver, EventUse, Status};

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
    /// Where a watched fence's light event is waited for by blocking (see the module doc).
    relay: OnceLock<Relay<D>>,
}

/// A stream and a blocking-sync event of a lane's own: the stream waits
/// for a light event, the event is recorded after that wait, and the
/// waiting thread sleeps in the event's synchronisation.
struct Relay<D: Driver> {
    stream: D::Stream,
    event: D::Event,
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
    let waits = Waits {
        driver,
        pool: pool.clone(),
        ran: Arc::default(),
        spin: SpinPolicy::new(spin_budget),
        relay: OnceLock::new(),
    };
    Lane::new(waits, None)
}

impl<D: Driver> Runner for Waits<D> {
    type Job = Entry<D>;
    // Its jobs wait for the device: a thread keeps its lane until it runs out.

    fn run(lane: &Arc<Completions<D>>, Entry { event, claim, watched }: Entry<D>) -> Ran<Entry<D>> {
        let waits = &lane.runner;
        // Not taken already by the wake thread, which saw it done.
        if lock(&claim).is_some() {
            // Once the context is lost its events may be gone with it.
            let status = match waits.driver.bind().and_then(|()| waits.driver.loss().check()) {
                // SAFETY: the event was made and recorded by this driver and
                // stays alive until after this call (dropped below).
                Ok(()) => unsafe { waits.wait_for_event(event.raw, watched) },
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

impl<D: Driver> Waits<D> {
    /// Waits for `event` by the spin policy: querying while recent events
    /// were reached within the budget, then blocking. A fence the wake
    /// thread watches it does not spin for: one spinning thread is enough;
    /// its event is a light one, waited for through the relay. What it
    /// learns of a watched one is from when the watch began, as the probe
    /// learns of one it completed: from when the fence was made, not from
    /// when its waiting thread was let go.
    ///
    /// # Safety
    /// `event` was made and recorded by this lane's driver and stays alive for the call.
    unsafe fn wait_for_event(&self, event: D::Event, watched: Option<Instant>) -> Status {
        let (spin, driver) = (&self.spin, &*self.driver);
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
        // SAFETY (both): this function's contract.
        let status = reached.unwrap_or_else(|| match watched {
            Some(_) => unsafe { self.relayed(event) },
            None => unsafe { driver.event_synchronize(event) },
        });
        spin.learn(watched.unwrap_or(start));
        status
    }

    /// Blocks until the light `event` is reached, through the relay; where
    /// the relay cannot be made or used, in the event's own synchronisation.
    ///
    /// # Safety
    /// As for [`Waits::wait_for_event`].
    unsafe fn relayed(&self, event: D::Event) -> Status {
        let driver = &*self.driver;
        let relay = match self.relay.get() {
            Some(relay) => Ok(relay),
            None => self.make_relay().map(|made| self.relay.get_or_init(|| made)),
        };
        // SAFETY: the relay's handles are this driver's and live as long as
        // the lane; `event` is alive for the call (this function's contract).
        // Only this lane's running job uses the relay: one at a time.
        let waited = relay.and_then(|relay| unsafe {
            driver.stream_wait_event(relay.stream, event)?;
            driver.event_record(relay.event, relay.stream)?;
            Ok(relay.event)
        });
        match waited {
            // SAFETY: as above.
            Ok(blocking) => unsafe { driver.event_synchronize(blocking) },
            // SAFETY: this function's contract.
            Err(_) => unsafe { driver.event_synchronize(event) },
        }
    }

    /// A new relay: a stream, and a blocking-sync event to record on it.
    fn make_relay(&self) -> Result<Relay<D>> {
        let stream = self.driver.stream_create()?;
        match self.driver.event_create(EventUse::HostWait) {
            Ok(event) => Ok(Relay { stream, event }),
            Err(error) => {
                // SAFETY: just made by this driver, nothing queued on it.
                unsafe { self.driver.stream_destroy(stream) };
                Err(error)
            }
        }
    }
}

impl<D: Driver> Drop for Waits<D> {
    fn drop(&mut self) {
        let Some(relay) = self.relay.take() else { return };
        // Dropped on any thread; a lost device's handles went with its context.
        if self.driver.bind().is_ok() {
            // SAFETY: made by this driver in `make_relay`, destroyed once; the
            // lane's jobs are over (it is being dropped), so nothing waits on
            // them. The driver releases a stream's resources once its work is done.
            unsafe {
                self.driver.stream_destroy(relay.stream);
                self.driver.event_destroy(relay.event);
            }
        }
    }
}
