//! The built-in ops that run as kernels, described once ([`BuiltinKernel`]:
//! each one's buffers, scalar and one statement over an element) and written
//! out per kernel language from that description: one C source for CUDA and
//! HIP ([`cuda_source`]), a WGSL module each for wgpu ([`wgsl_source`]).
//! Zeroing and copies use each API's own calls; the CPU runs the ops as Rust.

use std::sync::OnceLock;

/// A built-in kernel. Its discriminant is its place in [`BuiltinKernel::ALL`],
/// so an engine can keep the loaded functions in an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuiltinKernel {
    /// `out[i] = word`, over 32-bit words (any fill).
    Fill,
    /// `out[i] = a[i] + b[i]`, over `f32`s.
    Add,
    /// `out[i] = a[i] * b[i]`, over `f32`s.
    Mul,
    /// `out[i] = alpha * x[i]`, over `f32`s.
    Scale,
    /// `y[i] = alpha * x[i] + y[i]`, over `f32`s.
    Axpy,
    /// `out[i] = start + i`, over `u32`s.
    Iota,
    /// Holds the stream for a number of the device clock's ticks (test
    /// support; CUDA and HIP only: wgpu holds a stream on the host).
    Delay,
}

/// The element types of built-in buffers and scalars ([`U32`], [`F32`]),
/// as C and WGSL name them.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Word {
    c: &'static str,
    wgsl: &'static str,
}

const U32: Word = Word { c: "unsigned int", wgsl: "u32" };
const F32: Word = Word { c: "float", wgsl: "f32" };

/// One element-wise kernel, as every language writes it: its buffers (name,
/// element, read-only), its scalar, and one statement over element `i`, in
/// which `{index}` stands for the element's index in the whole buffer (a
/// WGSL dispatch covers a window of it).
struct Description {
    entry: &'static str,
    buffers: &'static [(&'static str, Word, bool)],
    scalar: Option<(&'static str, Word)>,
    statement: &'static str,
}

impl BuiltinKernel {
    /// Every built-in kernel, in discriminant order.
    pub const ALL: [BuiltinKernel; 7] = [
        BuiltinKernel::Fill,
        BuiltinKernel::Add,
        BuiltinKernel::Mul,
        BuiltinKernel::Scale,
        BuiltinKernel::Axpy,
        BuiltinKernel::Iota,
        BuiltinKernel::Delay,
    ];

    /// The element-wise description; `None` for the delay, which is no
    /// element-wise op (written out in [`cuda_source`] alone).
    fn description(self) -> Option<Description> {
        let binary = |entry, statement| Description {
            entry,
            buffers: &[("a", F32, true), ("b", F32, true), ("out", F32, false)],
            scalar: None,
            statement,
        };
        // A u32 output written from a u32 scalar.
        let from_word = |entry, scalar, statement| Description {
            entry,
            buffers: &[("out", U32, false)],
            scalar: Some((scalar, U32)),
            statement,
        };
        Some(match self {
            BuiltinKernel::Fill => from_word("weir_fill_u32", "word", "out[i] = word"),
            BuiltinKernel::Add => binary("weir_add_f32", "out[i] = a[i] + b[i]"),
            BuiltinKernel::Mul => binary("weir_mul_f32", "out[i] = a[i] * b[i]"),
            BuiltinKernel::Scale => Description {
                entry: "weir_scale_f32",
                buffers: &[("x", F32, true), ("out", F32, false)],
                scalar: Some(("alpha", F32)),
                statement: "out[i] = alpha * x[i]",
            },
            BuiltinKernel::Axpy => Description {
                entry: "weir_axpy_f32",
                buffers: &[("x", F32, true), ("y", F32, false)],
                scalar: Some(("alpha", F32)),
                statement: "y[i] = alpha * x[i] + y[i]",
            },
            BuiltinKernel::Iota => from_word("weir_iota_u32", "start", "out[i] = start + {index}"),
            BuiltinKernel::Delay => return None,
        })
    }

    /// The kernel's entry point in [`cuda_source`].
    pub fn entry(self) -> &'static str {
        self.description().map_or("weir_delay", |description| description.entry)
    }

    /// Per buffer argument, in order: read-only? (The delay takes none.)
    pub fn read_only(self) -> Vec<bool> {
        self.description().map_or_else(Vec::new, |description| {
            description.buffers.iter().map(|&(_, _, read_only)| read_only).collect()
        })
    }
}

