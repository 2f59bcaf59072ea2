//! Device memory: a slot of a shared wgpu buffer for a small allocation
//! (`super::slabs`), a wgpu buffer of its own for a larger one, its size
//! rounded up to the 4-byte copy granule. The padding is private to the
//! allocation, so ops that end at the buffer's end may round their range up
//! to it. Offsets into an allocation are relative to its `base` in the wgpu
//! buffer; [`WgpuMemory::at`] turns them into the wgpu buffer's.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::bind_groups::BindGroups;
use super::slabs::{Placed, Slot};
use super::WgpuDevice;
use crate::counters::Counters;
use crate::error::{Error, Result};

/// What an allocation's wgpu buffer (its own or a slab) is made for.
pub(crate) const STORAGE_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

/// A wgpu buffer of `size` bytes, not mapped: every buffer Weir makes but an
/// upload's staging buffer (`staging_with`).
pub fn buffer(device: &wgpu::Device, label: &str, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false })
}

/// Rounds `bytes` up to a multiple of 4.
pub(crate) fn align4(bytes: u64) -> u64 {
    bytes.div_ceil(4) * 4
}

/// One allocation. Released once neither its memory nor a queued op holds
/// it; wgpu keeps the buffer alive for work in flight.
///
/// A clone is a hold, as a queued op takes one until it is recorded: it
/// keeps the allocation's wgpu buffer alive, and its slot, which no other
/// allocation takes meanwhile. One pointer: a launch's arguments map to it in
/// place.
#[derive(Clone)]
pub struct WgpuMemory(Arc<Allocation>);

struct Allocation {
    buffer: wgpu::Buffer,
    /// Where it starts in `buffer` (0 unless it is a slot of a slab).
    base: u64,
    len: u64,
    _slot: Option<Arc<Slot>>,
    counters: Arc<Counters>,
    bind_groups: Arc<BindGroups>,
}

impl PartialEq for WgpuMemory {
    /// The same allocation: one object.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for WgpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WgpuMemory({} bytes)", self.0.len)
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.bind_groups.forget(&self.buffer, self.base, align4(self.len.max(1)));
        self.counters.live_allocations.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg_attr(not(feature = "test-support"), allow(dead_code))]
impl WgpuMemory {
    /// `bytes` of device memory on `gpu`: a slot of its slabs for a small allocation.
    pub fn allocate(gpu: &WgpuDevice, bytes: u64) -> Result<WgpuMemory> {
        let size = align4(bytes.max(1));
        let max = gpu.limits.max_buffer_size;
        if size > max {
            return Err(Error::invalid(format!("{bytes} bytes exceed the device's buffer limit of {max} bytes")));
        }
        let Placed { buffer, base, slot } = gpu.slabs.place(size).map_err(|failure| failure.refusing(bytes))?;
        gpu.counters.live_allocations.fetch_add(1, Ordering::SeqCst);
        Ok(WgpuMemory(Arc::new(Allocation {
            buffer,
            base,
            len: bytes,
            _slot: slot,
            counters: gpu.counters.clone(),
            bind_groups: gpu.bind_groups.clone(),
        })))
    }

    /// The wgpu buffer the allocation is in, for raw access: small
    /// allocations share one, each from its own [`WgpuMemory::offset`].
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.0.buffer
    }

    /// Where the allocation starts in [`WgpuMemory::buffer`].
    pub fn offset(&self) -> u64 {
        self.0.base
    }

    /// The allocation's size as Weir sees it (its range in the wgpu buffer may be up to 3 bytes longer).
    pub fn len(&self) -> u64 {
        self.0.len
    }

    /// Always false: allocations have at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Byte `offset` of the allocation, as an offset into the wgpu buffer.
    pub fn at(&self, offset: u64) -> u64 {
        self.0.base + offset
    }
}

/// A host-visible buffer holding `data` (padded to 4 bytes), ready to copy from.
pub(crate) fn staging_with(device: &wgpu::Device, data: &[u8]) -> Result<wgpu::Buffer, String> {
    let size = align4(data.len().max(1) as u64);
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("weir upload"),
        size,
        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::STORAGE,
        mapped_at_creation: true,
    });
    {
        let mut view =
            buffer.slice(..).get_mapped_range_mut().map_err(|e| format!("cannot fill a staging buffer: {e}"))?;
        view.slice(..data.len()).copy_from_slice(data);
    }
    buffer.unmap();
    Ok(buffer)
}
