//! Compute pipelines, cached by source, entry point and binding shape, the
//! uniform blocks dispatches read their parameters from, and the one way
//! every kernel (built-in or custom) is dispatched.
//!
//! Binding convention: buffer arguments bind at group 0 in argument order,
//! read-only storage for `Read`, read-write storage otherwise; scalar
//! arguments, if any, follow as one uniform buffer of consecutive 4-byte
//! words at the next binding (declare a struct of `u32`/`i32`/`f32` fields).
//! Where the device takes immediate data, that uniform is compiled as an
//! immediate and the scalars are recorded with the dispatch ([`Params`]):
//! no buffer per op. A custom kernel whose WGSL binds otherwise keeps its
//! own layout ([`interface`]): a group layout per group it uses, groups made
//! per dispatch, its scalars in uniform buffers.
//!
//! Pipelines and uniforms are made in `prepare`, outside the runtime's
//! ordering boundary: a first-use compile (slow on every driver, very slow on
//! software ones) never holds up admissions on other streams.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use smallvec::SmallVec;

use super::interface::{self, Arguments, OwnLayout, ResourceKind};
use super::scope::{scoped, Failure, BACKEND};
use super::slabs::{Placed, Slot};
use super::uniform_fill::ScalarType;
use super::Recorder;
use super::WgpuDevice;
use crate::error::Error;
use crate::kernel::{CustomKernel, ScalarArg};
use crate::lock::lock;
use rustc_hash::FxHashMap;

/// The stack of the thread a shader compiles on. naga parses, lowers and
/// validates recursively, so a deeply nested source needs far more stack than
/// a caller's thread may have (a JVM or test thread often has 512 KiB to
/// 2 MiB); a fresh thread with this much is cheap beside the compile itself.
const COMPILE_STACK_BYTES: usize = 64 << 20;

/// A pipeline's source, entry point and binding shape.
type Key = (String, String, Signature);

/// A compiled kernel and the layout of its bindings.
pub struct Pipeline {
    pipeline: wgpu::ComputePipeline,
    /// Group 0's layout: Weir's binding convention.
    layout: wgpu::BindGroupLayout,
    /// A custom kernel with a layout of its own (see [`interface`]): where
    /// each argument binds, and each group's layout; `layout` is then unused.
    own: Option<(OwnLayout, Vec<wgpu::BindGroupLayout>)>,
    /// Bytes of immediate data each dispatch sets (0: scalars, if any, are a uniform buffer).
    immediate_bytes: u32,
}

impl Pipeline {
    /// The kernel's own layout, if it binds by one.
    pub(crate) fn own_layout(&self) -> Option<&OwnLayout> {
        self.own.as_ref().map(|(layout, _)| layout)
    }
}

/// How a kernel's arguments bind (see the module doc): with its source, what
/// tells its pipelines apart. Inline: a launch finds a known one allocating nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Signature {
    /// Per buffer argument: read-only?
    pub read_only: SmallVec<[bool; 8]>,
    /// Whether it takes scalars.
    pub scalars: bool,
    /// A custom kernel's scalar types: its source's bindings must be what
    /// these arguments bind ([`interface`]). `None` for built-ins.
    pub checked: Option<SmallVec<[ScalarType; 8]>>,
    /// Bytes of immediate data the scalars are set as; 0: a uniform buffer
    /// at the binding after the buffers.
    pub immediate_bytes: u32,
    /// A custom kernel's block (the grid's): its `@workgroup_size` is this,
    /// as written or through `override` constants. `None` for built-ins.
    pub block: Option<[u32; 3]>,
    /// A kernel whose launch may bind a read-only and a writable argument
    /// in one wgpu buffer, which wgpu refuses: compiled with every storage
    /// binding writable, read-only ones too (a custom kernel's accesses are
    /// checked against its arguments' first).
    pub widened: bool,
}

/// Pipelines by source; a source that failed to compile stays failed until
/// the cache is pruned.
#[derive(Default)]
pub(crate) struct PipelineCache {
    entries: Mutex<HashMap<Key, Result<Arc<Pipeline>, String>>>,
    /// Custom kernels' pipelines by the kernel's address, each entry holding
    /// a weak handle of its kernel until the kernel is gone: a launch then
    /// neither copies nor hashes its source.
    by_kernel: Mutex<FxHashMap<usize, KnownKernel>>,
}

