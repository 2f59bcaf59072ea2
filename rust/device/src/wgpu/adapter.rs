//! Choosing the adapter and opening the device ([`WgpuDevice`]: what every
//! op needs to record and submit work).
//!
//! A runtime's [`AdapterChoice`] (its builder's `wgpu_backends` and
//! `adapter_named`) picks the wgpu backends to try, by default the primary
//! ones (Vulkan, Metal, DX12), never GL, so a machine without Vulkan does not
//! silently run on a GL emulation, and may keep only adapters whose name
//! contains a text. Among the rest a discrete GPU wins, then an integrated
//! one, then virtual, then software: that order numbers the adapters for the
//! builder's `device` and the listing (`weir_core::devices`, which takes the
//! default choice).

use std::sync::{Arc, Mutex, Weak};

use super::bind_groups::BindGroups;
use super::builtin::{Builtins, Shape};
use super::pipelines::PipelineCache;
use super::scope::{ready, BACKEND};
use super::slabs::Slabs;
use crate::counters::Counters;
use crate::error::{Error, Result};
use crate::info::{AdapterChoice, BackendKind, DeviceInfo, LaunchLimits};
use crate::lock::lock;

/// An opened device with what was learnt choosing it.
#[derive(Clone)]
pub struct Opened {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    /// What the listing says of the adapter, so `Runtime::info` says the same.
    pub info: DeviceInfo,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    /// What went wrong on the device outside any op, told to its runtimes.
    pub faults: Arc<DeviceFaults>,
}

/// What goes wrong on a device outside any op, for the runtimes on it: its
/// loss, for every runtime on it from then on (and a runtime opened later
/// gets a new device); an error no scope caught, for the runtimes open when
/// it came. Each runtime has its own slot: one device-wide slot made a single
/// invalid call through a raw device kept from an external op fail every op
/// of every runtime on the device for the rest of the process.
#[derive(Default)]
pub struct DeviceFaults {
    lost: Mutex<Option<Error>>,
    runtimes: Mutex<Vec<Weak<Mutex<Option<Error>>>>>,
}

impl DeviceFaults {
    /// A slot for one runtime on the device: the first fault from now on.
    pub fn slot(&self) -> Arc<Mutex<Option<Error>>> {
        // Held while the loss is read, so a loss reported meanwhile reaches the new slot.
        let mut runtimes = lock(&self.runtimes);
        runtimes.retain(|slot| slot.strong_count() > 0);
        let slot = Arc::new(Mutex::new(lock(&self.lost).clone()));
        runtimes.push(Arc::downgrade(&slot));
        slot
    }

    fn report(&self, error: Error) {
        if error.is_device_lost() {
            lock(&self.lost).get_or_insert_with(|| error.clone());
        }
        for slot in lock(&self.runtimes).iter().filter_map(Weak::upgrade) {
            lock(&slot).get_or_insert_with(|| error.clone());
        }
    }

    fn is_lost(&self) -> bool {
        lock(&self.lost).is_some()
    }
}

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
    /// The device's faults outside any op, as this runtime learns them (see [`DeviceFaults`]).
    pub device_error: Arc<Mutex<Option<Error>>>,
}

/// An adapter's kind: its rank among adapters (the lowest is tried first)
/// and its name in words.
fn kind(device_type: wgpu::DeviceType) -> (u8, &'static str) {
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
fn describe(adapter: &wgpu::AdapterInfo, limits: &wgpu::Limits, index: usize) -> DeviceInfo {
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
    /// Opens adapter `index` of those `choice` keeps (see the module doc): the
    /// device every runtime on it shares, or with `own` one of its own.
    pub fn open(choice: &AdapterChoice, index: usize, own: bool) -> Result<WgpuDevice> {
        let opened = open(choice, index, own)?;
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
            device_error: opened.faults.slot(),
        })
    }
}

