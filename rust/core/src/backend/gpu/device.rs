//! The device state every stream, event and allocation of one GPU backend
//! shares: the driver, live-object counters, its context's page-locked staging and,
//! where the driver's free waits for the whole device, the thread that frees.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::issue::Issuer;
use super::waiters::{waiter_pool, WaiterPool};
use crate::backend::lane::{Lane, Ran, Runner};
use crate::backend::pool::{Pool, Shape};
use crate::backend::Counters;
use crate::completion::spin::SpinPolicy;
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::host::{HostBuffer, PinnedBytes};
use crate::lock::lock;
use weir_device::driver::{Driver, EventUse, Handle};
use weir_device::modules::{of_context, Kernels};

/// One page-locked host buffer. Plain data: the pool's owner frees it.
struct Staging {
    ptr: Handle<*mut u8>,
    capacity: usize,
}

type FreeList = Arc<Mutex<Vec<Staging>>>;

/// The page-locked staging buffers of one context, shared by every runtime
/// on it ([`of_context`]) and freed once the last one went. Freeing
/// page-locked memory waits for all work on the context (CUDA's
/// `cuMemFreeHost` synchronises it): a runtime that freed its own as it
/// went, while another ran kernels on the context, kept its teardown thread
/// in the driver until those kernels ended, and the other runtime's
/// wake-ups and `diagnostics` waited as long.
pub(crate) struct StagingPool<D: Driver> {
    free: FreeList,
    /// Every buffer ever allocated, lent or not: freed with the pool.
    all: Mutex<Vec<Staging>>,
    /// The driver the buffers are allocated and freed with.
    driver: Arc<D>,
}

impl<D: Driver> Drop for StagingPool<D> {
    fn drop(&mut self) {
        // Unbound, the context is lost and its memory went with it.
        if self.driver.bind().is_err() {
            return;
        }
        for staging in lock(&self.all).drain(..) {
            // SAFETY: allocated by this pool's driver, freed once (drained);
            // every runtime on the context went, their streams synchronised
            // first, so no copy uses it.
            unsafe { self.driver.host_free(staging.ptr.0) };
        }
    }
}

/// A staging buffer lent out for one copy; back in the pool when dropped.
///
/// Dropping it never calls the driver, so a completion callback may drop it.
pub(crate) struct Loan {
    staging: Option<Staging>,
    home: FreeList,
}

impl Loan {
    pub fn ptr(&self) -> *mut u8 {
        self.staging.as_ref().map_or(std::ptr::null_mut(), |s| s.ptr.0)
    }

    /// Gives the buffer up without returning it to the pool, for a copy whose
    /// end nobody will learn (its completion callback was refused): it stays
    /// lent until its context's last runtime goes, which frees it after
    /// every stream synchronised.
    pub fn abandon(mut self) {
        self.staging = None;
    }

    /// The first `len` bytes, for host-side reads and writes.
    ///
    /// # Safety
    /// No device copy into or out of the buffer may be in flight, and
    /// `len` must not exceed the length the loan was taken for.
    pub unsafe fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        match &self.staging {
            // SAFETY: the loan owns the buffer exclusively, `len` is within its
            // capacity (contract), and no device access overlaps (contract).
            Some(s) => unsafe { std::slice::from_raw_parts_mut(s.ptr.0, len) },
            None => &mut [],
        }
    }
}

/// A staging buffer handed to the app as a [`HostBuffer`]: a finished
/// download's bytes, or host data to upload from. It keeps its device, and
/// so the pool's memory, alive, and goes back to the pool when dropped.
pub(crate) struct LentToHost<D: Driver> {
    loan: Loan,
    len: usize,
    device: Arc<Device<D>>,
}

impl<D: Driver> LentToHost<D> {
    /// # Safety
    /// The loan holds at least `len` bytes, and no device copy into it is in flight.
    pub unsafe fn host_buffer(loan: Loan, len: usize, device: Arc<Device<D>>) -> HostBuffer {
        HostBuffer::pinned(Box::new(LentToHost { loan, len, device }))
    }
}