/// The pipelines of one custom kernel, one per binding shape it was launched with.
struct KnownKernel {
    kernel: Weak<CustomKernel>,
    shapes: Vec<(Signature, Arc<Pipeline>)>,
}

fn entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    }
}

impl PipelineCache {
    /// The pipeline for `code`/`entry` bound as `signature` says, compiling
    /// it on first use; or the compiler's message, where the source does not
    /// compile or does not validate against its bindings. The outer error
    /// is no thread to compile on: nothing is wrong with the source.
    pub fn get(
        &self,
        device: &wgpu::Device,
        code: &str,
        entry: &str,
        signature: Signature,
    ) -> Result<Result<Arc<Pipeline>, String>, Error> {
        let key = (code.to_owned(), entry.to_owned(), signature);
        if let Some(found) = lock(&self.entries).get(&key) {
            return Ok(found.clone());
        }
        // Compile outside the lock; a racing compile of the same key is harmless.
        let built = match expression_depth(code) {
            depth if depth > MAX_EXPRESSION_DEPTH => Err(format!(
                "an expression in {entry}'s source is {depth} operators deep; the shader compiler takes at most \
                 {MAX_EXPRESSION_DEPTH} (split it into statements)"
            )),
            _ => compile_on_big_stack(device, key.clone())?,
        };
        let mut entries = lock(&self.entries);
        if entries.len() >= PRUNE_AT {
            // A pipeline only this map holds is no live kernel's (the built-ins'
            // and live custom kernels' are held beside it): an app making
            // kernel after kernel kept every one it ever compiled. One made
            // again compiles again; a failure is tried again.
            entries.retain(|_, built| matches!(built, Ok(pipeline) if Arc::strong_count(pipeline) > 1));
        }
        entries.insert(key, built.clone());
        Ok(built)
    }

    /// Sources kept now.
    #[cfg(test)]
    fn kept(&self) -> usize {
        lock(&self.entries).len()
    }

    /// The pipeline of custom `kernel`, whose source for this backend is
    /// `code`/`entry`, bound as `signature` says: found by the kernel's
    /// address once it compiled (see [`PipelineCache::get`] otherwise).
    pub(crate) fn get_custom(
        &self,
        device: &wgpu::Device,
        kernel: &Arc<CustomKernel>,
        code: &str,
        entry: &str,
        signature: Signature,
    ) -> Result<Result<Arc<Pipeline>, String>, Error> {
        let address = Arc::as_ptr(kernel) as usize;
        // An entry's weak handle keeps its kernel's allocation, so no other
        // kernel is made at that address while the entry stays: the entry at
        // a live kernel's address is that kernel's.
        if let Some(known) = lock(&self.by_kernel).get(&address) {
            if let Some((_, pipeline)) = known.shapes.iter().find(|(known, _)| *known == signature) {
                return Ok(Ok(pipeline.clone()));
            }
        }
        let pipeline = match self.get(device, code, entry, signature.clone())? {
            Ok(pipeline) => pipeline,
            failed => return Ok(failed),
        };
        let mut by_kernel = lock(&self.by_kernel);
        by_kernel.retain(|_, known| known.kernel.strong_count() > 0);
        let known = by_kernel
            .entry(address)
            .or_insert_with(|| KnownKernel { kernel: Arc::downgrade(kernel), shapes: Vec::new() });
        known.shapes.push((signature, pipeline.clone()));
        Ok(Ok(pipeline))
    }
}

/// How many sources the cache keeps before it drops those no kernel holds.
const PRUNE_AT: usize = 256;

/// The deepest expression a source may hold. The shader compiler recurses
/// once per operator of an expression (a long `a + b + …` as much as nested
/// parentheses), about 7 KiB a level in a debug build: this bound keeps the
/// deepest source well inside [`COMPILE_STACK_BYTES`] in any build.
const MAX_EXPRESSION_DEPTH: usize = 2048;

/// How deep the deepest expression of `code` is, counted from its text: the
/// operators of one statement plus its bracket nesting. It over-counts (every
/// operator of a statement counts), which only makes the bound stricter.
fn expression_depth(code: &str) -> usize {
    let (mut deepest, mut operators, mut nesting, mut peak) = (0, 0usize, 0usize, 0usize);
    let mut previous = ' ';
    for c in code.chars() {
        match c {
            ';' | '{' | '}' => {
                deepest = deepest.max(operators + peak);
                operators = 0;
                peak = nesting;
            }
            '(' | '[' => {
                nesting += 1;
                peak = peak.max(nesting);
            }
            ')' | ']' => nesting = nesting.saturating_sub(1),
            '+' | '-' | '*' | '/' | '%' | '&' | '|' | '^' | '<' | '>' | '!' | '=' if previous != c => operators += 1,
            _ => {}
        }
        previous = c;
    }
    deepest.max(operators + peak)
}