/// The backends of `backends` by name; the browser's, which no native build has, left out.
fn backend_names(backends: wgpu::Backends) -> String {
    let native = wgpu::Backend::ALL.into_iter().filter(|&backend| backend != wgpu::Backend::BrowserWebGpu);
    let names: Vec<&str> =
        native.filter(|&backend| backends.contains(backend.into())).map(wgpu::Backend::to_str).collect();
    names.join(", ")
}

/// The backends `choice` tries: those it names, else the primary ones.
fn wanted_backends(choice: &AdapterChoice) -> Result<wgpu::Backends> {
    let Some(list) = &choice.backends else { return Ok(wgpu::Backends::PRIMARY) };
    let backends = wgpu::Backends::from_comma_list(list);
    if backends.is_empty() {
        let named = format!("wgpu backends {list:?} name none (try vulkan, metal, dx12 or gl)");
        return Err(Error::unavailable(BACKEND, named));
    }
    Ok(backends)
}

/// The adapters the name filter keeps of those on `backends`, best first:
/// an adapter's place here is its device index.
fn candidates(instance: &wgpu::Instance, backends: wgpu::Backends, name_filter: &Option<String>) -> Vec<wgpu::Adapter> {
    let mut adapters: Vec<wgpu::Adapter> = ready(instance.enumerate_adapters(backends))
        .unwrap_or_default()
        .into_iter()
        .filter(|adapter| {
            name_filter.as_ref().is_none_or(|filter| adapter.get_info().name.to_ascii_lowercase().contains(filter))
        })
        .collect();
    // Stable: adapters of one kind keep the driver's order, run after run.
    adapters.sort_by_key(|adapter| kind(adapter.get_info().device_type).0);
    adapters
}

type OpenedEntry = (wgpu::Backends, Option<String>, usize, Result<Opened>);

/// The process's wgpu instances and opened devices.
///
/// One instance per set of backends for the life of the process: creating
/// one is costly, and tearing a Vulkan instance down while a driver's
/// background threads still run is a crash risk no runtime needs to take.
/// The device of each adapter is opened once per process and shared by every
/// runtime on it, as a CUDA primary context is. NVIDIA's Vulkan driver
/// deadlocked when one thread created or enumerated devices while another
/// destroyed one (seen on a data-centre GPU with tests opening and closing
/// runtimes in parallel); a device that lives as long as the process is never
/// destroyed concurrently with anything, and listing and opening take this
/// one lock, so enumerations never overlap device creation either.
///
/// A runtime that asks for a device of its own gets a new one, kept here
/// for the life of the process like the shared ones, for the same reason.
struct Adapters {
    instances: Vec<(wgpu::Backends, wgpu::Instance)>,
    opened: Vec<OpenedEntry>,
    own: Vec<wgpu::Device>,
}

static ADAPTERS: Mutex<Adapters> = Mutex::new(Adapters { instances: Vec::new(), opened: Vec::new(), own: Vec::new() });

impl Adapters {
    fn instance(&mut self, backends: wgpu::Backends) -> wgpu::Instance {
        if let Some((_, instance)) = self.instances.iter().find(|(b, _)| *b == backends) {
            return instance.clone();
        }
        let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
        descriptor.backends = backends;
        // No debug or validation layers, and none switched on by wgpu's own
        // environment variables: a runtime is configured by its builder only.
        descriptor.flags = wgpu::InstanceFlags::empty();
        let instance = wgpu::Instance::new(descriptor);
        self.instances.push((backends, instance.clone()));
        instance
    }
}

/// Every adapter the selection rules keep, best first, described as its
/// device would be once opened; none where wgpu finds none (or the
/// environment names no backend: opening says why). Creates no device.
pub fn list() -> Vec<DeviceInfo> {
    let choice = AdapterChoice::default();
    let Ok(backends) = wanted_backends(&choice) else { return Vec::new() };
    let mut adapters = lock(&ADAPTERS);
    let instance = adapters.instance(backends);
    candidates(&instance, backends, &choice.name)
        .iter()
        .enumerate()
        .map(|(index, adapter)| describe(&adapter.get_info(), &adapter.limits(), index))
        .collect()
}

