package dev.weir

import com.sun.jna.Callback
import com.sun.jna.CallbackThreadInitializer
import com.sun.jna.Native

/**
 * Keeps the Rust thread that wakes suspended calls attached to the JVM.
 *
 * A suspended Weir call resumes when Rust calls the bindings' continuation
 * callback. Weir makes that call from one place only: `weir-wake`, a
 * long-lived thread per process that runs every waker, holding no Weir lock
 * (never a CPU worker, the wgpu poll thread or a CUDA/HIP callback). So a
 * coroutine resumed there (on `Dispatchers.Unconfined`) may call any Weir API.
 * By default JNA attaches a native thread to the JVM for each callback and
 * detaches it afterwards, which makes every wake-up several times dearer; this
 * keeps `weir-wake` attached, as a daemon thread of the same name (detached
 * by JNA if it ever exits).
 *
 * The build installs this on the generated continuation callback when its
 * object initialises, before any call can suspend. Set the system property
 * `weir.wakers.detach=true` to measure the JNA default instead.
 */
object WakerThreads {
    /** The JVM name of the waking thread: the name Rust gives it. */
    const val THREAD_NAME: String = "weir-wake"

    /** Whether the waking thread stays attached between wake-ups (false when `weir.wakers.detach=true`). */
    val keepAttached: Boolean = !java.lang.Boolean.getBoolean("weir.wakers.detach")

    /** Registers the thread policy for [callback]; called from the generated bindings. */
    @JvmStatic
    fun install(callback: Callback) {
        if (keepAttached) {
            Native.setCallbackThreadInitializer(
                callback,
                CallbackThreadInitializer(/* daemon = */ true, /* detach = */ false, THREAD_NAME),
            )
        }
    }
}
