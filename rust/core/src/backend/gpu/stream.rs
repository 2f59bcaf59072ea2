//! GPU streams and their completion path.
//!
//! Work that must run once a stream reaches a point (completing a fence,
//! delivering a download, returning a staging buffer) is a [`Callback`]. It
//! runs either
//! - on the driver's callback thread (`Wake::Callback`), which must not call
//!   the driver: callbacks here only complete cells, copy host bytes and
//!   return staging buffers; or
//! - on one waiter thread per stream (`Wake::Waiter`), which sleeps in an
//!   event synchronisation (a blocking-sync event, so it does not spin).
//!   A stream's events complete in order, so one thread per stream never
//!   waits behind another stream's work. A fence likely to complete soon is
//!   also watched by the wake thread (`completion::watch`), which queries its
//!   event as it spins and, once every earlier completion of the stream ran,
//!   completes it itself and runs its wakers: one thread, already awake, sees
//!   the device finish and resumes the task. Whichever of the two takes the
//!   completion first runs it; completions still run in stream order.
//!
//! A device error seen by any callback poisons the stream: later callbacks
//! report it too. A fault that poisons the context (see `Loss`) loses the
//! whole driver, and the waiter makes no driver call after it. Either path contains a panicking callback, so the
//! completions behind it still run.
//!
//! The scheduler drops a retired stream on the delivery thread once a signal
//! on it completed: its work is done, so the drop only binds the device,
//! lets the waiter drain and exit, and destroys the handle.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use super::device::Device;
use super::owners::GpuEvent;
use crate::backend::FailureTally;
use crate::completion::spin::SpinPolicy;
use crate::completion::Probe;
use crate::error::{Error, Result};
use crate::lock::lock;
use weir_device::driver::{Callback, Driver, EventUse, Status};

/// Where completions run; see the module doc.
pub(crate) type Wake = crate::options::GpuWake;

/// Waits for `event` by the spin policy: querying while recent events were
/// reached within the budget, then blocking. A fence the wake thread
/// watches (see the module doc) it does not spin for: one spinning thread is
/// enough.
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

/// A completion taken by whichever of the waiter and the wake thread's probe
/// comes first.
type Claim = Arc<Mutex<Option<Callback>>>;

/// One completion on a waiter's queue: its place among the stream's
/// completions, its event, and whether the wake thread watches it too.
struct Entry<D: Driver> {
    place: u64,
    event: Arc<GpuEvent<D>>,
    claim: Claim,
    watched: bool,
}

struct Waiter<D: Driver> {
    /// The queue and the count of what it was given, under one lock so that
    /// places follow the queue's order.
    queue: Mutex<Option<(u64, Sender<Entry<D>>)>>,
    ran: Arc<AtomicU64>,
    /// Shared with the waiter thread: whether recent events were quick.
    spin: SpinPolicy,
}

