//! GPU streams and their completion path.
//!
//! Work that must run once a stream reaches a point (completing a fence,
//! delivering a download, returning a staging buffer) is a [`Callback`]. It
//! runs either
//! - on the driver's callback thread (`Wake::Callback`), which must not call
//!   the driver: callbacks here only complete cells, copy host bytes and
//!   return staging buffers; or
//! - on a thread of the device's waiter pool (`Wake::Waiter`, see
//!   `waiters`), which serves a stream while it has completions queued and
//!   sleeps in each event's synchronisation, so a stream never waits
//!   behind another stream's work. A fence likely to complete soon is
//!   also watched by the wake thread (`completion::watch`), which queries its
//!   event as it spins and, once every earlier completion of the stream ran,
//!   completes it itself and runs its wakers: one thread, already awake, sees
//!   the device finish and resumes the task. While the probe watches, the
//!   stream's completions are held back (`completion::Held`): no waiting
//!   thread is woken for the fence, nor sleeps in the driver beside the
//!   probe; once the probe ends (it ran the completion, or gave up on it),
//!   a waiting thread runs what queued meanwhile. Whichever of the two
//!   takes the completion first runs it; completions still run in stream
//!   order.
//!
//!   The thread that awaits the fence does not query the event itself.
//!   Having it run the probe as it watched was measured on an H100 and
//!   gained nothing: a fence awaited one after another read 1.323 and
//!   1.330 times the same-thread spin floor with it, 1.313 and 1.343
//!   without (15 processes each); the wake thread, spinning already, still
//!   saw most events first. Weir's cost over that floor lies in admitting
//!   the fence: on an H100, `fence()` took 4.7–6.8 µs (medians of 300)
//!   where raw's record took 0.2–0.4, and a timed build split it into the
//!   event's record (1.8 µs: a blocking-sync event, where raw records one
//!   that is not), the waiting thread's wake-up (2.2 µs, since held back),
//!   the watch (0.8), taking a pooled event (0.6) and the rest (1.4); the
//!   op's own admission added 0.8 µs to raw's launch, and the wait itself
//!   was shorter than raw's spin. A watched fence now records a light
//!   event (no blocking sync; see `waiters` for how a waiting thread
//!   still blocks for it): on an H100 the driver recorded one in 0.21 µs
//!   against 1.42 for a blocking-sync one (and the probe's query took
//!   0.23 against 0.58); `fence()` fell from 2.97–3.18 µs to 2.2, and a
//!   fence awaited one after another from 1.31 times the floor to 1.18
//!   (two runs each, in turn, 9 processes).
//!
//! A device error seen by any callback poisons the stream: later callbacks
//! report it too. A fault that poisons the context (see `Loss`) loses the
//! whole driver, and the waiter makes no driver call after it. Either path
//! contains a panicking callback, so the completions behind it still run.
//!
//! The scheduler drops a retired stream on the delivery thread once a signal
//! on it completed: its work is done, so the drop only binds the device,
//! lets its queued completions run, and destroys the handle.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use super::device::Device;
use super::owners::GpuEvent;
use super::waiters::{self, run_claimed, Claim, Completions, Entry, WaiterPool};
use crate::backend::FailureTally;
use crate::completion::paths::{self, WaitPath};
use crate::completion::{Held, Probe};
use crate::error::{Error, Result};
use crate::lock::lock;
use weir_device::driver::{Callback, Driver, EventUse, Status};

/// Where completions run; see the module doc.
pub(crate) type Wake = crate::options::GpuWake;

/// A device stream (non-blocking with respect to the legacy default stream).
///
/// Its state lives in a box of its own ([`StreamCore`]), so that the jobs of
/// the issuing thread can name it wherever the handle moves; the handle's
/// drop runs every queued job first (see [`StreamRef`]).
pub(crate) struct GpuStream<D: Driver> {
    core: Box<StreamCore<D>>,
    /// False for the backend's own capture stream, which no user made: the
    /// live count is of the streams of runtimes.
    counted: bool,
}

/// What a stream's driver calls and completions need.
pub(crate) struct StreamCore<D: Driver> {
    pub(crate) device: Arc<Device<D>>,
    pub(crate) raw: D::Stream,
    pub(crate) index: u32,
    /// A device error seen by a completion: every later completion reports it.
    failure: Arc<Mutex<Option<Error>>>,
    /// Ops whose driver calls failed on the issuing thread, for the next fence.
    pub(crate) failed_ops: FailureTally,
    /// Its completions, for the device's waiter pool (`Wake::Waiter`).
    waiter: Option<Arc<Completions<D>>>,
    /// The event this stream records for another stream of its device to
    /// wait for (see `issue::record_order`): made at its first such order,
    /// destroyed with the stream. Part of the stream, like its handle, so
    /// not among the live events.
    pub(crate) order_event: OnceLock<D::Event>,
}

