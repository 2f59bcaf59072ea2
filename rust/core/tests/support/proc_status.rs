//! The process's own numbers from `/proc/self/status`, shared by the soak
//! and the tests that bound threads.

/// One of `/proc/self/status`'s numeric fields (`VmRSS` in KiB, `Threads`);
/// 0 where there is no such file.
pub fn status(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
