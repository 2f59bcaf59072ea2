//! Choosing the adapter and opening the device.
//!
//! `WEIR_WGPU_BACKENDS` (a comma list: `vulkan`, `metal`, `dx12`, `gl`) picks
//! the wgpu backends to try; without it the primary ones (Vulkan, Metal,
//! DX12) are tried, never GL, so a machine without Vulkan does not silently
//! run on a GL emulation. `WEIR_WGPU_ADAPTER` keeps only adapters whose name
//! contains the given text. Among the rest a discrete GPU wins, then an
//! integrated one, then virtual, then software.

use std::sync::Mutex;

use super::scope::{ready, BACKEND};
use crate::completion::lock;
use crate::error::{Error, Result};

/// The environment variable naming the wgpu backends to try.
pub const BACKENDS_VAR: &str = "WEIR_WGPU_BACKENDS";
/// The environment variable filtering adapters by name.
pub const ADAPTER_VAR: &str = "WEIR_WGPU_ADAPTER";

/// An opened device with what was learnt choosing it.
pub(crate) struct Opened {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
}

fn backend_names(backends: wgpu::Backends) -> String {
    let names: Vec<&str> = [
        (wgpu::Backends::VULKAN, "vulkan"),
        (wgpu::Backends::METAL, "metal"),
        (wgpu::Backends::DX12, "dx12"),
        (wgpu::Backends::GL, "gl"),
    ]
    .into_iter()
    .filter(|(flag, _)| backends.contains(*flag))
    .map(|(_, name)| name)
    .collect();
    names.join(", ")
}

/// The backends to try: the override if set, else the primary ones.
fn wanted_backends() -> Result<wgpu::Backends> {
    match std::env::var(BACKENDS_VAR) {
        Ok(list) => {
            let backends = wgpu::Backends::from_comma_list(&list);
            if backends.is_empty() {
                return Err(Error::unavailable(
                    BACKEND,
                    format!("{BACKENDS_VAR}={list:?} names no wgpu backend (try vulkan, metal, dx12 or gl)"),
                ));
            }
            Ok(backends)
        }
        Err(_) => Ok(wgpu::Backends::PRIMARY),
    }
}

fn preference(kind: wgpu::DeviceType) -> u8 {
    match kind {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// One instance per set of backends for the life of the process: creating
/// one is costly, and tearing a Vulkan instance down while a driver's
/// background threads still run is a crash risk no runtime needs to take.
fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
    descriptor.backends = backends;
    descriptor.flags = wgpu::InstanceFlags::empty().with_env();
    wgpu::Instance::new(descriptor)
}

/// The adapter chosen for these backends and name filter, enumerated once per
/// process. Enumerating adapters while another runtime's device is being
/// destroyed deadlocked inside NVIDIA's Vulkan driver (seen on an H200 with
/// tests opening and closing runtimes in parallel); after the first open
/// nothing enumerates again.
fn adapter(backends: wgpu::Backends, name_filter: &Option<String>) -> Option<wgpu::Adapter> {
    type Chosen = (wgpu::Backends, Option<String>, wgpu::Instance, Option<wgpu::Adapter>);
    static CHOSEN: Mutex<Vec<Chosen>> = Mutex::new(Vec::new());
    let mut chosen = lock(&CHOSEN);
    if let Some((_, _, _, adapter)) = chosen.iter().find(|(b, f, _, _)| *b == backends && f == name_filter) {
        return adapter.clone();
    }
    let instance = instance(backends);
    let mut adapters: Vec<wgpu::Adapter> = ready(instance.enumerate_adapters(backends))
        .unwrap_or_default()
        .into_iter()
        .filter(|adapter| {
            name_filter.as_ref().is_none_or(|filter| adapter.get_info().name.to_ascii_lowercase().contains(filter))
        })
        .collect();
    adapters.sort_by_key(|adapter| preference(adapter.get_info().device_type));
    let best = adapters.into_iter().next();
    chosen.push((backends, name_filter.clone(), instance, best.clone()));
    best
}

/// Opens the preferred adapter's device with the adapter's full limits.
pub(crate) fn open() -> Result<Opened> {
    let backends = wanted_backends()?;
    let tried = backend_names(backends);
    let name_filter = std::env::var(ADAPTER_VAR).ok().map(|name| name.to_ascii_lowercase());
    let Some(adapter) = adapter(backends, &name_filter) else {
        let filter = name_filter.map(|name| format!(" named like {name:?}")).unwrap_or_default();
        return Err(Error::unavailable(BACKEND, format!("no adapter{filter} on the backends tried: {tried}")));
    };
    let info = adapter.get_info();
    let limits = adapter.limits();
    let request = adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("weir"),
        required_features: wgpu::Features::empty(),
        required_limits: limits.clone(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    });
    let (device, queue) = ready(request)
        .ok_or_else(|| Error::unavailable(BACKEND, "the device request did not complete"))?
        .map_err(|e| Error::unavailable(BACKEND, format!("cannot open {} ({:?}): {e}", info.name, info.backend)))?;
    Ok(Opened { device, queue, adapter: info, limits })
}
