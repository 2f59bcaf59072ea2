//! The HIP functions this backend calls, declared here rather than taken
//! from hip-sys: hip-sys returns `hipError_t` as a Rust enum, and a status
//! code the enum does not list (another ROCm version) would be undefined
//! behaviour. Here every status is a plain integer. The handle types come
//! from hip-sys; they are opaque pointers in every ROCm version.

use std::ffi::{c_char, c_int, c_uint, c_void};

use hip_sys::hiprt::{hipEvent_t, hipFunction_t, hipModule_t, hipStream_t};

/// A `hipError_t` or `hiprtcResult` as the library returned it.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status(pub c_uint);

pub const SUCCESS: Status = Status(0);
pub const ERROR_OUT_OF_MEMORY: Status = Status(2);
pub const ERROR_NO_DEVICE: Status = Status(100);
pub const ERROR_INVALID_DEVICE: Status = Status(101);
pub const ERROR_NOT_FOUND: Status = Status(500);

/// The faults after which HIP fails every later call with the same status
/// (illegal address, launch timeout, device assert, launch failure): the
/// device is lost for the process, as on CUDA. ROCm numbers them as CUDA does.
pub fn poisons_context(status: Status) -> bool {
    matches!(status.0, 700 | 702 | 710 | 719)
}

/// The `hipDeviceAttribute_t` values read for a device's launch limits, as
/// ROCm 5.2's `hip_runtime_api.h` numbers them.
pub const ATTRIBUTE_MAX_BLOCK_DIM: [c_int; 3] = [26, 27, 28];
pub const ATTRIBUTE_MAX_GRID_DIM: [c_int; 3] = [29, 30, 31];
pub const ATTRIBUTE_MAX_THREADS_PER_BLOCK: c_int = 56;
pub const ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: c_int = 74;

pub const STREAM_NON_BLOCKING: c_uint = 0x1;
pub const EVENT_DEFAULT: c_uint = 0x0;
pub const EVENT_BLOCKING_SYNC: c_uint = 0x1;
pub const EVENT_DISABLE_TIMING: c_uint = 0x2;
pub const HOST_MALLOC_PORTABLE: c_uint = 0x1;

pub type StreamCallback = unsafe extern "C" fn(stream: hipStream_t, status: Status, data: *mut c_void);

pub type Program = *mut c_void;

#[link(name = "amdhip64")]
extern "C" {
    pub fn hipInit(flags: c_uint) -> Status;
    pub fn hipGetDeviceCount(count: *mut c_int) -> Status;
    pub fn hipSetDevice(device: c_int) -> Status;
    pub fn hipDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> Status;
    pub fn hipDeviceTotalMem(bytes: *mut usize, device: c_int) -> Status;
    pub fn hipDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: c_int) -> Status;
    pub fn hipGetErrorName(status: Status) -> *const c_char;

    pub fn hipStreamCreateWithFlags(stream: *mut hipStream_t, flags: c_uint) -> Status;
    pub fn hipStreamSynchronize(stream: hipStream_t) -> Status;
    pub fn hipStreamDestroy(stream: hipStream_t) -> Status;
    pub fn hipStreamWaitEvent(stream: hipStream_t, event: hipEvent_t, flags: c_uint) -> Status;
    pub fn hipStreamAddCallback(
        stream: hipStream_t,
        callback: Option<StreamCallback>,
        data: *mut c_void,
        flags: c_uint,
    ) -> Status;

    pub fn hipEventCreateWithFlags(event: *mut hipEvent_t, flags: c_uint) -> Status;
    pub fn hipEventRecord(event: hipEvent_t, stream: hipStream_t) -> Status;
    pub fn hipEventSynchronize(event: hipEvent_t) -> Status;
    pub fn hipEventDestroy(event: hipEvent_t) -> Status;
    pub fn hipEventElapsedTime(milliseconds: *mut f32, start: hipEvent_t, stop: hipEvent_t) -> Status;

    pub fn hipMalloc(ptr: *mut *mut c_void, bytes: usize) -> Status;
    pub fn hipFree(ptr: *mut c_void) -> Status;
    pub fn hipHostMalloc(ptr: *mut *mut c_void, bytes: usize, flags: c_uint) -> Status;
    pub fn hipHostFree(ptr: *mut c_void) -> Status;
    pub fn hipMemsetAsync(dst: *mut c_void, value: c_int, bytes: usize, stream: hipStream_t) -> Status;
    pub fn hipMemsetD32Async(dst: *mut c_void, value: c_int, count: usize, stream: hipStream_t) -> Status;
    pub fn hipMemcpyHtoDAsync(dst: *mut c_void, src: *mut c_void, bytes: usize, stream: hipStream_t) -> Status;
    pub fn hipMemcpyDtoHAsync(dst: *mut c_void, src: *mut c_void, bytes: usize, stream: hipStream_t) -> Status;
    pub fn hipMemcpyDtoDAsync(dst: *mut c_void, src: *mut c_void, bytes: usize, stream: hipStream_t) -> Status;

    pub fn hipModuleLoadData(module: *mut hipModule_t, image: *const c_void) -> Status;
    pub fn hipModuleUnload(module: hipModule_t) -> Status;
    pub fn hipModuleGetFunction(function: *mut hipFunction_t, module: hipModule_t, name: *const c_char) -> Status;
    pub fn hipModuleLaunchKernel(
        function: hipFunction_t,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_bytes: c_uint,
        stream: hipStream_t,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> Status;

    // hiprtc lives in libamdhip64 in ROCm 5.2; hip-sys does not bind it.
    pub fn hiprtcCreateProgram(
        program: *mut Program,
        source: *const c_char,
        name: *const c_char,
        header_count: c_int,
        headers: *const *const c_char,
        include_names: *const *const c_char,
    ) -> Status;
    pub fn hiprtcCompileProgram(program: Program, option_count: c_int, options: *const *const c_char) -> Status;
    pub fn hiprtcGetCodeSize(program: Program, size: *mut usize) -> Status;
    pub fn hiprtcGetCode(program: Program, code: *mut c_char) -> Status;
    pub fn hiprtcGetProgramLogSize(program: Program, size: *mut usize) -> Status;
    pub fn hiprtcGetProgramLog(program: Program, log: *mut c_char) -> Status;
    pub fn hiprtcDestroyProgram(program: *mut Program) -> Status;
    pub fn hiprtcAddNameExpression(program: Program, name: *const c_char) -> Status;
    pub fn hiprtcGetLoweredName(program: Program, name: *const c_char, lowered: *mut *const c_char) -> Status;
}
