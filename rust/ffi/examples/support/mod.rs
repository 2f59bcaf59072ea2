//! What the FFI examples share: the runtime `--backend NAME` names (cpu by default).

use std::sync::Arc;

use weir_ffi::{Backend, WeirRuntime};

pub fn open_from_args() -> Result<Arc<WeirRuntime>, weir_ffi::WeirError> {
    let args: Vec<String> = std::env::args().collect();
    let name = args.windows(2).find(|w| w[0] == "--backend").map_or("cpu", |w| w[1].as_str());
    let backend = match name {
        "wgpu" => Backend::Wgpu,
        "cuda" => Backend::Cuda,
        "hip" => Backend::Hip,
        "auto" => Backend::Auto,
        _ => Backend::Cpu,
    };
    WeirRuntime::open(backend)
}
