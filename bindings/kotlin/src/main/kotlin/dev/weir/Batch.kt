@file:JvmName("WeirBatch")

package dev.weir

import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.IdentityHashMap

/**
 * The ops of one [WeirStream.batch], collected in the order they are made and
 * admitted together when the block returns; or of one [WeirStream.record],
 * recorded as a graph when the block returns.
 *
 * Its calls mirror the stream's (`execute`, `write`), but they only collect:
 * nothing is checked or admitted until the block returns. Ops are packed in
 * the encoding the generated `WeirStream.submitBatchFromRawMemory` reads (see weir-ffi's `batch.rs`), and
 * each buffer and kernel crosses into Rust once per batch, however many ops
 * use it.
 */
class Batch internal constructor() {
    internal val buffers = ArrayList<Buffer>()
    internal val kernels = ArrayList<Kernel>()
    private val bufferSlots = IdentityHashMap<Buffer, Int>()
    private val kernelSlots = IdentityHashMap<Kernel, Int>()

    /** The encoding so far: direct memory, lent to Rust when admitted; null once admitted. */
    private var bytes: ByteBuffer? = Encodings.take()
    private var size = 0

    /** Adds `kernel` over [args] on [grid], as `WeirStream.execute` would enqueue it. */
    @Throws(WeirException::class)
    fun execute(kernel: Kernel, grid: Grid, args: List<Arg>) {
        val argCount = args.size
        val given = grid != single
        val out = room(1 + 4 + 1 + (if (given) 7 * 4 else 0) + 4 + OpEncoding.argsBytes(args))
        var at = size
        out.put(at, OpEncoding.OP_EXECUTE)
        out.putInt(at + 1, slotOf(kernel))
        at = OpEncoding.putGrid(out, at + 5, grid, given)
        out.putInt(at, argCount)
        at += 4
        for (i in 0 until argCount) {
            val arg = args[i]
            at = OpEncoding.putArg(out, at, arg, if (arg is Arg.Buffer) slotOf(arg.buffer) else 0)
        }
        size = at
        ops++
    }

    /** Adds `kernel` over [args] on [grid]. */
    @Throws(WeirException::class)
    fun execute(kernel: Kernel, grid: Grid, vararg args: Arg) = execute(kernel, grid, args.asList())

    /** Adds the built-in [op] over [args]. */
    @Throws(WeirException::class)
    fun execute(op: BuiltinOp, vararg args: Arg) = execute(op.kernel(), single, args.asList())

    /** Adds a copy of raw [data] (a whole number of the buffer's elements) into [buffer] at element [offset]. */
    @JvmOverloads
    @Throws(WeirException::class)
    fun write(buffer: Buffer, data: ByteArray, offset: Long = 0) =
        write(buffer, OpEncoding.ELEMENT_BYTES, offset, data.size.toLong()) { it.put(data) }

    /** Adds a copy of [data] into [buffer] (of `f32`s or raw bytes) at element [offset]. */
    @JvmOverloads
    @Throws(WeirException::class)
    fun write(buffer: Buffer, data: FloatArray, offset: Long = 0) =
        write(buffer, OpEncoding.ELEMENT_F32, offset, data.size * 4L) { it.asFloatBuffer().put(data) }

    /** Adds a copy of [data] into [buffer] (of `i32`s, `u32`s as bits, or raw bytes) at element [offset]. */
    @JvmOverloads
    @Throws(WeirException::class)
    fun write(buffer: Buffer, data: IntArray, offset: Long = 0) =
        write(buffer, OpEncoding.ELEMENT_I32, offset, data.size * 4L) { it.asIntBuffer().put(data) }

    /**
     * A write of [length] bytes that [copy] puts into the view it is given,
     * whose element type Rust checks against the buffer's when the batch is admitted.
     */
    private inline fun write(buffer: Buffer, element: Byte, offset: Long, length: Long, copy: (ByteBuffer) -> Unit) {
        if (offset < 0) throw WeirException.InvalidArgument("invalid argument: negative element offset $offset")
        val out = room(1 + 4 + 1 + 8 + 8 + length)
        val at = size
        out.put(at, OpEncoding.OP_WRITE)
        out.putInt(at + 1, slotOf(buffer))
        out.put(at + 5, element)
        out.putLong(at + 6, offset)
        out.putLong(at + 14, length)
        copy(out.slice(at + 22, length.toInt()).order(ByteOrder.LITTLE_ENDIAN))
        size = at + 22 + length.toInt()
        ops++
    }

