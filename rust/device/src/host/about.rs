//! What the host is, as the CPU device describes itself: the processor's
//! name and the memory installed, as the system tells them (`sysinfo`:
//! Linux, macOS, Windows); where it does not, a plain name and no memory
//! figure.

use std::sync::OnceLock;

use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};

/// The processor's brand and the installed memory, read once.
fn host() -> &'static (Option<String>, Option<u64>) {
    static HOST: OnceLock<(Option<String>, Option<u64>)> = OnceLock::new();
    HOST.get_or_init(|| {
        let wanted = RefreshKind::nothing()
            .with_cpu(CpuRefreshKind::nothing())
            .with_memory(MemoryRefreshKind::nothing().with_ram());
        let Ok(system) = System::new_with_specifics(wanted) else { return (None, None) };
        let brand = system.cpus().first().map(|cpu| cpu.brand().trim().to_owned()).filter(|brand| !brand.is_empty());
        (brand, Some(system.total_memory()).filter(|&bytes| bytes > 0))
    })
}

/// The processor's name, with the threads it runs.
pub fn name() -> String {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let model = host().0.as_deref().unwrap_or("host CPU");
    format!("{model} ({threads} threads)")
}

/// The host's memory in bytes, where the system tells it.
pub fn memory_bytes() -> Option<u64> {
    host().1
}
