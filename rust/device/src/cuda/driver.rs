//! CUDA driver calls: the only module of the CUDA backend that calls the driver.
//!
//! Calls go through cudarc's result layer (`cudarc::driver::result`), whose
//! [`DriverError`] becomes Weir's error naming the call ([`Called`]). The
//! few it has no wrapper for (a 32-bit memset, a stream query, a host-wait
//! event's two flags, a module's kernel list, eager loading and parameter
//! sizes) are raw `sys` calls checked the same way, as are the calls written
//! once with HIP's (`handle_calls!`), which differ from it only by name.

use std::borrow::Cow;
use std::ffi::{c_void, CStr};
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cudarc::driver::result::{self, stream::StreamKind, DriverError};
use cudarc::driver::sys::{
    self, CUdevice_attribute, CUevent_flags, CUfunction_attribute, CUresult, CUstreamCaptureMode,
};

use super::{nccl, nvrtc};
use crate::driver::{
    callback_run, handle_calls, milliseconds, status_error, Driver, EventUse, GraphExec, Handle, Launch, Loss, RawPart,
};
use crate::enqueue::EnqueueError;
use crate::error::{Error, Result};
use crate::image::check_cuda_image;
use crate::info::{BackendKind, DeviceInfo, LaunchLimits};
use crate::lock::lock;
use crate::raw::RawStream;
use crate::rtc::Compiled;

const NAME: BackendKind = BackendKind::Cuda;

/// Every driver symbol this backend calls, checked before the first call:
/// cudarc panics on a missing one.
const SYMBOLS: [&str; 43] = [
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuStreamAddCallback",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventQuery",
    "cuEventDestroy_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemsetD8Async",
    "cuMemsetD32Async",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuLaunchKernel",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags",
    "cuGraphDestroy",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
];

/// Times two events; looked up at open rather than required, so an older
/// driver still runs everything but timestamps.
const ELAPSED_TIME: &str = "cuEventElapsedTime_v2";

/// Dynamic shared memory beyond this needs an explicit opt-in per function.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// A call of cudarc's result layer as Weir's result, naming the call.
trait Called<T> {
    fn called(self, call: &str) -> Result<T>;
    /// As [`Called::called`], for a call made while opening: its failure
    /// says CUDA cannot run here.
    fn opening(self, call: &str) -> Result<T>;
}

impl<T> Called<T> for std::result::Result<T, DriverError> {
    fn called(self, call: &str) -> Result<T> {
        self.map_err(|DriverError(code)| failure(call, code))
    }

    fn opening(self, call: &str) -> Result<T> {
        self.called(call).map_err(|error| Error::unavailable(NAME, error.to_string()))
    }
}

/// A raw call's status as Weir's result, for the calls cudarc's result
/// layer has no wrapper for (and those written once with HIP's, `handle_calls!`).
fn check(call: &str, status: CUresult) -> Result<()> {
    status.result().called(call)
}

/// A query's answer: done, not yet (`CUDA_ERROR_NOT_READY`), or a failure.
fn done(call: &str, queried: std::result::Result<(), DriverError>) -> Result<bool> {
    match queried {
        Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)) => Ok(false),
        other => other.called(call).map(|()| true),
    }
}

/// A failed status as an error, without a driver call (callbacks may not
/// make one): the name is cudarc's, the code CUDA's.
fn failure(call: &str, error: CUresult) -> Error {
    status_error(NAME, call, format!("{error:?}"), error as i32, poisons_context(error))
}

