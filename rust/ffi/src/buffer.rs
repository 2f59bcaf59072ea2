//! The buffer handle.

/// A range of device memory whose versions the scheduler tracks. Released when
/// the last handle goes (in Kotlin: `close()`/`use {}`), after the ops that use it finish.
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
}

#[uniffi::export]
impl Buffer {
    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.inner.len()
    }
}