/// Compiles on a thread of its own with [`COMPILE_STACK_BYTES`] of stack and
/// waits for it. The error scopes are that thread's, so every error the
/// compile raises is captured there. A compiler panic is a failed compile.
fn compile_on_big_stack(device: &wgpu::Device, key: Key) -> Result<Result<Arc<Pipeline>, String>, Error> {
    let device = device.clone();
    let compiler = std::thread::Builder::new()
        .name("weir-wgpu-compile".to_owned())
        .stack_size(COMPILE_STACK_BYTES)
        .spawn(move || compile(&device, &key))
        .map_err(|e| Error::backend(BACKEND, format!("cannot start a shader compile thread: {e}")))?;
    Ok(compiler
        .join()
        .unwrap_or_else(|panic| Err(format!("the shader compiler panicked: {}", crate::error::panic_text(&*panic)))))
}

/// Checks a custom kernel's bindings, then compiles. A source naga cannot
/// parse is left to wgpu, whose message says why.
///
/// A custom kernel whose scalars go as immediate data has its uniform turned
/// into an immediate in the parsed module, and a widened one its storage
/// made writable; that module is what wgpu compiles. Should that fail, the
/// source as written is compiled: where it compiles and no buffer is bound
/// both ways, it serves (its scalars in a uniform buffer); where it fails,
/// its message names lines and columns, as a parsed module's cannot.
fn compile(device: &wgpu::Device, key: &Key) -> Result<Arc<Pipeline>, String> {
    let (code, entry, signature) = key;
    let Some(scalars) = &signature.checked else { return compile_builtin(device, key) };
    let as_written = Signature { immediate_bytes: 0, widened: false, ..signature.clone() };
    let wgsl = || wgpu::ShaderSource::Wgsl(code.as_str().into());
    let Ok(mut module) = wgpu::naga::front::wgsl::parse_str(code) else {
        return build(device, entry, &as_written, wgsl(), &[], None).map_err(|f| f.message());
    };
    let own = interface::check(&module, entry, &Arguments { read_only: &signature.read_only, scalars })?;
    // Before wgpu sees it: a pipeline layout of more groups than the device
    // has is an assertion in wgpu, not an error (and a layout is made with a
    // place per group index up to the last).
    let limits = device.limits();
    let most = limits.max_bind_groups;
    if let Some((group, _)) = own.iter().flat_map(|own| &own.groups).find(|(group, _)| *group >= most) {
        return Err(format!("@group({group}) is past this device's bind groups, 0 to {} (max_bind_groups)", most - 1));
    }
    // A uniform is made at its declared size on every launch: one the device
    // cannot bind is refused here, not after that allocation, when recorded.
    let most = limits.max_uniform_buffer_binding_size;
    if let Some(uniform) = own.iter().flat_map(|own| &own.uniforms).find(|uniform| u64::from(uniform.size) > most) {
        return Err(format!(
            "a uniform of {} bytes is past this device's {most} (max_uniform_buffer_binding_size)",
            uniform.size
        ));
    }
    let block = signature.block.unwrap_or([1; 3]);
    let constants = interface::block_constants(&module, entry, block)?;
    let constants: Vec<(&str, f64)> = constants.iter().map(|(name, value)| (name.as_str(), *value)).collect();
    // Its own layout binds its uniforms as written: no immediates.
    let immediate_bytes = if own.is_some() { 0 } else { signature.immediate_bytes };
    let signature = Signature { immediate_bytes, ..signature.clone() };
    let as_built = |signature: &Signature, source| build(device, entry, signature, source, &constants, own.as_ref());
    if signature.immediate_bytes == 0 && !signature.widened {
        return as_built(&signature, wgsl()).map_err(|f| f.message());
    }
    if signature.immediate_bytes > 0 {
        interface::scalars_as_immediates(&mut module);
    }
    if signature.widened {
        interface::storage_writable(&mut module);
    }
    let rewrite = wgpu::ShaderSource::Naga(std::borrow::Cow::Owned(module));
    as_built(&signature, rewrite).or_else(|rewritten| match as_built(&as_written, wgsl()) {
        // Its scalars then go in a uniform buffer, as the pipeline says;
        // but a widened launch binds one buffer both ways, which needs
        // the storage made writable: the rewrite's failure is the answer.
        Ok(written) if !signature.widened => Ok(written),
        Ok(_) => Err(rewritten.message()),
        Err(failure) => Err(failure.message()),
    })
}

