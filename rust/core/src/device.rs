//! What a backend is and what it drives: the device layer's names, which
//! every layer shares.

pub use weir_device::info::{BackendKind, DeviceInfo, KernelLanguage, LaunchLimits};
