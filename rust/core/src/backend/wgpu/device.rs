//! The opened device as the engine holds it: the device layer's, and the
//! engine's counters of what it made on it.

use std::sync::Arc;

use crate::diagnostics::Counters;
use crate::error::Result;
use weir_device::info::AdapterChoice;
use weir_device::wgpu::WgpuDevice;

pub(crate) struct Gpu {
    pub opened: WgpuDevice,
    pub counters: Arc<Counters>,
}

impl Gpu {
    /// Opens adapter `index` of those `choice` keeps: the device every
    /// runtime on it shares, or with `own` one of its own.
    pub fn open(choice: &AdapterChoice, index: usize, own: bool) -> Result<Gpu> {
        Ok(Gpu { opened: WgpuDevice::open(choice, index, own)?, counters: Arc::default() })
    }
}

impl std::ops::Deref for Gpu {
    type Target = WgpuDevice;

    fn deref(&self) -> &WgpuDevice {
        &self.opened
    }
}
