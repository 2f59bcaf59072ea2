//! hiprtc: HIP C to an AMD GPU code object.

use std::sync::Mutex;

use super::ffi;
use crate::error::Result;
use crate::lock::lock;
use crate::rtc::{rtc_compile, Compiled};

/// hiprtc statuses are `hiprtcResult` codes, not `hipError_t`: kept as numbers.
fn describe(result: ffi::Status) -> Result<(), String> {
    match result {
        ffi::SUCCESS => Ok(()),
        ffi::Status(code) => Err(format!("hiprtcResult {code}")),
    }
}

// The same compile as NVRTC's but for the names, written once in `rtc_compile!`; hiprtc's
// calls live in libamdhip64 in ROCm 5.2.
rtc_compile! { crate::info::BackendKind::Hip, "hiprtc", calls: ffi, check: describe;
    create: hiprtcCreateProgram, add_name_expression: hiprtcAddNameExpression, compile: hiprtcCompileProgram,
    log_size: hiprtcGetProgramLogSize, log: hiprtcGetProgramLog, lowered_name: hiprtcGetLoweredName,
    code_size: hiprtcGetCodeSize, code: hiprtcGetCode, destroy: hiprtcDestroyProgram,
}

/// Held while hiprtc compiles: ROCm 5.2's hiprtcCompileProgram crashes when
/// two threads compile at once (seen in this crate's tests), and compiles now
/// run in `prepare`, on any thread.
static COMPILING: Mutex<()> = Mutex::new(());

/// Compiles `source` for `arch` (`gfx90a`, …), or for the current device
/// when `None`, with `options` after Weir's own, resolving `name_expression`.
pub fn compile(
    source: &str,
    arch: Option<&str>,
    options: &[String],
    name_expression: Option<&str>,
) -> Result<Compiled> {
    let mut all = vec!["-O3".to_owned()];
    all.extend(arch.map(|arch| format!("--offload-arch={arch}")));
    all.extend(options.iter().cloned());
    let _compiling = lock(&COMPILING);
    compile_program(source, &all, name_expression)
}
