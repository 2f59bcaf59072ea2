//! Raw access for external writes on the wgpu backend.

use weir_device::wgpu::memory::WgpuMemory;

/// What an [`external_write`](crate::Stream::external_write) closure gets on
/// the wgpu backend.
///
/// Record the foreign work into [`WgpuRawAccess::encoder`]: its commands run
/// in the stream at the write's position, after everything the buffers
/// depend on and before every later op on them, and a validation error in
/// them fails the stream. One that wgpu finds only as the commands are
/// submitted (a buffer of yours still mapped, or destroyed, when Weir
/// submits) refuses the whole submission: every op in it fails, with the
/// streams whose work it held, since none of it ran. The device is there
/// to create pipelines, bind groups and scratch buffers. The queue is there
/// for queries such as `get_timestamp_period`: work submitted on it
/// directly, and `Queue::write_buffer` (which runs at the start of the
/// *next* submission), are not ordered with the stream.
///
/// Callbacks registered on the device or queue (`on_submitted_work_done`,
/// `map_async`) run wherever wgpu fires them: on Weir's poll thread, or
/// inside any queue submission Weir makes — with the runtime's locks held.
/// They must not call into Weir and should not block; a panic in one is
/// contained and stops nothing.
pub struct WgpuRawAccess {
    device: wgpu::Device,
    queue: wgpu::Queue,
    ranges: Vec<WgpuBufferRange>,
    /// The allocations' slots, kept until the commands are submitted.
    held: Vec<WgpuMemory>,
    encoder: wgpu::CommandEncoder,
}

/// Where one Weir buffer's bytes are: a range of a wgpu buffer. Small Weir
/// buffers share one wgpu buffer, each in a range of its own, so work on one
/// must stay inside `offset..offset + len` (with `len` rounded up to 4
/// bytes: that padding is the buffer's own); bytes outside it belong to
/// other buffers.
#[derive(Debug, Clone)]
pub struct WgpuBufferRange {
    pub buffer: wgpu::Buffer,
    /// The Weir buffer's first byte in `buffer`; a legal storage binding offset.
    pub offset: u64,
    /// The Weir buffer's size.
    pub len: u64,
}

impl WgpuRawAccess {
    pub(crate) fn new(device: &wgpu::Device, queue: &wgpu::Queue, memory: &[&WgpuMemory]) -> Self {
        WgpuRawAccess {
            encoder: device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("weir external write") }),
            device: device.clone(),
            queue: queue.clone(),
            ranges: memory
                .iter()
                .map(|m| WgpuBufferRange { buffer: m.buffer().clone(), offset: m.offset(), len: m.len() })
                .collect(),
            held: memory.iter().map(|&m| m.clone()).collect(),
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

    /// Where the buffers are, in the order given to `external_write`.
    pub fn buffers(&self) -> &[WgpuBufferRange] {
        &self.ranges
    }

    /// Commands recorded here run in the stream, at the write's position.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        &mut self.encoder
    }

    /// The commands recorded, and what they hold until they are submitted.
    pub(crate) fn finish(self) -> (wgpu::CommandBuffer, Vec<WgpuMemory>) {
        (self.encoder.finish(), self.held)
    }
}
