//! One op admitted with nothing but handles and integers crossing the FFI.
//!
//! `WeirStream::execute` takes its grid and argument list as a record and a
//! sequence, which UniFFI passes as `RustBuffer`s. In Kotlin each of those is
//! a JNA structure passed by value (allocated by a call of its own, written
//! and read reflectively): about 3 µs apiece, where admitting the op costs
//! 0.3 µs in Rust. Here the binding encodes the op, as one op of the batch
//! encoding (`batch.rs`), into an [`OpScratch`]: memory of Rust's that it
//! writes through its address. The op's buffers cross as handle arguments of
//! their own (`execute_encoded0` to `execute_encoded4`, for ops with that
//! many distinct buffers), so the call passes only handles and integers.
//!
//! Rust never reads foreign memory here: it copies the bytes out of its own
//! scratch (with atomic loads, so even a foreign write during the call cannot
//! make the copy undefined) and checks them as `submit_batch` checks a batch,
//! so a malformed encoding is `InvalidArgument` and admits nothing.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::batch::{Reader, OP_EXECUTE};
use crate::buffer::Buffer;
use crate::error::{Result, WeirError};
use crate::kernel::Kernel;
use crate::stream::WeirStream;

/// Bytes in an [`OpScratch`]: an execute op with a given grid and about
/// eighty arguments.
const OP_SCRATCH_BYTES: usize = 512;

/// Memory in Rust that a binding encodes one op into, through its address,
/// before passing it to `WeirStream::execute_encoded*`. One per foreign
/// thread: the binding writes it only between its own calls on that thread.
#[derive(Debug, uniffi::Object)]
pub struct OpScratch {
    bytes: Box<[AtomicU8]>,
}

#[uniffi::export]
impl OpScratch {
    /// Zeroed scratch of [`OpScratch::capacity`] bytes.
    #[uniffi::constructor]
    pub fn new() -> Arc<Self> {
        Arc::new(OpScratch { bytes: (0..OP_SCRATCH_BYTES).map(|_| AtomicU8::new(0)).collect() })
    }

    /// The address of the first byte; valid, and fixed, while this handle is alive.
    pub fn address(&self) -> u64 {
        self.bytes.as_ptr() as usize as u64
    }

    /// How many bytes there are from [`OpScratch::address`].
    pub fn capacity(&self) -> u32 {
        OP_SCRATCH_BYTES as u32
    }
}

impl WeirStream {
    /// Admits the execute op encoded in the first `len` bytes of `scratch`,
    /// whose kernel slot 0 is `kernel` and whose buffer slots index `buffers`.
    fn admit_encoded(&self, kernel: &Kernel, scratch: &OpScratch, len: u32, buffers: &[&Buffer]) -> Result<()> {
        let len = usize::try_from(len).ok().filter(|&len| len <= OP_SCRATCH_BYTES).ok_or_else(|| {
            WeirError::invalid(format!("an encoded op of {len} bytes, but the scratch holds {OP_SCRATCH_BYTES}"))
        })?;
        let mut bytes = [0u8; OP_SCRATCH_BYTES];
        for (byte, shared) in bytes.iter_mut().zip(&scratch.bytes[..len]) {
            *byte = shared.load(Ordering::Relaxed);
        }
        let mut reader = Reader::new(&bytes[..len]);
        let tag = reader.u8()?;
        if tag != OP_EXECUTE {
            return Err(reader.error(format!("op tag {tag}, but only an execute op ({OP_EXECUTE}) is taken here")));
        }
        let kernels = [kernel];
        let mut args = Vec::new();
        let (kernel, grid) = reader.execute(&kernels, buffers, &mut args)?;
        if !reader.is_done() {
            return Err(reader.error("bytes after the op"));
        }
        Ok(self.core().execute(kernel, grid, &args)?)
    }
}

/// `execute` for the bindings: the op is encoded in `scratch`, and only its
/// handles and integers cross (see the module docs). Each form takes the
/// op's distinct buffers, slots 0, 1, …, as arguments of their own; the
/// errors, ordering and lifetimes are `execute`'s. Returns once admitted.
#[uniffi::export]
impl WeirStream {
    /// Admits the op in the first `len` bytes of `scratch`; it names no buffer.
    pub fn execute_encoded0(&self, kernel: Arc<Kernel>, scratch: Arc<OpScratch>, len: u32) -> Result<()> {
        self.admit_encoded(&kernel, &scratch, len, &[])
    }

    /// Admits the op in the first `len` bytes of `scratch`; buffer slot 0 is `buffer0`.
    pub fn execute_encoded1(
        &self,
        kernel: Arc<Kernel>,
        scratch: Arc<OpScratch>,
        len: u32,
        buffer0: Arc<Buffer>,
    ) -> Result<()> {
        self.admit_encoded(&kernel, &scratch, len, &[&buffer0])
    }

    /// Admits the op in the first `len` bytes of `scratch`; buffer slots 0 and 1 are `buffer0` and `buffer1`.
    pub fn execute_encoded2(
        &self,
        kernel: Arc<Kernel>,
        scratch: Arc<OpScratch>,
        len: u32,
        buffer0: Arc<Buffer>,
        buffer1: Arc<Buffer>,
    ) -> Result<()> {
        self.admit_encoded(&kernel, &scratch, len, &[&buffer0, &buffer1])
    }

    /// Admits the op in the first `len` bytes of `scratch`; buffer slots 0 to 2 are `buffer0` to `buffer2`.
    pub fn execute_encoded3(
        &self,
        kernel: Arc<Kernel>,
        scratch: Arc<OpScratch>,
        len: u32,
        buffer0: Arc<Buffer>,
        buffer1: Arc<Buffer>,
        buffer2: Arc<Buffer>,
    ) -> Result<()> {
        self.admit_encoded(&kernel, &scratch, len, &[&buffer0, &buffer1, &buffer2])
    }

    /// Admits the op in the first `len` bytes of `scratch`; buffer slots 0 to 3 are `buffer0` to `buffer3`.
    #[allow(clippy::too_many_arguments)]
    pub fn execute_encoded4(
        &self,
        kernel: Arc<Kernel>,
        scratch: Arc<OpScratch>,
        len: u32,
        buffer0: Arc<Buffer>,
        buffer1: Arc<Buffer>,
        buffer2: Arc<Buffer>,
        buffer3: Arc<Buffer>,
    ) -> Result<()> {
        self.admit_encoded(&kernel, &scratch, len, &[&buffer0, &buffer1, &buffer2, &buffer3])
    }
}
