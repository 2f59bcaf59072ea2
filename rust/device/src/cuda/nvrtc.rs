//! NVRTC: CUDA C to CUBIN for the device's architecture.

use std::ffi::c_void;

use cudarc::nvrtc::sys::{self, nvrtcResult};

use crate::error::{Error, Result};
use crate::info::BackendKind;
use crate::rtc::{rtc_compile, Compiled};

const SYMBOLS: [&str; 9] = [
    "nvrtcCreateProgram",
    "nvrtcAddNameExpression",
    "nvrtcGetLoweredName",
    "nvrtcCompileProgram",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcDestroyProgram",
];

/// Fails with `Unavailable` unless NVRTC and every function used here load.
pub fn check_present() -> Result<()> {
    // SAFETY: only tries to load the library; no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::unavailable(
            BackendKind::Cuda,
            "the NVRTC library (libnvrtc.so) was not found; add the CUDA toolkit's lib64 to the library path",
        ));
    }
    // SAFETY: the library is present (checked above), so `culib` returns it.
    let library = unsafe { sys::culib() };
    // SAFETY: looks a symbol up without calling it.
    let missing = SYMBOLS.iter().find(|name| unsafe { library.get::<*const c_void>(**name) }.is_err());
    match missing {
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

// The same compile as hiprtc's but for the names, written once in `rtc_compile!`. It asks
// for CUBIN (not PTX): loading it needs no JIT step.
rtc_compile! { BackendKind::Cuda, "NVRTC", calls: sys, check: status;
    create: nvrtcCreateProgram, add_name_expression: nvrtcAddNameExpression, compile: nvrtcCompileProgram,
    log_size: nvrtcGetProgramLogSize, log: nvrtcGetProgramLog, lowered_name: nvrtcGetLoweredName,
    code_size: nvrtcGetCUBINSize, code: nvrtcGetCUBIN, destroy: nvrtcDestroyProgram,
}

/// Compiles `source` to a CUBIN for `arch` (`sm_90`, …): C++17 unless
/// `options` name another standard, with the toolkit's include directories
/// (`cooperative_groups.h`, …) where it is installed, then `options`.
pub fn compile(source: &str, arch: &str, options: &[String], name_expression: Option<&str>) -> Result<Compiled> {
    let mut all = vec![format!("--gpu-architecture={arch}")];
    if !options.iter().any(|option| option.starts_with("-std") || option.starts_with("--std")) {
        all.push("--std=c++17".to_owned());
    }
    all.extend(toolkit_includes().iter().map(|include| format!("--include-path={}", include.display())));
    all.extend(options.iter().cloned());
    compile_program(source, &all, name_expression)
}

/// The CUDA toolkit's include directories, beside the NVRTC library this
/// process loaded (`…/lib64/libnvrtc.so` → `…/include`), if they hold the
/// toolkit's headers: NVRTC has the device built-ins of its own, while
/// headers such as `cooperative_groups.h` come from the toolkit, and since
/// CUDA 13 the C++ library they include (`cuda/std/…`) from its `cccl`
/// folder, which nvcc adds as well.
fn toolkit_includes() -> &'static [std::path::PathBuf] {
    static INCLUDES: std::sync::OnceLock<Vec<std::path::PathBuf>> = std::sync::OnceLock::new();
    INCLUDES.get_or_init(|| {
        // SAFETY: the library is loaded (checked present before any compile); a lookup calls nothing.
        let Ok(symbol) = (unsafe { sys::culib().get::<*const c_void>("nvrtcVersion") }) else { return Vec::new() };
        let Some(library) = loaded_from(*symbol) else { return Vec::new() };
        // As loaded (`…/cuda/lib64/…`), then with links resolved
        // (`…/cuda-13.0/targets/x86_64-linux/lib/…`): both sit two levels below the headers.
        let include = [Some(library.clone()), std::fs::canonicalize(&library).ok()]
            .into_iter()
            .flatten()
            .filter_map(|library| Some(library.parent()?.parent()?.join("include")))
            .find(|include| include.join("cooperative_groups.h").is_file());
        let Some(include) = include else { return Vec::new() };
        let cccl = include.join("cccl");
        match cccl.is_dir() {
            true => vec![include, cccl],
            false => vec![include],
        }
    })
}

/// The file of the shared library that holds `address`.
fn loaded_from(address: *const c_void) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: `dladdr` only reads the address and fills `info`, whose file
    // name points into the loader's own copy of the path, kept while the
    // library is loaded (NVRTC stays loaded for the process).
    let found = unsafe { libc::dladdr(address, info.as_mut_ptr()) };
    // SAFETY: zeroed, then filled by `dladdr` where it found the address.
    let info = unsafe { info.assume_init() };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated path from the loader (see above).
    let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(path.to_bytes())))
}
