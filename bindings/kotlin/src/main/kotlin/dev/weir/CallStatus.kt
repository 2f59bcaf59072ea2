package dev.weir

import com.sun.jna.Memory
import com.sun.jna.Pointer

/**
 * The `RustCallStatus` of every UniFFI call: one block of native memory per
 * thread, reused, passed to Rust as a plain pointer.
 *
 * As generated, each call allocated a JNA `Structure` for its status (native
 * memory with a cleaner registration, and a nested `RustBuffer` with another)
 * and JNA wrote and read it reflectively around the call: several
 * microseconds of a trivial call, and garbage that only JNA's one cleaner
 * thread frees, so sustained calls from a few threads outran it and filled
 * the heap. The build makes the generated calls use this instead (see
 * xtask/src/kotlin.rs).
 *
 * Rust writes the block only when a call fails (a success leaves it as it
 * was), so its code is kept zero between calls: [failure] copies a failure out
 * and clears the code before anything else can run on the thread, so a call
 * made meanwhile (lifting the error, freeing its buffer, a call nested in an
 * argument's lowering) finds it clear too.
 */
internal object CallStatus {
    /** The size of `RustCallStatus` as JNA lays it out (a code, then a `RustBuffer`). */
    private val size: Long = UniffiRustCallStatus().size().toLong()

    private val block = ThreadLocal.withInitial { Memory(size).also { it.clear() } }

    /** This thread's status block, its code zero. */
    @JvmStatic
    fun get(): Pointer = block.get()

    /** True when Rust reported a failure in [status]. */
    @JvmStatic
    fun failed(status: Pointer): Boolean = status.getByte(0) != UNIFFI_CALL_SUCCESS

    /** The failure in [status], copied out; [status] is clear again. */
    @JvmStatic
    fun failure(status: Pointer): UniffiRustCallStatus {
        try {
            val view = View(status)
            val copy = UniffiRustCallStatus()
            copy.code = view.code
            copy.error_buf = RustBuffer.create(view.error_buf.capacity.toULong(), view.error_buf.len.toULong(), view.error_buf.data)
            return copy
        } finally {
            status.setByte(0, UNIFFI_CALL_SUCCESS)
        }
    }

    /** The generated structure read over a status block (the failure path only). */
    private class View(status: Pointer) : UniffiRustCallStatus() {
        init {
            useMemory(status)
            read()
        }
    }
}
