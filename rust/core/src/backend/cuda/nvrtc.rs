//! NVRTC: CUDA C to CUBIN for the device's architecture.

use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;

use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};

use crate::backend::gpu::Rtc;
use crate::error::{Error, Result};

const SYMBOLS: [&str; 7] = [
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcDestroyProgram",
];

/// Fails with `Unavailable` unless NVRTC and every function used here load.
pub(crate) fn check_present() -> Result<()> {
    // SAFETY: only tries to load the library; no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::unavailable(
            "cuda",
            "the NVRTC library (libnvrtc.so) was not found; add the CUDA toolkit's lib64 to the library path",
        ));
    }
    // SAFETY: the library is present (checked above), so `culib` returns it.
    let library = unsafe { sys::culib() };
    match SYMBOLS
        .iter()
        // SAFETY: looks a symbol up without calling it.
        .find(|name| unsafe { library.get::<*const c_void>(**name) }.is_err())
    {
        Some(missing) => Err(Error::unavailable("cuda", format!("NVRTC lacks {missing}"))),
        None => Ok(()),
    }
}

fn status(result: nvrtcResult) -> Result<(), String> {
    match result {
        nvrtcResult::NVRTC_SUCCESS => Ok(()),
        error => Err(format!("{error:?}")),
    }
}

/// NVRTC's calls, producing CUBIN (not PTX): loading it needs no JIT step.
pub(crate) struct Nvrtc;

impl Rtc for Nvrtc {
    type Program = nvrtcProgram;
    const NAME: &'static str = "NVRTC";

    unsafe fn create(source: &CStr, name: &CStr) -> Result<nvrtcProgram, String> {
        let mut program = null_mut();
        // SAFETY: NUL-terminated strings; no headers.
        status(unsafe {
            sys::nvrtcCreateProgram(&mut program, source.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null())
        })?;
        Ok(program)
    }

    unsafe fn compile(program: nvrtcProgram, options: &[*const c_char]) -> Result<(), String> {
        // SAFETY: a live program (trait contract) and valid option strings.
        status(unsafe { sys::nvrtcCompileProgram(program, options.len() as i32, options.as_ptr()) })
    }

    unsafe fn log_size(program: nvrtcProgram) -> Result<usize, String> {
        let mut size = 0;
        // SAFETY: a live program (trait contract).
        status(unsafe { sys::nvrtcGetProgramLogSize(program, &mut size) }).map(|()| size)
    }

    unsafe fn log(program: nvrtcProgram, into: *mut c_char) -> Result<(), String> {
        // SAFETY: `into` holds `log_size` bytes (trait contract).
        status(unsafe { sys::nvrtcGetProgramLog(program, into) })
    }

    unsafe fn code_size(program: nvrtcProgram) -> Result<usize, String> {
        let mut size = 0;
        // SAFETY: a compiled program (trait contract).
        status(unsafe { sys::nvrtcGetCUBINSize(program, &mut size) }).map(|()| size)
    }

    unsafe fn code(program: nvrtcProgram, into: *mut c_char) -> Result<(), String> {
        // SAFETY: `into` holds `code_size` bytes (trait contract).
        status(unsafe { sys::nvrtcGetCUBIN(program, into) })
    }

    unsafe fn destroy(mut program: nvrtcProgram) {
        // SAFETY: a live program, destroyed once by its owner (trait contract).
        let _ = unsafe { sys::nvrtcDestroyProgram(&mut program) };
    }
}

/// Compiles `source` to a CUBIN for `arch` (`sm_90`, …).
pub(crate) fn compile(source: &str, arch: &str) -> Result<Vec<u8>> {
    let options = [format!("--gpu-architecture={arch}"), "--std=c++17".to_owned()];
    crate::backend::gpu::compile::<Nvrtc>("cuda", source, &options)
}
