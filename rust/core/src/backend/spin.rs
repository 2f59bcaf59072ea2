//! How long a GPU backend's waiting thread spins before it blocks: a
//! blocking wait wakes its thread well after the device got there (some
//! 20 us for a CUDA blocking-sync event, hundreds for some Vulkan drivers'
//! fence waits); a polling loop sees it at once. Each waiter spins only
//! while recent waits ended within the budget, so long work costs no core.

use std::time::Duration;

/// The budget per wait, unless `WEIR_GPU_SPIN_US` says otherwise (0: never spin).
const SPIN_BUDGET: Duration = Duration::from_micros(200);

/// Read when a waiting thread starts, so a benchmark can compare budgets.
pub(crate) fn spin_budget() -> Duration {
    std::env::var("WEIR_GPU_SPIN_US")
        .ok()
        .and_then(|micros| micros.parse().ok())
        .map_or(SPIN_BUDGET, Duration::from_micros)
}
