//! Kernels: the built-in ops every backend provides, and custom kernels given
//! per backend (a Rust closure for the CPU, WGSL, CUDA C, HIP C).

use std::fmt;
use std::sync::Arc;

pub use weir_device::{Access, Grid};

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

/// The arguments a CPU kernel closure receives, in declaration order.
pub struct CpuKernelArgs<'a> {
    pub grid: Grid,
    pub(crate) buffers: Vec<CpuView<'a>>,
    pub(crate) scalars: Vec<ScalarArg>,
}

pub(crate) enum CpuView<'a> {
    Read(&'a [u8]),
    Write(&'a mut [u8]),
}

impl<'a> CpuKernelArgs<'a> {
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

/// The built-in ops, the same on every backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `(dst: Write)`: every byte zero.
    MemsetZero,
    /// `(dst: Write, value: u32)`.
    FillU32,
    /// `(dst: Write, value: i32)`.
    FillI32,
    /// `(dst: Write, value: f32)`.
    FillF32,
    /// `(src: Read, dst: Write)`, equal sizes.
    Copy,
    /// `(a: Read, b: Read, out: Write)` f32, equal sizes.
    Add,
    /// `(a: Read, b: Read, out: Write)` f32, equal sizes.
    Mul,
    /// `(x: Read, out: Write, alpha: f32)`: out = alpha·x.
    Scale,
    /// `(x: Read, y: ReadWrite, alpha: f32)`: y = alpha·x + y.
    Axpy,
    /// `(out: Write, start: u32)`: `out[i] = start + i`.
    Iota,
    /// `(micros: u32)`: holds the stream for the given time (test support).
    #[cfg(feature = "test-support")]
    Delay,
}

impl Builtin {
    /// Every built-in, for backends that compile them all up front.
    pub const ALL: &'static [Builtin] = &[
        Builtin::MemsetZero,
        Builtin::FillU32,
        Builtin::FillI32,
        Builtin::FillF32,
        Builtin::Copy,
        Builtin::Add,
        Builtin::Mul,
        Builtin::Scale,
        Builtin::Axpy,
        Builtin::Iota,
        #[cfg(feature = "test-support")]
        Builtin::Delay,
    ];

    /// The op's snake_case name (used by the FFI).
    pub fn name(self) -> &'static str {
        match self {
            Builtin::MemsetZero => "memset_zero",
            Builtin::FillU32 => "fill_u32",
            Builtin::FillI32 => "fill_i32",
            Builtin::FillF32 => "fill_f32",
            Builtin::Copy => "copy",
            Builtin::Add => "add",
            Builtin::Mul => "mul",
            Builtin::Scale => "scale",
            Builtin::Axpy => "axpy",
            Builtin::Iota => "iota",
            #[cfg(feature = "test-support")]
            Builtin::Delay => "delay",
        }
    }

    /// Looks a built-in up by [`Builtin::name`].
    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL.iter().copied().find(|b| b.name() == name)
    }
}

#[derive(Debug, Clone)]
pub(crate) enum KernelDef {
    Builtin(Builtin),
    Custom(Arc<CustomKernel>),
}

/// A kernel to launch with [`crate::Stream::execute`]: a built-in op or a custom kernel.
#[derive(Debug, Clone)]
pub struct Kernel(pub(crate) KernelDef);

impl Kernel {
    /// One of the built-in ops.
    pub fn builtin(op: Builtin) -> Kernel {
        Kernel(KernelDef::Builtin(op))
    }

    /// Starts a custom kernel named `name`; add a source per backend.
    pub fn custom(name: impl Into<String>) -> CustomKernelBuilder {
        CustomKernelBuilder(CustomKernel { name: name.into(), cpu: None, wgsl: None, cuda: None, hip: None })
    }

    /// The custom kernel behind this handle, if it is one (backends and benchmarks).
    pub fn as_custom(&self) -> Option<&Arc<CustomKernel>> {
        match &self.0 {
            KernelDef::Builtin(_) => None,
            KernelDef::Custom(kernel) => Some(kernel),
        }
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        match &self.0 {
            KernelDef::Builtin(op) => op.name(),
            KernelDef::Custom(kernel) => &kernel.name,
        }
    }
}

