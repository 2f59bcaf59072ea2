//! The buffer handle.

use std::sync::Arc;

use crate::error::Result;
use crate::records::ElementType;

/// Typed device memory whose versions the scheduler tracks: a whole buffer,
/// or a view of a range of one ([`Buffer::view`]), which every op takes as it
/// takes a buffer. Counts and offsets are in its elements. Released when the
/// last handle to the memory goes (in Kotlin: `close()`/`use {}`), after the
/// ops that use it finish.
#[derive(Debug, uniffi::Object)]
pub struct Buffer {
    inner: weir_core::Buffer,
}

impl Buffer {
    pub(crate) fn new(inner: weir_core::Buffer) -> Self {
        Buffer { inner }
    }

    pub(crate) fn core(&self) -> &weir_core::Buffer {
        &self.inner
    }

    /// Refuses `data`, an array of `data` elements, for this buffer: the
    /// buffer holds that type or raw bytes, or `data` is raw bytes. Java and
    /// Kotlin have no unsigned arrays, so `i32` data goes with `u32` buffers
    /// as their bits.
    pub(crate) fn expect_data(&self, data: ElementType, what: &str) -> Result<()> {
        let held = self.inner.element_type();
        let as_bits = data == ElementType::I32 && held == weir_core::ElementType::U32;
        if data == ElementType::Bytes || as_bits {
            return Ok(());
        }
        Ok(self.inner.expect_element(data, what)?)
    }
}

#[uniffi::export]
impl Buffer {
    /// What the buffer holds.
    pub fn element_type(&self) -> ElementType {
        self.inner.element_type()
    }

    /// Number of elements (of a view: in its range).
    pub fn element_count(&self) -> u64 {
        self.inner.len()
    }

    /// Size in bytes (of a view: of its range).
    pub fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    /// The element of the whole buffer this one starts at: 0 unless a view.
    pub fn first_element(&self) -> u64 {
        self.inner.first()
    }

    /// Refuses reading this buffer into an array of `element`s with
    /// `InvalidArgument`, as `read_host` does: for a binding's blocking reads,
    /// which get raw bytes.
    pub fn check_read_as(&self, element: ElementType) -> Result<()> {
        self.expect_data(element, "a read")
    }

    /// The `count` elements from element `first` of this buffer (or view), as
    /// a buffer of its own sharing the memory. A write to it publishes a new
    /// version of the whole buffer, so every stream orders after it.
    pub fn view(&self, first: u64, count: u64) -> Result<Arc<Buffer>> {
        Ok(Arc::new(Buffer::new(self.inner.view(first, count)?)))
    }
}