/// Compiles a built-in. A widened one is made writable as a custom kernel
/// is, in its parsed module: one rewrite for every kernel.
fn compile_builtin(device: &wgpu::Device, key: &Key) -> Result<Arc<Pipeline>, String> {
    let (code, entry, signature) = key;
    let source = if signature.widened {
        let mut module = wgpu::naga::front::wgsl::parse_str(code).map_err(|error| error.emit_to_string(code))?;
        interface::storage_writable(&mut module);
        wgpu::ShaderSource::Naga(std::borrow::Cow::Owned(module))
    } else {
        wgpu::ShaderSource::Wgsl(code.as_str().into())
    };
    build(device, entry, signature, source, &[], None).map_err(|f| f.message())
}

/// Builds the pipeline of `entry_point` in `source`, its bindings as `signature` says.
fn build(
    device: &wgpu::Device,
    entry_point: &str,
    signature: &Signature,
    source: wgpu::ShaderSource<'_>,
    constants: &[(&str, f64)],
    own: Option<&OwnLayout>,
) -> Result<Arc<Pipeline>, Failure> {
    scoped(device, || {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(entry_point), source });
        let storage = |read_only: bool| wgpu::BufferBindingType::Storage { read_only: read_only && !signature.widened };
        let mut entries: Vec<wgpu::BindGroupLayoutEntry> = signature
            .read_only
            .iter()
            .enumerate()
            .map(|(binding, &read_only)| entry(binding as u32, storage(read_only)))
            .collect();
        if signature.scalars && signature.immediate_bytes == 0 {
            entries.push(entry(signature.read_only.len() as u32, wgpu::BufferBindingType::Uniform));
        }
        let layout_of = |entries: &[wgpu::BindGroupLayoutEntry]| {
            device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(entry_point), entries })
        };
        let layout = layout_of(&entries);
        // A layout of its own: a group layout per group it uses, none
        // between them.
        let own = own.map(|own| {
            let groups: Vec<wgpu::BindGroupLayout> = own
                .groups
                .iter()
                .map(|(_, resources)| {
                    let entries: Vec<wgpu::BindGroupLayoutEntry> = resources
                        .iter()
                        .map(|resource| match resource.kind {
                            ResourceKind::Buffer { read_only, .. } => entry(resource.binding, storage(read_only)),
                            ResourceKind::Uniform { .. } => entry(resource.binding, wgpu::BufferBindingType::Uniform),
                        })
                        .collect();
                    layout_of(&entries)
                })
                .collect();
            (own.clone(), groups)
        });
        let by_index: Vec<Option<&wgpu::BindGroupLayout>> = match &own {
            None => vec![Some(&layout)],
            Some((own, groups)) => {
                // None between the groups it uses.
                let count = own.groups.last().map_or(0, |(index, _)| *index as usize + 1);
                let mut by_index = vec![None; count];
                for ((index, _), group) in own.groups.iter().zip(groups) {
                    by_index[*index as usize] = Some(group);
                }
                by_index
            }
        };
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(entry_point),
            bind_group_layouts: &by_index,
            immediate_size: signature.immediate_bytes,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry_point),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(entry_point),
            compilation_options: wgpu::PipelineCompilationOptions { constants, ..Default::default() },
            cache: None,
        });
        Arc::new(Pipeline { pipeline, layout, own, immediate_bytes: signature.immediate_bytes })
    })
}

/// Immediate bytes a launch keeps inline: a custom kernel's few scalars, no allocation.
const IMMEDIATE_INLINE_BYTES: usize = 32;

/// The parameter blocks of one command's dispatches, one block per dispatch:
/// immediate data recorded with each dispatch where the pipeline takes it (no
/// device object at all), else a uniform buffer.
pub enum Params {
    Immediate { bytes: SmallVec<[u8; IMMEDIATE_INLINE_BYTES]>, block: usize },
    Uniform(Uniforms),
}