/// Runs `claim`'s completion if nobody took it yet, once the completions
/// before `place` ran; counts it as run either way it ends. False if it was
/// taken already.
fn run_claimed(claim: &Claim, place: u64, ran: &AtomicU64, status: Status) -> bool {
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

/// A device stream (non-blocking with respect to the legacy default stream).
///
/// Its state lives in a box of its own ([`StreamCore`]), so that the jobs of
/// the issuing thread can name it wherever the handle moves; the handle's
/// drop runs every queued job first (see [`StreamRef`]).
pub(crate) struct GpuStream<D: Driver> {
    core: Box<StreamCore<D>>,
    waiter_thread: Option<JoinHandle<()>>,
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
    waiter: Option<Waiter<D>>,
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
            let (waiter, thread) = stream.spawn_waiter()?;
            stream.core.waiter = Some(waiter);
            stream.waiter_thread = Some(thread);
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
        Ok(GpuStream { core: Box::new(core), waiter_thread: None, counted })
    }

    fn spawn_waiter(&self) -> Result<(Waiter<D>, JoinHandle<()>)> {
        let (queue, pending) = channel::<Entry<D>>();
        let device = self.device.clone();
        let spin = SpinPolicy::new(device.spin_budget);
        let ran = Arc::new(AtomicU64::new(0));
        let policy = spin.clone();
        let counted = ran.clone();
        let thread = std::thread::Builder::new()
            .name(format!("weir-{}-waiter-{}", D::KIND.name(), self.index))
            .spawn(move || {
                let bound = device.driver.bind();
                for Entry { place, event, claim, watched } in pending {
                    if lock(&claim).is_none() {
                        // The wake thread saw it done and ran it.
                        continue;
                    }
                    // Once the context is lost its events may be gone with it.
                    let status = match bound.clone().and_then(|()| device.driver.loss().check()) {
                        // SAFETY: the event was made and recorded by this driver and
                        // stays alive until after this call (dropped below).
                        Ok(()) => unsafe { wait_for_event(&policy, &*device.driver, event.raw, watched) },
                        Err(error) => Err(error),
                    };
                    // Off the live events before completing, so a caller woken by
                    // the completion sees no event of it still alive.
                    event.uncount();
                    drop(event);
                    run_claimed(&claim, place, &counted, status);
                }
            })
            .map_err(|e| Error::backend(D::KIND, format!("cannot start a completion thread: {e}")))?;
        Ok((Waiter { queue: Mutex::new(Some((0, queue))), ran, spin }, thread))
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
        let event = Arc::new(GpuEvent::new(&self.device, EventUse::HostWait)?);
        // SAFETY: both handles are alive and belong to this driver.
        unsafe { self.device.driver.event_record(event.raw, self.raw)? };
        let claim: Claim = Arc::new(Mutex::new(Some(callback)));
        let watched = awaited && waiter.spin.is_quick();
        let mut queue = lock(&waiter.queue);
        let (queued, sender) = queue.as_mut().ok_or(Error::Closed)?;
        let place = *queued;
        let probe = watched.then(|| self.probe(&event, &claim, place, waiter));
        let entry = Entry { place, event, claim, watched };
        sender.send(entry).map_err(|_| Error::backend(D::KIND, "the completion thread has stopped"))?;
        *queued += 1;
        // Only once the waiter has it: whichever takes it first runs it.
        if let Some(probe) = probe {
            crate::completion::watch(probe);
        }
        Ok(())
    }

    /// The wake thread's check for a watched completion: once the ones
    /// before it ran, it queries the event and, if the device got there,
    /// runs the completion itself. Done once run (by either side), after
    /// the spin budget from its first check, or on any error, which the
    /// waiter reports. Its share of the event, and through it of the device,
    /// is dropped on the release thread: it may be the device's last.
    fn probe(&self, event: &Arc<GpuEvent<D>>, claim: &Claim, place: u64, waiter: &Waiter<D>) -> Probe {
        let (claim, ran) = (claim.clone(), waiter.ran.clone());
        let mut event = Some(event.clone());
        let budget = waiter.spin.budget();
        let mut first_check: Option<Instant> = None;
        let mut check = move |event: &GpuEvent<D>| {
            if lock(&claim).is_none() || first_check.get_or_insert_with(Instant::now).elapsed() > budget {
                return true;
            }
            if ran.load(Ordering::SeqCst) != place {
                return false;
            }
            let driver = &event.device().driver;
            if driver.bind().and_then(|()| driver.loss().check()).is_err() {
                return true;
            }
            // SAFETY: made and recorded by this driver; this probe holds it alive.
            match unsafe { driver.event_query(event.raw) } {
                Some(Ok(true)) => {
                    event.uncount();
                    run_claimed(&claim, place, &ran, Ok(()));
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
            // Closing the queue ends the waiter once it ran what is queued.
            lock(&waiter.queue).take();
        }
        if let Some(thread) = self.waiter_thread.take() {
            // A drop on the waiter itself (a completion that could not be
            // delivered elsewhere ran there) must not wait for itself.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
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
