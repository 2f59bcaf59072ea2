//! Kernels: the built-in ops every backend provides, and custom kernels given
//! per backend (a Rust closure for the CPU, WGSL, CUDA C, HIP C).

use std::sync::Arc;

pub use weir_device::kernel::{CpuKernelArgs, CustomKernel, DeviceCode, DeviceKernel, KernelSource, ScalarArg};
pub use weir_device::{Access, Grid};

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

/// Calls macro `$declare` with the test hooks' variants of [`Builtin`] as
/// this build of the core has them (`Delay`, or none), so that a crate
/// mirroring the enum (the FFI's UniFFI declaration) follows the core's
/// features, not its own: Cargo may turn on `test-support` in the core alone.
#[doc(hidden)]
#[macro_export]
#[cfg(feature = "test-support")]
macro_rules! with_builtin_hooks {
    ($declare:ident) => {
        $declare!(Delay);
    };
}
#[doc(hidden)]
#[macro_export]
#[cfg(not(feature = "test-support"))]
macro_rules! with_builtin_hooks {
    ($declare:ident) => {
        $declare!();
    };
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
        CustomKernelBuilder {
            kernel: CustomKernel { name: name.into(), cpu: None, wgsl: None, cuda: None, hip: None },
            cuda_options: Vec::new(),
            hip_options: Vec::new(),
        }
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

/// Builds a [`Kernel`] from per-backend sources.
pub struct CustomKernelBuilder {
    kernel: CustomKernel,
    /// Compile options, given before or after their source: each source
    /// takes them when the kernel is built.
    cuda_options: Vec<String>,
    hip_options: Vec<String>,
}

impl CustomKernelBuilder {
    /// The CPU implementation.
    pub fn cpu(mut self, body: impl Fn(&mut CpuKernelArgs<'_>) -> Result<(), String> + Send + Sync + 'static) -> Self {
        self.kernel.cpu = Some(Arc::new(body));
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
        self.kernel.wgsl = Some(KernelSource { code: code.into(), entry: entry.into() });
        self
    }
    /// CUDA C++ source and the kernel to launch, by its name in the source:
    /// `extern "C"` or C++ (a template instance such as `ops::scale<float>`,
    /// a function in a namespace, an overload). Its parameters are the
    /// arguments in order (buffers as pointers), launched with the grid's block.
    pub fn cuda(mut self, code: impl Into<String>, entry: impl Into<String>) -> Self {
        self.kernel.cuda = Some(DeviceKernel::source(code, entry));
        self
    }
    /// A CUDA module built elsewhere (PTX, CUBIN or fatbin bytes, as `nvcc`
    /// wrote them) and the kernel to launch, by its symbol.
    pub fn cuda_module(mut self, image: impl Into<Arc<[u8]>>, entry: impl Into<String>) -> Self {
        self.kernel.cuda = Some(DeviceKernel::module(image, entry));
        self
    }
    /// Options for compiling the CUDA source (`--use_fast_math`, `-DN=4`,
    /// `-std=c++20`, `-I dir`), after Weir's own (the device's architecture,
    /// C++17 unless an option says otherwise, and the CUDA toolkit's include
    /// directory when it is installed).
    /// They may come before or after [`Self::cuda`]; a module built
    /// elsewhere ignores them.
    pub fn cuda_options<S: Into<String>>(mut self, options: impl IntoIterator<Item = S>) -> Self {
        self.cuda_options.extend(options.into_iter().map(Into::into));
        self
    }
    /// HIP C++ source and the kernel to launch, named as for [`Self::cuda`].
    pub fn hip(mut self, code: impl Into<String>, entry: impl Into<String>) -> Self {
        self.kernel.hip = Some(DeviceKernel::source(code, entry));
        self
    }
    /// An AMDGPU code object built elsewhere (`hipcc --genco`) and the kernel
    /// to launch, by its symbol.
    pub fn hip_module(mut self, image: impl Into<Arc<[u8]>>, entry: impl Into<String>) -> Self {
        self.kernel.hip = Some(DeviceKernel::module(image, entry));
        self
    }
    /// Options for compiling the HIP source, after Weir's own.
    pub fn hip_options<S: Into<String>>(mut self, options: impl IntoIterator<Item = S>) -> Self {
        self.hip_options.extend(options.into_iter().map(Into::into));
        self
    }
    /// Finishes the kernel.
    pub fn build(self) -> Kernel {
        let CustomKernelBuilder { mut kernel, cuda_options, hip_options } = self;
        for (source, options) in [(&mut kernel.cuda, cuda_options), (&mut kernel.hip, hip_options)] {
            if let Some(source) = source {
                source.options.extend(options);
            }
        }
        Kernel(KernelDef::Custom(Arc::new(kernel)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compile_options_reach_their_source_given_before_or_after_it() {
        let kernel = Kernel::custom("k")
            .cuda_options(["-DN=4"])
            .cuda("extern \"C\" __global__ void k() {}", "k")
            .cuda_options(["--use_fast_math"])
            .hip_options(["-DM=2"])
            .hip("extern \"C\" __global__ void k() {}", "k")
            .build();
        let custom = kernel.as_custom().expect("a custom kernel");
        let options = |source: &Option<DeviceKernel>| source.as_ref().map(|source| source.options.clone());
        assert_eq!(options(&custom.cuda), Some(vec!["-DN=4".to_owned(), "--use_fast_math".to_owned()]));
        assert_eq!(options(&custom.hip), Some(vec!["-DM=2".to_owned()]));
    }
}
