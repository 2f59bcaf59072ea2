package dev.weir

import com.sun.jna.Pointer
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.ensureActive

/**
 * `WeirStream.execute` with only handles and integers crossing into Rust.
 *
 * As generated, `execute` lowers its `Grid` and its `List<Arg>` into one
 * `RustBuffer` each: a JNA structure returned by an allocating call, written
 * reflectively and passed by value, about 3 µs apiece, where Rust admits the
 * op in 0.3 µs. Here the op is encoded as one op of the batch encoding
 * (weir-ffi's `batch.rs`) into this thread's [OpScratch], memory of Rust's
 * written through its address, and its distinct buffers cross as handle
 * arguments of `executeEncoded0`…`executeEncoded4`. The build makes the
 * generated `execute` and `executeAndWait` try this first (see
 * xtask/src/kotlin.rs); an op it does not take (more than [MAX_BUFFERS]
 * distinct buffers, or longer than the scratch) goes the generated way.
 * Either way the errors, their order (the stream, the kernel, then each
 * buffer is checked for being closed, as lowering checks them) and the
 * lifetimes are the same: no handle is kept after the call.
 */
internal object EncodedOps {
    /** The most distinct buffers one encoded op takes (`executeEncoded4`). */
    const val MAX_BUFFERS = 4

    /** One thread's scratch, with a view of its bytes and the op's buffers by slot. */
    private class Scratch {
        val handle = OpScratch()
        val bytes: ByteBuffer = Pointer(handle.address().toLong())
            .getByteBuffer(0, handle.capacity().toLong())
            .order(ByteOrder.LITTLE_ENDIAN)
        val buffers = arrayOfNulls<Buffer>(MAX_BUFFERS)
        var count = 0

        /** True while an op is being encoded (a list whose `get` admits an op would find it so). */
        var busy = false
    }

    private val scratch = ThreadLocal.withInitial(::Scratch)

    /**
     * Admits [kernel] over [args] on [grid] on [stream], as the generated
     * `execute` does, and returns true; or returns false, having done
     * nothing, when the op is not one this path takes.
     */
    @JvmStatic
    fun execute(stream: WeirStream, kernel: Kernel, grid: Grid, args: List<Arg>): Boolean {
        val s = scratch.get()
        if (s.busy) return false
        s.busy = true
        try {
            val length = encode(s, grid, args)
            if (length < 0) return false
            val buffers = s.buffers
            val len = length.toUInt()
            when (s.count) {
                0 -> stream.executeEncoded0(kernel, s.handle, len)
                1 -> stream.executeEncoded1(kernel, s.handle, len, buffers[0]!!)
                2 -> stream.executeEncoded2(kernel, s.handle, len, buffers[0]!!, buffers[1]!!)
                3 -> stream.executeEncoded3(kernel, s.handle, len, buffers[0]!!, buffers[1]!!, buffers[2]!!)
                else -> stream.executeEncoded4(kernel, s.handle, len, buffers[0]!!, buffers[1]!!, buffers[2]!!, buffers[3]!!)
            }
            return true
        } finally {
            s.buffers.fill(null, 0, s.count)
            s.count = 0
            s.busy = false
        }
    }

    /**
     * [execute], for the generated `executeAndWait`, which then waits: an
     * admission error in a cancelled coroutine is its cancellation, as in the
     * generated path, where the Rust future admits the op in a suspension.
     */
    @JvmStatic
    suspend fun executeToWait(stream: WeirStream, kernel: Kernel, grid: Grid, args: List<Arg>): Boolean =
        try {
            execute(stream, kernel, grid, args)
        } catch (failure: WeirException) {
            currentCoroutineContext().ensureActive()
            throw failure
        }

    /** Writes the op into [s]; its length in bytes, or -1 when it does not fit. */
    private fun encode(s: Scratch, grid: Grid, args: List<Arg>): Int {
        val out = s.bytes
        val argCount = args.size
        val given = grid != single
        // The op's fixed fields, then at most 6 bytes an argument.
        val most = 1 + 4 + 1 + (if (given) GRID_FIELDS * 4 else 0) + 4 + argCount.toLong() * 6
        if (most > out.capacity()) return -1
        out.put(0, OpEncoding.OP_EXECUTE)
        out.putInt(1, 0) // kernel slot 0: the call's kernel
        var at = 5
        if (given) {
            out.put(at, OpEncoding.GRID_GIVEN)
            out.putInt(at + 1, grid.groupsX.toInt())
            out.putInt(at + 5, grid.groupsY.toInt())
            out.putInt(at + 9, grid.groupsZ.toInt())
            out.putInt(at + 13, grid.blockX.toInt())
            out.putInt(at + 17, grid.blockY.toInt())
            out.putInt(at + 21, grid.blockZ.toInt())
            out.putInt(at + 25, grid.sharedBytes.toInt())
            at += 1 + GRID_FIELDS * 4
        } else {
            out.put(at, OpEncoding.GRID_DEFAULT)
            at += 1
        }
        out.putInt(at, argCount)
        at += 4
        for (i in 0 until argCount) {
            when (val arg = args[i]) {
                is Arg.Buffer -> {
                    val slot = slotOf(s, arg.buffer)
                    if (slot < 0) return -1
                    out.put(at, OpEncoding.ARG_BUFFER)
                    out.putInt(at + 1, slot)
                    out.put(at + 5, OpEncoding.access(arg.access))
                    at += 6
                }
                is Arg.U32 -> { out.put(at, OpEncoding.ARG_U32); out.putInt(at + 1, arg.value.toInt()); at += 5 }
                is Arg.I32 -> { out.put(at, OpEncoding.ARG_I32); out.putInt(at + 1, arg.value); at += 5 }
                is Arg.F32 -> { out.put(at, OpEncoding.ARG_F32); out.putInt(at + 1, arg.value.toRawBits()); at += 5 }
            }
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

    /** How [access] is written. */
    fun access(access: Access): Byte = when (access) {
        Access.READ -> 0
        Access.WRITE -> 1
        Access.READ_WRITE -> 2
    }
}
