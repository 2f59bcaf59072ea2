//! What a user kernel is, on every backend: its code per kernel language
//! (a Rust closure for the CPU, WGSL, CUDA C++, HIP C++, or a module built
//! elsewhere) and the scalar arguments it takes. Data only: compiling and
//! launching are each driver's, checking arguments the engine's.

use std::fmt;
use std::sync::Arc;

use crate::Grid;

/// Source text of a WGSL kernel and the entry point to launch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelSource {
    pub code: String,
    pub entry: String,
}

/// CUDA or HIP device code, as its authors wrote or built it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceCode {
    /// C++ source, compiled at run time (NVRTC, hiprtc) for the device.
    Source(String),
    /// A module built elsewhere: PTX, CUBIN or a fatbin for CUDA (`nvcc
    /// -ptx`, `-cubin`, `-fatbin`), an AMDGPU code object for HIP. Loaded
    /// as it is; a module with no code for the device is refused.
    Module(Arc<[u8]>),
}

/// A CUDA or HIP kernel: its code, the kernel to launch and, for source,
/// the compiler's options.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceKernel {
    pub code: DeviceCode,
    /// The kernel as its source names it: an `extern "C"` name, or a C++
    /// name (`ops::scale<float>`, an overload's plain name) that the
    /// compiler resolves (NVRTC and hiprtc name expressions). A module's
    /// kernel is named by its symbol (`extern "C"` or mangled).
    pub entry: String,
    /// Compiler options for source (`--use_fast_math`, `-DN=4`,
    /// `-std=c++20`, `-I dir` or `--include-path=dir`); a module takes none.
    pub options: Vec<String>,
}

/// A kernel call's arguments of one kind: up to eight live on the worker's
/// stack, so a call allocates nothing.
pub(crate) type CallArgs<T> = smallvec::SmallVec<[T; 8]>;

/// The arguments a CPU kernel closure receives, in declaration order.
pub struct CpuKernelArgs<'a> {
    pub grid: Grid,
    buffers: CallArgs<CpuView<'a>>,
    scalars: CallArgs<ScalarArg>,
}

