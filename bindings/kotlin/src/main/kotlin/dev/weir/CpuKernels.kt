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
 * scalars each counted on their own). Buffers are NIO views of the device
 * memory itself, lent for the call: read-only for arguments declared
 * [Access.READ]; using one after the kernel returns is refused.
 */
class CpuKernelArgs internal constructor(private val call: CpuKernelCall) {
    /** The grid the kernel was launched with (its block is the launch's on every backend). */
    val grid: Grid get() = call.grid()

    /** Number of buffer arguments. */
    val bufferCount: Int get() = call.bufferCount().toInt()

    /** Buffer argument [index] as little-endian bytes. */
    fun bytes(index: Int): ByteBuffer {
        val at = index.toUInt()
        val size = call.bufferSizeBytes(at).toLong()
        val bytes = Pointer(call.bufferAddress(at).toLong()).getByteBuffer(0, size).order(ByteOrder.LITTLE_ENDIAN)
        return if (call.bufferWritable(at)) bytes else bytes.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN)
    }

    /** Buffer argument [index] as `f32`s. */
    fun floats(index: Int): FloatBuffer = bytes(index).asFloatBuffer()

    /** Buffer argument [index] as 32-bit integers (`i32`, or `u32` bits). */
    fun ints(index: Int): IntBuffer = bytes(index).asIntBuffer()

    /** Scalar argument [index], an `f32`. */
    fun float(index: Int): Float = call.scalarF32(index.toUInt())

    /** Scalar argument [index], an `i32`. */
    fun int(index: Int): Int = call.scalarI32(index.toUInt())

    /** Scalar argument [index], a `u32`. */
    fun uint(index: Int): UInt = call.scalarU32(index.toUInt())
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
 */
fun cpuKernel(body: CpuKernelFunction): CpuKernelBody = object : CpuKernelBody {
    override fun run(call: CpuKernelCall): String? = call.use {
        try {
            body.run(CpuKernelArgs(it))
            null
        } catch (failure: Throwable) {
            failure.message ?: failure.toString()
        }
    }
}
