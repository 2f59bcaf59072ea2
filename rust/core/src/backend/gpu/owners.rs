//! The owners of device events and allocations: each releases its handle
//! exactly once, in `Drop`, and keeps the live counts honest.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::device::Device;
use crate::backend::DeviceTimestamp;
use crate::error::Result;
use weir_device::driver::{Driver, EventUse};

/// A device event (timing off, except for [`EventUse::Timing`]), from the
/// device's pool and back to it when dropped. Reusing one that a stream still waits on is allowed: a stream
/// wait takes the event's latest record when it is made, and a host wait
/// is over before the event drops. A timing event recorded on its stream is
/// the backend's timestamp, counted among the live events, as it is one.
pub(crate) struct GpuEvent<D: Driver> {
    /// The device it belongs to, alive while the event is.
    pub(crate) device: Arc<Device<D>>,
    usage: EventUse,
    pub(crate) raw: D::Event,
    /// Whether it is still among the live events (see [`GpuEvent::uncount`]).
    counted: AtomicBool,
}

impl<D: Driver> GpuEvent<D> {
    pub(crate) fn new(device: &Arc<Device<D>>, usage: EventUse) -> Result<Self> {
        let raw = match device.events.take(usage) {
            Some(raw) => raw,
            None => device.driver.event_create(usage)?,
        };
        device.counters.live_events.fetch_add(1, Ordering::SeqCst);
        Ok(GpuEvent { device: device.clone(), usage, raw, counted: AtomicBool::new(true) })
    }

    /// Takes it off the live events once its work is done, before its
    /// completion runs, though a second owner (a waiter and a wake-thread
    /// probe share a fence's event) may drop it later.
    pub(crate) fn uncount(&self) {
        if self.counted.swap(false, Ordering::SeqCst) {
            self.device.counters.live_events.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl<D: Driver> DeviceTimestamp for GpuEvent<D> {
    fn elapsed_since(&self, earlier: &Self) -> Result<Duration> {
        let driver = &self.device.driver;
        // Read from any thread: bind first.
        driver.bind()?;
        // SAFETY: both are live events of this driver, timing ones (only
        // `Backend::timestamp` makes timestamps), recorded on one stream in
        // this order, and complete (the caller waited for both).
        unsafe { driver.event_elapsed(earlier.raw, self.raw) }
    }
}

impl<D: Driver> Drop for GpuEvent<D> {
    fn drop(&mut self) {
        self.uncount();
        if let Some(spare) = self.device.events.give_back(self.usage, self.raw) {
            // The pool is full. Dropped on the waiter thread or under the
            // scheduler's lock: bind, since either may not have the device
            // current (and a lost device's events went with its context).
            if self.device.driver.bind().is_ok() {
                // SAFETY: made by this driver; this owner destroys it once.
                unsafe { self.device.driver.event_destroy(spare) };
            }
        }
    }
}

/// A device allocation.
pub(crate) struct GpuMemory<D: Driver> {
    device: Arc<Device<D>>,
    pub(crate) ptr: u64,
    pub(crate) len: u64,
}

impl<D: Driver> PartialEq for GpuMemory<D> {
    /// The same allocation: one object.
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl<D: Driver> GpuMemory<D> {
    pub(crate) fn new(device: &Arc<Device<D>>, len: u64) -> Result<Self> {
        let ptr = device.driver.alloc(len)?;
        device.counters.live_allocations.fetch_add(1, Ordering::SeqCst);
        Ok(GpuMemory { device: device.clone(), ptr, len })
    }
}

impl<D: Driver> Drop for GpuMemory<D> {
    fn drop(&mut self) {
        // The scheduler drops memory only once a signal on every stream that
        // used it completed, on the delivery thread (or a closing thread),
        // never from a completion callback. CUDA queues the free on its pool
        // stream; HIP's free waits for the device, so it goes to the frees' thread.
        // SAFETY: allocated by this driver in `new`; this owner frees it once,
        // after its last user completed.
        unsafe { self.device.free(self.ptr) };
        self.device.counters.live_allocations.fetch_sub(1, Ordering::SeqCst);
    }
}
