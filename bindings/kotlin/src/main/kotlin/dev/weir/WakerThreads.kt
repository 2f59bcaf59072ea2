package dev.weir

import com.sun.jna.Callback
import com.sun.jna.CallbackThreadInitializer
import com.sun.jna.Native

/**
 * Keeps the Rust threads that wake suspended calls attached to the JVM.
 *
 * A suspended Weir call resumes when a Rust thread (a CPU stream's worker,
 * the wgpu poll thread, a CUDA/HIP callback) calls the bindings' continuation
 * callback. By default JNA attaches such a native thread to the JVM for the
 * call and detaches it afterwards, which makes every wake-up several times
 * dearer. Weir wakes from few, long-lived threads, so it keeps them attached
 * (as daemon threads, detached by JNA when they exit).
 *
 * The build installs this on the generated continuation callback when its
 * object initialises, before any call can suspend. Set the system property
 * `weir.wakers.detach=true` to measure the JNA default instead.
 */
object WakerThreads {
    /** Whether waker threads stay attached between wake-ups (false when `weir.wakers.detach=true`). */
    val keepAttached: Boolean = !java.lang.Boolean.getBoolean("weir.wakers.detach")

    /** Registers the thread policy for [callback]; called from the generated bindings. */
    @JvmStatic
    fun install(callback: Callback) {
        if (keepAttached) {
            Native.setCallbackThreadInitializer(
                callback,
                CallbackThreadInitializer(/* daemon = */ true, /* detach = */ false, "weir-waker"),
            )
        }
    }
}
