//! Plain data crossing the FFI: backends, access modes, kernel arguments,
//! launch grids, device info and diagnostics.

use std::sync::Arc;

use crate::buffer::Buffer;
use crate::error::{Result, WeirError};

/// Which backend a runtime opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, uniffi::Enum)]
pub enum Backend {
    /// The best available: CUDA, then HIP, then a hardware wgpu adapter, then the CPU.
    Auto,
    /// The CPU backend: always available; its streams run on a bounded pool of worker threads.
    Cpu,
    /// wgpu (Vulkan, Metal, DX12), when compiled in.
    Wgpu,
    /// NVIDIA CUDA, when compiled in and a driver is present.
    Cuda,
    /// AMD HIP, when compiled in and a device is present.
    Hip,
}

impl From<Backend> for weir_core::BackendKind {
    fn from(backend: Backend) -> Self {
        use weir_core::BackendKind as K;
        match backend {
            Backend::Auto => K::Auto,
            Backend::Cpu => K::Cpu,
            Backend::Wgpu => K::Wgpu,
            Backend::Cuda => K::Cuda,
            Backend::Hip => K::Hip,
        }
    }
}

impl From<weir_core::BackendKind> for Backend {
    fn from(kind: weir_core::BackendKind) -> Self {
        use weir_core::BackendKind as K;
        match kind {
            K::Auto => Backend::Auto,
            K::Cpu => Backend::Cpu,
            K::Wgpu => Backend::Wgpu,
            K::Cuda => Backend::Cuda,
            K::Hip => Backend::Hip,
        }
    }
}

/// Which backend an error comes from: the core's `BackendKind`, as errors
/// carry it, declared here for UniFFI (checked against it by the compiler).
///
/// Exposed beside [`Backend`], not as it, because Kotlin nests the error
/// variants in `WeirException`, where `Backend` names the variant
/// `WeirException.Backend` and would hide the enum.
pub type BackendKind = weir_core::BackendKind;

#[uniffi::remote(Enum)]
pub enum BackendKind {
    /// No one backend: an internal error (a bug in Weir to report).
    Auto,
    /// The CPU backend.
    Cpu,
    /// wgpu (Vulkan, Metal, DX12).
    Wgpu,
    /// NVIDIA CUDA.
    Cuda,
    /// AMD HIP.
    Hip,
}

/// What a buffer holds. Its sizes, offsets and counts are in these elements;
/// a `Bytes` buffer counts single bytes and takes any data.
///
/// The core's own type, declared here for UniFFI (checked against it by the compiler).
pub type ElementType = weir_core::ElementType;

#[uniffi::remote(Enum)]
pub enum ElementType {
    /// Raw bytes, with no claim about what they hold.
    Bytes,
    /// 32-bit floats.
    F32,
    /// Signed 32-bit integers.
    I32,
    /// Unsigned 32-bit integers.
    U32,
}

/// How a reducing collective (`DeviceGroup.all_reduce`, `reduce_scatter`)
/// combines the members' elements, element by element; integers wrap.
pub type ReduceOp = weir_core::ReduceOp;

#[uniffi::remote(Enum)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

/// How an op touches a buffer. The scheduler orders ops from this and nothing else.
pub type Access = weir_core::Access;

#[uniffi::remote(Enum)]
pub enum Access {
    /// The op only reads the buffer.
    Read,
    /// The op overwrites the buffer without reading it.
    Write,
    /// The op reads and writes the buffer.
    ReadWrite,
}