impl<D: Driver> std::ops::Deref for GpuStream<D> {
    type Target = StreamCore<D>;

    fn deref(&self) -> &StreamCore<D> {
        &self.core
    }
}

/// A stream named by a job of the issuing thread.
///
/// A job runs before the drop of the stream it names gets past its
/// [`super::issue::Issuer::flush`], and the stream's state is boxed, so it
/// stays where this points until then, however the handle moves.
pub(crate) struct StreamRef<D: Driver>(*const StreamCore<D>);

// SAFETY: it only hands out a shared reference to a `StreamCore`, which is
// `Sync` (its driver handles may be used from any thread, the rest is locked
// or atomic); see the type's doc for why it stays valid.
unsafe impl<D: Driver> Send for StreamRef<D> {}

impl<D: Driver> StreamRef<D> {
    pub(crate) fn new(stream: &GpuStream<D>) -> Self {
        StreamRef(&*stream.core)
    }

    /// The stream, from a job.
    pub(crate) fn get(&self) -> &StreamCore<D> {
        // SAFETY: the stream's drop flushes the issuer, which runs this job
        // first, and its core is boxed, never moved (the type's doc).
        unsafe { &*self.0 }
    }
}

impl<D: Driver> GpuStream<D> {
    pub(crate) fn new(device: &Arc<Device<D>>, index: u32, wake: Wake) -> Result<Self> {
        let mut stream = Self::made(device, index, true)?;
        if wake == Wake::Waiter {
            stream.core.waiter = Some(waiters::completions(device.driver.clone(), &device.waiters, device.spin_budget));
        }
        Ok(stream)
    }

    /// A stream the backend keeps for itself (graph captures): no waiter,
    /// not counted among the runtime's streams.
    pub(crate) fn internal(device: &Arc<Device<D>>) -> Result<Self> {
        Self::made(device, u32::MAX, false)
    }

    fn made(device: &Arc<Device<D>>, index: u32, counted: bool) -> Result<Self> {
        let raw = device.driver.stream_create()?;
        if counted {
            device.counters.live_streams.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        let core = StreamCore {
            device: device.clone(),
            raw,
            index,
            failure: Arc::default(),
            failed_ops: FailureTally::default(),
            waiter: None,
            order_event: OnceLock::new(),
        };
        Ok(GpuStream { core: Box::new(core), counted })
    }
}

impl<D: Driver> StreamCore<D> {
    /// Runs `callback` once all work enqueued on this stream so far is done,
    /// with the stream's first failure if it has one. `awaited` says a task
    /// is likely to wait for it (a fence), so a quick one is worth spinning for.
    pub(crate) fn after(&self, callback: Callback, awaited: bool) -> Result<()> {
        let callback = self.poisoning(callback);
        let Some(waiter) = &self.waiter else {
            // SAFETY: `raw` is this stream, alive while `self` is; the callback
            // only completes cells, hands page-locked loans to readers and drops staging loans.
            return unsafe { self.device.driver.add_callback(self.raw, callback) };
        };
        let watched = (awaited && waiter.runner.spin.is_quick()).then(Instant::now);
        // A watched fence's event is a light one: the probe queries it, and
        // a waiting thread that must block for it does so through its
        // lane's relay (`waiters`). A blocking-sync event's record costs
        // the admitting thread more.
        let usage = if watched.is_some() { EventUse::StreamOrder } else { EventUse::HostWait };
        let event = Arc::new(GpuEvent::new(&self.device, usage)?);
        // SAFETY: both handles are alive and belong to this driver.
        unsafe { self.device.driver.event_record(event.raw, self.raw)? };
        let claim: Claim = Arc::new(Mutex::new(Some(callback)));
        if watched.is_some() {
            // No waiting thread is woken for it while the probe watches.
            waiter.defer();
        }
        let place = waiter.push([Entry { event: event.clone(), claim: claim.clone(), watched }]);
        // Only once the waiter has it: whichever takes it first runs it.
        if let Some(since) = watched {
            // Let go, the lane resumes, and a waiting thread runs what it
            // queued, the watched fence first (done already, or given up
            // on). Its share of the lane goes on the release thread, as it
            // may hold the device's driver last.
            let lane = waiter.clone();
            let held: Held = Box::new(scopeguard::guard((), move |()| {
                lane.resume();
                crate::completion::release(move || drop(lane));
            }));
            crate::completion::watch(self.probe(event, claim, place, since, waiter), held);
        }
        Ok(())
    }

