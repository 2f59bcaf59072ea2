//! Small allocations share wgpu buffers ("slabs"), each in a slot of its own.
//!
//! wgpu-core sizes the resource tracking of every command buffer and every
//! compute pass to the most buffers the device ever had alive, and clears it
//! again when they end: with 100 000 live wgpu buffers, each batch of ops
//! costs a millisecond before any of its work runs, and a raw wgpu loop
//! pays it too. An app that keeps many small buffers alive is common (a
//! parameter set, a few counters per item), so allocations of at most
//! [`SHARED_MAX`] bytes take a slot of a slab instead: 100 000 small
//! buffers are a few dozen wgpu buffers.
//!
//! Slots come in powers of two from the device's storage binding alignment
//! up, so a slot's start is a legal binding offset and its padding (to the
//! slot's size) is private to its allocation. A slot returns to its slab
//! when the last handle of it goes ([`Slot`]): its allocation, and every
//! queued op or external write that holds it. Work already submitted needs
//! no handle: a later owner's work is submitted later on the one queue,
//! which orders it after (wgpu places the barriers between them).
//!
//! A read-only and a writable binding of one wgpu buffer in one dispatch
//! are refused by wgpu; ops that may bind two slots of one slab that way are
//! compiled with every binding writable (see `prepare`).
//!
//! An op's scalars, when its kernel takes them in a uniform block, take a
//! slot of the device's uniform slabs the same way (`pipelines::Uniforms`):
//! otherwise every op queued behind a hold would be a wgpu buffer, and
//! every later pass would pay for the most there ever were.

use std::sync::{Arc, Mutex, Weak};

use super::memory::{buffer, STORAGE_USAGE};
use super::scope::{scoped, Failure};
use crate::lock::lock;
use rustc_hash::FxHashMap;

/// Allocations of at most this many bytes take a slot of a slab.
pub(crate) const SHARED_MAX: u64 = 64 << 10;

/// Bytes of one slab.
const SLAB_BYTES: u64 = 1 << 20;

/// The slabs of one device.
pub struct Slabs {
    device: wgpu::Device,
    /// What every slab (and every buffer of its own) is made for, and the
    /// names they are made with.
    usage: wgpu::BufferUsages,
    label: &'static str,
    own_label: &'static str,
    /// The smallest slot: the device's offset alignment for bindings of the slabs' kind (at least 16 bytes).
    smallest: u64,
    classes: Mutex<Vec<Class>>,
    me: Weak<Slabs>,
}

/// The slabs whose slots are `slot` bytes.
struct Class {
    slot: u64,
    slabs: FxHashMap<u64, Slab>,
    /// Slabs that may have a free slot, the last tried first. An entry whose
    /// slab is full or gone is dropped when met.
    with_room: Vec<u64>,
    /// Slabs listed in `with_room` (not counting entries of gone slabs).
    listed: usize,
    /// Slabs made so far in this class (names them; never reused).
    made: u64,
}

struct Slab {
    buffer: wgpu::Buffer,
    /// Slots never handed out start here.
    fresh: u32,
    /// Slots handed out and returned.
    returned: Vec<u32>,
    /// Slots handed out now.
    used: u32,
    /// In its class's `with_room`.
    listed: bool,
}

impl Slab {
    fn take(&mut self, slots: u32) -> Option<u32> {
        let index = self.returned.pop().or_else(|| (self.fresh < slots).then_some(self.fresh))?;
        if index == self.fresh {
            self.fresh += 1;
        }
        self.used += 1;
        Some(index)
    }
}

/// A slot handed out; it returns to its slab when the last handle goes.
pub struct Slot {
    slabs: Weak<Slabs>,
    class: usize,
    slab: u64,
    index: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slabs) = self.slabs.upgrade() {
            slabs.give_back(self.class, self.slab, self.index);
        }
    }
}

/// Where an allocation lives: its slab and its first byte there, or (over
/// [`SHARED_MAX`] bytes) a buffer of its own, from byte 0 and with no slot.
pub struct Placed {
    pub buffer: wgpu::Buffer,
    pub base: u64,
    pub slot: Option<Arc<Slot>>,
}

impl Slabs {
    /// Slabs for small allocations; `align` is the device's storage binding offset alignment.
    pub fn storage(device: &wgpu::Device, align: u64) -> Arc<Slabs> {
        Slabs::new(device, align, STORAGE_USAGE, ["weir small buffers", "weir buffer"])
    }