/// One argument of a kernel launch: a buffer with its access mode, or a
/// scalar of the width the kernel's parameter has (CUDA and HIP check it
/// against the kernel's declared parameter sizes; WGSL and the built-ins take
/// 32-bit scalars).
#[derive(Debug, Clone, uniffi::Enum)]
pub enum Arg {
    /// A buffer, declared as read, written or both.
    Buffer { buffer: Arc<Buffer>, access: Access },
    /// An unsigned 32-bit scalar.
    U32 { value: u32 },
    /// A signed 32-bit scalar.
    I32 { value: i32 },
    /// A 32-bit float scalar.
    F32 { value: f32 },
    /// An unsigned 64-bit scalar (`size_t`, `unsigned long long`, a pointer passed as an integer).
    U64 { value: u64 },
    /// A signed 64-bit scalar (`long long`, `int64_t`).
    I64 { value: i64 },
    /// A 64-bit float scalar (`double`).
    F64 { value: f64 },
    /// A struct (or any plain value) passed by value, as its bytes in the
    /// device's layout: the kernel's parameter must be exactly this size.
    Bytes { value: Vec<u8> },
}

impl Arg {
    /// The core argument, borrowing the buffer handle.
    pub(crate) fn to_core(&self) -> weir_core::Arg<'_> {
        match self {
            Arg::Buffer { buffer, access } => weir_core::Arg::Buffer(buffer.core(), *access),
            Arg::U32 { value } => weir_core::Arg::u32(*value),
            Arg::I32 { value } => weir_core::Arg::i32(*value),
            Arg::F32 { value } => weir_core::Arg::f32(*value),
            Arg::U64 { value } => weir_core::Arg::u64(*value),
            Arg::I64 { value } => weir_core::Arg::i64(*value),
            Arg::F64 { value } => weir_core::Arg::f64(*value),
            Arg::Bytes { value } => weir_core::Arg::bytes(value),
        }
    }
}

/// Launch shape of a custom kernel: work groups, the threads of one group
/// (the block, on every backend: WGSL takes it through `override` constants in
/// `@workgroup_size`), dynamic shared memory for CUDA/HIP. Built-in ops
/// ignore it. Every field defaults to a single group of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct Grid {
    /// Work groups along x.
    #[uniffi(default = 1)]
    pub groups_x: u32,
    /// Work groups along y.
    #[uniffi(default = 1)]
    pub groups_y: u32,
    /// Work groups along z.
    #[uniffi(default = 1)]
    pub groups_z: u32,
    /// Threads per group along x.
    #[uniffi(default = 1)]
    pub block_x: u32,
    /// Threads per group along y.
    #[uniffi(default = 1)]
    pub block_y: u32,
    /// Threads per group along z.
    #[uniffi(default = 1)]
    pub block_z: u32,
    /// Dynamic shared memory in bytes (CUDA/HIP).
    #[uniffi(default = 0)]
    pub shared_bytes: u32,
}

impl Default for Grid {
    /// One group of one thread, no shared memory (what built-in ops are given).
    fn default() -> Self {
        Grid { groups_x: 1, groups_y: 1, groups_z: 1, block_x: 1, block_y: 1, block_z: 1, shared_bytes: 0 }
    }
}

impl From<weir_core::Grid> for Grid {
    fn from(grid: weir_core::Grid) -> Self {
        let ([groups_x, groups_y, groups_z], [block_x, block_y, block_z]) = (grid.groups, grid.block);
        Grid { groups_x, groups_y, groups_z, block_x, block_y, block_z, shared_bytes: grid.shared_bytes }
    }
}

impl Grid {
    pub(crate) fn to_core(self) -> Result<weir_core::Grid> {
        let groups = [self.groups_x, self.groups_y, self.groups_z];
        let block = [self.block_x, self.block_y, self.block_z];
        if groups.contains(&0) || block.contains(&0) {
            return Err(WeirError::invalid(format!("grid {groups:?} x {block:?} has an empty dimension")));
        }
        Ok(weir_core::Grid::new(groups, block).with_shared_bytes(self.shared_bytes))
    }
}

/// Enough groups of `block` threads along x to cover `items` items (`block` 0 counts as 1).
#[uniffi::export]
pub fn grid_linear(items: u32, block: u32) -> Grid {
    weir_core::Grid::linear(items, block).into()
}

