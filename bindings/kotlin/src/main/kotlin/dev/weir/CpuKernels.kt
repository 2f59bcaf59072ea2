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
class CpuKernelArgs internal constructor(
    /** The call as the library packs it (weir-ffi's `CpuKernelCall.packed`): grid, buffers, scalars. */
    private val packed: LongArray,
) {
    /** The copies lent so far, by buffer index. */
    private val lent = HashMap<Int, Lent>()

    /** False once the kernel has returned. */
    @Volatile
    private var open = true

    private class Lent(val bytes: ByteBuffer, val address: Long, val writable: Boolean)

    /** Where the scalars start in [packed]: after the grid, the buffer count and the buffers. */
    private val scalarsAt: Int = GRID_WORDS + 1 + WORDS_PER_ARGUMENT * packed[GRID_WORDS].toInt()

    /** The grid the kernel was launched with (its block is the launch's on every backend). */
    @get:Throws(WeirException::class)
    val grid: Grid
        get() = live {
            val word = { at: Int -> packed[at].toUInt() }
            Grid(word(0), word(1), word(2), word(3), word(4), word(5), word(6))
        }

    /** Number of buffer arguments. */
    @get:Throws(WeirException::class)
    val bufferCount: Int get() = live { packed[GRID_WORDS].toInt() }

    /** Buffer argument [index] as little-endian bytes: the call's copy of it. */
    @Throws(WeirException::class)
    fun bytes(index: Int): ByteBuffer {
        val copy = synchronized(lent) {
            live {
                lent.getOrPut(index) {
                    val at = argument(index, bufferCount, GRID_WORDS + 1, "buffer")
                    val (address, size, writable) = Triple(packed[at], packed[at + 1], packed[at + 2] != 0L)
                    if (size > Int.MAX_VALUE) {
                        throw WeirException.InvalidArgument("invalid argument: buffer argument $index holds $size bytes, more than one JVM array")
                    }
                    val bytes = ByteArray(size.toInt())
                    Pointer(address).read(0, bytes, 0, bytes.size)
                    Lent(ByteBuffer.wrap(bytes), address, writable)
                }
            }
        }
        val view = copy.bytes.duplicate().order(ByteOrder.LITTLE_ENDIAN)
        return if (copy.writable) view else view.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN)
    }

    /** Buffer argument [index] as `f32`s. */
    @Throws(WeirException::class)
    fun floats(index: Int): FloatBuffer = bytes(index).asFloatBuffer()

    /** Buffer argument [index] as 32-bit integers (`i32`, or `u32` bits). */
    @Throws(WeirException::class)
    fun ints(index: Int): IntBuffer = bytes(index).asIntBuffer()

    /** Scalar argument [index], an `f32`. */
    @JvmName("scalarF32") // Java: `float` is a keyword there
    @Throws(WeirException::class)
    fun float(index: Int): Float = Float.fromBits(scalar(index, F32).toInt())

    /** Scalar argument [index], an `i32`. */
    @JvmName("scalarI32") // Java: `int` is a keyword there
    @Throws(WeirException::class)
    fun int(index: Int): Int = scalar(index, I32).toInt()

    /** Scalar argument [index], a `u32`. */
    @JvmName("scalarU32")
    @Throws(WeirException::class)
    fun uint(index: Int): UInt = scalar(index, U32).toUInt()

    /** Scalar argument [index], a `u64`. */
    @JvmName("scalarU64")
    @Throws(WeirException::class)
    fun ulong(index: Int): ULong = scalar(index, U64).toULong()

    /** Scalar argument [index], an `i64`. */
    @JvmName("scalarI64") // Java: `long` is a keyword there
    @Throws(WeirException::class)
    fun long(index: Int): Long = scalar(index, I64)

    /** Scalar argument [index], an `f64`. */
    @JvmName("scalarF64") // Java: `double` is a keyword there
    @Throws(WeirException::class)
    fun double(index: Int): Double = Double.fromBits(scalar(index, F64))

    /** Scalar argument [index], a struct passed by value: a copy of its bytes (little-endian). */
    @JvmName("structBytes")
    @Throws(WeirException::class)
    fun struct(index: Int): ByteBuffer = synchronized(lent) {
        live {
            val at = typedScalar(index, STRUCT)
            val bytes = ByteArray(packed[at + 2].toInt())
            Pointer(packed[at + 1]).read(0, bytes, 0, bytes.size)
            ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
        }
    }

    /** The value of scalar argument [index], which must be of type [tag]. */
    private fun scalar(index: Int, tag: Int): Long = live { packed[typedScalar(index, tag) + 1] }

    /** Where scalar argument [index] is in [packed], refused unless its type is [tag]. */
    private fun typedScalar(index: Int, tag: Int): Int {
        val at = argument(index, packed[scalarsAt].toInt(), scalarsAt + 1, "scalar")
        val found = packed[at].toInt()
        if (found != tag) {
            throw WeirException.InvalidArgument("invalid argument: scalar argument $index is a ${SCALAR_TYPES.getOrElse(found) { "?" }}, not a ${SCALAR_TYPES[tag]}")
        }
        return at
    }

    /** Where argument [index] of [count] is in [packed], the first at [first]; refused if there is none. */
    private fun argument(index: Int, count: Int, first: Int, kind: String): Int {
        if (index !in 0 until count) {
            throw WeirException.InvalidArgument("invalid argument: no $kind argument $index: the kernel has $count")
        }
        return first + WORDS_PER_ARGUMENT * index
    }

    /** [ask], or the typed refusal once the kernel has returned. */
    private inline fun <T> live(ask: () -> T): T {
        if (!open) throw WeirException.InvalidArgument("invalid argument: this kernel call is over: its memory is no longer lent")
        return ask()
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

    private companion object {
        /** The grid's words: groups, block, shared bytes. */
        const val GRID_WORDS = 7

        /** A buffer's words (address, size, writable) and a scalar's (type, two words). */
        const val WORDS_PER_ARGUMENT = 3

        // Scalar types as the library tags them.
        const val U32 = 6
        const val I32 = 7
        const val F32 = 8
        const val U64 = 9
        const val I64 = 10
        const val F64 = 11
        const val STRUCT = 12

        /** Each tag's name, for refusals. */
        val SCALAR_TYPES = listOf("?", "u8", "i8", "u16", "i16", "f16", "u32", "i32", "f32", "u64", "i64", "f64", "struct")
    }
}

