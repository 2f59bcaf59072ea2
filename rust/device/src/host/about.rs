//! What the host is, as the CPU device describes itself: the processor's
//! name and the memory installed, where the system says so cheaply (Linux's
//! `/proc`); elsewhere a plain name and no memory figure.

use std::sync::OnceLock;

/// The processor's name, with the threads it runs.
pub fn name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let model = proc_field("/proc/cpuinfo", "model name").unwrap_or_else(|| "host CPU".to_owned());
        format!("{model} ({threads} threads)")
    })
    .clone()
}

/// The host's memory in bytes, where the system tells it.
pub fn memory_bytes() -> Option<u64> {
    static MEMORY: OnceLock<Option<u64>> = OnceLock::new();
    *MEMORY.get_or_init(|| {
        // "MemTotal:       16318200 kB"
        let total = proc_field("/proc/meminfo", "MemTotal")?;
        let kib: u64 = total.strip_suffix("kB")?.trim().parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// The value of the first `key: value` line of a `/proc` file.
fn proc_field(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name.trim() == key).then(|| value.trim().to_owned()).filter(|value| !value.is_empty())
    })
}
