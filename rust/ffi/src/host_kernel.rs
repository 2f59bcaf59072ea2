//! Custom CPU kernels written in Kotlin or Swift: a foreign callback that the
//! CPU backend's stream worker calls with the launch's memory.
//!
//! The callback gets addresses, not copies: a [`CpuKernelCall`] names each
//! buffer argument's first byte, size and access, valid while the callback
//! runs and refused after it. The worker holds no lock of Weir's during the
//! call; a callback that waits on its own stream waits for itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Result, WeirError};
use crate::records::Grid;

/// A custom kernel's CPU implementation in a foreign language.
#[uniffi::export(with_foreign)]
pub trait CpuKernelBody: Send + Sync {
    /// Runs the kernel over `call`'s arguments; returns `None` when it
    /// succeeded, or the message that fails the op (and the buffers it writes).
    fn run(&self, call: Arc<CpuKernelCall>) -> Option<String>;
}

/// One buffer argument of a call: where it is, how big, whether it is written.
#[derive(Debug, Clone, Copy)]
struct CallBuffer {
    address: usize,
    size_bytes: usize,
    writable: bool,
}

/// The arguments of one launch of a foreign CPU kernel, in declaration order:
/// buffers and scalars each counted on their own. Addresses are valid only
/// while [`CpuKernelBody::run`] runs; after it returns every accessor fails
/// with `InvalidArgument`.
#[derive(Debug, uniffi::Object)]
pub struct CpuKernelCall {
    grid: Grid,
    buffers: Vec<CallBuffer>,
    scalars: Vec<weir_core::ScalarArg>,
    live: AtomicBool,
}

impl CpuKernelCall {
    fn live(&self) -> Result<()> {
        match self.live.load(Ordering::Acquire) {
            true => Ok(()),
            false => Err(WeirError::invalid("this kernel call is over: its memory is no longer lent")),
        }
    }

    fn buffer(&self, index: u32) -> Result<CallBuffer> {
        self.live()?;
        let count = self.buffers.len();
        self.buffers
            .get(index as usize)
            .copied()
            .ok_or_else(|| WeirError::invalid(format!("no buffer argument {index}: the kernel has {count}")))
    }

    /// Scalar argument `index` as `pick` takes it, or why not: no such
    /// argument, or one of another type than `wanted`.
    fn scalar<T>(&self, index: u32, wanted: &str, pick: impl FnOnce(&weir_core::ScalarArg) -> Option<T>) -> Result<T> {
        self.live()?;
        let count = self.scalars.len();
        let scalar = self
            .scalars
            .get(index as usize)
            .ok_or_else(|| WeirError::invalid(format!("no scalar argument {index}: the kernel has {count}")))?;
        pick(scalar).ok_or_else(|| WeirError::invalid(format!("scalar argument {index} is {scalar:?}, not a {wanted}")))
    }
}

#[uniffi::export]
impl CpuKernelCall {
    /// The launch's grid, as given to `execute`.
    pub fn grid(&self) -> Grid {
        self.grid
    }

    /// Number of buffer arguments.
    pub fn buffer_count(&self) -> u32 {
        self.buffers.len() as u32
    }

    /// Number of scalar arguments.
    pub fn scalar_count(&self) -> u32 {
        self.scalars.len() as u32
    }

    /// The address of buffer argument `index`'s first byte (of a view: of its
    /// range), lent for the call.
    pub fn buffer_address(&self, index: u32) -> Result<u64> {
        Ok(self.buffer(index)?.address as u64)
    }

    /// The size in bytes of buffer argument `index`.
    pub fn buffer_size_bytes(&self, index: u32) -> Result<u64> {
        Ok(self.buffer(index)?.size_bytes as u64)
    }

    /// True when buffer argument `index` is declared `Write` or `ReadWrite`:
    /// the kernel may write it. Writing a read-only one is undefined.
    pub fn buffer_writable(&self, index: u32) -> Result<bool> {
        Ok(self.buffer(index)?.writable)
    }

    /// Scalar argument `index`, which must be a `u32`.
    pub fn scalar_u32(&self, index: u32) -> Result<u32> {
        self.scalar(index, "u32", |scalar| match scalar {
            weir_core::ScalarArg::U32(value) => Some(*value),
            _ => None,
        })
    }

    /// Scalar argument `index`, which must be an `i32`.
    pub fn scalar_i32(&self, index: u32) -> Result<i32> {
        self.scalar(index, "i32", |scalar| match scalar {
            weir_core::ScalarArg::I32(value) => Some(*value),
            _ => None,
        })
    }

    /// Scalar argument `index`, which must be an `f32`.
    pub fn scalar_f32(&self, index: u32) -> Result<f32> {
        self.scalar(index, "f32", |scalar| match scalar {
            weir_core::ScalarArg::F32(value) => Some(*value),
            _ => None,
        })
    }

    /// Scalar argument `index`, which must be a `u64`.
    pub fn scalar_u64(&self, index: u32) -> Result<u64> {
        self.scalar(index, "u64", |scalar| match scalar {
            weir_core::ScalarArg::U64(value) => Some(*value),
            _ => None,
        })
    }