/** A CPU kernel's body: a Kotlin lambda or a Java one (`args -> { … }`). */
fun interface CpuKernelFunction {
    /**
     * Runs the kernel over [args]; throwing fails the op with the exception's
     * message. Declared for Java, so that a Java body may let the
     * [WeirException] of an argument accessor, or any other, propagate.
     */
    @Throws(Exception::class)
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
@Throws(WeirException::class)
fun cpuKernel(body: CpuKernelFunction): CpuKernelBody {
    if (NativeLink.linked) {
        val token = NativeKernels.bind(body)
        if (token != 0L) return cpuKernelBoundInJvm(token.toULong())
    }
    return cpuKernelThroughCallback(body)
}

/** [body] called through UniFFI's callback, as where the JNI entries are not bound. */
internal fun cpuKernelThroughCallback(body: CpuKernelFunction): CpuKernelBody = object : CpuKernelBody {
    override fun run(call: CpuKernelCall): String? = call.use {
        // Nothing may leave a callback that returns no error: a refusal fails the op instead.
        val packed = try {
            it.packed().toLongArray()
        } catch (refused: WeirException) {
            return refused.message ?: refused.toString()
        }
        runBody(body, packed)
    }
}

/** Runs [body] over the call [packed] (see [CpuKernelArgs]): the kernel's failure message, or null. */
private fun runBody(body: CpuKernelFunction, packed: LongArray): String? {
    val args = CpuKernelArgs(packed)
    return try {
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

    /** One launch of [body] over the call [packed] (see [CpuKernelArgs]); called by the library's worker. */
    @JvmStatic
    fun run(body: CpuKernelFunction, packed: LongArray): String? = runBody(body, packed)
}
