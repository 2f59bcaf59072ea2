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

    /**
     * The failure in [status], copied into this thread's one failure
     * structure; [status] is clear again.
     *
     * Reused, like the status block: a structure allocated per failure (and
     * the `RustBuffer` inside it, and one to read the block through) is
     * native memory only JNA's cleaner thread frees, so failing calls from a
     * few threads outran it and filled the heap, as succeeding ones did before
     * the block. The generated check lifts the error (reading and freeing its
     * buffer through the block, not this structure) before this thread can
     * fail again, so one per thread is enough.
     */
    @JvmStatic
    fun failure(status: Pointer): UniffiRustCallStatus {
        try {
            val copy = failures.get()
            copy.code = status.getByte(0)
            copy.error_buf.capacity = status.getLong(ERROR_CAPACITY)
            copy.error_buf.len = status.getLong(ERROR_LEN)
            copy.error_buf.data = status.getPointer(ERROR_DATA)
            return copy
        } finally {
            status.setByte(0, UNIFFI_CALL_SUCCESS)
        }
    }

    private val failures = ThreadLocal.withInitial { UniffiRustCallStatus() }

    /** Where `error_buf`'s fields lie in the block, as JNA lays the structure out. */
    private val ERROR_CAPACITY: Long
    private val ERROR_LEN: Long
    private val ERROR_DATA: Long

    init {
        val layout = Layout()
        ERROR_CAPACITY = layout.errorBuffer + layout.buffer.field("capacity")
        ERROR_LEN = layout.errorBuffer + layout.buffer.field("len")
        ERROR_DATA = layout.errorBuffer + layout.buffer.field("data")
    }

    /** The generated structures' field offsets, read once. */
    private class Layout : UniffiRustCallStatus() {
        val errorBuffer = fieldOffset("error_buf").toLong()
        val buffer = BufferLayout()
    }

    private class BufferLayout : RustBuffer() {
        fun field(name: String): Long = fieldOffset(name).toLong()
    }
}