impl DeviceKernel {
    fn source(code: impl Into<String>, entry: impl Into<String>) -> Self {
        DeviceKernel { code: DeviceCode::Source(code.into()), entry: entry.into(), options: Vec::new() }
    }

    fn module(image: impl Into<Arc<[u8]>>, entry: impl Into<String>) -> Self {
        DeviceKernel { code: DeviceCode::Module(image.into()), entry: entry.into(), options: Vec::new() }
    }
}

/// Builds a [`Kernel`] from per-backend sources.
pub struct CustomKernelBuilder(CustomKernel);

impl CustomKernelBuilder {
    /// The CPU implementation.
    pub fn cpu(mut self, body: impl Fn(&mut CpuKernelArgs<'_>) -> Result<(), String> + Send + Sync + 'static) -> Self {
        self.0.cpu = Some(Arc::new(body));
        self
    }
    /// WGSL source and entry point. The storage buffers the entry point
    /// uses take the buffer arguments in `@group`/`@binding` order, and its
    /// uniforms, in the same order, are filled from the scalars (one per
    /// value, at the offsets WGSL's layout gives, or one [`crate::Arg::bytes`] per
    /// uniform), so another project's shader runs unchanged; Weir's own
    /// layout (buffers at group 0, bindings `0..n`, one uniform of 4-byte
    /// fields at `n`) passes its scalars as immediate data where it can.
    /// `@workgroup_size` takes the grid's block through `override`
    /// constants (see [`Grid`]).
    pub fn wgsl(mut self, code: impl Into<String>, entry: impl Into<String>) -> Self {
        self.0.wgsl = Some(KernelSource { code: code.into(), entry: entry.into() });
        self
    }
    /// CUDA C++ source and the kernel to launch, by its name in the source:
    /// `extern "C"` or C++ (a template instance such as `ops::scale<float>`,
    /// a function in a namespace, an overload). Its parameters are the
    /// arguments in order (buffers as pointers), launched with the grid's block.
    pub fn cuda(mut self, code: impl Into<String>, entry: impl Into<String>) -> Self {
        self.0.cuda = Some(DeviceKernel::source(code, entry));
        self
    }
    /// A CUDA module built elsewhere (PTX, CUBIN or fatbin bytes, as `nvcc`
    /// wrote them) and the kernel to launch, by its symbol.
    pub fn cuda_module(mut self, image: impl Into<Arc<[u8]>>, entry: impl Into<String>) -> Self {
        self.0.cuda = Some(DeviceKernel::module(image, entry));
        self
    }
    /// Options for compiling the CUDA source (`--use_fast_math`, `-DN=4`,
    /// `-std=c++20`, `-I dir`), after Weir's own (the device's architecture,
    /// C++17 unless an option says otherwise, and the CUDA toolkit's include
    /// directory when it is installed).
    pub fn cuda_options<S: Into<String>>(mut self, options: impl IntoIterator<Item = S>) -> Self {
        if let Some(cuda) = &mut self.0.cuda {
            cuda.options.extend(options.into_iter().map(Into::into));
        }
        self
    }
    /// HIP C++ source and the kernel to launch, named as for [`Self::cuda`].
    pub fn hip(mut self, code: impl Into<String>, entry: impl Into<String>) -> Self {
        self.0.hip = Some(DeviceKernel::source(code, entry));
        self
    }
    /// An AMDGPU code object built elsewhere (`hipcc --genco`) and the kernel
    /// to launch, by its symbol.
    pub fn hip_module(mut self, image: impl Into<Arc<[u8]>>, entry: impl Into<String>) -> Self {
        self.0.hip = Some(DeviceKernel::module(image, entry));
        self
    }
    /// Options for compiling the HIP source, after Weir's own.
    pub fn hip_options<S: Into<String>>(mut self, options: impl IntoIterator<Item = S>) -> Self {
        if let Some(hip) = &mut self.0.hip {
            hip.options.extend(options.into_iter().map(Into::into));
        }
        self
    }
    /// Finishes the kernel.
    pub fn build(self) -> Kernel {
        Kernel(KernelDef::Custom(Arc::new(self.0)))
    }
}
