//! CPU device memory with a race detector.
//!
//! Bytes live in a heap block shared by the stream workers. The scheduler is
//! what keeps conflicting accesses apart; the detector checks it did: every
//! command declares its byte ranges before touching them, and an overlapping
//! conflicting access fails the command (without touching memory) and is
//! counted in `race_violations`.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::command::Span;
use crate::counters::Counters;
use crate::error::Error;
use crate::lock::lock;

/// Fresh memory is filled with this byte so that a missing initialisation shows.
pub(crate) const FRESH_BYTE: u8 = 0xA5;

struct Block {
    // u64 words keep every 4-byte typed view aligned.
    words: Box<[UnsafeCell<u64>]>,
    len: u64,
    active: Mutex<Vec<ActiveAccess>>,
    counters: Arc<Counters>,
}

// SAFETY: the bytes are only reached through `CpuMemory::view`, whose callers hold
// an `AccessGuard` proving no conflicting access overlaps theirs; all other fields are Sync.
unsafe impl Sync for Block {}

impl Drop for Block {
    fn drop(&mut self) {
        self.counters.live_allocations.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ActiveAccess {
    id: u64,
    range: Range<u64>,
    write: bool,
}

/// One CPU allocation. Cloning shares it: workers keep it alive while they use it.
#[derive(Clone)]
pub struct CpuMemory(Arc<Block>);

impl PartialEq for CpuMemory {
    /// The same allocation: clones share one.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for CpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuMemory({} bytes)", self.0.len)
    }
}

static NEXT_ACCESS: AtomicU64 = AtomicU64::new(1);

/// Proof that a byte range is registered with the race detector; unregisters on drop.
pub(crate) struct AccessGuard {
    memory: CpuMemory,
    access: ActiveAccess,
}

impl Drop for AccessGuard {
    fn drop(&mut self) {
        lock(&self.memory.0.active).retain(|access| access.id != self.access.id);
    }
}

impl AccessGuard {
    /// The guarded bytes, read-only.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the guard registered this range; any overlapping access registered
        // meanwhile is a read (checked in `begin`), so shared bytes are not written.
        unsafe { std::slice::from_raw_parts(self.memory.base().add(self.access.range.start as usize), self.len()) }
    }

    /// True for a write guard.
    pub(crate) fn is_write(&self) -> bool {
        self.access.write
    }

    /// The guarded bytes, writable; an error for a read guard.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], String> {
        if !self.access.write {
            return Err("write through a read guard".to_owned());
        }
        let start = self.access.range.start as usize;
        // SAFETY: a write guard is granted only when no other access overlaps the
        // range, and none is granted while it lives; callers take one slice per guard.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.memory.base().add(start), self.len()) })
    }

    fn len(&self) -> usize {
        (self.access.range.end - self.access.range.start) as usize
    }
}

/// `bytes` copied onto the heap; out of host memory, an error rather than
/// the end of the process (an allocation that fails aborts it).
pub fn heap_copy(bytes: &[u8]) -> Result<Vec<u8>, Error> {
    let mut copy = heap_with_room(bytes.len())?;
    copy.extend_from_slice(bytes);
    Ok(copy)
}

/// `len` zero bytes on the heap; out of host memory, an error, as [`heap_copy`].
pub fn heap_zeroed(len: usize) -> Result<Vec<u8>, Error> {
    let mut zeros = heap_with_room(len)?;
    zeros.resize(len, 0);
    Ok(zeros)
}

fn heap_with_room(len: usize) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(len).map_err(|_| Error::OutOfMemory { bytes: len as u64, host: true })?;
    Ok(bytes)
}

impl CpuMemory {
    pub fn allocate(bytes: u64, counters: &Arc<Counters>) -> Option<CpuMemory> {
        let words = usize::try_from(bytes.div_ceil(8)).ok()?;
        let mut storage: Vec<UnsafeCell<u64>> = Vec::new();
        storage.try_reserve_exact(words).ok()?;
        let fresh = u64::from_ne_bytes([FRESH_BYTE; 8]);
        storage.extend((0..words).map(|_| UnsafeCell::new(fresh)));
        counters.live_allocations.fetch_add(1, Ordering::SeqCst);
        Some(CpuMemory(Arc::new(Block {
            words: storage.into_boxed_slice(),
            len: bytes,
            active: Mutex::new(Vec::new()),
            counters: counters.clone(),
        })))
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.0.len
    }

    fn base(&self) -> *mut u8 {
        self.0.words.as_ptr() as *mut u8
    }

    /// Registers an access to `span` of this memory; fails on a conflicting overlap.
    pub(crate) fn begin(span: &Span<CpuMemory>, write: bool) -> Result<AccessGuard, String> {
        let memory = &span.buffer;
        let range = span.offset..span.offset.saturating_add(span.len);
        if range.end > memory.size() {
            return Err(format!("range {range:?} outside a {}-byte allocation", memory.size()));
        }
        let mut active = lock(&memory.0.active);
        if let Some(other) =
            active.iter().find(|a| (a.write || write) && a.range.start < range.end && range.start < a.range.end)
        {
            memory.0.counters.race_violations.fetch_add(1, Ordering::SeqCst);
            return Err(format!(
                "race detected: {} of bytes {range:?} overlaps a running {} of bytes {:?}",
                if write { "write" } else { "read" },
                if other.write { "write" } else { "read" },
                other.range
            ));
        }
        let access = ActiveAccess { id: NEXT_ACCESS.fetch_add(1, Ordering::Relaxed), range, write };
        active.push(access.clone());
        Ok(AccessGuard { memory: memory.clone(), access })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detector_flags_overlapping_write_and_read() {
        let counters = Arc::new(Counters::default());
        let memory = CpuMemory::allocate(64, &counters).unwrap();
        let write = CpuMemory::begin(&Span { buffer: memory.clone(), offset: 0, len: 32 }, true).unwrap();
        let read = CpuMemory::begin(&Span { buffer: memory.clone(), offset: 16, len: 32 }, false);
        assert!(read.is_err());
        assert_eq!(counters.race_violations.load(Ordering::SeqCst), 1);
        // Disjoint ranges and concurrent reads are fine.
        let _disjoint = CpuMemory::begin(&Span { buffer: memory.clone(), offset: 32, len: 32 }, true).unwrap();
        drop(write);
        let _r1 = CpuMemory::begin(&Span { buffer: memory.clone(), offset: 0, len: 16 }, false).unwrap();
        let _r2 = CpuMemory::begin(&Span { buffer: memory.clone(), offset: 0, len: 16 }, false).unwrap();
        assert_eq!(counters.race_violations.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn fresh_memory_is_not_zero() {
        let counters = Arc::new(Counters::default());
        let memory = CpuMemory::allocate(16, &counters).unwrap();
        let guard = CpuMemory::begin(&Span { buffer: memory, offset: 0, len: 16 }, false).unwrap();
        assert!(guard.bytes().iter().all(|&b| b == FRESH_BYTE));
    }
}
