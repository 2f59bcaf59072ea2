//! Host memory that device copies go straight into and out of: page-locked
//! where the backend has it (CUDA, HIP), plain memory elsewhere.
//!
//! [`crate::Stream::write`] copies the caller's slice before it returns, and
//! a read hands back a fresh `Vec`: each costs one host copy beside the
//! device's. An app that streams data through the device keeps its data in
//! [`HostBuffer`]s instead: [`crate::Stream::write_host`] uploads one with
//! no host copy, and [`crate::PendingRead::wait_host`] returns the page-locked
//! memory the device copied into.

use std::fmt;
use std::sync::Arc;

use crate::element::Element;
use crate::error::{Error, Result};

/// Page-locked bytes of one device, lent out as a [`HostBuffer`]. Only the
/// GPU backends lock memory, so a build without them makes none.
#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
pub(crate) trait PinnedBytes: Send + Sync {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
    /// An address naming the device that locked the memory, so that only
    /// that device copies from it directly.
    fn device(&self) -> usize;
}

enum Memory {
    Heap(Vec<u8>),
    #[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
    Pinned(Box<dyn PinnedBytes>),
}

/// Host bytes a device copies directly: page-locked on CUDA and HIP. Cheap
/// to clone; clones share the bytes, which are read-only while shared.
/// [`HostBuffer::get_mut`] gives them back for writing once this is the only
/// handle and no copy in flight holds them. Made by
/// [`crate::Runtime::host_buffer`] (a copy of data),
/// [`crate::Stream::staging_buffer`] (to fill in place) or a read
/// ([`crate::PendingRead::wait_host`]); page-locked memory goes back to its
/// runtime's pool when the last clone goes, and keeps the device open until then.
#[derive(Clone)]
pub struct HostBuffer(Arc<Memory>);

impl HostBuffer {
    pub(crate) fn heap(bytes: Vec<u8>) -> Self {
        HostBuffer(Arc::new(Memory::Heap(bytes)))
    }

    /// `len` zero bytes on the heap; out of host memory, an error (an
    /// allocation that fails would end the process).
    pub(crate) fn zeroed(len: usize) -> Result<Self> {
        Ok(HostBuffer::heap(weir_device::host::heap_zeroed(len)?))
    }

    #[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
    pub(crate) fn pinned(bytes: Box<dyn PinnedBytes>) -> Self {
        HostBuffer(Arc::new(Memory::Pinned(bytes)))
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &*self.0 {
            Memory::Heap(bytes) => bytes,
            Memory::Pinned(pinned) => pinned.bytes(),
        }
    }

    /// The bytes as elements of `T`; an error if their length is not a
    /// whole number of `T`s.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        bytemuck::try_cast_slice(self.as_bytes())
            .map_err(|error| Error::invalid(format!("{} host bytes as {}: {error}", self.len(), T::TYPE.name())))
    }

    /// `staging`, a new buffer of `bytes.len()` bytes, holding a copy of `bytes`.
    pub(crate) fn filled(mut staging: HostBuffer, bytes: &[u8]) -> crate::Result<HostBuffer> {
        // A new buffer has one handle, so it is writable.
        match staging.get_mut() {
            Some(into) if into.len() == bytes.len() => into.copy_from_slice(bytes),
            _ => return Err(crate::Error::invalid("a staging buffer to fill must be new and of its bytes' size")),
        }
        Ok(staging)
    }

    /// The bytes for writing, while this is the buffer's only handle and no
    /// copy holds it; `None` otherwise.
    pub fn get_mut(&mut self) -> Option<&mut [u8]> {
        Arc::get_mut(&mut self.0).map(|memory| match memory {
            Memory::Heap(bytes) => bytes.as_mut_slice(),
            Memory::Pinned(pinned) => pinned.bytes_mut(),
        })
    }

    /// How many bytes it holds.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// True when it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the memory is page-locked, so device copies skip the host copy.
    pub fn is_page_locked(&self) -> bool {
        matches!(&*self.0, Memory::Pinned(_))
    }

    /// The bytes as a `Vec`: moved out of plain memory held by this handle
    /// alone, copied otherwise.
    pub fn into_vec(self) -> Vec<u8> {
        match Arc::try_unwrap(self.0) {
            Ok(Memory::Heap(bytes)) => bytes,
            Ok(Memory::Pinned(pinned)) => pinned.bytes().to_vec(),
            Err(shared) => HostBuffer(shared).as_bytes().to_vec(),
        }
    }

    /// The device whose page-locked memory this is, if it is.
    #[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
    pub(crate) fn locked_by(&self) -> Option<usize> {
        match &*self.0 {
            Memory::Heap(_) => None,
            Memory::Pinned(pinned) => Some(pinned.device()),
        }
    }
}

impl std::ops::Deref for HostBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer").field("len", &self.len()).field("page_locked", &self.is_page_locked()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_bytes_are_writable_only_while_unshared() {
        let mut host = HostBuffer::heap(vec![0; 8]);
        host.get_mut().expect("one handle").copy_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
        let shared = host.clone();
        assert!(host.get_mut().is_none(), "a clone shares the bytes");
        assert_eq!(shared.as_slice::<u32>().unwrap(), &[1, 2]);
        drop(shared);
        assert!(host.get_mut().is_some());
        assert!(!host.is_page_locked());
        assert_eq!(host.into_vec(), vec![1, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn a_length_that_is_not_whole_elements_is_an_error() {
        let host = HostBuffer::heap(vec![0; 6]);
        assert!(matches!(host.as_slice::<f32>(), Err(Error::InvalidArgument(_))));
    }
}
