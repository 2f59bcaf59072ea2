//! Batches: many ops admitted in one crossing of the ordering boundary, and
//! in one crossing of the FFI.
//!
//! The ops come packed in bytes, which the Kotlin and Swift layers write
//! (`WeirStream.batch`) and this module decodes: a list of typed records would
//! cost the foreign side an object, a boxed size and a reflective write per
//! field of every op, several times what admitting the op costs in Rust.
//! The bytes are borrowed for the call, not copied into a `RustBuffer`
//! (which Rust would lift byte by byte). Ops name their buffers and kernels
//! by slot, an index into the lists the batch carries, so each handle
//! crosses once per batch however many ops use it (lowering a handle is a
//! call of its own).
//!
//! # Encoding
//!
//! Little-endian; `u32` slots index `buffers` and `kernels`. Each op is a tag
//! byte and its fields:
//!
//! - `0` execute: kernel slot `u32`; grid tag `u8` (`0`: the default grid,
//!   `1`: seven `u32`s, the fields of `Grid` in order); argument count `u32`;
//!   then per argument a tag `u8` and its value: `0` buffer (slot `u32`,
//!   access `u8`: `0` read, `1` write, `2` read-write), `1` `u32`, `2` `i32`,
//!   `3` `f32` (its bits), `4` `u64`, `5` `i64`, `6` `f64` (its bits), `7` a
//!   struct's bytes (a `u32` length, then the bytes).
//! - `1` write: buffer slot `u32`; the data's element type `u8` (`0` raw
//!   bytes, which go into any buffer, `1` `f32`, `2` `i32`, `3` `u32`: refused
//!   on a buffer of another type, as a stream's write refuses it); element
//!   offset `u64`; length in bytes `u64` (a whole number of the buffer's
//!   elements); the bytes.

use std::ops::{Deref, Range};
use std::sync::Arc;

use crate::buffer::Buffer;
use crate::error::{Result, WeirError};
use crate::graph::Graph;
use crate::kernel::Kernel;
use crate::records::{Access, ElementType, Grid};
use crate::stream::WeirStream;

/// The tag of an execute op.
pub(crate) const OP_EXECUTE: u8 = 0;
/// The tag of a write op.
const OP_WRITE: u8 = 1;

/// A batch op with its slots looked up; `args` is a range of the batch's flat argument list.
enum Decoded<'a> {
    Execute { kernel: &'a weir_core::Kernel, grid: weir_core::Grid, args: Range<usize> },
    Write { buffer: &'a weir_core::Buffer, offset: u64, data: &'a [u8] },
}

/// Reads the encoding, failing with where it stops making sense.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    op: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0, op: 0 }
    }

    /// True once every byte is read.
    pub(crate) fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    pub(crate) fn error(&self, what: impl std::fmt::Display) -> WeirError {
        WeirError::invalid(format!("batch op {} (byte {}): {what}", self.op, self.at))
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(len).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| self.error(format!("the encoding ends before {len} more bytes")))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        let mut word = [0; 4];
        word.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(word))
    }

    fn u64(&mut self) -> Result<u64> {
        let mut word = [0; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn slot<'s, P: Deref>(&self, list: &'s [P], slot: u32, what: &str) -> Result<&'s P::Target> {
        let found = usize::try_from(slot).ok().and_then(|index| list.get(index));
        found
            .map(Deref::deref)
            .ok_or_else(|| self.error(format!("{what} slot {slot}, but the batch has {}", list.len())))
    }

    /// The fields of an execute op, after its tag: its kernel and grid, and
    /// its arguments, appended to `args`.
    pub(crate) fn execute<'s, K, B>(
        &mut self,
        kernels: &'s [K],
        buffers: &'s [B],
        args: &mut Vec<weir_core::Arg<'s>>,
    ) -> Result<(&'s weir_core::Kernel, weir_core::Grid)>
    where
        K: Deref<Target = Kernel>,
        B: Deref<Target = Buffer>,
    {
        let kernel = self.u32()?;
        let kernel = self.slot(kernels, kernel, "kernel")?.core();
        let grid = self.grid()?.to_core()?;
        let count = self.u32()?;
        for _ in 0..count {
            args.push(match self.u8()? {
                0 => {
                    let slot = self.u32()?;
                    let buffer = self.slot(buffers, slot, "buffer")?.core();
                    weir_core::Arg::Buffer(buffer, self.access()?)
                }
                1 => weir_core::Arg::u32(self.u32()?),
                2 => weir_core::Arg::i32(self.u32()? as i32),
                3 => weir_core::Arg::f32(f32::from_bits(self.u32()?)),
                4 => weir_core::Arg::u64(self.u64()?),
                5 => weir_core::Arg::i64(self.u64()? as i64),
                6 => weir_core::Arg::f64(f64::from_bits(self.u64()?)),
                7 => {
                    let len = self.u32()? as usize;
                    weir_core::Arg::bytes(self.take(len)?)
                }
                tag => return Err(self.error(format!("unknown argument tag {tag}"))),
            });
        }
        Ok((kernel, grid))
    }

    fn grid(&mut self) -> Result<Grid> {
        match self.u8()? {
            0 => Ok(Grid::default()),
            1 => Ok(Grid {
                groups_x: self.u32()?,
                groups_y: self.u32()?,
                groups_z: self.u32()?,
                block_x: self.u32()?,
                block_y: self.u32()?,
                block_z: self.u32()?,
                shared_bytes: self.u32()?,
            }),
            tag => Err(self.error(format!("unknown grid tag {tag}"))),
        }
    }

    fn element(&mut self) -> Result<ElementType> {
        match self.u8()? {
            0 => Ok(ElementType::Bytes),
            1 => Ok(ElementType::F32),
            2 => Ok(ElementType::I32),
            3 => Ok(ElementType::U32),
            tag => Err(self.error(format!("unknown element type {tag}"))),
        }
    }

    fn access(&mut self) -> Result<Access> {
        match self.u8()? {
            0 => Ok(Access::Read),
            1 => Ok(Access::Write),
            2 => Ok(Access::ReadWrite),
            tag => Err(self.error(format!("unknown access {tag}"))),
        }
    }
}

