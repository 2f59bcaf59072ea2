package dev.weir

import com.sun.jna.Native
import com.sun.jna.Pointer
import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * `WeirStream.execute` in one JNI call with only handles and integers.
 *
 * As generated, `execute` lowers its `Grid` and its `List<Arg>` into one
 * `RustBuffer` each: a JNA structure returned by an allocating call, written
 * reflectively and passed by value, about 3 µs apiece, where Rust admits the
 * op in 0.3 µs; and it clones each handle (the stream, the kernel, each
 * buffer) by a JNA call of its own, about 0.1 µs each. Here the op is encoded
 * as one op of the batch encoding (weir-ffi's `batch.rs`) into this thread's
 * direct memory, and [NativeExecute.execute] admits it, the handles of the
 * stream, the kernel and up to [MAX_BUFFERS] distinct buffers lent for the
 * call, each kept alive meanwhile as a generated call keeps it
 * (`uniffiBeginBorrow`, a build step: see xtask/src/kotlin.rs).
 *
 * The stream's `execute` and `executeAndWait` (Weir.kt) try this first. An
 * op it does not take (more distinct buffers, longer than the memory, no JNI
 * entry linked) or one that Rust refuses goes the generated way, so the
 * errors are the generated path's, in its order (the stream, the kernel,
 * each buffer is checked for being closed, as lowering checks them), and no
 * handle is kept after the call.
 */
internal object EncodedOps {
    /** The most distinct buffers one encoded op takes. */
    const val MAX_BUFFERS = 4

    /** Bytes of encoding a thread keeps: an op with about eighty arguments. */
    private const val CAPACITY = 512

    /** One thread's encoding memory and the op's buffers by slot, with their lent handles. */
    private class Scratch {
        val bytes: ByteBuffer = ByteBuffer.allocateDirect(CAPACITY).order(ByteOrder.LITTLE_ENDIAN)
        val address: Long = Pointer.nativeValue(Native.getDirectBufferPointer(bytes))
        val buffers = arrayOfNulls<Buffer>(MAX_BUFFERS)
        val handles = LongArray(MAX_BUFFERS)
        var count = 0

        /** True while an op is being encoded (a list whose `get` admits an op would find it so). */
        var busy = false
    }

    private val scratch = ThreadLocal.withInitial(::Scratch)

    /**
     * Admits [kernel] over [args] on [grid] on [stream], as the generated
     * `execute` does, and returns true; or returns false, having admitted
     * nothing, for the generated path to make the call.
     */
    @JvmStatic
    fun execute(stream: WeirStream, kernel: Kernel, grid: Grid, args: List<Arg>): Boolean {
        if (!NativeLink.linked) return false
        val s = scratch.get()
        if (s.busy) return false
        s.busy = true
        try {
            val length = encode(s, grid, args)
            return length >= 0 && admit(s, stream, kernel, length)
        } finally {
            s.buffers.fill(null, 0, s.count)
            s.count = 0
            s.busy = false
        }
    }

    /**
     * [execute] for `executeAndWait`: an op refused in a cancelled coroutine
     * throws its cancellation, as the generated suspend call reports it.
     */
    internal suspend fun executeSuspending(stream: WeirStream, kernel: Kernel, grid: Grid, args: List<Arg>): Boolean =
        try {
            execute(stream, kernel, grid, args)
        } catch (refused: WeirException) {
            returnedAtOnce()
            throw refused
        }

    /** Lends the handles, in the generated lowering's order, for the one JNI call. */
    private fun admit(s: Scratch, stream: WeirStream, kernel: Kernel, length: Int): Boolean {
        val streamHandle = stream.uniffiBeginBorrow()
        try {
            val kernelHandle = kernel.uniffiBeginBorrow()
            try {
                var lent = 0
                try {
                    while (lent < s.count) {
                        s.handles[lent] = s.buffers[lent]!!.uniffiBeginBorrow()
                        lent++
                    }
                    val h = s.handles
                    val answer = NativeExecute.execute(streamHandle, kernelHandle, s.address, length, s.count, h[0], h[1], h[2], h[3])
                    // A refused op is not made again (it may have published failed
                    // versions): its error, typed, is raised from where Rust kept it.
                    if (answer == NativeExecute.REFUSED) takeExecuteRefusal()
                    return answer == NativeExecute.ADMITTED
                } finally {
                    for (slot in 0 until lent) s.buffers[slot]!!.uniffiEndBorrow()
                }
            } finally {
                kernel.uniffiEndBorrow()
            }
        } finally {
            stream.uniffiEndBorrow()
        }
    }