impl Params {
    /// Bytes of our own it holds beyond its inline size.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Params::Immediate { bytes, .. } if bytes.spilled() => bytes.capacity(),
            Params::Immediate { .. } => 0,
            Params::Uniform(uniforms) => uniforms.bytes.capacity(),
        }
    }

    /// One block per entry of `blocks` for `pipeline`, or why the device
    /// could not make them.
    pub fn new(gpu: &WgpuDevice, pipeline: &Pipeline, blocks: &[impl AsRef<[u32]>]) -> Result<Params, Error> {
        if pipeline.immediate_bytes == 0 {
            let bytes: Vec<Vec<u8>> = blocks
                .iter()
                .map(|words| words.as_ref().iter().flat_map(|word| word.to_le_bytes()).collect())
                .collect();
            return Uniforms::new(gpu, &bytes)
                .map(Params::Uniform)
                .map_err(|failure| failure.refusing((blocks.len() as u64) * gpu.shape.uniform_align));
        }
        let block = pipeline.immediate_bytes as usize;
        let mut bytes = SmallVec::from_elem(0u8, block * blocks.len());
        for (slot, words) in bytes.chunks_exact_mut(block).zip(blocks) {
            for (at, value) in slot.chunks_exact_mut(4).zip(words.as_ref()) {
                at.copy_from_slice(&value.to_le_bytes());
            }
        }
        Ok(Params::Immediate { bytes, block })
    }

    /// The uniforms of a kernel with its own layout, filled from its scalars.
    pub fn own(gpu: &WgpuDevice, own: &OwnLayout, scalars: &[&ScalarArg]) -> Result<Params, Error> {
        let blocks: Vec<Vec<u8>> = own.uniforms.iter().map(|uniform| uniform.bytes(scalars)).collect();
        Uniforms::new(gpu, &blocks).map(Params::Uniform).map_err(|failure| failure.refusing(gpu.shape.uniform_align))
    }
}

/// The uniform blocks of one command's dispatches, one block per dispatch,
/// at a stride the device can bind at: in a slot of the device's uniform
/// slabs ([`super::slabs`]), or a buffer of their own when they are large.
///
/// Their bytes are written through the queue when the op is recorded (just
/// before its submission, whose commands the write precedes), not when it is
/// admitted: an op queued behind a hold then holds only its bytes. The slot
/// is held until the op's commands are submitted (the queued op is), as its
/// next owner writes it the same way.
pub struct Uniforms {
    bytes: Vec<u8>,
    written: AtomicBool,
    buffer: wgpu::Buffer,
    /// The first block's offset in `buffer`.
    base: u64,
    stride: u64,
    block: u64,
    _slot: Option<Arc<Slot>>,
}

impl Uniforms {
    /// One block per entry of `blocks`, each padded to the largest, to at
    /// least 16 bytes and to a multiple of 16 (so small parameter structs
    /// always fit).
    fn new(gpu: &WgpuDevice, blocks: &[Vec<u8>]) -> Result<Uniforms, Failure> {
        let align = gpu.shape.uniform_align.max(1);
        let longest = blocks.iter().map(Vec::len).max().unwrap_or(0);
        let block = (longest as u64).max(16).div_ceil(16) * 16;
        let stride = block.div_ceil(align) * align;
        let size = stride * (blocks.len().max(1) as u64);
        let mut bytes = vec![0u8; size as usize];
        for (slot, block) in bytes.chunks_exact_mut(stride as usize).zip(blocks) {
            slot[..block.len()].copy_from_slice(block);
        }
        let Placed { buffer, base, slot } = gpu.uniform_slabs.place(size)?;
        Ok(Uniforms { bytes, written: AtomicBool::new(false), buffer, base, stride, block, _slot: slot })
    }

    /// Writes the blocks through `queue`, once: they land before the next
    /// submission's commands.
    fn write(&self, queue: &wgpu::Queue) {
        if !self.written.swap(true, Ordering::Relaxed) {
            queue.write_buffer(&self.buffer, self.base, &self.bytes);
        }
    }

    fn binding(&self, index: usize) -> wgpu::BindingResource<'_> {
        window(&Binding { buffer: &self.buffer, offset: self.base + self.stride * index as u64, size: self.block })
    }
}

/// A byte window of a buffer to bind.
pub struct Binding<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub offset: u64,
    pub size: u64,
}

