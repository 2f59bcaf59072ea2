//! Buffers: device memory whose versions the scheduler tracks.

use std::sync::Arc;

use crate::backend::Span;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::scheduler::{BufferKey, Engine};

struct Handle {
    engine: Arc<dyn Engine>,
    key: BufferKey,
    len: u64,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // Memory is freed once every op that used it is done (see the scheduler).
        self.engine.release(self.key);
    }
}

/// A range of device memory. Clones share it and keep its runtime alive; when
/// the last clone drops, its memory is freed as soon as the ops that use it
/// finish, with no further call.
#[derive(Clone)]
pub struct Buffer(Arc<Handle>);

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer(#{}, {} bytes)", self.0.key, self.0.len)
    }
}

impl Buffer {
    pub(crate) fn new(engine: Arc<dyn Engine>, key: BufferKey, len: u64) -> Self {
        Buffer(Arc::new(Handle { engine, key, len }))
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.0.len
    }

    /// Always false: buffers have at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The runtime this buffer belongs to, and its key there.
    pub(crate) fn owner(&self) -> (&Arc<dyn Engine>, BufferKey) {
        (&self.0.engine, self.0.key)
    }

    pub(crate) fn key_in(&self, engine: &Arc<dyn Engine>) -> Result<BufferKey> {
        if Runtime::same_engine(&self.0.engine, engine) {
            Ok(self.0.key)
        } else {
            Err(Error::ForeignHandle("buffer"))
        }
    }

    /// The bytes `offset..offset + len`, checked against this buffer and runtime.
    pub(crate) fn span_in(&self, engine: &Arc<dyn Engine>, offset: u64, len: u64) -> Result<Span<BufferKey>> {
        let key = self.key_in(engine)?;
        match offset.checked_add(len) {
            Some(end) if end <= self.0.len => Ok(Span { buffer: key, offset, len }),
            _ => Err(Error::OutOfRange { offset, size: len, len: self.0.len }),
        }
    }

    /// The whole buffer as a span.
    pub(crate) fn whole_in(&self, engine: &Arc<dyn Engine>) -> Result<Span<BufferKey>> {
        self.span_in(engine, 0, self.0.len)
    }
}
