//! Kernels: the built-in ops, and custom kernels given as source per GPU backend.

use std::sync::Arc;

use crate::host_kernel::{cpu_closure, CpuKernelBody};

/// The core's `Builtin`, declared for UniFFI under the name the bindings use
/// (checked against it by the compiler). The declaration is made by a macro
/// the core calls with its test hooks' variant or not, as the core was
/// built: `uniffi::remote` is an attribute macro, which sees a `#[cfg]` on a
/// variant unresolved and would name the variant in a build without it.
pub type BuiltinOp = weir_core::Builtin;

macro_rules! declare_builtin_op {
    ($($hook:ident)?) => {
        /// The built-in ops, the same on every backend. Arguments, in order:
        #[uniffi::remote(Enum)]
        pub enum BuiltinOp {
            /// `(dst: Write)`: every byte zero.
            MemsetZero,
            /// `(dst: Write, value: U32)`.
            FillU32,
            /// `(dst: Write, value: I32)`.
            FillI32,
            /// `(dst: Write, value: F32)`.
            FillF32,
            /// `(src: Read, dst: Write)`, equal sizes.
            Copy,
            /// `(a: Read, b: Read, out: Write)` f32, equal sizes: out = a + b.
            Add,
            /// `(a: Read, b: Read, out: Write)` f32, equal sizes: out = a · b.
            Mul,
            /// `(x: Read, out: Write, alpha: F32)`: out = alpha · x.
            Scale,
            /// `(x: Read, y: ReadWrite, alpha: F32)`: y = alpha · x + y.
            Axpy,
            /// `(out: Write, start: U32)`: `out[i] = start + i`.
            Iota,
            $(
                /// `(micros: U32)`: holds the stream for that long (tests, benchmarks; 0 is a no-op op).
                $hook,
            )?
        }
    };
}

weir_core::with_builtin_hooks!(declare_builtin_op);

/// Source text of a kernel for one backend, and the function to launch.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct KernelSource {
    /// The source code (WGSL, CUDA C or HIP C).
    pub code: String,
    /// The entry point's name: CUDA and HIP take a C++ name too
    /// (`ops::scale<float>`), looked up through the compiler.
    pub entry: String,
    /// NVRTC or hiprtc options (`--use_fast_math`, `-DN=4`, `-I/path`); the
    /// toolkit's own include directory is added where it is found. WGSL takes none.
    #[uniffi(default = [])]
    pub options: Vec<String>,
}

/// A precompiled CUDA or HIP module (PTX, CUBIN or fatbin; a HIP code
/// object), as the bytes of the file nvcc or hipcc wrote, and the kernel to
/// launch in it (its C++ name is found by demangling the module's symbols).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct KernelModule {
    /// The module file's bytes.
    pub image: Vec<u8>,
    /// The kernel's name in it.
    pub entry: String,
}

/// A kernel to launch with `WeirStream.execute`: a built-in op, or a custom kernel
/// with an implementation per backend. Launching a kernel on a backend it has
/// none for fails with `Unsupported`.
#[derive(Debug, uniffi::Object)]
pub struct Kernel {
    inner: weir_core::Kernel,
}

impl Kernel {
    pub(crate) fn core(&self) -> &weir_core::Kernel {
        &self.inner
    }
}

#[uniffi::export]
impl Kernel {
    /// One of the built-in ops.
    #[uniffi::constructor]
    pub fn builtin(op: BuiltinOp) -> Arc<Self> {
        Arc::new(Kernel { inner: weir_core::Kernel::builtin(op) })
    }

    /// A custom kernel named `name`, with the implementations it has: WGSL,
    /// CUDA C and HIP C sources, and `cpu`, a callback the CPU backend runs.
    /// One launch runs on every backend it has one for when buffers come
    /// first, then scalars, and the block is the grid's (WGSL: `override`
    /// constants in `@workgroup_size`); see the crate docs of weir-core.
    ///
    /// `cuda_module` and `hip_module` are precompiled modules, taken instead
    /// of `cuda` and `hip` sources when both are given.
    #[uniffi::constructor(default(wgsl = None, cuda = None, hip = None, cpu = None, cuda_module = None, hip_module = None))]
    pub fn custom(
        name: String,
        wgsl: Option<KernelSource>,
        cuda: Option<KernelSource>,
        hip: Option<KernelSource>,
        cpu: Option<Arc<dyn CpuKernelBody>>,
        cuda_module: Option<KernelModule>,
        hip_module: Option<KernelModule>,
    ) -> Arc<Self> {
        let mut builder = weir_core::Kernel::custom(name);
        if let Some(body) = cpu {
            builder = builder.cpu(cpu_closure(body));
        }
        if let Some(source) = wgsl {
            builder = builder.wgsl(source.code, source.entry);
        }
        if let Some(source) = cuda {
            builder = builder.cuda(source.code, source.entry).cuda_options(source.options);
        }
        if let Some(source) = hip {
            builder = builder.hip(source.code, source.entry).hip_options(source.options);
        }
        if let Some(module) = cuda_module {
            builder = builder.cuda_module(module.image, module.entry);
        }
        if let Some(module) = hip_module {
            builder = builder.hip_module(module.image, module.entry);
        }
        Arc::new(Kernel { inner: builder.build() })
    }

    /// The kernel's name (built-ins: their snake_case name).
    pub fn name(&self) -> String {
        self.inner.name().to_owned()
    }
}