/// Raises `function`'s ceiling of dynamic shared memory to `bytes`; false
/// when it was that high already.
///
/// # Safety
/// `function` is a live function of this driver's context, current here.
unsafe fn raise_dynamic_shared(function: Handle<sys::CUfunction>, bytes: u32) -> Result<bool> {
    // The function is every runtime's on the context, each on its own
    // issuing thread: the ceiling only rises (under one lock), so a launch
    // asking less never lowers it under one asking more.
    static RAISING: Mutex<()> = Mutex::new(());
    let _raising = lock(&RAISING);
    let dynamic_shared = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    let wanted = i32::try_from(bytes).map_err(|_| Error::invalid(format!("{bytes} bytes of shared memory")))?;
    // SAFETY: a live function (the caller's contract).
    unsafe {
        let set = result::function::get_function_attribute(function.0, dynamic_shared).called("cuFuncGetAttribute")?;
        if set >= wanted {
            return Ok(false);
        }
        result::function::set_function_attribute(function.0, dynamic_shared, wanted).called("cuFuncSetAttribute")?;
    }
    Ok(true)
}

/// The faults after which CUDA fails every later call of the context with
/// the same status ("sticky" errors): the device is lost for every runtime
/// on it, until the context is reset. (CUDA 12's `CUDA_ERROR_CONTAINED` and
/// `CUDA_ERROR_TENSOR_MEMORY_LEAK` are sticky too, but cudarc 0.19 has no
/// name for them.)
const STICKY: [CUresult; 14] = {
    use CUresult::*;
    [
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_LAUNCH_TIMEOUT,
        CUDA_ERROR_ILLEGAL_INSTRUCTION,
        CUDA_ERROR_MISALIGNED_ADDRESS,
        CUDA_ERROR_INVALID_ADDRESS_SPACE,
        CUDA_ERROR_INVALID_PC,
        CUDA_ERROR_HARDWARE_STACK_ERROR,
        CUDA_ERROR_ASSERT,
        CUDA_ERROR_ECC_UNCORRECTABLE,
        CUDA_ERROR_NVLINK_UNCORRECTABLE,
        CUDA_ERROR_CONTEXT_IS_DESTROYED,
        CUDA_ERROR_DEVICE_UNAVAILABLE,
        CUDA_ERROR_EXTERNAL_DEVICE,
    ]
};

fn poisons_context(error: CUresult) -> bool {
    STICKY.contains(&error)
}

/// The CUDA driver, bound to one device's primary context.
pub struct Cuda {
    device: sys::CUdevice,
    context: Handle<sys::CUcontext>,
    /// Allocations and frees only: allocating here and synchronising it makes
    /// new memory usable on every stream at once.
    pool_stream: Handle<sys::CUstream>,
    arch: String,
    has: OptionalCalls,
    info: DeviceInfo,
    loss: Arc<Loss>,
}

/// The calls a newer driver has, found at open.
struct OptionalCalls {
    /// `cuFuncLoad` and `cuFuncGetParamInfo` (CUDA 12.4 and later).
    eager_load: bool,
    /// `cuEventElapsedTime_v2` (CUDA 12.8 and later).
    elapsed_time: bool,
    /// `cuModuleGetFunctionCount`, `cuModuleEnumerateFunctions` and
    /// `cuFuncGetName`, which list a module's kernels (CUDA 12.4 and later).
    lists_kernels: bool,
}

/// What [`loaded`] learnt of the driver.
struct Loaded {
    has: OptionalCalls,
    /// Devices the driver sees.
    count: i32,
}

