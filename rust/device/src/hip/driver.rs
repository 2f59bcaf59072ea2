//! HIP runtime calls: the only module of the HIP backend that calls HIP.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;
use std::sync::Arc;
use std::time::Duration;

use hip_sys::hiprt::{hipEvent_t, hipFunction_t, hipModule_t, hipStream_t};

use super::ffi::{self, Status as HipStatus};
use super::{hiprtc, metadata};
use crate::driver::{callback_run, handle_calls, milliseconds, status_error, Driver, EventUse, Handle, Launch, Loss};
use crate::error::{Error, Result};
use crate::image::{check_bundle, check_elf, BUNDLE_MAGIC, ELF_MAGIC};
use crate::info::{BackendKind, DeviceInfo, LaunchLimits};
use crate::raw::RawStream;
use crate::rtc::Compiled;

const NAME: BackendKind = BackendKind::Hip;

/// `wall_clock64()` ticks per microsecond: the 100 MHz constant clock of
/// `s_memrealtime` on the GFX9 and CDNA devices ROCm 5.2 supports.
#[cfg(feature = "test-support")]
const WALL_CLOCK_TICKS_PER_MICRO: u64 = 100;

/// Names a failed HIP status. Unknown codes stay numbers: never an enum.
fn failure(call: &str, status: HipStatus) -> Error {
    // SAFETY: hipGetErrorName takes any code and returns a static string or null.
    let name = unsafe { ffi::hipGetErrorName(status) };
    let name = if name.is_null() {
        format!("hipError_t {}", status.0)
    } else {
        // SAFETY: non-null, NUL-terminated and static (HIP's own table).
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    };
    status_error(NAME, call, name, status.0 as i32, ffi::poisons_context(status))
}

fn check(call: &str, status: HipStatus) -> Result<()> {
    (status == ffi::SUCCESS).then_some(()).ok_or_else(|| failure(call, status))
}

/// The HIP runtime, bound to one device.
pub struct Hip {
    device: i32,
    info: DeviceInfo,
    loss: Arc<Loss>,
}

/// Initialises HIP and counts its devices, or says why HIP cannot run here.
fn device_count() -> Result<i32> {
    let unavailable = |call: &str, status: HipStatus| Error::unavailable(NAME, failure(call, status).to_string());
    // SAFETY: plain queries; the out-pointer is a valid local.
    unsafe {
        match ffi::hipInit(0) {
            ffi::SUCCESS => {}
            // ROCm reports a machine without an AMD GPU as either code.
            status @ (ffi::ERROR_NO_DEVICE | ffi::ERROR_INVALID_DEVICE) => {
                return Err(Error::unavailable(NAME, format!("no HIP device ({})", failure("hipInit", status))))
            }
            other => return Err(unavailable("hipInit", other)),
        }
        let mut count = 0;
        match ffi::hipGetDeviceCount(&mut count) {
            ffi::SUCCESS if count > 0 => Ok(count),
            ffi::SUCCESS | ffi::ERROR_NO_DEVICE => Err(Error::unavailable(NAME, "no HIP device")),
            other => Err(unavailable("hipGetDeviceCount", other)),
        }
    }
}

