@file:JvmName("WeirBatch")

package dev.weir

import java.util.IdentityHashMap

/**
 * The ops of one [WeirStream.batch], collected in the order they are made and
 * admitted together when the block returns.
 *
 * Its calls mirror the stream's (`execute`, `write`), but they only collect:
 * nothing is checked or admitted until the block returns. Ops are packed in
 * the encoding `WeirStream.submitBatch` reads (see weir-ffi's `batch.rs`), and
 * each buffer and kernel crosses into Rust once per batch, however many ops
 * use it.
 */
class Batch internal constructor() {
    internal val buffers = ArrayList<Buffer>()
    internal val kernels = ArrayList<Kernel>()
    private val bufferSlots = IdentityHashMap<Buffer, Int>()
    private val kernelSlots = IdentityHashMap<Kernel, Int>()
    private var bytes = ByteArray(1024)
    private var size = 0

    /** Adds `kernel` over [args] on [grid], as `WeirStream.execute` would enqueue it. */
    fun execute(kernel: Kernel, grid: Grid, args: List<Arg>) {
        putByte(OpEncoding.OP_EXECUTE)
        putInt(slotOf(kernel))
        if (grid == single) {
            putByte(OpEncoding.GRID_DEFAULT)
        } else {
            putByte(OpEncoding.GRID_GIVEN)
            for (field in intArrayOf(grid.groupsX.toInt(), grid.groupsY.toInt(), grid.groupsZ.toInt(),
                grid.blockX.toInt(), grid.blockY.toInt(), grid.blockZ.toInt(), grid.sharedBytes.toInt())) {
                putInt(field)
            }
        }
        putInt(args.size)
        for (arg in args) {
            when (arg) {
                is Arg.Buffer -> {
                    putByte(OpEncoding.ARG_BUFFER)
                    putInt(slotOf(arg.buffer))
                    putByte(OpEncoding.access(arg.access))
                }
                is Arg.U32 -> { putByte(OpEncoding.ARG_U32); putInt(arg.value.toInt()) }
                is Arg.I32 -> { putByte(OpEncoding.ARG_I32); putInt(arg.value) }
                is Arg.F32 -> { putByte(OpEncoding.ARG_F32); putInt(arg.value.toRawBits()) }
            }
        }
        ops++
    }

    /** Adds `kernel` over [args] on [grid]. */
    fun execute(kernel: Kernel, grid: Grid, vararg args: Arg) = execute(kernel, grid, args.asList())

    /** Adds the built-in [op] over [args]. */
    fun execute(op: BuiltinOp, vararg args: Arg) = execute(op.kernel(), single, args.asList())

    /** Adds a copy of raw [data] (a whole number of the buffer's elements) into [buffer] at element [offset]. */
    @JvmOverloads
    fun write(buffer: Buffer, data: ByteArray, offset: Long = 0) = write(buffer, data, OpEncoding.ELEMENT_BYTES, offset)

    /** Adds a copy of [data] into [buffer] (of `f32`s or raw bytes) at element [offset]. */
    @JvmOverloads
    fun write(buffer: Buffer, data: FloatArray, offset: Long = 0) =
        write(buffer, data.toLittleEndianBytes(), OpEncoding.ELEMENT_F32, offset)

    /** Adds a copy of [data] into [buffer] (of `i32`s, `u32`s as bits, or raw bytes) at element [offset]. */
    @JvmOverloads
    fun write(buffer: Buffer, data: IntArray, offset: Long = 0) =
        write(buffer, data.toLittleEndianBytes(), OpEncoding.ELEMENT_I32, offset)

    /** A write of [data], whose element type Rust checks against the buffer's when the batch is admitted. */
    private fun write(buffer: Buffer, data: ByteArray, element: Byte, offset: Long) {
        if (offset < 0) throw WeirException.InvalidArgument("invalid argument: negative element offset $offset")
        putByte(OpEncoding.OP_WRITE)
        putInt(slotOf(buffer))
        putByte(element)
        putLong(offset)
        putLong(data.size.toLong())
        room(data.size)
        data.copyInto(bytes, size)
        size += data.size
        ops++
    }

    /** How many ops were added. */
    var ops: Int = 0
        private set

    internal fun encoded(): ByteArray = bytes.copyOf(size)

    // The last buffer and kernel looked up, and their slots: ops in a row
    // often name the same ones, and this skips the map.
    private var lastBuffer: Buffer? = null
    private var lastBufferSlot = 0
    private var lastKernel: Kernel? = null
    private var lastKernelSlot = 0

    private fun slotOf(buffer: Buffer): Int {
        if (buffer !== lastBuffer) {
            lastBufferSlot = bufferSlots.getOrPut(buffer) {
                buffers += buffer
                buffers.size - 1
            }
            lastBuffer = buffer
        }
        return lastBufferSlot
    }

    private fun slotOf(kernel: Kernel): Int {
        if (kernel !== lastKernel) {
            lastKernelSlot = kernelSlots.getOrPut(kernel) {
                kernels += kernel
                kernels.size - 1
            }
            lastKernel = kernel
        }
        return lastKernelSlot
    }

    private fun room(more: Int) {
        if (size + more > bytes.size) bytes = bytes.copyOf(maxOf(bytes.size * 2, size + more))
    }

    private fun putByte(value: Byte) {
        room(1)
        bytes[size++] = value
    }

    private fun putInt(value: Int) {
        room(4)
        bytes[size] = value.toByte()
        bytes[size + 1] = (value shr 8).toByte()
        bytes[size + 2] = (value shr 16).toByte()
        bytes[size + 3] = (value shr 24).toByte()
        size += 4
    }

    private fun putLong(value: Long) {
        putInt(value.toInt())
        putInt((value shr 32).toInt())
    }
}

/**
 * Admits every op [build] adds, in order, in one call: each its own op (its
 * own versions, its own failure), with no op of any stream between them.
 * Everything is checked before anything is admitted, so one refused op
 * admits none. Returns once admitted, not once done. An empty batch admits nothing.
 */
@Throws(WeirException::class)
fun WeirStream.batch(build: Batch.() -> Unit) {
    val batch = Batch().apply(build)
    if (batch.ops > 0) submitBatch(batch.buffers, batch.kernels, batch.encoded())
}
