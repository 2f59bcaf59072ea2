//! The built-in ops in WGSL, and how they are launched over buffers of any
//! size: in windows no larger than the device's storage binding limit, each
//! dispatched as a 2D grid of 256-thread groups (one thread per 4-byte word).
//! Each launch is planned in `prepare` (pipeline, windows, uniform blocks)
//! and recorded over its buffers when its batch is submitted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use super::pipelines::{dispatch, Binding, Params, Pipeline, Signature};
use super::scope::BACKEND;
use super::Recorder;
use super::WgpuDevice;
use crate::builtin::{wgsl_source, BuiltinKernel};
use crate::error::Error;
use crate::lock::lock;

/// How a built-in declares its parameter block `p`: immediate data, or a
/// uniform at the binding after its `buffers` buffers.
fn params_declaration(immediate: bool, buffers: usize) -> String {
    if immediate {
        "var<immediate> p: Params;".to_owned()
    } else {
        format!("@group(0) @binding({buffers}) var<uniform> p: Params;")
    }
}

/// `dst[index] = (dst[index] & keep) | bits`: writes part of one word, for
/// byte ranges that do not start or end on a word.
fn patch_source(immediate: bool) -> String {
    format!(
        "
struct Params {{ index: u32, keep: u32, bits: u32, pad: u32 }}
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
{}

@compute @workgroup_size(1)
fn main() {{
    dst[p.index] = (dst[p.index] & p.keep) | p.bits;
}}
",
        params_declaration(immediate, 1)
    )
}

/// The bytes of a built-in's parameter block.
const BUILTIN_PARAMS_BYTES: u32 = 16;

/// The largest window a built-in binds, whatever the device binds (Metal
/// reports its largest buffer, past 16 GiB on large Macs): its words are
/// counted, and indexed by the shaders, in 32 bits.
const MOST_BUILTIN_WINDOW: u64 = 1 << 31;

/// Device limits that shape launches.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Largest binding window, a multiple of `align`.
    pub window: u64,
    /// Storage binding offset alignment.
    pub align: u64,
    /// Uniform binding offset alignment.
    pub uniform_align: u64,
    pub max_groups: u32,
}

impl Shape {
    pub fn new(limits: &wgpu::Limits) -> Shape {
        let align = u64::from(limits.min_storage_buffer_offset_alignment.max(4));
        let window = (limits.max_storage_buffer_binding_size / align * align).max(align);
        Shape {
            window,
            align,
            uniform_align: u64::from(limits.min_uniform_buffer_offset_alignment.max(4)),
            max_groups: limits.max_compute_workgroups_per_dimension.max(1),
        }
    }

    /// The largest window a built-in binds: the device's, to 2 GiB (a
    /// multiple of `align`, a power of two no larger).
    pub fn builtin_window(&self) -> u64 {
        self.window.min(MOST_BUILTIN_WINDOW)
    }

    /// A 2D grid of 256-thread groups covering `words` threads.
    pub fn grid(&self, words: u64) -> [u32; 3] {
        let groups = words.div_ceil(256).max(1);
        let x = groups.min(u64::from(self.max_groups));
        let y = groups.div_ceil(x);
        [x as u32, y.min(u64::from(u32::MAX)) as u32, 1]
    }
}

/// True when built-ins take their parameters as immediate data on this device.
fn immediate(gpu: &WgpuDevice) -> bool {
    gpu.immediate_bytes >= BUILTIN_PARAMS_BYTES
}

/// The built-in pipelines by kernel (`None`: the masked word write) and
/// whether every binding is writable: an op finds its pipeline without
/// writing out and hashing its source, as the pipeline cache would.
#[derive(Default)]
pub struct Builtins {
    pipelines: Mutex<HashMap<BuiltinKey, Arc<Pipeline>>>,
}

/// A built-in kernel (`None`: the masked word write), and whether every binding is writable.
type BuiltinKey = (Option<BuiltinKernel>, bool);

impl Builtins {
    fn get(
        &self,
        key: BuiltinKey,
        make: impl FnOnce() -> Result<Arc<Pipeline>, Error>,
    ) -> Result<Arc<Pipeline>, Error> {
        if let Some(pipeline) = lock(&self.pipelines).get(&key) {
            return Ok(pipeline.clone());
        }
        // Made outside the lock (a first compile is slow); a race makes it twice, harmlessly.
        let pipeline = make()?;
        lock(&self.pipelines).insert(key, pipeline.clone());
        Ok(pipeline)
    }
}

/// A built-in pipeline; a built-in that does not compile is a bug of ours,
/// reported as the backend's error.
/// `widened`: every binding writable (see [`Signature::widened`]).
fn builtin(gpu: &WgpuDevice, source: &str, read_only: &[bool], widened: bool) -> Result<Arc<Pipeline>, Error> {
    let immediate_bytes = if immediate(gpu) { BUILTIN_PARAMS_BYTES } else { 0 };
    let read_only = SmallVec::from_slice(read_only);
    let signature = Signature { read_only, scalars: true, checked: None, immediate_bytes, block: None, widened };
    let built = gpu.pipelines.get(&gpu.device, source, "main", signature)?;
    built.map_err(|message| Error::backend(BACKEND, format!("a built-in kernel: {message}")))
}

