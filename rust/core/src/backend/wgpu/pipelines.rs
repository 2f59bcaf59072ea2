//! Compute pipelines, cached by source, entry point and binding shape, and the
//! one way every kernel (built-in or custom) is dispatched.
//!
//! Binding convention: buffer arguments bind at group 0 in argument order,
//! read-only storage for `Read`, read-write storage otherwise; scalar
//! arguments, if any, follow as one uniform buffer of consecutive 4-byte
//! words at the next binding (declare a struct of `u32`/`i32`/`f32` fields).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::scope::{scoped, Failure};
use crate::lock::lock;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    code: String,
    entry: String,
    /// Per buffer binding: read-only?
    read_only: Vec<bool>,
    scalars: bool,
}

/// A compiled kernel and the layout of its bindings.
pub(crate) struct Pipeline {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

/// Pipelines by source; a source that failed to compile stays failed.
#[derive(Default)]
pub(crate) struct PipelineCache {
    entries: Mutex<HashMap<Key, Result<Arc<Pipeline>, String>>>,
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
    /// The pipeline for `code`/`entry` with buffers bound as `read_only` says,
    /// compiling it on first use.
    pub fn get(
        &self,
        device: &wgpu::Device,
        code: &str,
        entry: &str,
        read_only: &[bool],
        scalars: bool,
    ) -> Result<Arc<Pipeline>, String> {
        let key = Key { code: code.to_owned(), entry: entry.to_owned(), read_only: read_only.to_vec(), scalars };
        if let Some(found) = lock(&self.entries).get(&key) {
            return found.clone();
        }
        // Compile outside the lock; a racing compile of the same key is harmless.
        let built = compile(device, &key).map_err(|failure| failure.message());
        lock(&self.entries).insert(key, built.clone());
        built
    }
}

fn compile(device: &wgpu::Device, key: &Key) -> Result<Arc<Pipeline>, Failure> {
    scoped(device, || {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&key.entry),
            source: wgpu::ShaderSource::Wgsl(key.code.as_str().into()),
        });
        let mut entries: Vec<wgpu::BindGroupLayoutEntry> = key
            .read_only
            .iter()
            .enumerate()
            .map(|(binding, &read_only)| entry(binding as u32, wgpu::BufferBindingType::Storage { read_only }))
            .collect();
        if key.scalars {
            entries.push(entry(key.read_only.len() as u32, wgpu::BufferBindingType::Uniform));
        }
        let layout = device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(&key.entry), entries: &entries });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(&key.entry),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&key.entry),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(&key.entry),
            compilation_options: Default::default(),
            cache: None,
        });
        Arc::new(Pipeline { pipeline, layout })
    })
}

/// A byte window of a buffer to bind.
pub(crate) struct Binding<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub offset: u64,
    pub size: u64,
}

/// Records one dispatch of `pipeline` over `buffers` (and `scalars`, if the
/// pipeline takes them) into `encoder`.
pub(crate) fn dispatch(
    device: &wgpu::Device,
    encoder: &mut wgpu::CommandEncoder,
    pipeline: &Pipeline,
    buffers: &[Binding<'_>],
    scalars: Option<&[u32]>,
    groups: [u32; 3],
) {
    let scalar_buffer = scalars.map(|words| {
        // At least 16 bytes, so small parameter structs always fit.
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.resize(bytes.len().max(16).div_ceil(16) * 16, 0);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("weir scalars"),
            size: bytes.len() as u64,
            usage: wgpu::BufferUsages::UNIFORM,
            mapped_at_creation: true,
        });
        if let Ok(mut view) = buffer.slice(..).get_mapped_range_mut() {
            view.copy_from_slice(&bytes);
        }
        buffer.unmap();
        buffer
    });
    let mut entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
        .iter()
        .enumerate()
        .map(|(binding, window)| wgpu::BindGroupEntry {
            binding: binding as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: window.buffer,
                offset: window.offset,
                size: wgpu::BufferSize::new(window.size),
            }),
        })
        .collect();
    if let Some(buffer) = &scalar_buffer {
        entries.push(wgpu::BindGroupEntry { binding: buffers.len() as u32, resource: buffer.as_entire_binding() });
    }
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.layout,
        entries: &entries,
    });
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
    pass.set_pipeline(&pipeline.pipeline);
    pass.set_bind_group(0, &bind_group, &[]);
    pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
}