/// Device `device` as the listing shows it and a runtime on it reports it.
/// Needs no device current: every query names the device.
fn describe(device: i32) -> Result<DeviceInfo> {
    // SAFETY: plain queries of a device below the count; out-pointers are valid locals.
    unsafe {
        let attribute = |attribute| -> Result<u32> {
            let mut value = 0;
            check("hipDeviceGetAttribute", ffi::hipDeviceGetAttribute(&mut value, attribute, device))?;
            Ok(u32::try_from(value).unwrap_or(0))
        };
        let mut name = [0 as std::ffi::c_char; 256];
        check("hipDeviceGetName", ffi::hipDeviceGetName(name.as_mut_ptr(), name.len() as i32, device))?;
        let mut memory = 0usize;
        check("hipDeviceTotalMem", ffi::hipDeviceTotalMem(&mut memory, device))?;
        let [bx, by, bz] = ffi::ATTRIBUTE_MAX_BLOCK_DIM;
        let [gx, gy, gz] = ffi::ATTRIBUTE_MAX_GRID_DIM;
        Ok(DeviceInfo {
            backend: BackendKind::Hip,
            index: device as usize,
            name: CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
            memory_bytes: Some(memory as u64),
            software: false,
            max_buffer_bytes: memory as u64,
            limits: LaunchLimits {
                max_block: [attribute(bx)?, attribute(by)?, attribute(bz)?],
                max_threads_per_block: attribute(ffi::ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
                max_groups: [attribute(gx)?, attribute(gy)?, attribute(gz)?],
                max_shared_bytes: attribute(ffi::ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            },
        })
    }
}

/// Every device HIP sees, in ordinal order; none where HIP cannot run
/// (opening says why). A device whose attributes HIP does not give is left out.
pub fn list() -> Vec<DeviceInfo> {
    let Ok(count) = device_count() else { return Vec::new() };
    (0..count).filter_map(|device| describe(device).ok()).collect()
}

impl Hip {
    /// Opens device `ordinal`, or says why it cannot.
    pub fn open(ordinal: usize) -> Result<Hip> {
        let count = device_count()?;
        let device = match i32::try_from(ordinal) {
            Ok(device) if device < count => device,
            _ => return Err(Error::unavailable(NAME, format!("no HIP device {ordinal}: the machine has {count}"))),
        };
        let hip = Hip { device, info: describe(device)?, loss: Arc::default() };
        hip.bind()?;
        Ok(hip)
    }
}

unsafe extern "C" fn on_stream_callback(_stream: hipStream_t, status: HipStatus, data: *mut c_void) {
    // No HIP call is allowed here, so the code is not looked up by name.
    let status = (status == ffi::SUCCESS).then_some(()).ok_or_else(|| {
        let name = format!("hipError_t {}", status.0);
        status_error(NAME, "a stream callback", name, status.0 as i32, ffi::poisons_context(status))
    });
    // SAFETY: `data` is the callback `add_callback` leaked for this call, run once.
    unsafe { callback_run(data, status) };
}

impl Driver for Hip {
    type Stream = Handle<hipStream_t>;
    type Event = Handle<hipEvent_t>;
    type Module = Handle<hipModule_t>;
    type Function = Handle<hipFunction_t>;

    const KIND: BackendKind = BackendKind::Hip;

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn arch(&self) -> String {
        // hiprtc compiles for the current device when no target is named, so
        // the device identifies the compiled code.
        format!("{}#{}", self.info.name, self.device)
    }

    fn bind(&self) -> Result<()> {
        self.loss.check()?;
        // SAFETY: the ordinal was checked at open.
        check("hipSetDevice", unsafe { ffi::hipSetDevice(self.device) })
    }

    fn loss(&self) -> &Arc<Loss> {
        &self.loss
    }

    fn stream_create(&self) -> Result<Self::Stream> {
        let mut stream = null_mut();
        // SAFETY: writes one handle into `stream`.
        check("hipStreamCreateWithFlags", unsafe {
            ffi::hipStreamCreateWithFlags(&mut stream, ffi::STREAM_NON_BLOCKING)
        })
        .map(|()| Handle(stream))
    }

    fn event_create(&self, usage: EventUse) -> Result<Self::Event> {
        let flags = match usage {
            EventUse::StreamOrder => ffi::EVENT_DISABLE_TIMING,
            EventUse::HostWait => ffi::EVENT_DISABLE_TIMING | ffi::EVENT_BLOCKING_SYNC,
            // Nobody blocks on a timing event: the stream's completion path says when it is done.
            EventUse::Timing => ffi::EVENT_DEFAULT,
        };
        let mut event = null_mut();
        // SAFETY: writes one handle into `event`.
        check("hipEventCreateWithFlags", unsafe { ffi::hipEventCreateWithFlags(&mut event, flags) })
            .map(|()| Handle(event))
    }

    // Calls that differ from CUDA's only by name, written once in `handle_calls!`.
    handle_calls! { calls: ffi, check: check;
        event_record: hipEventRecord, stream_wait_event: hipStreamWaitEvent, event_synchronize: hipEventSynchronize,
        stream_synchronize: hipStreamSynchronize, add_callback: hipStreamAddCallback(on_stream_callback),
        stream_destroy: hipStreamDestroy, event_destroy: hipEventDestroy, module_unload: hipModuleUnload,
    }

    fn can_time(&self) -> Result<()> {
        Ok(())
    }

    unsafe fn event_elapsed(&self, start: Self::Event, end: Self::Event) -> Result<Duration> {
        let mut ms = 0f32;
        // SAFETY: live timing events, both complete (trait contract); `ms` is a local.
        check("hipEventElapsedTime", unsafe { ffi::hipEventElapsedTime(&mut ms, start.0, end.0) })?;
        Ok(milliseconds(ms))
    }

    fn alloc(&self, bytes: u64) -> Result<u64> {
        // hipMalloc memory is usable on every stream at once. ROCm 5.2's
        // stream-ordered allocator is a preview, so it is not used.
        let mut ptr = null_mut();
        // SAFETY: `ptr` receives the allocation.
        match unsafe { ffi::hipMalloc(&mut ptr, bytes as usize) } {
            ffi::ERROR_OUT_OF_MEMORY => Err(Error::OutOfMemory { bytes, host: false }),
            other => check("hipMalloc", other).map(|()| ptr as u64),
        }
    }

    unsafe fn free(&self, ptr: u64) {
        // SAFETY: from `alloc`, and every user completed (trait contract).
        let _ = unsafe { ffi::hipFree(ptr as *mut c_void) };
    }

    fn free_waits_for_device(&self) -> bool {
        // hipFree performs an implicit hipDeviceSynchronize (hip_runtime_api.h).
        true
    }

    fn host_alloc(&self, bytes: usize) -> Result<*mut u8> {
        let mut ptr = null_mut();
        // SAFETY: `ptr` receives the allocation.
        match unsafe { ffi::hipHostMalloc(&mut ptr, bytes, ffi::HOST_MALLOC_PORTABLE) } {
            // Page-locked memory is the host's.
            ffi::ERROR_OUT_OF_MEMORY => Err(Error::OutOfMemory { bytes: bytes as u64, host: true }),
            other => check("hipHostMalloc", other).map(|()| ptr.cast()),
        }
    }

    unsafe fn host_free(&self, ptr: *mut u8) {
        // SAFETY: from `host_alloc`, freed once by the staging pool.
        let _ = unsafe { ffi::hipHostFree(ptr.cast()) };
    }

    unsafe fn memset_d8(&self, ptr: u64, byte: u8, count: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: range inside a live allocation (trait contract).
        check("hipMemsetAsync", unsafe {
            ffi::hipMemsetAsync(ptr as *mut c_void, i32::from(byte), count as usize, stream.0)
        })
    }

    unsafe fn memset_d32(&self, ptr: u64, word: u32, count: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: aligned range inside a live allocation (trait contract).
        check("hipMemsetD32Async", unsafe {
            ffi::hipMemsetD32Async(ptr as *mut c_void, word as i32, count as usize, stream.0)
        })
    }

    unsafe fn copy_h2d(&self, dst: u64, src: *const u8, len: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: `src` is page-locked and outlives the copy (trait contract);
        // HIP only reads through it despite the mutable type.
        check("hipMemcpyHtoDAsync", unsafe {
            ffi::hipMemcpyHtoDAsync(dst as *mut c_void, src as *mut c_void, len as usize, stream.0)
        })
    }

    unsafe fn copy_d2h(&self, dst: *mut u8, src: u64, len: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: `dst` is page-locked and outlives the copy (trait contract).
        check("hipMemcpyDtoHAsync", unsafe {
            ffi::hipMemcpyDtoHAsync(dst.cast(), src as *mut c_void, len as usize, stream.0)
        })
    }

    unsafe fn copy_d2d(&self, dst: u64, src: u64, len: u64, stream: Self::Stream) -> Result<()> {
        // SAFETY: both ranges inside live allocations (trait contract).
        check("hipMemcpyDtoDAsync", unsafe {
            ffi::hipMemcpyDtoDAsync(dst as *mut c_void, src as *mut c_void, len as usize, stream.0)
        })
    }

    fn compile(&self, source: &str, options: &[String], name_expression: Option<&str>) -> Result<Compiled> {
        hiprtc::compile(source, None, options, name_expression)
    }

    fn module_load(&self, image: &[u8]) -> Result<Self::Module> {
        if image.starts_with(ELF_MAGIC) {
            check_elf(image).map_err(Error::invalid)?;
        } else if image.starts_with(BUNDLE_MAGIC) {
            check_bundle(image).map_err(Error::invalid)?;
        } else {
            return Err(Error::invalid("a HIP module image is an AMDGPU code object (ELF) or a clang offload bundle"));
        }
        let mut module = null_mut();
        // SAFETY: `image` is a code object or offload bundle whose headers
        // name only ranges inside it (checked above).
        check("hipModuleLoadData", unsafe { ffi::hipModuleLoadData(&mut module, image.as_ptr().cast()) })
            .map(|()| Handle(module))
    }

    unsafe fn function(&self, module: Self::Module, entry: &CStr) -> Result<Option<Self::Function>> {
        let mut function = null_mut();
        // SAFETY: a loaded module (trait contract) and a NUL-terminated name.
        match unsafe { ffi::hipModuleGetFunction(&mut function, module.0, entry.as_ptr()) } {
            ffi::ERROR_NOT_FOUND => Ok(None),
            other => check("hipModuleGetFunction", other).map(|()| Some(Handle(function))),
        }
    }

    unsafe fn param_sizes(&self, _function: Self::Function, image: &[u8], entry: &str) -> Result<Option<Vec<usize>>> {
        // HIP cannot ask a loaded function for its parameters, but hiprtc's
        // code object declares them. An image this reader cannot follow (a
        // later code object format) loses only the check, as on a CUDA driver
        // without `cuFuncGetParamInfo`.
        Ok(metadata::param_sizes(image, entry))
    }

    unsafe fn launch(&self, Launch { function, grid, stream, params }: Launch<'_, Self>) -> Result<()> {
        let ([gx, gy, gz], [bx, by, bz]) = (grid.groups, grid.block);
        // SAFETY: a live function and stream; one valid pointer per kernel
        // parameter (trait contract).
        check("hipModuleLaunchKernel", unsafe {
            ffi::hipModuleLaunchKernel(
                function.0,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                grid.shared_bytes,
                stream.0,
                params.as_mut_ptr(),
                null_mut(),
            )
        })
    }

    #[cfg(feature = "test-support")]
    fn delay_ticks(&self, duration: Duration) -> u64 {
        u64::try_from(duration.as_micros()).unwrap_or(u64::MAX).saturating_mul(WALL_CLOCK_TICKS_PER_MICRO)
    }

    fn raw_stream(stream: Self::Stream) -> RawStream {
        RawStream::Hip(stream.0)
    }

    // RCCL is not bound yet.
    type Communicator = ();

    fn communicator(_drivers: &[&Self]) -> Result<()> {
        Err(Error::unsupported(BackendKind::Hip, "collectives over a device group (RCCL is not bound yet)"))
    }
}