/// Checks that the driver library, every symbol this backend calls and
/// NVRTC are there (cudarc panics on a missing one), then initialises the
/// driver and counts its devices; or says why CUDA cannot run here.
fn loaded() -> Result<Loaded> {
    // SAFETY: only tries to load the library; no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::unavailable(NAME, "the CUDA driver library (libcuda.so) was not found"));
    }
    // SAFETY: the library is present (checked above), so `culib` returns it.
    let library = unsafe { sys::culib() };
    // SAFETY: looks a symbol up without calling it.
    let has = |name: &str| unsafe { library.get::<*const c_void>(name) }.is_ok();
    if let Some(missing) = SYMBOLS.iter().find(|name| !has(name)) {
        return Err(Error::unavailable(NAME, format!("the CUDA driver lacks {missing} (driver too old)")));
    }
    let all = |names: &[&str]| names.iter().all(|name| has(name));
    let optional = OptionalCalls {
        eager_load: all(&["cuFuncLoad", "cuFuncGetParamInfo"]),
        elapsed_time: has(ELAPSED_TIME),
        lists_kernels: all(&["cuModuleGetFunctionCount", "cuModuleEnumerateFunctions", "cuFuncGetName"]),
    };
    nvrtc::check_present()?;
    // Every symbol cudarc calls below was found above.
    match result::init() {
        Err(DriverError(CUresult::CUDA_ERROR_NO_DEVICE)) => return Err(Error::unavailable(NAME, "no CUDA device")),
        other => other.opening("cuInit")?,
    }
    match result::device::get_count().opening("cuDeviceGetCount")? {
        count if count < 1 => Err(Error::unavailable(NAME, "no CUDA device")),
        count => Ok(Loaded { has: optional, count }),
    }
}