    /// Scalar argument `index`, which must be an `i64`.
    pub fn scalar_i64(&self, index: u32) -> Result<i64> {
        self.scalar(index, "i64", |scalar| match scalar {
            weir_core::ScalarArg::I64(value) => Some(*value),
            _ => None,
        })
    }

    /// Scalar argument `index`, which must be an `f64`.
    pub fn scalar_f64(&self, index: u32) -> Result<f64> {
        self.scalar(index, "f64", |scalar| match scalar {
            weir_core::ScalarArg::F64(value) => Some(*value),
            _ => None,
        })
    }

    /// Scalar argument `index`, which must be a struct passed by value: its bytes.
    pub fn scalar_bytes(&self, index: u32) -> Result<Vec<u8>> {
        self.scalar(index, "struct's bytes", |scalar| match scalar {
            weir_core::ScalarArg::Bytes(bytes) => Some(bytes.to_vec()),
            _ => None,
        })
    }
}

/// A scalar's place in [`CpuKernelCall::packed`]: its tag, then two words.
fn packed_scalar(scalar: &weir_core::ScalarArg) -> [i64; 3] {
    use weir_core::ScalarArg::*;
    let number = |tag: i64, bits: i64| [tag, bits, 0];
    match scalar {
        U8(value) => number(1, i64::from(*value)),
        I8(value) => number(2, i64::from(*value)),
        U16(value) => number(3, i64::from(*value)),
        I16(value) => number(4, i64::from(*value)),
        F16Bits(bits) => number(5, i64::from(*bits)),
        U32(value) => number(6, i64::from(*value)),
        I32(value) => number(7, i64::from(*value)),
        F32(value) => number(8, i64::from(value.to_bits())),
        U64(value) => number(9, *value as i64),
        I64(value) => number(10, *value),
        F64(value) => number(11, value.to_bits() as i64),
        // The struct's bytes stay where they are, lent for the call as buffers are.
        Bytes(bytes) => [12, bytes.as_ptr() as i64, bytes.len() as i64],
    }
}

#[uniffi::export]
impl CpuKernelCall {
    /// The whole call as numbers, for a binding that reads its arguments
    /// without one call per argument (Kotlin's `CpuKernelArgs`):
    /// - the grid: groups x, y, z, block x, y, z, shared bytes;
    /// - the buffer count, then per buffer its address, size in bytes and
    ///   1 if writable (else 0);
    /// - the scalar count, then per scalar a tag (1 `u8`, 2 `i8`, 3 `u16`,
    ///   4 `i16`, 5 `f16` bits, 6 `u32`, 7 `i32`, 8 `f32` bits, 9 `u64`,
    ///   10 `i64`, 11 `f64` bits, 12 a struct) and two words: the value as
    ///   one word (the signed types sign-extended, the rest zero-extended)
    ///   and 0, or for a struct its bytes' address and length, lent for the
    ///   call as buffers are.
    pub fn packed(&self) -> Result<Vec<i64>> {
        self.live()?;
        let Grid { groups_x, groups_y, groups_z, block_x, block_y, block_z, shared_bytes } = self.grid;
        let grid = [groups_x, groups_y, groups_z, block_x, block_y, block_z, shared_bytes].map(i64::from);
        let mut packed = Vec::with_capacity(grid.len() + 2 + 3 * (self.buffers.len() + self.scalars.len()));
        packed.extend(grid);
        packed.push(self.buffers.len() as i64);
        for buffer in &self.buffers {
            packed.extend([buffer.address as i64, buffer.size_bytes as i64, i64::from(buffer.writable)]);
        }
        packed.push(self.scalars.len() as i64);
        packed.extend(self.scalars.iter().flat_map(packed_scalar));
        Ok(packed)
    }
}

/// The core's CPU closure for `body`: it lends the launch's memory to one
/// [`CpuKernelCall`], calls `body` and takes the loan back.
pub(crate) fn cpu_closure(
    body: Arc<dyn CpuKernelBody>,
) -> impl Fn(&mut weir_core::CpuKernelArgs<'_>) -> std::result::Result<(), String> + Send + Sync + 'static {
    move |args| {
        let mut buffers = Vec::with_capacity(args.buffer_count());
        for index in 0..args.buffer_count() {
            // Writable arguments lend a mutable address; the rest a shared one.
            let buffer = match args.bytes_mut(index) {
                Ok(bytes) => {
                    CallBuffer { address: bytes.as_mut_ptr() as usize, size_bytes: bytes.len(), writable: true }
                }
                Err(_) => {
                    let bytes = args.bytes(index)?;
                    CallBuffer { address: bytes.as_ptr() as usize, size_bytes: bytes.len(), writable: false }
                }
            };
            buffers.push(buffer);
        }
        let scalars = (0..).map_while(|index| args.scalar(index).ok()).collect();
        let call = Arc::new(CpuKernelCall { grid: args.grid.into(), buffers, scalars, live: AtomicBool::new(true) });
        // The loan ends however `run` ends: a body that throws comes back as
        // a panic (UniFFI's "callback interface failure"), which the worker
        // turns into the op's failure, and a call it kept must not outlive it.
        let ended = scopeguard::guard(&call, |call| call.live.store(false, Ordering::Release));
        let failure = body.run(Arc::clone(*ended));
        drop(ended);
        match failure {
            None => Ok(()),
            Some(message) => Err(message),
        }
    }
}