/// A device, as `devices()` lists it and `WeirRuntime.info()` reports it
/// once opened: the same record for the same device.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct DeviceInfo {
    /// The backend that drives it.
    pub backend: Backend,
    /// Its index among its backend's devices: what `WeirRuntime.open_device` takes.
    pub index: u32,
    /// The device's name.
    pub name: String,
    /// Device memory in bytes, where the backend knows it (the host's memory for the CPU).
    pub memory_bytes: Option<u64>,
    /// Largest buffer the device accepts, in bytes.
    pub max_buffer_bytes: u64,
    /// True when the device is emulated on the host (lavapipe, the CPU backend).
    pub software: bool,
    /// The largest launch a custom kernel's `Grid` may ask for.
    pub limits: LaunchLimits,
}

/// The largest launch a device takes, in the terms of [`Grid`]: groups of
/// blocks of threads. The CPU backend hands the grid to its kernel as given
/// (every bound is `u32::MAX`) and has no shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct LaunchLimits {
    /// Most threads of one block (a wgpu workgroup) along x.
    pub max_block_x: u32,
    /// Most threads of one block along y.
    pub max_block_y: u32,
    /// Most threads of one block along z.
    pub max_block_z: u32,
    /// Most threads of one block, all dimensions together.
    pub max_threads_per_block: u32,
    /// Most groups of one launch along x.
    pub max_groups_x: u32,
    /// Most groups of one launch along y.
    pub max_groups_y: u32,
    /// Most groups of one launch along z.
    pub max_groups_z: u32,
    /// Most shared (workgroup) memory one block may use, in bytes.
    pub max_shared_bytes: u32,
}

impl From<weir_core::DeviceInfo> for DeviceInfo {
    fn from(info: weir_core::DeviceInfo) -> Self {
        let limits = info.limits;
        DeviceInfo {
            backend: info.backend.into(),
            index: u32::try_from(info.index).unwrap_or(u32::MAX),
            name: info.name,
            memory_bytes: info.memory_bytes,
            max_buffer_bytes: info.max_buffer_bytes,
            software: info.software,
            limits: LaunchLimits {
                max_block_x: limits.max_block[0],
                max_block_y: limits.max_block[1],
                max_block_z: limits.max_block[2],
                max_threads_per_block: limits.max_threads_per_block,
                max_groups_x: limits.max_groups[0],
                max_groups_y: limits.max_groups[1],
                max_groups_z: limits.max_groups[2],
                max_shared_bytes: limits.max_shared_bytes,
            },
        }
    }
}

/// Live objects and scheduler counts of one runtime, for leak tests and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct Diagnostics {
    /// Fence handles alive.
    pub live_fences: u64,
    /// Futures registered on, and threads blocked in, a pending completion.
    pub live_waiters: u64,
    /// Buffers with a live handle.
    pub live_buffers: u64,
    /// Released buffers whose memory waits for their last users.
    pub retiring_buffers: u64,
    /// Cross-stream waits the scheduler inserted.
    pub inserted_waits: u64,
    /// Ops admitted.
    pub admitted_ops: u64,
    /// Backend events (CUevent, hipEvent, …) alive, beside the one a GPU
    /// stream keeps, as part of itself, for other streams to wait on.
    pub live_events: u64,
    /// Device allocations alive.
    pub live_allocations: u64,
    /// Host-to-device copies made so far.
    pub host_to_device_copies: u64,
    /// Device-to-host copies made so far.
    pub device_to_host_copies: u64,
    /// Conflicting overlapping accesses seen by the CPU backend's race detector.
    pub race_violations: u64,
    /// Ops in the runtime's queue (`RuntimeOptions.queue_limit_ops` bounds
    /// them): admitted and not yet run (CPU) or handed to the driver.
    pub ops_in_queue: u64,
    /// Host bytes those ops hold (uploads' data).
    pub host_bytes_in_queue: u64,
    /// The most ops in the queue at once since the runtime opened.
    pub peak_ops_in_queue: u64,
}