/// Device `ordinal` as the listing shows it and a runtime on it reports it,
/// with its `CUdevice` and instruction set; `Unavailable` for a device this
/// backend cannot drive.
///
/// # Safety
/// [`loaded`] succeeded, and `ordinal` is below its count.
unsafe fn describe(ordinal: i32) -> Result<(sys::CUdevice, DeviceInfo, String)> {
    // SAFETY: the driver is initialised (contract), and `device` is the
    // driver's own for `ordinal`.
    unsafe {
        let device = result::device::get(ordinal).opening("cuDeviceGet")?;
        let attribute =
            |of: CUdevice_attribute| result::device::get_attribute(device, of).opening("cuDeviceGetAttribute");
        let unsigned = |of: CUdevice_attribute| attribute(of).map(|value| u32::try_from(value).unwrap_or(0));
        if attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? == 0 {
            return Err(Error::unavailable(NAME, "the device has no stream-ordered memory pools"));
        }
        let major = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let name = result::device::get_name(device).opening("cuDeviceGetName")?;
        let memory = result::device::total_mem(device).opening("cuDeviceTotalMem")?;
        use CUdevice_attribute::*;
        let limits = LaunchLimits {
            max_block: [
                unsigned(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                unsigned(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                unsigned(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_threads_per_block: unsigned(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_groups: [
                unsigned(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                unsigned(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                unsigned(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            // A launch past the default 48 KiB opts in (see `launch`): the opt-in bound is the one that holds.
            max_shared_bytes: unsigned(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        };
        let info = DeviceInfo {
            backend: BackendKind::Cuda,
            index: ordinal as usize,
            name,
            memory_bytes: Some(memory as u64),
            software: false,
            max_buffer_bytes: memory as u64,
            limits,
        };
        Ok((device, info, format!("sm_{major}{minor}")))
    }
}

/// Every device a runtime can open, in ordinal order; none where CUDA
/// cannot run (no library, driver or NVRTC: opening says why). A device the
/// backend cannot drive is left out, as is one whose attributes the driver
/// does not give.
pub fn list() -> Vec<DeviceInfo> {
    let listed = std::panic::catch_unwind(|| {
        let Ok(loaded) = loaded() else { return Vec::new() };
        // SAFETY: `loaded` succeeded and every ordinal is below its count.
        (0..loaded.count).filter_map(|ordinal| unsafe { describe(ordinal) }.ok()).map(|(_, info, _)| info).collect()
    });
    // The checks in `loaded` make cudarc's loader panic-free; this catches anything they missed.
    listed.unwrap_or_default()
}

impl Cuda {
    /// Opens device `ordinal`, or says why it cannot.
    pub fn open(ordinal: usize) -> Result<Cuda> {
        let Loaded { has, count } = loaded()?;
        let ordinal = match i32::try_from(ordinal) {
            Ok(ordinal) if ordinal < count => ordinal,
            _ => return Err(Error::unavailable(NAME, format!("no CUDA device {ordinal}: the machine has {count}"))),
        };
        // SAFETY: `loaded` succeeded and the ordinal is below its count.
        let (device, info, arch) = unsafe { describe(ordinal)? };
        // SAFETY: every symbol used below was found by `loaded`; `device` is the
        // driver's; the pool stream is queried once made, in the bound context.
        unsafe {
            let context = match result::primary_ctx::retain(device) {
                // An earlier runtime's fault poisoned the process's context:
                // the driver refuses CUDA to this process from then on.
                Err(DriverError(fault)) if poisons_context(fault) => {
                    return Err(failure("cuDevicePrimaryCtxRetain", fault))
                }
                other => other.opening("cuDevicePrimaryCtxRetain")?,
            };
            let mut driver = Cuda {
                device,
                context: Handle(context),
                pool_stream: Handle(null_mut()),
                arch,
                has,
                info,
                loss: Arc::default(),
            };
            // From here `driver`'s Drop releases what was made.
            driver.bind()?;
            driver.pool_stream = driver.stream_create()?;
            // Is the context healthy? A poisoned one reports its fault on every
            // call, so a query of the empty pool stream reports it (a lost
            // device) without waiting for anything.
            check("cuStreamQuery", sys::cuStreamQuery(driver.pool_stream.0))?;
            Ok(driver)
        }
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        // SAFETY: the context was retained in `open` and is released once here;
        // the pool stream (if made) has only allocations and frees on it.
        unsafe {
            if self.bind().is_ok() && !self.pool_stream.0.is_null() {
                let _ = result::stream::synchronize(self.pool_stream.0);
                let _ = result::stream::destroy(self.pool_stream.0);
            }
            let _ = result::primary_ctx::release(self.device);
        }
    }
}

/// The stream callback's trampoline as `cuStreamAddCallback` types it. It
/// takes the status as the plain `u32` the driver passes: cudarc's
/// `CUresult` is an enum of the codes CUDA 13.0 knows, and a newer driver's
/// code in it would be undefined behaviour.
const ON_STREAM_CALLBACK: unsafe extern "C" fn(sys::CUstream, CUresult, *mut c_void) =
    // SAFETY: one C ABI: `CUresult` is `#[repr(u32)]`, passed as a `u32`.
    unsafe { std::mem::transmute::<unsafe extern "C" fn(sys::CUstream, u32, *mut c_void), _>(on_stream_callback) };

unsafe extern "C" fn on_stream_callback(_stream: sys::CUstream, status: u32, data: *mut c_void) {
    // No driver call is allowed here: the status is described without one,
    // by name where it is one of the faults a kernel's work can end in.
    const CALL: &str = "a stream callback";
    let mut known = STICKY.into_iter().chain([CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES]);
    let status = match known.find(|known| *known as u32 == status) {
        _ if status == CUresult::CUDA_SUCCESS as u32 => Ok(()),
        Some(known) => Err(failure(CALL, known)),
        None => Err(status_error(NAME, CALL, format!("CUDA error {status}"), status as i32, false)),
    };
    // SAFETY: `data` is the callback `add_callback` leaked for this call, run once.
    unsafe { callback_run(data, status) };
}

impl Driver for Cuda {
    type Stream = Handle<sys::CUstream>;
    type Event = Handle<sys::CUevent>;
    type Module = Handle<sys::CUmodule>;
    type Function = Handle<sys::CUfunction>;

    const KIND: BackendKind = BackendKind::Cuda;

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn arch(&self) -> String {
        self.arch.clone()
    }

    fn bind(&self) -> Result<()> {
        self.loss.check()?;
        // Asking is cheaper than setting, and every enqueue binds.
        if result::ctx::get_current().is_ok_and(|current| current == Some(self.context.0)) {
            return Ok(());
        }
        // SAFETY: the context is retained for the driver's life.
        unsafe { result::ctx::set_current(self.context.0) }.called("cuCtxSetCurrent")
    }

    fn context_key(&self) -> Option<u64> {
        Some(self.context.0 as u64)
    }

    fn loss(&self) -> &Arc<Loss> {
        &self.loss
    }

    fn stream_create(&self) -> Result<Self::Stream> {
        result::stream::create(StreamKind::NonBlocking).map(Handle).called("cuStreamCreate")
    }

    fn event_create(&self, usage: EventUse) -> Result<Self::Event> {
        use CUevent_flags::*;
        let flags = match usage {
            EventUse::StreamOrder => CU_EVENT_DISABLE_TIMING as u32,
            EventUse::HostWait => CU_EVENT_DISABLE_TIMING as u32 | CU_EVENT_BLOCKING_SYNC as u32,
            // Nobody blocks on a timing event: the stream's completion path says when it is done.
            EventUse::Timing => CU_EVENT_DEFAULT as u32,
        };
        // The raw call: cudarc's `event::create` takes one flag, and a host wait's event needs two.
        let mut event = null_mut();
        // SAFETY: writes one handle into `event`.
        check("cuEventCreate", unsafe { sys::cuEventCreate(&mut event, flags) })?;
        Ok(Handle(event))
    }

    // Calls that differ from HIP's only by name, written once in `handle_calls!`.
    handle_calls! { calls: sys, check: check;
        event_record: cuEventRecord, stream_wait_event: cuStreamWaitEvent, event_synchronize: cuEventSynchronize,
        stream_synchronize: cuStreamSynchronize, add_callback: cuStreamAddCallback(ON_STREAM_CALLBACK),
        stream_destroy: cuStreamDestroy_v2, event_destroy: cuEventDestroy_v2, module_unload: cuModuleUnload,
    }

    fn can_time(&self) -> Result<()> {
        match self.has.elapsed_time {
            true => Ok(()),
            false => Err(Error::unsupported(NAME, format!("timestamps need {ELAPSED_TIME} (a CUDA 12.8 driver)"))),
        }
    }

    unsafe fn event_elapsed(&self, start: Self::Event, end: Self::Event) -> Result<Duration> {
        // SAFETY: live timing events, both complete (trait contract).
        unsafe { result::event::elapsed(start.0, end.0) }.map(milliseconds).called("cuEventElapsedTime")
    }

    unsafe fn stream_query(&self, stream: Self::Stream) -> Option<Result<bool>> {
        // SAFETY: a live stream (trait contract).
        Some(done("cuStreamQuery", unsafe { sys::cuStreamQuery(stream.0) }.result()))
    }

    unsafe fn event_query(&self, event: Self::Event) -> Option<Result<bool>> {
        // SAFETY: a live event (trait contract).
        Some(done("cuEventQuery", unsafe { result::event::query(event.0) }))
    }

    fn alloc(&self, bytes: u64) -> Result<u64> {
        // SAFETY: the pool stream is alive.
        let ptr = match unsafe { result::malloc_async(self.pool_stream.0, bytes as usize) } {
            Err(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => {
                return Err(Error::OutOfMemory { bytes, host: false })
            }
            other => other.called("cuMemAllocAsync")?,
        };
        // Only allocations are queued on the pool stream, so this returns at once;
        // afterwards the memory is usable on any stream without an event.
        // SAFETY: the pool stream is alive.
        if let Err(error) = unsafe { result::stream::synchronize(self.pool_stream.0) }.called("cuStreamSynchronize") {
            // Nobody else will own it: it goes back before the error does.
            // SAFETY: just allocated on the pool stream, and never handed out.
            let _ = unsafe { result::free_async(ptr, self.pool_stream.0) };
            return Err(error);
        }
        Ok(ptr)
    }

    unsafe fn free(&self, ptr: u64) {
        // SAFETY: `ptr` came from `alloc` and its users completed (trait contract).
        let _ = unsafe { result::free_async(ptr, self.pool_stream.0) };
    }

    fn host_alloc(&self, bytes: usize) -> Result<*mut u8> {
        // SAFETY: allocates; nothing of ours is touched.
        match unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) } {
            // Page-locked memory is the host's.
            Err(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY)) => {
                Err(Error::OutOfMemory { bytes: bytes as u64, host: true })
            }
            other => other.map(<*mut c_void>::cast).called("cuMemHostAlloc"),
        }
    }

    unsafe fn host_free(&self, ptr: *mut u8) {
        // SAFETY: from `host_alloc`, freed once by the staging pool.
        let _ = unsafe { result::free_host(ptr.cast()) };
    }

    unsafe fn memset_d8(&self, ptr: u64, byte: u8, count: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: range inside a live allocation (trait contract).
        unsafe { result::memset_d8_async(ptr, byte, count as usize, stream.0) }.called("cuMemsetD8Async")
    }

    unsafe fn memset_d32(&self, ptr: u64, word: u32, count: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: aligned range inside a live allocation (trait contract).
        check("cuMemsetD32Async", unsafe { sys::cuMemsetD32Async(ptr, word, count as usize, stream.0) })
    }

    unsafe fn copy_h2d(&self, dst: u64, src: *const u8, len: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: `src` holds `len` bytes, is page-locked and outlives the copy (trait contract).
        unsafe { result::memcpy_htod_async(dst, std::slice::from_raw_parts(src, len as usize), stream.0) }
            .called("cuMemcpyHtoDAsync")
    }

    unsafe fn copy_d2h(&self, dst: *mut u8, src: u64, len: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: `dst` holds `len` bytes nobody else touches until the copy
        // is done, is page-locked and outlives it (trait contract).
        unsafe { result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(dst, len as usize), src, stream.0) }
            .called("cuMemcpyDtoHAsync")
    }

    unsafe fn copy_d2d(&self, dst: u64, src: u64, len: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: both ranges inside live allocations (trait contract).
        unsafe { result::memcpy_dtod_async(dst, src, len as usize, stream.0) }.called("cuMemcpyDtoDAsync")
    }

    fn compile(&self, source: &str, options: &[String], name_expression: Option<&str>) -> Result<Compiled> {
        nvrtc::compile(source, &self.arch, options, name_expression)
    }

    fn module_load(&self, image: &[u8]) -> Result<Self::Module> {
        // A CUBIN is an ELF file and a fatbin starts with its magic; anything
        // else is PTX, which the driver reads as a C string.
        let binary = check_cuda_image(image).map_err(Error::invalid)?;
        let image: Cow<[u8]> =
            if binary || image.last() == Some(&0) { image.into() } else { [image, &[0]].concat().into() };
        // SAFETY: `image` is a CUBIN or fatbin whose headers name only ranges
        // inside it (checked above), or NUL-terminated PTX; the driver reads
        // it during the call and keeps a copy.
        match unsafe { result::module::load_data(image.as_ptr().cast()) } {
            Ok(module) => Ok(Handle(module)),
            Err(DriverError(
                refused @ (CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
                | CUresult::CUDA_ERROR_INVALID_PTX
                | CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
                | CUresult::CUDA_ERROR_INVALID_IMAGE
                | CUresult::CUDA_ERROR_INVALID_SOURCE),
            )) => Err(Error::invalid(format!(
                "the module cannot run on this {} ({}): {refused:?}: build it for {} (CUBIN, or a fatbin \
                 holding it) or as PTX of a version this driver reads",
                self.info.name, self.arch, self.arch
            ))),
            Err(DriverError(other)) => Err(failure("cuModuleLoadData", other)),
        }
    }

    unsafe fn kernel_symbols(&self, module: Self::Module) -> Result<Option<Vec<String>>> {
        if !self.has.lists_kernels {
            return Ok(None);
        }
        let mut count = 0;
        // SAFETY: a loaded module (trait contract); the symbols were found at
        // open; every out-pointer is a local or `functions`, sized to `count`;
        // a function's name is the driver's, copied before the next call.
        unsafe {
            check("cuModuleGetFunctionCount", sys::cuModuleGetFunctionCount(&mut count, module.0))?;
            let mut functions = vec![null_mut(); count as usize];
            check(
                "cuModuleEnumerateFunctions",
                sys::cuModuleEnumerateFunctions(functions.as_mut_ptr(), count, module.0),
            )?;
            let mut symbols = Vec::with_capacity(functions.len());
            for function in functions {
                let mut name = std::ptr::null();
                check("cuFuncGetName", sys::cuFuncGetName(&mut name, function))?;
                if !name.is_null() {
                    symbols.push(CStr::from_ptr(name).to_string_lossy().into_owned());
                }
            }
            Ok(Some(symbols))
        }
    }

    unsafe fn function(&self, module: Self::Module, entry: &CStr) -> Result<Option<Self::Function>> {
        // SAFETY: a loaded module (trait contract).
        let function = match unsafe { result::module::get_function(module.0, entry.to_owned()) } {
            Err(DriverError(CUresult::CUDA_ERROR_NOT_FOUND)) => return Ok(None),
            other => other.called("cuModuleGetFunction")?,
        };
        // With lazy loading (the default since CUDA 12.2) the function would load
        // at its first launch, which can synchronise the context: in `enqueue`,
        // behind work in flight. Load it now, in `prepare` (or at open).
        if self.has.eager_load {
            // SAFETY: a function of a loaded module; `cuFuncLoad` was found at open.
            check("cuFuncLoad", unsafe { sys::cuFuncLoad(function) })?;
        }
        Ok(Some(Handle(function)))
    }

    unsafe fn param_sizes(&self, function: Self::Function, _image: &[u8], _entry: &str) -> Result<Option<Vec<usize>>> {
        if !self.has.eager_load {
            return Ok(None);
        }
        let mut sizes = Vec::new();
        loop {
            let (mut offset, mut size) = (0, 0);
            // SAFETY: a loaded function (trait contract); the out-pointers are locals.
            match unsafe { sys::cuFuncGetParamInfo(function.0, sizes.len(), &mut offset, &mut size) } {
                CUresult::CUDA_SUCCESS => sizes.push(size),
                // Past the last parameter.
                CUresult::CUDA_ERROR_INVALID_VALUE => return Ok(Some(sizes)),
                other => return check("cuFuncGetParamInfo", other).map(|()| None),
            }
        }
    }

    const GRAPHS: bool = true;
    // Events of one context can be waited on in another; device pointers are
    // unified, so a device-to-device copy reaches another device's memory
    // (through peer access where the devices allow it).
    const PEER_COPIES: bool = true;

    unsafe fn capture(
        &self,
        stream: Self::Stream,
        enqueue: &mut dyn FnMut() -> Result<(), EnqueueError>,
    ) -> Option<Result<GraphExec, EnqueueError>> {
        let failed = |call: &'static str| move |DriverError(code)| EnqueueError::Failed(failure(call, code));
        // SAFETY: `stream` is live and used for nothing but this capture;
        // thread-local mode, so other threads' driver calls do not disturb it.
        // The graph is destroyed once instantiated (the instance is self-contained).
        Some(unsafe {
            result::stream::begin_capture(stream.0, CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(failed("cuStreamBeginCapture"))
                .and_then(|()| {
                    // A panic in `enqueue` still ends the capture, so that the
                    // stream is not left capturing and the graph is freed.
                    let unwinding = scopeguard::guard_on_unwind((), |()| {
                        if let Some(graph) = result::stream::end_capture(stream.0).ok().filter(|graph| !graph.is_null())
                        {
                            let _ = result::graph::destroy(graph);
                        }
                    });
                    let enqueued = enqueue();
                    drop(unwinding);
                    let ended = result::stream::end_capture(stream.0);
                    // An enqueue's own error first: the capture's end fails after it too.
                    let captured = enqueued.and(ended.map_err(failed("cuStreamEndCapture"))).and_then(|graph| {
                        result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0))
                            .map(|exec| Handle(exec.cast()))
                            .map_err(failed("cuGraphInstantiate"))
                    });
                    if let Some(graph) = ended.ok().filter(|graph| !graph.is_null()) {
                        let _ = result::graph::destroy(graph);
                    }
                    captured
                })
        })
    }

    unsafe fn graph_launch(&self, exec: GraphExec, stream: Self::Stream) -> Result<()> {
        // SAFETY: an instance `capture` made, not destroyed; a live stream.
        unsafe { result::graph::launch(exec.0.cast(), stream.0) }.called("cuGraphLaunch")
    }

    unsafe fn graph_destroy(&self, exec: GraphExec) {
        // SAFETY: an instance `capture` made, destroyed once; CUDA frees it
        // once launches in flight are done.
        let _ = unsafe { result::graph::exec_destroy(exec.0.cast()) };
    }

    unsafe fn launch(&self, Launch { function, grid, stream, params }: Launch<'_, Self>) -> Result<()> {
        // SAFETY: a live function and stream; `params` holds one valid pointer per
        // kernel parameter (trait contract).
        unsafe {
            if grid.shared_bytes > DEFAULT_SHARED_LIMIT {
                raise_dynamic_shared(function, grid.shared_bytes)?;
            }
            let [x, y, z] = grid.groups;
            let [bx, by, bz] = grid.block;
            let mut launch =
                || result::launch_kernel(function.0, (x, y, z), (bx, by, bz), grid.shared_bytes, stream.0, params);
            match launch() {
                // A function's default ceiling is 48 KiB less its static
                // shared memory: a kernel with some asks for the opt-in at
                // less than 48 KiB. Raised on the first refusal, not queried
                // on every launch.
                Err(result::DriverError(CUresult::CUDA_ERROR_INVALID_VALUE))
                    if grid.shared_bytes > 0 && raise_dynamic_shared(function, grid.shared_bytes)? =>
                {
                    launch()
                }
                first => first,
            }
            .called("cuLaunchKernel")
        }
    }

    #[cfg(feature = "test-support")]
    fn delay_ticks(&self, duration: Duration) -> u64 {
        // %globaltimer counts nanoseconds.
        u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
    }

    fn raw_stream(stream: Self::Stream) -> RawStream {
        RawStream::Cuda(stream.0)
    }

    type Communicator = nccl::Communicator;

    fn communicator(drivers: &[&Self]) -> Result<nccl::Communicator> {
        let ordinals: Vec<i32> = drivers.iter().map(|driver| driver.info.index as i32).collect();
        // NCCL makes its own context current per device: the primary one, as ours.
        let made = nccl::Communicator::open(&ordinals);
        if let Some(first) = drivers.first() {
            first.bind()?;
        }
        made
    }

    fn joined_communicator(driver: &Self, id: &[u8; 128], ranks: usize, rank: usize) -> Result<nccl::Communicator> {
        // NCCL joins on the current device: this driver's, whose primary
        // context is current once bound.
        driver.bind()?;
        let joined = nccl::Communicator::join(id, ranks, rank);
        driver.bind()?;
        joined
    }

    unsafe fn enqueue_collective(
        communicator: &nccl::Communicator,
        collective: &crate::collective::Collective,
        parts: &[RawPart<'_, Self>],
    ) -> Result<()> {
        // SAFETY: this function's contract is `nccl::enqueue`'s.
        unsafe { nccl::enqueue(communicator, collective, parts) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An external device's error leaves the process's CUDA unusable, as
    /// CUDA documents: it was reported as one op's backend error, and work
    /// went on being admitted to fail op by op.
    #[test]
    fn an_external_devices_error_loses_the_device() {
        assert!(failure("cuStreamSynchronize", CUresult::CUDA_ERROR_EXTERNAL_DEVICE).is_device_lost());
        assert!(!failure("cuMemAlloc", CUresult::CUDA_ERROR_OUT_OF_MEMORY).is_device_lost());
    }
}