    /// The wake thread's check for a watched completion: once the ones
    /// before it ran, it queries the event and, if the device got there,
    /// runs the completion itself. Done once run (by either side), after
    /// the spin budget from its first check, or on any error, which the
    /// waiter reports. Its share of the event, and through it of the device,
    /// is dropped on the release thread: it may be the device's last.
    /// `place` is the completion's among the stream's; `since`, when the
    /// fence was made, is what a completion it runs teaches the spin policy.
    fn probe(
        &self,
        event: Arc<GpuEvent<D>>,
        claim: Claim,
        place: u64,
        since: Instant,
        waiter: &Completions<D>,
    ) -> Probe {
        let ran = waiter.runner.ran.clone();
        let waits = waiter.runner.spin.clone();
        let mut event = Some(event);
        let budget = waits.budget();
        let mut first_check: Option<Instant> = None;
        let mut check = move |event: &GpuEvent<D>| {
            if lock(&claim).is_none() || first_check.get_or_insert_with(Instant::now).elapsed() > budget {
                return true;
            }
            if ran.load(Ordering::SeqCst) != place {
                return false;
            }
            let driver = &event.device.driver;
            if driver.bind().and_then(|()| driver.loss().check()).is_err() {
                return true;
            }
            // SAFETY: made and recorded by this driver; this probe holds it alive.
            match unsafe { driver.event_query(event.raw) } {
                Some(Ok(true)) => {
                    event.uncount();
                    if run_claimed(&claim, place, &ran, Ok(())) {
                        paths::count(WaitPath::ProbeCompleted);
                        waits.learn(since);
                    }
                    true
                }
                Some(Ok(false)) => false,
                _ => true,
            }
        };
        Box::new(move || {
            let Some(held) = &event else { return true };
            let done = check(held);
            if done {
                let held = event.take();
                crate::completion::release(move || drop(held));
            }
            done
        })
    }

    /// True when all work enqueued so far is done and no failure was seen:
    /// a fence now would report nothing. `false` where the driver cannot tell.
    pub(crate) fn is_settled(&self) -> bool {
        if lock(&self.failure).is_some() || self.device.driver.loss().get().is_some() {
            return false;
        }
        // Driver calls still queued, or a failure the next fence reports.
        if !self.device.issuer.is_idle() || !self.failed_ops.is_clear() {
            return false;
        }
        // SAFETY: `raw` is this stream, alive while `self` is.
        matches!(unsafe { self.device.driver.stream_query(self.raw) }, Some(Ok(true)))
    }

    /// Wraps `callback` so a device error poisons the stream and later
    /// callbacks see it; a lost device loses the whole driver.
    fn poisoning(&self, callback: Callback) -> Callback {
        let failure = self.failure.clone();
        let index = self.index;
        // The loss, not the device: a callback must never drop the device.
        let loss = self.device.driver.loss().clone();
        Box::new(move |status: Status| {
            let status = match status {
                Err(error) => {
                    loss.record(&error);
                    let error = error.into_op_failure(index, None);
                    Err(lock(&failure).get_or_insert(error).clone())
                }
                Ok(()) => match &*lock(&failure) {
                    Some(error) => Err(error.clone()),
                    None => Ok(()),
                },
            };
            callback(status)
        })
    }
}

impl<D: Driver> Drop for GpuStream<D> {
    fn drop(&mut self) {
        // Jobs of the issuing thread name this stream: they run first.
        self.device.issuer.flush();
        // Usually the delivery thread, which never bound the device before.
        let bound = self.device.driver.bind().is_ok();
        if bound {
            // Let queued work and callbacks finish before the stream goes (they
            // already have, for a retired stream: this returns at once). An
            // error here was already reported to the stream's completions.
            // SAFETY: `raw` is alive until `stream_destroy` below.
            let _ = unsafe { self.device.driver.stream_synchronize(self.raw) };
        }
        if let Some(waiter) = &self.core.waiter {
            // What is queued runs first; but a drop on the thread running
            // it (a completion that could not be delivered elsewhere ran
            // there) does not wait for itself.
            WaiterPool::drain(waiter);
        }
        if bound {
            // SAFETY: made by this driver in `new`, synchronised above, destroyed once.
            unsafe { self.device.driver.stream_destroy(self.raw) };
            if let Some(&event) = self.core.order_event.get() {
                // SAFETY: made by this driver; its records were on this
                // stream, done, and no job is left to record or wait on it
                // (flushed above). Destroyed once, here.
                unsafe { self.device.driver.event_destroy(event) };
            }
        }
        if self.counted {
            self.device.counters.live_streams.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}