/// The ops of an encoding, decoded with their slots looked up (arguments
/// into `args`), ready to admit.
fn decode<'a>(
    ops: &'a [u8],
    buffers: &'a [Arc<Buffer>],
    kernels: &'a [Arc<Kernel>],
    args: &mut Vec<weir_core::Arg<'a>>,
) -> Result<Vec<Decoded<'a>>> {
    let mut reader = Reader::new(ops);
    let mut decoded = Vec::new();
    while !reader.is_done() {
        decoded.push(match reader.u8()? {
            OP_EXECUTE => {
                let start = args.len();
                let (kernel, grid) = reader.execute(kernels, buffers, args)?;
                Decoded::Execute { kernel, grid, args: start..args.len() }
            }
            OP_WRITE => {
                let slot = reader.u32()?;
                let buffer = reader.slot(buffers, slot, "buffer")?;
                let element = reader.element()?;
                buffer.expect_data(element, "a write").map_err(|refused| reader.error(refused.to_string()))?;
                let buffer = buffer.core();
                let offset = reader.u64()?;
                let len = reader.u64()?;
                let len = usize::try_from(len).map_err(|_| reader.error(format!("{len} bytes to write")))?;
                Decoded::Write { buffer, offset, data: reader.take(len)? }
            }
            tag => return Err(reader.error(format!("unknown op tag {tag}"))),
        });
        reader.op += 1;
    }
    Ok(decoded)
}

/// Makes each decoded op on `stream`: a batch's or a recording's.
fn make(stream: &weir_core::Stream, decoded: &[Decoded<'_>], args: &[weir_core::Arg<'_>]) -> weir_core::Result<()> {
    for op in decoded {
        match op {
            Decoded::Execute { kernel, grid, args: range } => stream.execute(kernel, *grid, &args[range.clone()])?,
            Decoded::Write { buffer, offset, data } => stream.write_bytes(buffer, *offset, data)?,
        }
    }
    Ok(())
}

#[uniffi::export]
impl WeirStream {
    /// Admits the ops encoded in `ops` (see the module documentation; the
    /// Kotlin and Swift `WeirStream.batch` write it) in order, in one crossing of
    /// the ordering boundary: each op as if admitted alone (its own versions,
    /// its own failure), but no op of any stream comes between them.
    /// Everything is decoded and checked before anything is admitted, so a
    /// refused op (a bad slot, grid or argument) admits none. Returns once
    /// admitted, not once done. `ops` is borrowed for the call (Swift: `Data`;
    /// Kotlin, generated as `submitBatchFromRawMemory`: the first
    /// `remaining()` bytes at a direct `ByteBuffer`'s address, whatever its
    /// position, which `Batch.kt` lends sliced), not copied into a
    /// `RustBuffer` and lifted byte by byte.
    pub fn submit_batch(&self, buffers: Vec<Arc<Buffer>>, kernels: Vec<Arc<Kernel>>, ops: &[u8]) -> Result<()> {
        let mut args = Vec::new();
        let decoded = decode(ops, &buffers, &kernels, &mut args)?;
        if decoded.is_empty() {
            return Ok(());
        }
        Ok(self.core().batch(|batch| make(batch, &decoded, &args))?)
    }

    /// Records the ops encoded in `ops` (as [`WeirStream::submit_batch`]
    /// reads them; Kotlin's and Swift's `WeirStream.record` write them) as a
    /// graph, admitting none; [`WeirStream::replay`] admits the graph as one
    /// op, any number of times, on any stream of this runtime. Nothing
    /// recorded is `InvalidArgument`, as is any op a stream would refuse.
    /// (Kotlin: generated as `recordBatchFromRawMemory`.)
    pub fn record_batch(&self, buffers: Vec<Arc<Buffer>>, kernels: Vec<Arc<Kernel>>, ops: &[u8]) -> Result<Arc<Graph>> {
        let mut args = Vec::new();
        let decoded = decode(ops, &buffers, &kernels, &mut args)?;
        let graph = self.core().record(|recording| make(recording, &decoded, &args))?;
        Ok(Arc::new(Graph::new(graph)))
    }
}