/// The device of adapter `index` (0: the preferred one) of those `choice`
/// keeps, opened once per process (see `Adapters`); with `own`, a new
/// device (and queue) for the caller alone.
pub fn open(choice: &AdapterChoice, index: usize, own: bool) -> Result<Opened> {
    let backends = wanted_backends(choice)?;
    let name_filter = choice.name.clone();
    let mut adapters = lock(&ADAPTERS);
    if own {
        let instance = adapters.instance(backends);
        let opened = open_device(&instance, backends, &name_filter, index)?;
        adapters.own.push(opened.device.clone());
        return Ok(opened);
    }
    let known = adapters.opened.iter().position(|(b, f, i, _)| *b == backends && *f == name_filter && *i == index);
    if let Some(known) = known {
        if let Ok(opened) = &adapters.opened[known].3 {
            // wgpu tells of a loss from a poll: one now, so a device lost since the last is known to be.
            // (Its callbacks are Weir's own; a panic in one must not leave this lock poisoned.)
            let device = &opened.device;
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| device.poll(wgpu::PollType::Poll)));
        }
        match &adapters.opened[known].3 {
            // A lost device serves no runtime again: a new one is opened, and
            // the lost one kept, as every device is, for the process's life.
            Ok(opened) if opened.faults.is_lost() => {
                let lost = adapters.opened.swap_remove(known);
                adapters.own.extend(lost.3.map(|opened| opened.device));
            }
            device => return device.clone(),
        }
    }
    let instance = adapters.instance(backends);
    let device = open_device(&instance, backends, &name_filter, index);
    adapters.opened.push((backends, name_filter, index, device.clone()));
    device
}

fn open_device(
    instance: &wgpu::Instance,
    backends: wgpu::Backends,
    name_filter: &Option<String>,
    index: usize,
) -> Result<Opened> {
    let tried = backend_names(backends);
    let adapters = candidates(instance, backends, name_filter);
    let count = adapters.len();
    let Some(adapter) = adapters.into_iter().nth(index) else {
        let filter = name_filter.as_ref().map(|name| format!(" named like {name:?}")).unwrap_or_default();
        if count == 0 {
            return Err(Error::unavailable(BACKEND, format!("no adapter{filter} on the backends tried: {tried}")));
        }
        return Err(Error::unavailable(
            BACKEND,
            format!("no adapter {index}: the backends tried ({tried}) have {count} adapter(s){filter}"),
        ));
    };
    let info = adapter.get_info();
    let limits = adapter.limits();
    // Immediate data carries kernel parameters without a buffer per op;
    // timestamp queries time ranges of a stream (`Stream::timestamp`).
    let features = adapter.features() & (wgpu::Features::IMMEDIATES | wgpu::Features::TIMESTAMP_QUERY);
    let request = adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("weir"),
        required_features: features,
        required_limits: limits.clone(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    });
    let (device, queue) = ready(request)
        .ok_or_else(|| Error::unavailable(BACKEND, "the device request did not complete"))?
        .map_err(|e| Error::unavailable(BACKEND, format!("cannot open {} ({:?}): {e}", info.name, info.backend)))?;
    let faults = Arc::new(DeviceFaults::default());
    let errors = faults.clone();
    device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
        errors.report(Error::backend(BACKEND, format!("device error outside any op: {error}")));
    }));
    let lost = faults.clone();
    device.set_device_lost_callback(move |reason, message| {
        let message = format!("{reason:?}: {message}");
        lost.report(Error::DeviceLost { backend: BACKEND, message, status: None });
    });
    let described = describe(&info, &limits, index);
    Ok(Opened { device, queue, info: described, limits, features, faults })
}
