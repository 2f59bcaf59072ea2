//! NVRTC: CUDA C to CUBIN for the device's architecture.

use std::ffi::c_void;

use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};

use crate::backend::gpu::rtc_calls;
use crate::device::BackendKind;
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
            BackendKind::Cuda,
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
        Some(missing) => Err(Error::unavailable(BackendKind::Cuda, format!("NVRTC lacks {missing}"))),
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

// The same calls as hiprtc's but for the names, written once in `rtc_calls!`.
rtc_calls! { impl Rtc for Nvrtc { NAME: "NVRTC", Program: nvrtcProgram, calls: sys, check: status }
    create: nvrtcCreateProgram, compile: nvrtcCompileProgram, destroy: nvrtcDestroyProgram,
    log_size: nvrtcGetProgramLogSize, log: nvrtcGetProgramLog,
    code_size: nvrtcGetCUBINSize, code: nvrtcGetCUBIN,
}

/// Compiles `source` to a CUBIN for `arch` (`sm_90`, …).
pub(crate) fn compile(source: &str, arch: &str) -> Result<Vec<u8>> {
    let options = [format!("--gpu-architecture={arch}"), "--std=c++17".to_owned()];
    crate::backend::gpu::compile::<Nvrtc>(BackendKind::Cuda, source, &options)
}