impl From<weir_core::Diagnostics> for Diagnostics {
    fn from(d: weir_core::Diagnostics) -> Self {
        Diagnostics {
            live_fences: d.live_fences,
            live_waiters: d.live_waiters,
            live_buffers: d.live_buffers,
            retiring_buffers: d.retiring_buffers,
            inserted_waits: d.inserted_waits,
            admitted_ops: d.admitted_ops,
            live_events: d.backend.live_events,
            live_allocations: d.backend.live_allocations,
            host_to_device_copies: d.backend.host_to_device_copies,
            device_to_host_copies: d.backend.device_to_host_copies,
            race_violations: d.backend.race_violations,
            ops_in_queue: d.ops_in_queue,
            host_bytes_in_queue: d.host_bytes_in_queue,
            peak_ops_in_queue: d.peak_ops_in_queue,
        }
    }
}

/// How a runtime is opened (`WeirRuntime.open_with`): the core builder's
/// knobs, each with the default a plain `open` uses.
#[derive(Debug, Clone, uniffi::Record)]
pub struct RuntimeOptions {
    /// The device's place in `devices()` for its backend.
    #[uniffi(default = 0)]
    pub device: u32,
    /// The most ops the runtime holds queued on the host, admitted and not
    /// yet run or handed to the driver. At the limit, a plain admission
    /// blocks its thread until there is room; one through the stream's
    /// non-waiting handle (`withoutWaiting()`) fails with `QueueFull`, and
    /// the stream's `room()` suspends until there is room.
    #[uniffi(default = 65536)]
    pub queue_limit_ops: u64,
    /// The most host bytes those ops hold (uploads' data).
    #[uniffi(default = 268435456)]
    pub queue_limit_host_bytes: u64,
    /// How long a thread that waits for the device spins before it blocks,
    /// in microseconds (none: 200).
    #[uniffi(default = None)]
    pub spin_micros: Option<u64>,
    /// On wgpu, a device (and queue) of this runtime's own instead of the
    /// adapter's shared one, so that other runtimes' long kernels do not
    /// delay its work. Other backends ignore it.
    #[uniffi(default = false)]
    pub own_device: bool,
    /// Where a CUDA or HIP runtime completes its fences and reads (none: the
    /// driver's default, a waiter thread on CUDA, a callback on HIP). Other
    /// backends ignore it.
    #[uniffi(default = None)]
    pub wake: Option<GpuWake>,
    /// On wgpu, the graphics APIs whose adapters are tried, a comma list
    /// (`vulkan`, `metal`, `dx12`, `gl`; none: the primary ones, never GL).
    #[uniffi(default = None)]
    pub wgpu_backends: Option<String>,
    /// On wgpu, only adapters whose name contains this (in any case);
    /// `device` then counts among those.
    #[uniffi(default = None)]
    pub adapter_named: Option<String>,
}

/// Where a CUDA or HIP runtime completes fences and reads.
pub type GpuWake = weir_core::GpuWake;

#[uniffi::remote(Enum)]
pub enum GpuWake {
    /// On the driver's host-callback thread, enqueued on the stream.
    Callback,
    /// On the device's waiter threads, one for each stream with completions
    /// pending, which sleep in an event synchronisation.
    Waiter,
}

impl RuntimeOptions {
    /// The core builder these options describe.
    pub(crate) fn builder(&self, backend: Backend) -> crate::error::Result<weir_core::RuntimeBuilder> {
        let mut builder = weir_core::Runtime::builder(backend.into())
            .device(usize::try_from(self.device)?)
            .queue_limit(weir_core::QueueLimit { ops: self.queue_limit_ops, host_bytes: self.queue_limit_host_bytes })
            .own_device(self.own_device);
        if let Some(micros) = self.spin_micros {
            builder = builder.spin(std::time::Duration::from_micros(micros));
        }
        if let Some(wake) = self.wake {
            builder = builder.wake(wake);
        }
        if let Some(list) = &self.wgpu_backends {
            builder = builder.wgpu_backends(list.clone());
        }
        if let Some(name) = &self.adapter_named {
            builder = builder.adapter_named(name.clone());
        }
        Ok(builder)
    }
}