/// A CPU kernel's view of one buffer argument, as its access allows.
pub(crate) enum CpuView<'a> {
    Read(&'a [u8]),
    Write(&'a mut [u8]),
}

impl<'a> CpuKernelArgs<'a> {
    /// The arguments of one call: the buffers' views and the scalars, each in declaration order.
    pub(crate) fn new(grid: Grid, buffers: CallArgs<CpuView<'a>>, scalars: CallArgs<ScalarArg>) -> Self {
        CpuKernelArgs { grid, buffers, scalars }
    }

    /// Number of buffer arguments.
    pub fn buffer_count(&self) -> usize {
        self.buffers.len()
    }

    /// The bytes of buffer argument `index` (any access mode).
    pub fn bytes(&self, index: usize) -> Result<&[u8], String> {
        match self.buffers.get(index) {
            Some(CpuView::Read(bytes)) => Ok(bytes),
            Some(CpuView::Write(bytes)) => Ok(bytes),
            None => Err(format!("no buffer argument {index}")),
        }
    }

    /// The bytes of buffer argument `index`, which must be declared `Write` or `ReadWrite`.
    pub fn bytes_mut(&mut self, index: usize) -> Result<&mut [u8], String> {
        match self.buffers.get_mut(index) {
            Some(CpuView::Write(bytes)) => Ok(bytes),
            Some(CpuView::Read(_)) => Err(format!("buffer argument {index} is declared read-only")),
            None => Err(format!("no buffer argument {index}")),
        }
    }

    /// Buffer argument `index` as `f32`s.
    pub fn f32s(&self, index: usize) -> Result<&[f32], String> {
        bytemuck::try_cast_slice(self.bytes(index)?).map_err(|e| format!("buffer {index} as f32: {e}"))
    }

    /// Buffer argument `index` as mutable `f32`s.
    pub fn f32s_mut(&mut self, index: usize) -> Result<&mut [f32], String> {
        bytemuck::try_cast_slice_mut(self.bytes_mut(index)?).map_err(|e| format!("buffer {index} as f32: {e}"))
    }

    /// Buffer argument `index` as `u32`s.
    pub fn u32s(&self, index: usize) -> Result<&[u32], String> {
        bytemuck::try_cast_slice(self.bytes(index)?).map_err(|e| format!("buffer {index} as u32: {e}"))
    }

    /// Buffer argument `index` as mutable `u32`s.
    pub fn u32s_mut(&mut self, index: usize) -> Result<&mut [u32], String> {
        bytemuck::try_cast_slice_mut(self.bytes_mut(index)?).map_err(|e| format!("buffer {index} as u32: {e}"))
    }

    /// Scalar argument `index` (counting scalars only); a struct's bytes
    /// are shared, not copied.
    pub fn scalar(&self, index: usize) -> Result<ScalarArg, String> {
        self.scalars.get(index).cloned().ok_or_else(|| format!("no scalar argument {index}"))
    }
}

/// A scalar kernel argument: a value of any width the kernel languages
/// have, or the bytes of a struct passed by value. On CUDA and HIP each is
/// checked against the size the kernel declares for its parameter; WGSL
/// takes the 4-byte ones; a CPU closure reads whichever it was given.
#[derive(Debug, Clone, PartialEq)]
pub enum ScalarArg {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    /// An IEEE half-precision value, as its bits (`__half`, `f16`).
    F16Bits(u16),
    U32(u32),
    I32(i32),
    F32(f32),
    U64(u64),
    I64(i64),
    F64(f64),
    /// A struct (or any plain value) passed by value, as its bytes in the
    /// device's layout: the kernel's parameter must be exactly this size.
    Bytes(Arc<[u8]>),
}

impl ScalarArg {
    /// The argument's size in bytes, as the device receives it.
    pub fn size(&self) -> usize {
        match self {
            ScalarArg::U8(_) | ScalarArg::I8(_) => 1,
            ScalarArg::U16(_) | ScalarArg::I16(_) | ScalarArg::F16Bits(_) => 2,
            ScalarArg::U32(_) | ScalarArg::I32(_) | ScalarArg::F32(_) => 4,
            ScalarArg::U64(_) | ScalarArg::I64(_) | ScalarArg::F64(_) => 8,
            ScalarArg::Bytes(bytes) => bytes.len(),
        }
    }

    /// The argument as the device receives it: its little-endian bytes
    /// (every device Weir drives is little-endian).
    pub fn to_bytes(&self) -> smallvec::SmallVec<[u8; 8]> {
        match self {
            ScalarArg::U8(v) => v.to_le_bytes()[..].into(),
            ScalarArg::I8(v) => v.to_le_bytes()[..].into(),
            ScalarArg::U16(v) | ScalarArg::F16Bits(v) => v.to_le_bytes()[..].into(),
            ScalarArg::I16(v) => v.to_le_bytes()[..].into(),
            ScalarArg::U32(v) => v.to_le_bytes()[..].into(),
            ScalarArg::I32(v) => v.to_le_bytes()[..].into(),
            ScalarArg::F32(v) => v.to_le_bytes()[..].into(),
            ScalarArg::U64(v) => v.to_le_bytes()[..].into(),
            ScalarArg::I64(v) => v.to_le_bytes()[..].into(),
            ScalarArg::F64(v) => v.to_le_bytes()[..].into(),
            ScalarArg::Bytes(bytes) => bytes[..].into(),
        }
    }

    /// The 32 bits of a 4-byte argument (`u32`, `i32`, `f32`), as they are
    /// passed to device code; `None` for any other width.
    pub fn bits(&self) -> Option<u32> {
        match *self {
            ScalarArg::U32(v) => Some(v),
            ScalarArg::I32(v) => Some(v as u32),
            ScalarArg::F32(v) => Some(v.to_bits()),
            _ => None,
        }
    }

    /// The type's name as kernels and errors write it.
    pub fn type_name(&self) -> &'static str {
        match self {
            ScalarArg::U8(_) => "u8",
            ScalarArg::I8(_) => "i8",
            ScalarArg::U16(_) => "u16",
            ScalarArg::I16(_) => "i16",
            ScalarArg::F16Bits(_) => "f16",
            ScalarArg::U32(_) => "u32",
            ScalarArg::I32(_) => "i32",
            ScalarArg::F32(_) => "f32",
            ScalarArg::U64(_) => "u64",
            ScalarArg::I64(_) => "i64",
            ScalarArg::F64(_) => "f64",
            ScalarArg::Bytes(_) => "bytes",
        }
    }
}

/// A CPU kernel: a Rust closure over its arguments. An `Err` fails the op and
/// poisons its stream.
pub type CpuKernelFn = Arc<dyn Fn(&mut CpuKernelArgs<'_>) -> Result<(), String> + Send + Sync>;

impl DeviceKernel {
    /// Source to compile at run time, with no options yet.
    pub fn source(code: impl Into<String>, entry: impl Into<String>) -> Self {
        DeviceKernel { code: DeviceCode::Source(code.into()), entry: entry.into(), options: Vec::new() }
    }

    /// A module built elsewhere.
    pub fn module(image: impl Into<Arc<[u8]>>, entry: impl Into<String>) -> Self {
        DeviceKernel { code: DeviceCode::Module(image.into()), entry: entry.into(), options: Vec::new() }
    }
}

/// A user kernel with a source per backend.
#[derive(Clone)]
pub struct CustomKernel {
    pub name: String,
    pub cpu: Option<CpuKernelFn>,
    pub wgsl: Option<KernelSource>,
    pub cuda: Option<DeviceKernel>,
    pub hip: Option<DeviceKernel>,
}

impl fmt::Debug for CustomKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomKernel")
            .field("name", &self.name)
            .field("cpu", &self.cpu.is_some())
            .field("wgsl", &self.wgsl.is_some())
            .field("cuda", &self.cuda.is_some())
            .field("hip", &self.hip.is_some())
            .finish()
    }
}