    /** How many ops were added. */
    var ops: Int = 0
        private set

    /**
     * Admits the ops on [stream] (none: nothing) and gives the memory back:
     * the batch takes no op after this.
     */
    internal fun submit(stream: WeirStream) {
        val out = bytes ?: throw IllegalStateException("the batch was already admitted")
        try {
            if (ops > 0) lent(out.slice(0, size)) { stream.submitBatchFromRawMemory(buffers, kernels, it) }
        } finally {
            release()
        }
    }

    /** Records the ops on [stream] as a graph, admitting none, and gives the memory back. */
    internal fun record(stream: WeirStream): Graph {
        val out = bytes ?: throw IllegalStateException("the batch was already admitted")
        try {
            return lent(out.slice(0, size)) { stream.recordBatchFromRawMemory(buffers, kernels, it) }
        } finally {
            release()
        }
    }

    /** Gives the memory back for another batch; the batch takes no op after this. */
    internal fun release() {
        bytes?.let(Encodings::give)
        bytes = null
    }

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

    /** The encoding's memory, with room for [more] bytes after [size]. */
    private fun room(more: Long): ByteBuffer {
        val out = bytes ?: throw IllegalStateException("a batch takes ops only inside its block")
        if (size + more <= out.capacity()) return out
        if (size + more > Int.MAX_VALUE) {
            throw WeirException.InvalidArgument("invalid argument: a batch of more than ${Int.MAX_VALUE} bytes")
        }
        val grown = Encodings.allocate(maxOf(out.capacity().toLong() * 2, size + more).coerceAtMost(Int.MAX_VALUE.toLong()).toInt())
        grown.put(0, out, 0, size)
        Encodings.give(out)
        bytes = grown
        return grown
    }
}

/**
 * Direct memory for batch encodings: each thread keeps the one its last
 * batch used (up to [KEPT_BYTES]), so a batch allocates none in the common
 * case, and the JDK's cleaner has no direct buffer to free per batch.
 */
private object Encodings {
    const val FIRST_BYTES = 4096
    const val KEPT_BYTES = 256 shl 10

    private val kept = ThreadLocal<ByteBuffer?>()

    fun allocate(capacity: Int): ByteBuffer = ByteBuffer.allocateDirect(capacity).order(ByteOrder.LITTLE_ENDIAN)

    /** This thread's kept memory (now the caller's), or new memory. */
    fun take(): ByteBuffer = kept.get()?.also { kept.set(null) } ?: allocate(FIRST_BYTES)

    /** Keeps [memory] for this thread's next batch, if it is larger than the one kept and not too large. */
    fun give(memory: ByteBuffer) {
        if (memory.capacity() <= KEPT_BYTES && memory.capacity() > (kept.get()?.capacity() ?: 0)) kept.set(memory)
    }
}

/**
 * Admits every op [build] adds, in order, in one call: each its own op (its
 * own versions, its own failure), with no op of any stream between them.
 * Everything is checked before anything is admitted, so one refused op
 * admits none. Returns once admitted, not once done. An empty batch admits nothing.
 */
@Throws(WeirException::class)
fun WeirStream.batch(build: Batch.() -> Unit) = built(build).submit(this)

/**
 * Records every op [build] adds, in order, as a [Graph], admitting none:
 * [WeirStream.replay] then admits all of them as one op, any number of times,
 * on any stream of this runtime (each replay waits for what its ops read and
 * publishes one version of what they write). The buffers named stay alive
 * while the graph does. Nothing recorded is `InvalidArgument`, as is any op
 * the stream would refuse.
 */
@Throws(WeirException::class)
fun WeirStream.record(build: Batch.() -> Unit): Graph = built(build).record(this)

/** A batch with the ops [build] adds; its memory goes back if [build] throws. */
private inline fun built(build: Batch.() -> Unit): Batch {
    val batch = Batch()
    try {
        batch.build()
    } catch (failure: Throwable) {
        batch.release()
        throw failure
    }
    return batch
}
