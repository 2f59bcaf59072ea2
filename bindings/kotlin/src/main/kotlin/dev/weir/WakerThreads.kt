package dev.weir

/**
 * The Rust thread that wakes suspended calls.
 *
 * A suspended Weir call resumes when Rust calls the bindings' continuation
 * callback. Work completing resumes it on `weir-wake`, a long-lived thread
 * per process that runs those wakers, holding no Weir lock (never a CPU
 * worker, the wgpu poll thread or a CUDA/HIP callback). A few calls resume
 * their waiters on the thread that ends the wait instead, also holding no
 * Weir lock: `CancelToken.cancel()` and `shutdown()` on the calling thread,
 * a device group's `join` on the thread that joined (`weir-join`). Either
 * way a coroutine resumed there (on `Dispatchers.Unconfined`) may call any
 * Weir API. The library keeps `weir-wake` attached to the JVM as a daemon
 * thread of this name, from when it starts (weir-ffi's `jvm_threads.rs`),
 * as it does the CPU pool's workers, which run Kotlin CPU kernels: JNA
 * would otherwise attach and detach it around every wake-up, which makes
 * each several times dearer.
 */
object WakerThreads {
    /** The JVM name of the waking thread: the name Rust gives it. */
    const val THREAD_NAME: String = "weir-wake"
}
