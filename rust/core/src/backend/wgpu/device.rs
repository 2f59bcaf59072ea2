//! The opened device: what every op needs to record and submit work.

use std::sync::{Arc, Mutex};

use super::adapter;
use super::builtin::Shape;
use super::memory::WgpuCounters;
use super::pipelines::PipelineCache;
use crate::device::{BackendKind, DeviceInfo};
use crate::error::Result;

pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    pub shape: Shape,
    pub pipelines: PipelineCache,
    /// The most bytes of immediate data a dispatch may set (0: the device takes none).
    pub immediate_bytes: u32,
    pub counters: Arc<WgpuCounters>,
    pub info: DeviceInfo,
    /// Shared by every runtime on the device (see `adapter::open`).
    pub device_error: Arc<Mutex<Option<crate::Error>>>,
}

fn kind_in_words(kind: wgpu::DeviceType) -> &'static str {
    match kind {
        wgpu::DeviceType::DiscreteGpu => "discrete GPU",
        wgpu::DeviceType::IntegratedGpu => "integrated GPU",
        wgpu::DeviceType::VirtualGpu => "virtual GPU",
        wgpu::DeviceType::Cpu => "software",
        wgpu::DeviceType::Other => "other",
    }
}

impl Gpu {
    pub fn open() -> Result<Gpu> {
        let opened = adapter::open()?;
        let info = DeviceInfo {
            backend: BackendKind::Wgpu,
            name: format!(
                "{} ({:?}, {})",
                opened.adapter.name,
                opened.adapter.backend,
                kind_in_words(opened.adapter.device_type)
            ),
            memory_bytes: None,
            // Allocations are rounded up to 4 bytes; keep the rounded size legal.
            max_buffer_bytes: opened.limits.max_buffer_size / 4 * 4,
            software: opened.adapter.device_type == wgpu::DeviceType::Cpu,
        };
        let immediate_bytes =
            if opened.features.contains(wgpu::Features::IMMEDIATES) { opened.limits.max_immediate_size } else { 0 };
        Ok(Gpu {
            shape: Shape::new(&opened.limits),
            device: opened.device,
            queue: opened.queue,
            limits: opened.limits,
            pipelines: PipelineCache::default(),
            immediate_bytes,
            counters: Arc::new(WgpuCounters::default()),
            info,
            device_error: opened.device_error,
        })
    }
}
