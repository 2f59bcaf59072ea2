//! The opened device: what every op needs to record and submit work.

use std::sync::{Arc, Mutex};

use super::adapter;
use super::bind_groups::BindGroups;
use super::builtin::{Builtins, Shape};
use super::pipelines::PipelineCache;
use super::slabs::Slabs;
use crate::counters::Counters;
use crate::error::Result;
use crate::info::{AdapterChoice, BackendKind, DeviceInfo, LaunchLimits};

/// A wgpu device and its one queue, with the caches every op records from.
pub struct WgpuDevice {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub limits: wgpu::Limits,
    pub(crate) shape: Shape,
    pub(crate) pipelines: PipelineCache,
    pub(crate) builtins: Builtins,
    /// Shared with every allocation, which drops the groups binding it.
    pub bind_groups: Arc<BindGroups>,
    /// The wgpu buffers small allocations share.
    pub slabs: Arc<Slabs>,
    /// The wgpu buffers ops' scalar blocks share.
    pub(crate) uniform_slabs: Arc<Slabs>,
    /// The most bytes of immediate data a dispatch may set (0: the device takes none).
    pub immediate_bytes: u32,
    /// The device takes timestamp queries (`Features::TIMESTAMP_QUERY`).
    pub timestamps: bool,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period: f32,
    /// What is made and copied on it (allocations, staging buffers, copies).
    pub counters: Arc<Counters>,
    pub info: DeviceInfo,
    /// Shared by every runtime on the device (see `adapter::open`).
    pub device_error: Arc<Mutex<Option<crate::Error>>>,
}

/// An adapter's kind: its rank among adapters (the lowest is tried first)
/// and its name in words.
pub(crate) fn kind(device_type: wgpu::DeviceType) -> (u8, &'static str) {
    match device_type {
        wgpu::DeviceType::DiscreteGpu => (0, "discrete GPU"),
        wgpu::DeviceType::IntegratedGpu => (1, "integrated GPU"),
        wgpu::DeviceType::VirtualGpu => (2, "virtual GPU"),
        wgpu::DeviceType::Other => (3, "other"),
        wgpu::DeviceType::Cpu => (4, "software"),
    }
}

/// Adapter `index` as its device is opened: the device gets the adapter's
/// own limits, so the adapter alone says what the device will take.
pub(crate) fn describe(adapter: &wgpu::AdapterInfo, limits: &wgpu::Limits, index: usize) -> DeviceInfo {
    DeviceInfo {
        backend: BackendKind::Wgpu,
        index,
        name: format!("{} ({:?}, {})", adapter.name, adapter.backend, kind(adapter.device_type).1),
        // wgpu does not say how much memory an adapter has.
        memory_bytes: None,
        // Allocations are rounded up to 4 bytes; keep the rounded size legal.
        max_buffer_bytes: limits.max_buffer_size / 4 * 4,
        software: adapter.device_type == wgpu::DeviceType::Cpu,
        limits: LaunchLimits {
            max_block: [
                limits.max_compute_workgroup_size_x,
                limits.max_compute_workgroup_size_y,
                limits.max_compute_workgroup_size_z,
            ],
            max_threads_per_block: limits.max_compute_invocations_per_workgroup,
            max_groups: [limits.max_compute_workgroups_per_dimension; 3],
            max_shared_bytes: limits.max_compute_workgroup_storage_size,
        },
    }
}

impl WgpuDevice {
    /// Opens adapter `index` of those `choice` keeps (see `adapter`): the
    /// device every runtime on it shares, or with `own` one of its own.
    pub fn open(choice: &AdapterChoice, index: usize, own: bool) -> Result<WgpuDevice> {
        let opened = adapter::open(choice, index, own)?;
        let info = opened.info.clone();
        let immediate_bytes =
            if opened.features.contains(wgpu::Features::IMMEDIATES) { opened.limits.max_immediate_size } else { 0 };
        Ok(WgpuDevice {
            timestamps: opened.features.contains(wgpu::Features::TIMESTAMP_QUERY),
            timestamp_period: opened.queue.get_timestamp_period(),
            shape: Shape::new(&opened.limits),
            slabs: Slabs::storage(&opened.device, u64::from(opened.limits.min_storage_buffer_offset_alignment)),
            uniform_slabs: Slabs::uniform(&opened.device, u64::from(opened.limits.min_uniform_buffer_offset_alignment)),
            device: opened.device,
            queue: opened.queue,
            limits: opened.limits,
            pipelines: PipelineCache::default(),
            builtins: Builtins::default(),
            bind_groups: Arc::default(),
            immediate_bytes,
            counters: Arc::default(),
            info,
            device_error: opened.device_error,
        })
    }
}