impl<D: Driver> PinnedBytes for LentToHost<D> {
    fn bytes(&self) -> &[u8] {
        match &self.loan.staging {
            // SAFETY: `len` is within the loan (`host_buffer`'s contract); a
            // device copy may read the bytes meanwhile (an upload holding a
            // clone of the buffer) but none writes them: downloads land
            // before the buffer is made, and `bytes_mut` needs the only handle.
            Some(s) => unsafe { std::slice::from_raw_parts(s.ptr.0, self.len) },
            None => &[],
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` is within the loan; `&mut self` comes only through
        // the buffer's only handle, and every upload from it holds a handle
        // until its copy is done, so no device copy uses it now.
        unsafe { self.loan.bytes_mut(self.len) }
    }

    fn device(&self) -> usize {
        Device::address(&self.device)
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        if let Some(staging) = self.staging.take() {
            lock(&self.home).push(staging);
        }
    }
}

/// The frees of a driver whose free waits for the whole device (`hipFree`),
/// a lane run by a pool of one thread: memory is released on the delivery
/// thread, which must not wait behind other streams' kernels to run the
/// next waker. It holds the driver, not the device: the device's drop ends it.
pub(crate) struct Frees<D: Driver> {
    driver: Arc<D>,
    pool: Arc<Pool<Frees<D>>>,
}

impl<D: Driver> Frees<D> {
    fn start(driver: &Arc<D>) -> Arc<Lane<Frees<D>>> {
        let name = format!("weir-{}-free", D::KIND.name());
        // With no thread to be had, the frees run here, waiting for the device.
        let idle = SpinPolicy::new(Duration::ZERO);
        let pool = Pool::new(Shape { name, size: Some(1), idle, on_start: || {}, else_here: true });
        Lane::new(Frees { driver: driver.clone(), pool }, None)
    }
}

impl<D: Driver> Runner for Frees<D> {
    type Job = u64;

    fn run(lane: &Arc<Lane<Self>>, ptr: u64) -> Ran<u64> {
        let driver = &lane.runner.driver;
        // Unbound, the device is gone: its memory went with it.
        if driver.bind().is_ok() {
            // SAFETY: `ptr` came from this driver's `alloc`, every user
            // completed (`Device::free`'s contract), and it is pushed once.
            unsafe { driver.free(ptr) };
        }
        lane.progress.advance(1);
        Ran::Done
    }

    fn schedule(lane: Arc<Lane<Self>>) {
        lane.runner.pool.clone().schedule(lane);
    }
}

/// A value on cache lines of its own (two: some CPUs fetch lines in
/// pairs), so that writing it costs nothing to readers of its neighbours.
#[repr(align(128))]
pub(crate) struct OwnLine<T>(pub T);

impl<T> std::ops::Deref for OwnLine<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// Events not in use, by use, so that a fence, a timestamp or a peer copy's
/// ordering costs a record, not also a create and a destroy (a runtime's
/// own streams order each other through each stream's own event). Bounded:
/// past it, events are destroyed.
pub(crate) struct EventPool<D: Driver> {
    /// By [`EventUse`], indexed by `usage as usize`: in the enum's order
    /// (its variants carry no data, so their discriminants are 0, 1, 2).
    by_use: [Mutex<Vec<D::Event>>; 3],
}

impl<D: Driver> EventPool<D> {
    const MAX: usize = 256;

    /// An idle event made for `usage`, if one is pooled.
    pub fn take(&self, usage: EventUse) -> Option<D::Event> {
        lock(&self.by_use[usage as usize]).pop()
    }

    /// Pools an event no longer in use; hands it back if the pool is full.
    pub fn give_back(&self, usage: EventUse, event: D::Event) -> Option<D::Event> {
        let mut pool = lock(&self.by_use[usage as usize]);
        if pool.len() >= Self::MAX {
            return Some(event);
        }
        pool.push(event);
        None
    }

    fn drain(&self) -> Vec<D::Event> {
        self.by_use.iter().flat_map(|pool| std::mem::take(&mut *lock(pool))).collect()
    }
}

/// Shared by a backend and all it made; the last owner releases the device.
///
/// Aligned to its own cache lines, and so are the parts the issuing thread
/// writes as it runs jobs (the event pool, the live and copy counts): an
/// `Arc` keeps its counts just before the value, and every event taken
/// from the pool (a fence's, a peer copy's) clones the device. Sharing a
/// line with what every admission reads (the issuer, the driver), each
/// such write would take it from the admitting thread.
#[repr(align(128))]
pub(crate) struct Device<D: Driver> {
    pub info: DeviceInfo,
    pub counters: OwnLine<Counters>,
    pub kernels: Arc<Kernels<D>>,
    pub events: OwnLine<EventPool<D>>,
    staging: Arc<StagingPool<D>>,
    /// `None` where the driver's free returns at once.
    frees: Option<Arc<Lane<Frees<D>>>>,
    /// Makes the stream-ordered driver calls of admitted ops, in order.
    pub issuer: Issuer<D>,
    /// The threads that wait for its streams' completions (`Wake::Waiter`).
    pub waiters: Arc<WaiterPool<D>>,
    /// How long a stream's waiter (and the wake thread, for a fence) spins
    /// on an event before giving up on seeing it reached at once.
    pub spin_budget: Duration,
    pub driver: Arc<D>,
}

impl<D: Driver> Device<D> {
    /// The device of `driver`, whose waiting threads spin for up to `spin_budget` per wait.
    pub fn new(driver: D, spin_budget: Duration) -> Arc<Self> {
        let driver = Arc::new(driver);
        let frees = driver.free_waits_for_device().then(|| Frees::start(&driver));
        Arc::new(Device {
            info: driver.info(),
            counters: OwnLine(Counters::default()),
            kernels: Kernels::of_context(&driver),
            events: OwnLine(EventPool { by_use: Default::default() }),
            staging: of_context(&*driver, || StagingPool {
                free: FreeList::default(),
                all: Mutex::new(Vec::new()),
                driver: driver.clone(),
            }),
            frees,
            issuer: Issuer::new(spin_budget),
            waiters: waiter_pool(),
            spin_budget,
            driver,
        })
    }

    /// Frees device memory from any thread without waiting for the device:
    /// on the frees' thread where the driver's free would wait, else here, after
    /// binding the device (this may be a thread that never used it).
    ///
    /// # Safety
    /// `ptr` came from this driver's `alloc`, every command that used it
    /// completed, and it is freed once.
    pub unsafe fn free(&self, ptr: u64) {
        if let Some(frees) = &self.frees {
            frees.push([ptr]);
            return;
        }
        if self.driver.bind().is_ok() {
            // SAFETY: this function's contract.
            unsafe { self.driver.free(ptr) };
        }
    }

    /// The address that names this device while it lives (see `PinnedBytes::device`).
    pub fn address(device: &Arc<Self>) -> usize {
        Arc::as_ptr(device) as *const () as usize
    }

    /// Lends a page-locked buffer of at least `len` bytes.
    pub fn stage(&self, len: usize) -> Result<Loan> {
        // Power-of-two sizes keep the pool small and reusable; past the
        // largest a slice may span, none is asked for.
        let capacity = len
            .max(64 * 1024)
            .checked_next_power_of_two()
            .filter(|&capacity| isize::try_from(capacity).is_ok())
            .ok_or(Error::OutOfMemory { bytes: len as u64, host: true })?;
        // Only a buffer of that size is lent again: a small loan kept long
        // (a read held by the app) in a large buffer would make the next
        // large loan allocate another, and so on, without bound.
        let reused = {
            let mut free = lock(&self.staging.free);
            let fits = free.iter().position(|staging| staging.capacity == capacity);
            fits.map(|index| free.swap_remove(index))
        };
        let home = self.staging.free.clone();
        if let Some(staging) = reused {
            return Ok(Loan { staging: Some(staging), home });
        }
        let ptr = self.staging.driver.host_alloc(capacity)?;
        lock(&self.staging.all).push(Staging { ptr: Handle(ptr), capacity });
        self.counters.host_staging_buffers.fetch_add(1, Ordering::SeqCst);
        Ok(Loan { staging: Some(Staging { ptr: Handle(ptr), capacity }), home })
    }
}

impl<D: Driver> Drop for Device<D> {
    fn drop(&mut self) {
        // No stream is left to queue a completion; idle threads exit now.
        self.waiters.close();
        // Frees already handed over finish first; the thread never holds this device.
        if let Some(frees) = self.frees.take() {
            Pool::drain(&frees);
            frees.runner.pool.close();
        }
        // Its staging goes with the context's last runtime (`StagingPool`).
        if self.driver.bind().is_err() {
            return;
        }
        for event in self.events.drain() {
            // SAFETY: made by this driver, idle (pooled), destroyed once (drained).
            unsafe { self.driver.event_destroy(event) };
        }
    }
}
