//! hiprtc: HIP C to an AMD GPU code object.

use std::ffi::{c_char, CStr};
use std::ptr::null_mut;

use super::ffi::{self, Program};
use crate::backend::gpu::Rtc;
use crate::error::Result;

/// hiprtc statuses are `hiprtcResult` codes, not `hipError_t`: kept as numbers.
fn describe(result: ffi::Status) -> Result<(), String> {
    match result {
        ffi::SUCCESS => Ok(()),
        ffi::Status(code) => Err(format!("hiprtcResult {code}")),
    }
}

/// hiprtc's calls (they live in libamdhip64 in ROCm 5.2).
pub(crate) struct Hiprtc;

impl Rtc for Hiprtc {
    type Program = Program;
    const NAME: &'static str = "hiprtc";

    unsafe fn create(source: &CStr, name: &CStr) -> Result<Program, String> {
        let mut program = null_mut();
        // SAFETY: NUL-terminated strings; no headers.
        let result = unsafe {
            ffi::hiprtcCreateProgram(
                &mut program,
                source.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        describe(result).map(|()| program)
    }

    unsafe fn compile(program: Program, options: &[*const c_char]) -> Result<(), String> {
        // SAFETY: a live program (trait contract) and valid option strings.
        describe(unsafe { ffi::hiprtcCompileProgram(program, options.len() as i32, options.as_ptr()) })
    }

    unsafe fn log_size(program: Program) -> Result<usize, String> {
        let mut size = 0;
        // SAFETY: a live program (trait contract).
        describe(unsafe { ffi::hiprtcGetProgramLogSize(program, &mut size) }).map(|()| size)
    }

    unsafe fn log(program: Program, into: *mut c_char) -> Result<(), String> {
        // SAFETY: `into` holds `log_size` bytes (trait contract).
        describe(unsafe { ffi::hiprtcGetProgramLog(program, into) })
    }

    unsafe fn code_size(program: Program) -> Result<usize, String> {
        let mut size = 0;
        // SAFETY: a compiled program (trait contract).
        describe(unsafe { ffi::hiprtcGetCodeSize(program, &mut size) }).map(|()| size)
    }

    unsafe fn code(program: Program, into: *mut c_char) -> Result<(), String> {
        // SAFETY: `into` holds `code_size` bytes (trait contract).
        describe(unsafe { ffi::hiprtcGetCode(program, into) })
    }

    unsafe fn destroy(mut program: Program) {
        // SAFETY: a live program, destroyed once by its owner (trait contract).
        let _ = unsafe { ffi::hiprtcDestroyProgram(&mut program) };
    }
}

/// Compiles `source` for `arch` (`gfx90a`, …), or for the current device when `None`.
pub(crate) fn compile(source: &str, arch: Option<&str>) -> Result<Vec<u8>> {
    let mut options = vec!["-O3".to_owned()];
    if let Some(arch) = arch {
        options.push(format!("--offload-arch={arch}"));
    }
    crate::backend::gpu::compile::<Hiprtc>("hip", source, &options)
}
