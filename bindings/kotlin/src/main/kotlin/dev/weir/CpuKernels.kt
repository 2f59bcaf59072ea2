/**
 * Custom kernels for the CPU backend, written in Kotlin (or Java): the CPU
 * backend runs no kernel source, so a custom kernel's CPU implementation is a
 * function, called on the stream's worker thread with the launch's memory.
 */
@file:JvmName("WeirCpuKernels")

package dev.weir

import com.sun.jna.Pointer
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.FloatBuffer
import java.nio.IntBuffer

/**
 * The arguments of one CPU kernel launch, in declaration order (buffers and
 * scalars each counted on their own).
 *
 * A buffer is lent as the call's own copy of the device memory: [bytes],
 * [floats] and [ints] give little-endian NIO views of that copy (one copy per
 * buffer per call, shared by every view of it), read-only for arguments
 * declared [Access.READ]. When the kernel returns, what it wrote to a
 * writable argument's copy is written to the device memory, before the op
 * counts as done. The copies never alias device memory, so a view kept past
 * the call, or used from another thread, can never reach memory the runtime
 * owns: what is written to it after the kernel returns goes nowhere. Asking
 * these arguments for anything once the kernel has returned throws
 * [WeirException.InvalidArgument].
 */
class CpuKernelArgs internal constructor(private val call: CpuKernelCall) {
    /** The copies lent so far, by buffer index. */
    private val lent = HashMap<Int, Lent>()

    /** False once the kernel has returned. */
    @Volatile
    private var open = true

    private class Lent(val bytes: ByteBuffer, val address: Long, val writable: Boolean)

    /** The grid the kernel was launched with (its block is the launch's on every backend). */
    val grid: Grid get() = call { grid() }

    /** Number of buffer arguments. */
    val bufferCount: Int get() = call { bufferCount().toInt() }

    /** Buffer argument [index] as little-endian bytes: the call's copy of it. */
    fun bytes(index: Int): ByteBuffer {
        val copy = synchronized(lent) {
            lent.getOrPut(index) {
                val at = index.toUInt()
                val (size, address, writable) = call {
                    Triple(bufferSizeBytes(at).toLong(), bufferAddress(at).toLong(), bufferWritable(at))
                }
                if (size > Int.MAX_VALUE) {
                    throw WeirException.InvalidArgument("invalid argument: buffer argument $index holds $size bytes, more than one JVM array")
                }
                val bytes = ByteArray(size.toInt())
                Pointer(address).read(0, bytes, 0, bytes.size)
                Lent(ByteBuffer.wrap(bytes), address, writable)
            }
        }
        val view = copy.bytes.duplicate().order(ByteOrder.LITTLE_ENDIAN)
        return if (copy.writable) view else view.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN)
    }

    /** Buffer argument [index] as `f32`s. */
    fun floats(index: Int): FloatBuffer = bytes(index).asFloatBuffer()

    /** Buffer argument [index] as 32-bit integers (`i32`, or `u32` bits). */
    fun ints(index: Int): IntBuffer = bytes(index).asIntBuffer()

    /** Scalar argument [index], an `f32`. */
    @JvmName("scalarF32") // Java: `float` is a keyword there
    fun float(index: Int): Float = call { scalarF32(index.toUInt()) }

    /** Scalar argument [index], an `i32`. */
    @JvmName("scalarI32") // Java: `int` is a keyword there
    fun int(index: Int): Int = call { scalarI32(index.toUInt()) }

    /** Scalar argument [index], a `u32`. */
    @JvmName("scalarU32")
    fun uint(index: Int): UInt = call { scalarU32(index.toUInt()) }

    /** Scalar argument [index], a `u64`. */
    @JvmName("scalarU64")
    fun ulong(index: Int): ULong = call { scalarU64(index.toUInt()) }

    /** Scalar argument [index], an `i64`. */
    @JvmName("scalarI64") // Java: `long` is a keyword there
    fun long(index: Int): Long = call { scalarI64(index.toUInt()) }

    /** Scalar argument [index], an `f64`. */
    @JvmName("scalarF64") // Java: `double` is a keyword there
    fun double(index: Int): Double = call { scalarF64(index.toUInt()) }

    /** Scalar argument [index], a struct passed by value: a copy of its bytes (little-endian). */
    @JvmName("structBytes")
    fun struct(index: Int): ByteBuffer =
        ByteBuffer.wrap(call { scalarBytes(index.toUInt()) }).order(ByteOrder.LITTLE_ENDIAN)

    /** [ask] of the call, or the typed refusal once the kernel has returned. */
    private fun <T> call(ask: CpuKernelCall.() -> T): T {
        if (!open) throw WeirException.InvalidArgument("invalid argument: this kernel call is over: its memory is no longer lent")
        return call.ask()
    }

    /**
     * Ends the loan: writes back what the kernel wrote to each writable
     * copy (still on the worker, while the memory is lent), then refuses
     * every later use.
     */
    internal fun finish(wrote: Boolean) {
        synchronized(lent) {
            open = false
            if (wrote) {
                for (copy in lent.values) {
                    if (copy.writable) Pointer(copy.address).write(0, copy.bytes.array(), 0, copy.bytes.capacity())
                }
            }
            lent.clear()
        }
    }
}

/** A CPU kernel's body: a Kotlin lambda or a Java one (`args -> { … }`). */
fun interface CpuKernelFunction {
    /** Runs the kernel over [args]; throwing fails the op with the exception's message. */
    fun run(args: CpuKernelArgs)
}

/**
 * A CPU implementation for [Kernel.custom] (its `cpu` argument) from [body].
 * An exception thrown by [body] fails the op, and the buffers it writes, with
 * its message. [body] runs on the stream's worker thread: it must not wait
 * for work on its own stream.
 *
 * Where the library's JNI entries are bound ([NativeLink]), the worker calls
 * [body] through JNI ([NativeKernels]); else through UniFFI's callback, a
 * JNA callback several times dearer than a small kernel.
 */
fun cpuKernel(body: CpuKernelFunction): CpuKernelBody {
    if (NativeLink.linked) {
        val token = NativeKernels.bind(body)
        if (token != 0L) return cpuKernelBoundInJvm(token.toULong())
    }
    return object : CpuKernelBody {
        override fun run(call: CpuKernelCall): String? = runBody(body, call)
    }
}

/** Runs [body] over [call]'s arguments and closes [call]: the kernel's failure message, or null. */
private fun runBody(body: CpuKernelFunction, call: CpuKernelCall): String? = call.use {
    val args = CpuKernelArgs(it)
    try {
        body.run(args)
        args.finish(wrote = true)
        null
    } catch (failure: Throwable) {
        // A failed op publishes failed versions: what it wrote is not kept.
        args.finish(wrote = false)
        failure.message ?: failure.toString()
    }
}

/**
 * The JNI side of Kotlin CPU kernels (weir-ffi's `jvm_kernel.rs`): [bind]
 * holds a body in the library under a token, for `cpuKernelBoundInJvm`; the
 * worker calls [run] for each launch.
 */
internal object NativeKernels {
    /** Holds [body] in the library by a global reference; its token, or 0 if it could not. */
    @JvmStatic
    external fun bind(body: CpuKernelFunction): Long

    /** One launch of [body] over the call whose owned handle is [call]; called by the library's worker. */
    @JvmStatic
    fun run(body: CpuKernelFunction, call: Long): String? = runBody(body, FfiConverterTypeCpuKernelCall.lift(call))
}
