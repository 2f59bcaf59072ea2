//! Timestamps as timestamp queries: one command buffer per timestamp, an
//! empty compute pass whose end-of-pass write takes the queue's clock once
//! every command before it is done (Vulkan writes it at the bottom of the
//! pipe), resolved into a buffer and read back like a download. Needs the
//! adapter's `TIMESTAMP_QUERY` feature (pass timestamp writes only, not
//! `TIMESTAMP_QUERY_INSIDE_ENCODERS`: each op already has its own encoder).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::lanes::{Shared, WgpuLane};
use super::queued::{Queued, Recorded};
use super::readback::Readback;
use crate::backend::{DeviceTimestamp, HostSink};
use crate::completion::Completion;
use crate::diagnostics::Counters;
use crate::error::{Error, Result};
use crate::lock::lock;
use weir_device::wgpu::memory::buffer;
use weir_device::wgpu::scope::{scoped, BACKEND};
use weir_device::wgpu::WgpuDevice;

/// A timestamp query in flight or read: its ticks arrive through a read-back.
/// Counted among the live events: it is wgpu's timing event.
pub struct WgpuTimestamp {
    sink: Arc<HostSink>,
    /// The ticks, once taken out of the sink (the first time they are asked for).
    ticks: Mutex<Option<u64>>,
    /// Nanoseconds per tick (`Queue::get_timestamp_period`).
    period: f32,
    counters: Arc<Counters>,
}

impl Drop for WgpuTimestamp {
    fn drop(&mut self) {
        self.counters.live_events.fetch_sub(1, Ordering::SeqCst);
    }
}

impl WgpuTimestamp {
    fn ticks(&self) -> Result<u64> {
        let mut ticks = lock(&self.ticks);
        if let Some(ticks) = *ticks {
            return Ok(ticks);
        }
        let bytes = self.sink.take().ok_or_else(|| Error::internal("a timestamp was read before it was taken"))?;
        let raw: [u8; 8] =
            bytes.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(|| Error::internal("a short timestamp query"))?;
        let value = u64::from_le_bytes(raw);
        *ticks = Some(value);
        Ok(value)
    }
}

impl DeviceTimestamp for WgpuTimestamp {
    fn elapsed_since(&self, earlier: &Self) -> Result<Duration> {
        let ticks = self.ticks()?.saturating_sub(earlier.ticks()?);
        Ok(Duration::from_nanos((ticks as f64 * f64::from(self.period)).round() as u64))
    }
}

/// Enqueues a timestamp on `lane` (stream `number`).
pub(crate) fn enqueue(
    gpu: &WgpuDevice,
    shared: &Shared,
    lane: &Arc<WgpuLane>,
    number: u32,
    completion: Arc<Completion>,
) -> Result<WgpuTimestamp> {
    if !gpu.timestamps {
        return Err(Error::unsupported(
            BACKEND,
            format!("timestamps need the adapter feature TIMESTAMP_QUERY, which {} lacks", gpu.info.name),
        ));
    }
    let size = wgpu::QUERY_SIZE as u64;
    let recorded = scoped(&gpu.device, || {
        let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("weir timestamp"),
            ty: wgpu::QueryType::Timestamp,
            count: 1,
        });
        let resolve = wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC;
        let resolved = buffer(&gpu.device, "weir timestamp resolve", size, resolve);
        let read_back = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let staging = buffer(&gpu.device, "weir timestamp read-back", size, read_back);
        let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("weir timestamp"),
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: &queries,
                beginning_of_pass_write_index: None,
                end_of_pass_write_index: Some(0),
            }),
        }));
        encoder.resolve_query_set(&queries, 0..1, &resolved, 0);
        encoder.copy_buffer_to_buffer(&resolved, 0, &staging, 0, size);
        (encoder.finish(), staging)
    });
    let (commands, staging) = recorded.map_err(|failure| failure.on_stream(number))?;
    let sink = HostSink::new(completion);
    let readback = Readback::new(staging, 0, size as usize, sink.clone());
    shared.record(lane, Queued::Commands(Box::new(Recorded { commands, buffers: Vec::new() })), Some(readback))?;
    gpu.counters.live_events.fetch_add(1, Ordering::SeqCst);
    Ok(WgpuTimestamp { sink, ticks: Mutex::new(None), period: gpu.timestamp_period, counters: gpu.counters.clone() })
}
