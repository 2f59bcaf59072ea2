//! Buffers: typed device memory whose versions the scheduler tracks, and
//! views of a range of it.

use std::sync::Arc;

use crate::backend::Span;
use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::scheduler::{BufferKey, Engine};

struct Handle {
    engine: Arc<dyn Engine>,
    key: BufferKey,
    element: ElementType,
    /// Of the whole allocation.
    size_bytes: u64,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // Memory is freed once every op that used it is done (see the scheduler).
        self.engine.release(self.key);
    }
}

/// Typed device memory: the whole of an allocation, or a view of a range of
/// one ([`Buffer::view`]). Clones and views share the memory and keep its
/// runtime alive; when the last of them drops, the memory is freed as soon as
/// the ops that use it finish, with no further call.
///
/// Lengths, offsets and counts are in elements of the buffer's
/// [`ElementType`]. A view is an argument like any buffer: ops see only its
/// range, and a write to it publishes a new version of its whole allocation,
/// so other streams order after it exactly as after a write to the buffer.
#[derive(Clone)]
pub struct Buffer {
    handle: Arc<Handle>,
    /// The view's first byte within the allocation.
    start: u64,
    /// The view's size in bytes (a whole number of elements).
    size_bytes: u64,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer(#{}, {} × {}", self.handle.key, self.len(), self.handle.element)?;
        if self.is_view() {
            write!(f, " from element {}", self.first())?;
        }
        f.write_str(")")
    }
}

impl Buffer {
    pub(crate) fn new(engine: Arc<dyn Engine>, key: BufferKey, element: ElementType, size_bytes: u64) -> Self {
        Buffer { handle: Arc::new(Handle { engine, key, element, size_bytes }), start: 0, size_bytes }
    }

    /// What the buffer holds.
    pub fn element_type(&self) -> ElementType {
        self.handle.element
    }

    /// Number of elements (of a view: in its range).
    pub fn len(&self) -> u64 {
        self.size_bytes / self.handle.element.size_bytes()
    }

    /// Always false: buffers and views hold at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Size in bytes (of a view: of its range).
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// The element of the whole allocation this buffer starts at: 0 unless a view.
    pub fn first(&self) -> u64 {
        self.start / self.handle.element.size_bytes()
    }

    /// True when this is a view of part of its allocation.
    pub fn is_view(&self) -> bool {
        self.size_bytes != self.handle.size_bytes
    }

    /// The `count` elements from element `first` of this buffer (or view), as
    /// a buffer of its own sharing the memory.
    ///
    /// On wgpu, a view that an arithmetic built-in or a custom kernel binds
    /// must start at a multiple of the device's storage-binding alignment
    /// (at most 256 bytes; `Unsupported` otherwise); reads, writes, copies
    /// and zeroing take any view on every backend.
    pub fn view(&self, first: u64, count: u64) -> Result<Buffer> {
        if count == 0 {
            return Err(Error::invalid("a view holds at least one element"));
        }
        let (start, size_bytes) = self.byte_range(first, count)?;
        Ok(Buffer { handle: self.handle.clone(), start, size_bytes })
    }

    /// The bytes of elements `first..first + count` within the allocation.
    fn byte_range(&self, first: u64, count: u64) -> Result<(u64, u64)> {
        let element = self.handle.element;
        let out_of_range = || Error::OutOfRange { offset: first, size: count, len: self.len(), element };
        let end = first.checked_add(count).ok_or_else(out_of_range)?;
        if end > self.len() {
            return Err(out_of_range());
        }
        Ok((self.start + first * element.size_bytes(), count * element.size_bytes()))
    }

    /// Refuses data of `element` for this buffer with [`Error::InvalidArgument`]
    /// naming both types, unless they are the same or the buffer holds raw bytes.
    pub fn expect_element(&self, element: ElementType, what: &str) -> Result<()> {
        if self.handle.element.serves(element) {
            return Ok(());
        }
        Err(Error::invalid(format!("{what} of {element} on a buffer of {}", self.handle.element)))
    }

    /// The runtime this buffer belongs to, and its key there.
    pub(crate) fn owner(&self) -> (&Arc<dyn Engine>, BufferKey) {
        (&self.handle.engine, self.handle.key)
    }

    pub(crate) fn key_in(&self, engine: &Arc<dyn Engine>) -> Result<BufferKey> {
        if Runtime::same_engine(&self.handle.engine, engine) {
            Ok(self.handle.key)
        } else {
            Err(Error::ForeignHandle("buffer"))
        }
    }

    /// Elements `first..first + count` of this buffer as a span of its
    /// allocation, checked against this buffer and runtime.
    pub(crate) fn span_in(&self, engine: &Arc<dyn Engine>, first: u64, count: u64) -> Result<Span<BufferKey>> {
        let key = self.key_in(engine)?;
        let (offset, len) = self.byte_range(first, count)?;
        Ok(Span { buffer: key, offset, len })
    }

    /// The whole buffer (or view) as a span.
    pub(crate) fn whole_in(&self, engine: &Arc<dyn Engine>) -> Result<Span<BufferKey>> {
        let key = self.key_in(engine)?;
        Ok(Span { buffer: key, offset: self.start, len: self.size_bytes })
    }

    /// The bytes of its allocation that this buffer (or view) covers, as a
    /// buffer of `to`'s allocation, a whole buffer of the same size: `to`
    /// itself, or a view of it, refused unless they are whole elements of
    /// `to` (as every view of it is).
    pub(crate) fn same_bytes_of(&self, to: &Buffer) -> Result<Buffer> {
        if !self.is_view() {
            return Ok(to.clone());
        }
        let unit = to.handle.element.size_bytes();
        if !self.start.is_multiple_of(unit) || !self.size_bytes.is_multiple_of(unit) {
            return Err(Error::invalid(format!(
                "bytes {}..{} of a buffer are no view of a buffer of {}: its views hold whole {}",
                self.start,
                self.start + self.size_bytes,
                to.handle.element,
                to.handle.element.unit()
            )));
        }
        to.view(self.start / unit, self.size_bytes / unit)
    }

    /// The whole allocation, refusing a view: for what maps memory as a whole.
    pub(crate) fn whole_allocation_in(&self, engine: &Arc<dyn Engine>, what: &str) -> Result<BufferKey> {
        if self.is_view() {
            return Err(Error::invalid(format!("{what} takes whole buffers, not views")));
        }
        self.key_in(engine)
    }
}
