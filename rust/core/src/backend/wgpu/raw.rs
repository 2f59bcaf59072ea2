//! Raw access for external writes on the wgpu backend.

use super::memory::WgpuMemory;

/// What an [`external_write`](crate::Stream::external_write) closure gets on
/// the wgpu backend.
///
/// Record the foreign work into [`WgpuRawAccess::encoder`]: its commands run
/// in the stream at the write's position, after everything the buffers
/// depend on and before every later op on them, and a validation error in
/// them fails the stream. The device is there to create pipelines, bind
/// groups and scratch buffers. The queue is there for queries such as
/// `get_timestamp_period`: work submitted on it directly, and
/// `Queue::write_buffer` (which runs at the start of the *next* submission),
/// are not ordered with the stream.
///
/// Callbacks registered on the device or queue (`on_submitted_work_done`,
/// `map_async`) run wherever wgpu fires them: on Weir's poll thread, or
/// inside any queue submission Weir makes — with the runtime's locks held.
/// They must not call into Weir and should not block; a panic in one is
/// contained and stops nothing.
pub struct WgpuRawAccess {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) buffers: Vec<wgpu::Buffer>,
    pub(crate) lens: Vec<u64>,
    pub(crate) encoder: wgpu::CommandEncoder,
}

impl WgpuRawAccess {
    pub(crate) fn new(device: &wgpu::Device, queue: &wgpu::Queue, memory: &[&WgpuMemory]) -> Self {
        WgpuRawAccess {
            encoder: device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("weir external write") }),
            device: device.clone(),
            queue: queue.clone(),
            buffers: memory.iter().map(|m| m.buffer.clone()).collect(),
            lens: memory.iter().map(|m| m.len).collect(),
        }
    }

    /// The device the buffers live on.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The device's one queue; see the type's doc before submitting on it.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The buffers, in the order given to `external_write`. Each wgpu buffer
    /// may be up to 3 bytes longer than the Weir buffer (see [`WgpuRawAccess::buffer_len`]).
    pub fn buffers(&self) -> &[wgpu::Buffer] {
        &self.buffers
    }

    /// The Weir size of buffer `index`.
    pub fn buffer_len(&self, index: usize) -> Option<u64> {
        self.lens.get(index).copied()
    }

    /// Commands recorded here run in the stream, at the write's position.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        &mut self.encoder
    }

    pub(crate) fn finish(self) -> wgpu::CommandBuffer {
        self.encoder.finish()
    }
}