    /// Slabs for ops' scalars; `align` is the device's uniform binding offset alignment.
    pub fn uniform(device: &wgpu::Device, align: u64) -> Arc<Slabs> {
        let usage = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
        Slabs::new(device, align, usage, ["weir scalars", "weir scalars"])
    }

    /// `labels`: a slab's name, and a buffer of its own's.
    fn new(device: &wgpu::Device, align: u64, usage: wgpu::BufferUsages, labels: [&'static str; 2]) -> Arc<Slabs> {
        let [label, own_label] = labels;
        Arc::new_cyclic(|me| Slabs {
            device: device.clone(),
            usage,
            label,
            own_label,
            smallest: align.max(16).next_power_of_two(),
            classes: Mutex::new(Vec::new()),
            me: me.clone(),
        })
    }

    /// A slot for `bytes`, in a new slab if every slab of its size is full;
    /// over [`SHARED_MAX`] bytes, a buffer of its own.
    pub fn place(&self, bytes: u64) -> Result<Placed, Failure> {
        if bytes > SHARED_MAX {
            let buffer = scoped(&self.device, || buffer(&self.device, self.own_label, bytes, self.usage))?;
            return Ok(Placed { buffer, base: 0, slot: None });
        }
        let slot = bytes.max(1).next_power_of_two().max(self.smallest);
        let class = slot.trailing_zeros().saturating_sub(self.smallest.trailing_zeros()) as usize;
        let slots = (SLAB_BYTES / slot).max(1) as u32;
        let mut classes = lock(&self.classes);
        while classes.len() <= class {
            let size = self.smallest << classes.len();
            classes.push(Class { slot: size, slabs: FxHashMap::default(), with_room: Vec::new(), listed: 0, made: 0 });
        }
        let class_slabs = &mut classes[class];
        while let Some(&id) = class_slabs.with_room.last() {
            let Some(slab) = class_slabs.slabs.get_mut(&id) else {
                class_slabs.with_room.pop();
                continue;
            };
            if let Some(index) = slab.take(slots) {
                return Ok(self.placed(class, id, &slab.buffer, index, class_slabs.slot));
            }
            slab.listed = false;
            class_slabs.listed -= 1;
            class_slabs.with_room.pop();
        }
        let buffer = scoped(&self.device, || buffer(&self.device, self.label, slot * u64::from(slots), self.usage))?;
        class_slabs.made += 1;
        let id = class_slabs.made;
        let mut slab = Slab { buffer, fresh: 0, returned: Vec::new(), used: 0, listed: true };
        let index = slab.take(slots).unwrap_or(0);
        let placed = self.placed(class, id, &slab.buffer, index, class_slabs.slot);
        class_slabs.slabs.insert(id, slab);
        class_slabs.with_room.push(id);
        class_slabs.listed += 1;
        Ok(placed)
    }

    fn placed(&self, class: usize, slab: u64, buffer: &wgpu::Buffer, index: u32, slot: u64) -> Placed {
        Placed {
            buffer: buffer.clone(),
            base: u64::from(index) * slot,
            slot: Some(Arc::new(Slot { slabs: self.me.clone(), class, slab, index })),
        }
    }

    /// Slot `index` of slab `slab` is free again. A slab left empty goes,
    /// unless it is the only one of its size with room (the next small
    /// allocation would make it again).
    fn give_back(&self, class: usize, id: u64, index: u32) {
        let mut classes = lock(&self.classes);
        let Some(class) = classes.get_mut(class) else { return };
        let Some(slab) = class.slabs.get_mut(&id) else { return };
        slab.returned.push(index);
        slab.used = slab.used.saturating_sub(1);
        if !slab.listed {
            slab.listed = true;
            class.listed += 1;
            class.with_room.push(id);
        }
        if slab.used == 0 && class.listed > 1 {
            // Its entry in `with_room` is dropped when met.
            class.slabs.remove(&id);
            class.listed -= 1;
            if class.with_room.len() > 2 * class.listed + 16 {
                let slabs = &class.slabs;
                class.with_room.retain(|id| slabs.contains_key(id));
            }
        }
    }

    /// Slabs alive now, of every size.
    #[cfg(feature = "test-support")]
    pub fn count(&self) -> usize {
        lock(&self.classes).iter().map(|class| class.slabs.len()).sum()
    }
}
