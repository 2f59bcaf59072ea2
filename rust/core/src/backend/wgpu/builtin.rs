//! The built-in ops in WGSL, and how they are launched over buffers of any
//! size: in windows no larger than the device's storage binding limit, each
//! dispatched as a 2D grid of 256-thread groups (one thread per 4-byte word).

use super::device::Gpu;
use super::pipelines::{dispatch, Binding};

/// Every element-wise kernel reads its parameters from this struct:
/// `n` words in this window, `base` = index of the window's first word.
const HEADER: &str = "
struct Params { n: u32, base: u32, a: u32, b: u32 }
";

const INDEX: &str = "
    let i = id.x + id.y * groups.x * 256u;
    if (i >= p.n) { return; }
";

/// A built-in element-wise kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elementwise {
    /// (dst) ← a
    Fill,
    /// (a, b, out): out = a + b
    Add,
    /// (a, b, out): out = a · b
    Mul,
    /// (x, out): out = α·x, α = bits of a
    Scale,
    /// (x, y): y = α·x + y, α = bits of a
    Axpy,
    /// (out): out[i] = a + i
    Iota,
}

impl Elementwise {
    /// Per buffer argument: read-only?
    pub fn read_only(self) -> &'static [bool] {
        match self {
            Elementwise::Fill | Elementwise::Iota => &[false],
            Elementwise::Add | Elementwise::Mul => &[true, true, false],
            Elementwise::Scale | Elementwise::Axpy => &[true, false],
        }
    }

    pub fn source(self) -> String {
        let (bindings, body) = match self {
            Elementwise::Fill => ("var<storage, read_write> dst: array<u32>;", "dst[i] = p.a;"),
            Elementwise::Iota => ("var<storage, read_write> out: array<u32>;", "out[i] = p.a + p.base + i;"),
            Elementwise::Add | Elementwise::Mul => (
                "var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;",
                if self == Elementwise::Add { "out[i] = a[i] + b[i];" } else { "out[i] = a[i] * b[i];" },
            ),
            Elementwise::Scale => (
                "var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;",
                "out[i] = bitcast<f32>(p.a) * x[i];",
            ),
            Elementwise::Axpy => (
                "var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;",
                "y[i] = bitcast<f32>(p.a) * x[i] + y[i];",
            ),
        };
        let params = self.read_only().len();
        format!(
            "{HEADER}
@group(0) @binding(0) {bindings}
@group(0) @binding({params}) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {{{INDEX}    {body}
}}
"
        )
    }
}

/// dst[index] = (dst[index] & keep) | bits: writes part of one word, for
/// byte ranges that do not start or end on a word.
const PATCH: &str = "
struct Patch { index: u32, keep: u32, bits: u32, pad: u32 }
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<uniform> p: Patch;

@compute @workgroup_size(1)
fn main() {
    dst[p.index] = (dst[p.index] & p.keep) | p.bits;
}
";

/// Device limits that shape launches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Largest binding window, a multiple of `align`.
    pub window: u64,
    /// Storage binding offset alignment.
    pub align: u64,
    pub max_groups: u32,
}

impl Shape {
    pub fn new(limits: &wgpu::Limits) -> Shape {
        let align = u64::from(limits.min_storage_buffer_offset_alignment.max(4));
        let window = (limits.max_storage_buffer_binding_size / align * align).max(align);
        Shape { window, align, max_groups: limits.max_compute_workgroups_per_dimension.max(1) }
    }

    /// A 2D grid of 256-thread groups covering `words` threads.
    pub fn grid(&self, words: u64) -> [u32; 3] {
        let groups = words.div_ceil(256).max(1);
        let x = groups.min(u64::from(self.max_groups));
        let y = groups.div_ceil(x);
        [x as u32, y.min(u64::from(u32::MAX)) as u32, 1]
    }
}

/// One buffer argument of an element-wise launch: a byte range starting on a
/// binding-aligned offset.
pub(crate) struct Operand<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub offset: u64,
}

/// Records `op` over `bytes` bytes of each operand (a multiple of 4), in windows.
pub(crate) fn elementwise(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    op: Elementwise,
    operands: &[Operand<'_>],
    bytes: u64,
    scalar: u32,
) -> Result<(), String> {
    let (device, shape) = (&gpu.device, gpu.shape);
    let pipeline = gpu.pipelines.get(device, &op.source(), "main", op.read_only(), true)?;
    let mut start = 0;
    while start < bytes {
        let size = shape.window.min(bytes - start);
        let bindings: Vec<Binding<'_>> = operands
            .iter()
            .map(|operand| Binding { buffer: operand.buffer, offset: operand.offset + start, size })
            .collect();
        let words = size / 4;
        let base = (start / 4) as u32;
        let params = [words as u32, base, scalar, 0];
        dispatch(device, encoder, &pipeline, &bindings, Some(&params), shape.grid(words));
        start += size;
    }
    Ok(())
}

/// Records a masked write of word `word` (a word index in `buffer`).
pub(crate) fn patch(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    buffer: &wgpu::Buffer,
    word: u64,
    keep: u32,
    bits: u32,
) -> Result<(), String> {
    let (device, shape) = (&gpu.device, gpu.shape);
    let pipeline = gpu.pipelines.get(device, PATCH, "main", &[false], true)?;
    let byte = word * 4;
    let offset = byte / shape.align * shape.align;
    let binding = Binding { buffer, offset, size: byte - offset + 4 };
    let params = [((byte - offset) / 4) as u32, keep, bits, 0];
    dispatch(device, encoder, &pipeline, &[binding], Some(&params), [1, 1, 1]);
    Ok(())
}