/// One dispatch of a planned launch: the window each operand binds, and its grid.
struct Window {
    /// First byte, relative to each operand's offset.
    start: u64,
    size: u64,
    groups: [u32; 3],
}

/// A built-in launched as dispatches, planned: its pipeline, and a window and
/// a uniform block per dispatch. An element-wise launch's windows cover its
/// bytes; a masked word write's window holds its word, in a grid of one.
pub struct DispatchPlan {
    pipeline: Arc<Pipeline>,
    params: Params,
    windows: Vec<Window>,
}

impl DispatchPlan {
    /// Bytes of our own it holds beyond its inline size.
    pub fn heap_bytes(&self) -> usize {
        self.windows.capacity() * std::mem::size_of::<Window>() + self.params.heap_bytes()
    }

    /// Every dispatch, by index.
    pub(crate) fn all(&self) -> std::ops::Range<usize> {
        0..self.windows.len()
    }
}

/// Plans `op` over `bytes` bytes of each operand (a multiple of 4), in
/// windows; with every binding writable when `shared` (operands in one buffer).
pub(crate) fn plan_elementwise(
    gpu: &WgpuDevice,
    op: BuiltinKernel,
    bytes: u64,
    scalar: u32,
    shared: bool,
) -> Result<DispatchPlan, Error> {
    let shape = gpu.shape;
    let pipeline = gpu.builtins.get((Some(op), shared), || {
        let read_only = op.read_only();
        let params = params_declaration(immediate(gpu), read_only.len());
        let source = wgsl_source(op, &params)
            .ok_or_else(|| Error::internal(format!("the built-in {op:?} has no WGSL: it is no element-wise op")))?;
        builtin(gpu, &source, &read_only, shared)
    })?;
    let (mut windows, mut blocks) = (Vec::new(), Vec::new());
    let mut start = 0;
    while start < bytes {
        let size = shape.builtin_window().min(bytes - start);
        let words = size / 4;
        windows.push(Window { start, size, groups: shape.grid(words) });
        blocks.push([words as u32, (start / 4) as u32, scalar, 0]);
        start += size;
    }
    Ok(DispatchPlan { params: Params::new(gpu, &pipeline, &blocks)?, pipeline, windows })
}

/// Records the planned dispatches `which` (indices into the plan) over
/// `operands`, each a byte range starting on a binding-aligned offset (its
/// windows are bound, not its size).
pub(crate) fn record_dispatches(
    gpu: &WgpuDevice,
    recorder: &mut Recorder,
    plan: &DispatchPlan,
    which: impl IntoIterator<Item = usize>,
    operands: &[Binding<'_>],
) {
    for index in which {
        let Some(window) = plan.windows.get(index) else { continue };
        let bindings: SmallVec<[Binding<'_>; 3]> = operands
            .iter()
            .map(|operand| Binding { buffer: operand.buffer, offset: operand.offset + window.start, size: window.size })
            .collect();
        dispatch(gpu, recorder, &plan.pipeline, &bindings, Some((&plan.params, index)), window.groups);
    }
}

/// A word of a buffer to write partly: its index, the mask of the bits it
/// keeps, and the bits it sets.
pub(crate) type MaskedWord = (u64, u32, u32);

/// Plans masked writes of `words`, one dispatch each, over a buffer bound
/// at a binding-aligned offset.
pub(crate) fn plan_patches(gpu: &WgpuDevice, words: &[MaskedWord]) -> Result<DispatchPlan, Error> {
    let align = gpu.shape.align;
    let pipeline = gpu.builtins.get((None, false), || builtin(gpu, &patch_source(immediate(gpu)), &[false], false))?;
    let (mut windows, mut blocks) = (Vec::new(), Vec::new());
    for &(word, keep, bits) in words {
        let byte = word * 4;
        let start = byte / align * align;
        windows.push(Window { start, size: byte - start + 4, groups: [1, 1, 1] });
        blocks.push([((byte - start) / 4) as u32, keep, bits, 0]);
    }
    Ok(DispatchPlan { params: Params::new(gpu, &pipeline, &blocks)?, pipeline, windows })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metal reports its largest buffer as the binding limit, past 16 GiB
    /// on large machines: a window that size counted its words mod 2³².
    #[test]
    fn a_builtins_window_counts_its_words_in_32_bits_whatever_the_device_binds() {
        let limits = wgpu::Limits { max_storage_buffer_binding_size: 1 << 36, ..wgpu::Limits::default() };
        let shape = Shape::new(&limits);
        let window = shape.builtin_window();
        assert!(window / 4 <= u64::from(u32::MAX), "a window of {window} bytes");
        assert_eq!(shape.window, 1 << 36, "a custom kernel binds what the device binds");
        let [x, y, _] = shape.grid(window / 4);
        assert!(u64::from(x) * u64::from(y) * 256 <= u64::from(u32::MAX) + 1);
    }
}