fn window<'a>(window: &Binding<'a>) -> wgpu::BindingResource<'a> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer: window.buffer,
        offset: window.offset,
        size: wgpu::BufferSize::new(window.size),
    })
}

/// Records one dispatch of `pipeline` over `buffers` (and block `index` of
/// `params`, if the pipeline takes scalars) into the recorder's compute
/// pass. A group binding only storage windows is reused from the device's
/// cache ([`super::bind_groups`]).
pub fn dispatch(
    gpu: &WgpuDevice,
    recorder: &mut Recorder,
    pipeline: &Pipeline,
    buffers: &[Binding<'_>],
    params: Option<(&Params, usize)>,
    groups: [u32; 3],
) {
    let device = &gpu.device;
    if let Some((own, layouts)) = &pipeline.own {
        // A layout of its own: a group per group it uses, made here (its
        // uniforms are the command's own).
        let uniforms = match params {
            Some((Params::Uniform(uniforms), _)) => Some(uniforms).inspect(|uniforms| uniforms.write(&gpu.queue)),
            _ => None,
        };
        let bound: SmallVec<[(u32, wgpu::BindGroup); 4]> = own
            .groups
            .iter()
            .zip(layouts)
            .map(|((index, resources), layout)| {
                let entries: Vec<wgpu::BindGroupEntry<'_>> = resources
                    .iter()
                    .filter_map(|resource| {
                        let bound = match resource.kind {
                            ResourceKind::Buffer { argument, .. } => window(buffers.get(argument)?),
                            ResourceKind::Uniform { index } => uniforms?.binding(index),
                        };
                        Some(wgpu::BindGroupEntry { binding: resource.binding, resource: bound })
                    })
                    .collect();
                let group =
                    device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout, entries: &entries });
                (*index, group)
            })
            .collect();
        recorder.pass_with_groups(&pipeline.pipeline, &bound).dispatch_workgroups(groups[0], groups[1], groups[2]);
        return;
    }
    let make = |uniform: Option<wgpu::BindingResource<'_>>| {
        // The buffers at `0..n`, then the uniform (if any) at `n`.
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .map(window)
            .chain(uniform)
            .enumerate()
            .map(|(binding, resource)| wgpu::BindGroupEntry { binding: binding as u32, resource })
            .collect();
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.layout,
            entries: &entries,
        })
    };
    let mut immediates = None;
    let bind_group = match params {
        Some((Params::Uniform(uniforms), index)) => {
            uniforms.write(&gpu.queue);
            make(Some(uniforms.binding(index)))
        }
        other => {
            if let Some((Params::Immediate { bytes, block }, index)) = other {
                immediates = bytes.get(index * block..(index + 1) * block);
            }
            let windows = buffers.iter().map(|window| (window.buffer.clone(), window.offset, window.size)).collect();
            recorder.kept_group(&pipeline.layout, windows, |windows| {
                gpu.bind_groups.get(&pipeline.layout, windows, || make(None))
            })
        }
    };
    let pass = recorder.pass_with(&pipeline.pipeline, &bind_group);
    if let Some(bytes) = immediates {
        pass.set_immediates(0, bytes);
    }
    pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernels made and dropped one after another leave the cache bounded,
    /// while a pipeline still held stays (skipped where no adapter is).
    #[test]
    fn pipelines_no_kernel_holds_are_dropped_past_the_bound() {
        let Ok(opened) = super::super::adapter::open(&crate::info::AdapterChoice::default(), 0, true) else {
            eprintln!("wgpu: skipped (no adapter)");
            return;
        };
        let cache = PipelineCache::default();
        let signature = || Signature {
            read_only: SmallVec::from_slice(&[false]),
            scalars: false,
            checked: None,
            immediate_bytes: 0,
            block: None,
            widened: false,
        };
        let source = |value: usize| {
            format!(
                "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
                 @compute @workgroup_size(1) fn main() {{ out[0] = {value}u; }}"
            )
        };
        let held = cache.get(&opened.device, &source(0), "main", signature()).unwrap().unwrap();
        for value in 1..=PRUNE_AT + 10 {
            drop(cache.get(&opened.device, &source(value), "main", signature()).unwrap().unwrap());
        }
        assert!(cache.kept() <= 12, "{} sources kept", cache.kept());
        let again = cache.get(&opened.device, &source(0), "main", signature()).unwrap().unwrap();
        assert!(Arc::ptr_eq(&held, &again), "a held pipeline was dropped");
    }
}
