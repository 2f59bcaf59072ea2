//! What the host is, as the CPU device describes itself: the processor's
//! name and the memory installed, as the system tells them (`sysinfo`:
//! Linux, macOS, Windows); where it does not, a plain name and no memory
//! figure.

use std::sync::OnceLock;

use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};

/// The processor's name, with the threads it runs, and the host's memory in
/// bytes where the system tells it (both read from the system once).
pub fn about() -> (String, Option<u64>) {
    static HOST: OnceLock<(Option<String>, Option<u64>)> = OnceLock::new();
    let (brand, memory) = HOST.get_or_init(|| {
        let wanted = RefreshKind::nothing()
            .with_cpu(CpuRefreshKind::nothing())
            .with_memory(MemoryRefreshKind::nothing().with_ram());
        let Ok(system) = System::new_with_specifics(wanted) else { return (None, None) };
        let brand = system.cpus().first().map(|cpu| cpu.brand().trim().to_owned()).filter(|brand| !brand.is_empty());
        (brand, Some(system.total_memory()).filter(|&bytes| bytes > 0))
    });
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    (format!("{} ({threads} threads)", brand.as_deref().unwrap_or("host CPU")), *memory)
}
