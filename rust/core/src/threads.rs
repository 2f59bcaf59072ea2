//! The threads of Weir's that run foreign code: the wake thread (wakers,
//! hence coroutine continuations) and the CPU pool's workers (CPU kernels
//! written in another language), and the release thread beside them (the
//! drops of foreign objects). A host runtime may want to know them as they
//! start: a JVM keeps such a thread attached to it, as a daemon, instead of
//! attaching and detaching it around every call into Java.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

static ON_START: OnceLock<fn(&str)> = OnceLock::new();

/// Has `hook` called on each of Weir's threads that run foreign code as it
/// starts, with the thread's name, before it runs any. The first hook set
/// stays; threads already running are not told. A panicking hook is
/// contained: the thread goes on.
pub fn on_thread_start(hook: fn(&str)) {
    let _ = ON_START.set(hook);
}

/// Tells the hook, if one is set, that the current thread, `name`, starts.
pub(crate) fn started(name: &str) {
    if let Some(hook) = ON_START.get() {
        let _ = catch_unwind(AssertUnwindSafe(|| hook(name)));
    }
}