/// The C source of every built-in kernel, for CUDA and HIP alike (HIP C
/// accepts this CUDA-style source; the clock and pause differ). A kernel
/// takes its buffers, then its scalar, then the element count.
pub fn cuda_source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let mut source = String::from(CUDA_PRELUDE);
        for kernel in BuiltinKernel::ALL {
            let Some(Description { entry, buffers, scalar, statement }) = kernel.description() else { continue };
            let mut params: Vec<String> = buffers
                .iter()
                .map(|&(name, word, read_only)| format!("{}{}* {name}", if read_only { "const " } else { "" }, word.c))
                .collect();
            params.extend(scalar.map(|(name, word)| format!("{} {name}", word.c)));
            params.push("weir_u64 n".to_owned());
            let statement = statement.replace("{index}", "(unsigned int)i");
            source += &format!(
                "\nextern \"C\" __global__ void {entry}({}) {{\n    WEIR_FOR_EACH(i, n) {statement};\n}}\n",
                params.join(", ")
            );
        }
        source + CUDA_DELAY
    })
}

const CUDA_PRELUDE: &str = r#"
typedef unsigned long long weir_u64;

#if defined(__HIPCC_RTC__) || defined(__HIP__)
__device__ static inline weir_u64 weir_clock() { return wall_clock64(); }
__device__ static inline void weir_pause() { __builtin_amdgcn_s_sleep(127); }
#else
__device__ static inline weir_u64 weir_clock() {
    weir_u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ static inline void weir_pause() { __nanosleep(1000); }
#endif

#define WEIR_FOR_EACH(i, n) \
    for (weir_u64 i = (weir_u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (weir_u64)gridDim.x * blockDim.x)
"#;

const CUDA_DELAY: &str = r#"
/* Holds the stream: one thread sleeps on the device clock until `ticks` passed. */
extern "C" __global__ void weir_delay(weir_u64 ticks) {
    weir_u64 start = weir_clock();
    while (weir_clock() - start < ticks) weir_pause();
}
"#;

/// The WGSL of `kernel` (`None` for the delay), its entry point `main`:
/// 256-thread groups in a 2D grid, one thread per element of a window of
/// `p.n` elements starting at element `p.base`, the scalar's bits in `p.a`.
/// Its buffers bind at group 0, bindings `0..`, and `params` declares the
/// parameter block `p` (immediate data, or a uniform after the buffers).
pub fn wgsl_source(kernel: BuiltinKernel, params: &str) -> Option<String> {
    let Description { buffers, scalar, statement, .. } = kernel.description()?;
    let mut source = String::from("struct Params { n: u32, base: u32, a: u32, b: u32 }\n");
    for (binding, &(name, word, read_only)) in buffers.iter().enumerate() {
        let access = if read_only { "read" } else { "read_write" };
        source += &format!("@group(0) @binding({binding}) var<storage, {access}> {name}: array<{}>;\n", word.wgsl);
    }
    let scalar = match scalar {
        Some((name, F32)) => format!("    let {name} = bitcast<f32>(p.a);\n"),
        // A u32, as the block holds it.
        Some((name, _)) => format!("    let {name} = p.a;\n"),
        None => String::new(),
    };
    let statement = statement.replace("{index}", "(p.base + i)");
    Some(format!(
        "{source}{params}\n\n@compute @workgroup_size(256)\nfn main(@builtin(global_invocation_id) id: vec3<u32>, \
         @builtin(num_workgroups) groups: vec3<u32>) {{\n    let i = id.x + id.y * groups.x * 256u;\n    \
         if (i >= p.n) {{ return; }}\n{scalar}    {statement};\n}}\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_is_written_once_in_c_with_its_buffers_then_its_scalar_then_the_count() {
        let source = cuda_source();
        for kernel in BuiltinKernel::ALL {
            assert_eq!(source.matches(&format!("void {}(", kernel.entry())).count(), 1, "{kernel:?}");
        }
        assert!(source.contains(
            "void weir_axpy_f32(const float* x, float* y, float alpha, weir_u64 n) {\n    WEIR_FOR_EACH(i, n) y[i] = \
             alpha * x[i] + y[i];"
        ));
        assert!(source.contains("WEIR_FOR_EACH(i, n) out[i] = start + (unsigned int)i;"), "{source}");
        assert!(source.contains("void weir_delay(weir_u64 ticks)"));
    }

    #[test]
    fn wgsl_binds_buffers_in_order_and_reads_the_scalar_from_its_bits() {
        let scale = wgsl_source(BuiltinKernel::Scale, "var<immediate> p: Params;").unwrap();
        assert!(scale.contains("@binding(0) var<storage, read> x: array<f32>;"), "{scale}");
        assert!(scale.contains("@binding(1) var<storage, read_write> out: array<f32>;"), "{scale}");
        assert!(scale.contains("let alpha = bitcast<f32>(p.a);") && scale.contains("out[i] = alpha * x[i];"));
        let iota = wgsl_source(BuiltinKernel::Iota, "").unwrap();
        assert!(iota.contains("out[i] = start + (p.base + i);"), "{iota}");
        assert!(wgsl_source(BuiltinKernel::Delay, "").is_none());
        assert_eq!(BuiltinKernel::Axpy.read_only(), [true, false]);
    }
}
