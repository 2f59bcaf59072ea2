//! The device state every stream, event and allocation of one GPU backend
//! shares: the driver, live-object counters and the page-locked staging pool.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::driver::{Driver, Handle};
use super::kernels::Kernels;
use crate::backend::Counters;
use crate::device::DeviceInfo;
use crate::error::Result;
use crate::lock::lock;

/// One page-locked host buffer. Plain data: the pool's owner frees it.
struct Staging {
    ptr: Handle<*mut u8>,
    capacity: usize,
}

type FreeList = Arc<Mutex<Vec<Staging>>>;

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
    /// lent until the device goes, which frees it after every stream
    /// synchronised.
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

impl Drop for Loan {
    fn drop(&mut self) {
        if let Some(staging) = self.staging.take() {
            lock(&self.home).push(staging);
        }
    }
}

/// Shared by a backend and all it made; the last owner releases the device.
pub(crate) struct Device<D: Driver> {
    pub info: DeviceInfo,
    pub counters: Counters,
    pub kernels: Kernels<D>,
    free_staging: FreeList,
    /// Every staging buffer ever allocated, lent or not: freed with the device.
    all_staging: Mutex<Vec<Staging>>,
    pub driver: D,
}

impl<D: Driver> Device<D> {
    pub fn new(driver: D) -> Arc<Self> {
        Arc::new(Device {
            info: driver.info(),
            counters: Counters::default(),
            kernels: Kernels::default(),
            free_staging: FreeList::default(),
            all_staging: Mutex::new(Vec::new()),
            driver,
        })
    }

    /// Lends a page-locked buffer of at least `len` bytes.
    pub fn stage(&self, len: usize) -> Result<Loan> {
        let reused = {
            let mut free = lock(&self.free_staging);
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, s)| s.capacity >= len)
                .min_by_key(|(_, s)| s.capacity)
                .map(|(index, _)| index);
            best.map(|index| free.swap_remove(index))
        };
        let staging = match reused {
            Some(staging) => staging,
            None => {
                // Power-of-two sizes keep the pool small and reusable.
                let capacity = len.max(64 * 1024).next_power_of_two();
                let ptr = self.driver.host_alloc(capacity)?;
                lock(&self.all_staging).push(Staging { ptr: Handle(ptr), capacity });
                self.counters.host_staging_buffers.fetch_add(1, Ordering::SeqCst);
                Staging { ptr: Handle(ptr), capacity }
            }
        };
        Ok(Loan { staging: Some(staging), home: self.free_staging.clone() })
    }
}

impl<D: Driver> Drop for Device<D> {
    fn drop(&mut self) {
        // Streams synchronise before they go and hold this device, so no copy
        // or callback still uses a staging buffer or a module here.
        if self.driver.bind().is_err() {
            return;
        }
        self.kernels.unload(&self.driver);
        for staging in lock(&self.all_staging).drain(..) {
            // SAFETY: allocated by this driver's `host_alloc`, freed once (drained).
            unsafe { self.driver.host_free(staging.ptr.0) };
        }
    }
}