    /** Writes the op into [s]; its length in bytes, or -1 when it does not fit. */
    private fun encode(s: Scratch, grid: Grid, args: List<Arg>): Int {
        val out = s.bytes
        val argCount = args.size
        val given = grid != single
        // The op's fixed fields, then the arguments.
        val most = 1 + 4 + 1 + (if (given) GRID_FIELDS * 4 else 0) + 4 + OpEncoding.argsBytes(args)
        if (most > out.capacity()) return -1
        out.put(0, OpEncoding.OP_EXECUTE)
        out.putInt(1, 0) // kernel slot 0: the call's kernel
        var at = OpEncoding.putGrid(out, 5, grid, given)
        out.putInt(at, argCount)
        at += 4
        for (i in 0 until argCount) {
            val arg = args[i]
            val slot = if (arg is Arg.Buffer) slotOf(s, arg.buffer) else 0
            if (slot < 0) return -1
            at = OpEncoding.putArg(out, at, arg, slot)
        }
        return at
    }

    /** [buffer]'s slot in this op, given one on first use; -1 past [MAX_BUFFERS]. */
    private fun slotOf(s: Scratch, buffer: Buffer): Int {
        val buffers = s.buffers
        for (slot in 0 until s.count) if (buffers[slot] === buffer) return slot
        if (s.count == MAX_BUFFERS) return -1
        buffers[s.count] = buffer
        return s.count++
    }

    private const val GRID_FIELDS = 7
}

/**
 * The tags of the batch encoding (weir-ffi's `batch.rs`), which [Batch] and
 * [EncodedOps] write.
 */
internal object OpEncoding {
    const val OP_EXECUTE: Byte = 0
    const val OP_WRITE: Byte = 1
    const val ELEMENT_BYTES: Byte = 0
    const val ELEMENT_F32: Byte = 1
    const val ELEMENT_I32: Byte = 2
    const val GRID_DEFAULT: Byte = 0
    const val GRID_GIVEN: Byte = 1
    const val ARG_BUFFER: Byte = 0
    const val ARG_U32: Byte = 1
    const val ARG_I32: Byte = 2
    const val ARG_F32: Byte = 3
    const val ARG_U64: Byte = 4
    const val ARG_I64: Byte = 5
    const val ARG_F64: Byte = 6
    const val ARG_BYTES: Byte = 7

    /** The bytes [putArg] writes for [arg] (a `Long`: a struct's bytes near 2 GiB overflow an `Int`). */
    fun argBytes(arg: Arg): Long = when (arg) {
        is Arg.Buffer -> 6
        is Arg.U32, is Arg.I32, is Arg.F32 -> 5
        is Arg.U64, is Arg.I64, is Arg.F64 -> 9
        is Arg.Bytes -> 5L + arg.value.size
    }

    /** The bytes [putArg] writes for all of [args] (an indexed loop: no iterator on the launch path). */
    fun argsBytes(args: List<Arg>): Long {
        var total = 0L
        for (i in args.indices) total += argBytes(args[i])
        return total
    }

    /** How [access] is written. */
    fun access(access: Access): Byte = when (access) {
        Access.READ -> 0
        Access.WRITE -> 1
        Access.READ_WRITE -> 2
    }

    /** Writes an execute op's grid at [at] (its tag, and its fields unless [given] is false); the byte after it. */
    fun putGrid(out: ByteBuffer, at: Int, grid: Grid, given: Boolean): Int {
        if (!given) {
            out.put(at, GRID_DEFAULT)
            return at + 1
        }
        out.put(at, GRID_GIVEN)
        out.putInt(at + 1, grid.groupsX.toInt())
        out.putInt(at + 5, grid.groupsY.toInt())
        out.putInt(at + 9, grid.groupsZ.toInt())
        out.putInt(at + 13, grid.blockX.toInt())
        out.putInt(at + 17, grid.blockY.toInt())
        out.putInt(at + 21, grid.blockZ.toInt())
        out.putInt(at + 25, grid.sharedBytes.toInt())
        return at + 29
    }

    /** Writes [arg] at [at], a buffer as its [slot]; the byte after it. */
    fun putArg(out: ByteBuffer, at: Int, arg: Arg, slot: Int): Int = when (arg) {
        is Arg.Buffer -> {
            out.put(at, ARG_BUFFER)
            out.putInt(at + 1, slot)
            out.put(at + 5, access(arg.access))
            at + 6
        }
        is Arg.U32 -> { out.put(at, ARG_U32); out.putInt(at + 1, arg.value.toInt()); at + 5 }
        is Arg.I32 -> { out.put(at, ARG_I32); out.putInt(at + 1, arg.value); at + 5 }
        is Arg.F32 -> { out.put(at, ARG_F32); out.putInt(at + 1, arg.value.toRawBits()); at + 5 }
        is Arg.U64 -> { out.put(at, ARG_U64); out.putLong(at + 1, arg.value.toLong()); at + 9 }
        is Arg.I64 -> { out.put(at, ARG_I64); out.putLong(at + 1, arg.value); at + 9 }
        is Arg.F64 -> { out.put(at, ARG_F64); out.putLong(at + 1, arg.value.toRawBits()); at + 9 }
        is Arg.Bytes -> {
            out.put(at, ARG_BYTES)
            out.putInt(at + 1, arg.value.size)
            out.put(at + 5, arg.value)
            at + 5 + arg.value.size
        }
    }
}

