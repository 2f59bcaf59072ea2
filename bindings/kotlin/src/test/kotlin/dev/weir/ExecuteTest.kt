package dev.weir

import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.cancel
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.lang.management.ManagementFactory
import java.util.concurrent.ConcurrentLinkedQueue

/**
 * `execute` and `executeAndWait` as the build routes them: ops of up to four
 * distinct buffers encoded and admitted by one JNI call with the handles lent
 * (`EncodedOps`), the rest, and every op Rust refuses, through the generated
 * path. Both must hand the kernel the same arguments and fail the same way.
 */
class ExecuteTest {
    /** What one launch of [recorder] saw: each buffer's tag (its first `i32`) and writability, the scalars, the grid. */
    private data class Seen(val tags: List<Int>, val writable: List<Boolean>, val scalars: List<Any>, val grid: Grid)

    private val seen = ConcurrentLinkedQueue<Seen>()

    /** Reads its scalars as the types [scalarTypes] says, launch by launch. */
    private val scalarTypes = ConcurrentLinkedQueue<List<Arg>>()

    private val recorder = cpuKernel { args ->
        val scalars = scalarTypes.poll().mapIndexed { i, arg ->
            when (arg) {
                is Arg.U32 -> args.uint(i)
                is Arg.I32 -> args.int(i)
                is Arg.F32 -> args.float(i)
                is Arg.U64 -> args.ulong(i)
                is Arg.I64 -> args.long(i)
                is Arg.F64 -> args.double(i)
                is Arg.Bytes -> args.struct(i).array().toList()
                is Arg.Buffer -> error("a buffer among the scalars")
            }
        }
        val buffers = 0 until args.bufferCount
        seen += Seen(buffers.map { args.ints(it).get(0) }, buffers.map { !args.bytes(it).isReadOnly }, scalars, args.grid)
    }

    /** The launch [args] on [grid] should give [recorder]. */
    private fun expected(tags: Map<Buffer, Int>, grid: Grid, args: List<Arg>): Seen {
        val buffers = args.filterIsInstance<Arg.Buffer>()
        val scalars = args.filterNot { it is Arg.Buffer }.map {
            when (it) {
                is Arg.U32 -> it.value
                is Arg.I32 -> it.value
                is Arg.F32 -> it.value
                is Arg.U64 -> it.value
                is Arg.I64 -> it.value
                is Arg.F64 -> it.value
                is Arg.Bytes -> it.value.toList()
                is Arg.Buffer -> error("unreachable")
            }
        }
        return Seen(buffers.map { tags.getValue(it.buffer) }, buffers.map { it.access != Access.READ }, scalars, grid)
    }

    @Test
    fun `the JNI entry is linked, so execute takes the encoded path`() {
        assertTrue(NativeLink.linked, "the library's JNI entry did not link: every execute goes the generated way")
    }

    @Test
    fun `every argument shape reaches the kernel as given, encoded up to four buffers and generated past them`() {
        val rt = Backends.open("cpu")
        val s = rt.defaultStream()
        val buffers = List(6) { tag -> s.upload(intArrayOf(tag)) }
        val tags = buffers.withIndex().associate { (tag, buffer) -> buffer to tag }
        val (b0, b1, b2, b3, b4) = buffers
        val b5 = buffers[5]
        val given = Grid(2u, 3u, 4u, 5u, 6u, 7u, 0u)
        val scalars = List(120) { if (it % 2 == 0) scalar(it.toUInt()) else scalar(-it) } // past the scratch: generated
        val shapes = listOf(
            single to listOf(scalar(7u)),
            given to listOf(b0.writes(), scalar(-3), scalar(1.5f), scalar(9u)),
            single to listOf(b0.reads(), b1.readsWrites(), b0.reads(), scalar(2f)),
            given to listOf(b2.reads(), b1.reads(), b0.writes()),
            single to listOf(scalar(Float.NaN), b3.reads(), b2.reads(), b1.writes(), b0.readsWrites(), scalar(Int.MIN_VALUE)),
            given to listOf(b0.reads(), b1.reads(), b2.reads(), b3.reads(), b4.writes(), scalar(UInt.MAX_VALUE)),
            single to listOf(b5.writes(), b4.reads(), b3.reads(), b2.reads(), b1.reads(), b0.reads(), b4.reads()),
            given to listOf(b1.writes()) + scalars,
            // 64-bit scalars and a struct's bytes, which take more room than a 32-bit scalar.
            given to listOf(scalar(ULong.MAX_VALUE), b0.reads(), scalar(-(1L shl 50)), scalar(Math.PI), structArg(byteArrayOf(1, 2, 3, 4, 5))),
        )
        Kernel.custom("recorder", cpu = recorder).use { kernel ->
            runBlocking {
                for ((grid, args) in shapes) {
                    for (wait in listOf(false, true)) {
                        scalarTypes += args.filterNot { it is Arg.Buffer }
                        if (wait) s.executeAndWait(kernel, grid, args) else s.execute(kernel, grid, args).also { s.sync() }
                        val launch = seen.poll()
                        assertEquals(expected(tags, grid, args), launch, "${args.size} arguments, wait $wait")
                    }
                }
            }
        }
        rt.shutdown()
        rt.close()
    }

    @Test
    fun `a closed stream, kernel or buffer is refused before anything is admitted, on either path`() {
        val rt = Backends.open("cpu")
        val s = rt.defaultStream()
        val open = List(5) { s.zeros(4, ElementType.U32) }
        val closed = s.zeros(4, ElementType.U32).also { it.close() }
        val fill = BuiltinOp.FILL_U32.kernel()
        val before = rt.diagnostics().admittedOps
        assertThrows<IllegalStateException> { s.execute(BuiltinOp.FILL_U32, closed.writes(), scalar(1u)) }
        assertThrows<IllegalStateException> { s.execute(BuiltinOp.COPY, open[0].reads(), closed.writes()) }
        assertThrows<IllegalStateException> {
            s.execute(fill, single, open.map { it.reads() } + closed.writes()) // six buffers: the generated path
        }
        assertThrows<IllegalStateException> { runBlocking { s.executeAndWait(BuiltinOp.FILL_U32, closed.writes(), scalar(1u)) } }
        val closedKernel = Kernel.builtin(BuiltinOp.FILL_U32).also { it.close() }
        assertThrows<IllegalStateException> { s.execute(closedKernel, single, listOf(open[0].writes(), scalar(1u))) }
        val closedStream = rt.newStream().also { it.close() }
        assertThrows<IllegalStateException> { closedStream.execute(BuiltinOp.FILL_U32, open[0].writes(), scalar(1u)) }
        assertEquals(before, rt.diagnostics().admittedOps, "a refused call admitted an op")
        s.execute(BuiltinOp.FILL_U32, open[0].writes(), scalar(5u))
        assertArrayEquals(IntArray(4) { 5 }, runBlocking { s.readInts(open[0]) })
        rt.shutdown()
        rt.close()
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `bad input is the same typed error on either path and admits nothing`(backend: String): Unit = onRuntime(backend) { rt ->
        val s = rt.defaultStream()
        val floats = s.zeros(4, ElementType.F32)
        val small = s.zeros(2, ElementType.F32)
        val empty = Grid(1u, 0u, 1u, 1u, 1u, 1u, 0u)
        val before = rt.diagnostics().admittedOps
        val encoded = assertThrows<WeirException.InvalidArgument> { s.execute(BuiltinOp.FILL_F32.kernel(), empty, listOf(floats.writes(), scalar(1f))) }
        val generated = assertThrows<WeirException.InvalidArgument> {
            s.execute(BuiltinOp.FILL_F32.kernel(), empty, listOf(floats.writes(), scalar(1f)) + List(120) { scalar(1f) }) // past the scratch
        }
        assertTrue("empty dimension" in encoded.message!!, encoded.message)
        assertEquals(encoded.message, generated.message)
        assertThrows<WeirException.InvalidArgument> { s.execute(BuiltinOp.FILL_U32, floats.writes(), scalar(1u)) } // f32 buffer
        assertThrows<WeirException.InvalidArgument> { s.execute(BuiltinOp.COPY, floats.reads(), small.writes()) } // sizes differ
        assertThrows<WeirException.InvalidArgument> { runBlocking { s.executeAndWait(BuiltinOp.COPY, floats.reads(), small.writes()) } }
        assertEquals(before, rt.diagnostics().admittedOps, "refused ops were admitted")
        runBlocking {
            s.executeAndWait(BuiltinOp.FILL_F32, floats.writes(), scalar(2.5f))
            assertArrayEquals(FloatArray(4) { 2.5f }, s.readFloats(floats))
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `executeAndWait in a cancelled coroutine admits a good op and refuses a bad one, both as cancellations`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            val x = s.zeros(4, ElementType.F32)
            val small = s.zeros(2, ElementType.F32)
            runBlocking {
                val before = rt.diagnostics().admittedOps
                val good = async(start = CoroutineStart.UNDISPATCHED) {
                    coroutineContext.cancel()
                    s.executeAndWait(BuiltinOp.FILL_F32, x.writes(), scalar(4f))
                }
                assertThrows<CancellationException> { good.await() }
                assertEquals(before + 1u, rt.diagnostics().admittedOps, "the op of a cancelled executeAndWait was not admitted")
                val bad = async(start = CoroutineStart.UNDISPATCHED) {
                    coroutineContext.cancel()
                    s.executeAndWait(BuiltinOp.COPY, x.reads(), small.writes())
                }
                assertThrows<CancellationException> { bad.await() }
                assertEquals(before + 1u, rt.diagnostics().admittedOps)
                assertArrayEquals(FloatArray(4) { 4f }, s.readFloats(x))
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `an op refused over a failed input is made once, and raises its failure typed`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            val (x, y) = s.zeros(4, ElementType.F32) to s.zeros(4, ElementType.F32)
            runCatching { s.failWrite(x, "a deliberate failure") }
            runCatching { runBlocking { s.sync() } }
            val before = rt.diagnostics().admittedOps
            val outcome = runCatching { s.execute(BuiltinOp.AXPY, x.reads(), y.readsWrites(), scalar(1f)) }.exceptionOrNull()
            // Refused now (a failed input known at admission) or admitted to fail: one op either way.
            if (outcome != null) assertTrue(outcome is WeirException.OpFailed, "$outcome")
            assertTrue(rt.diagnostics().admittedOps - before <= 1u, "a refused op was made twice")
            assertThrows<WeirException.OpFailed> { runBlocking { s.readFloats(y) } }
            runCatching { runBlocking { s.sync() } }
        }

    @Test
    fun `an argument list that admits an op while it is read still gives both ops their own arguments`() {
        val rt = Backends.open("cpu")
        val s = rt.defaultStream()
        val (x, y) = List(2) { s.zeros(4, ElementType.U32) }
        val args = object : AbstractList<Arg>() {
            var nested = true
            override val size = 2
            override fun get(index: Int): Arg {
                if (index == 1 && nested) {
                    nested = false
                    s.execute(BuiltinOp.FILL_U32, y.writes(), scalar(9u)) // mid-encoding, after x took its slot
                }
                return if (index == 0) x.writes() else scalar(3u)
            }
        }
        s.execute(BuiltinOp.FILL_U32.kernel(), single, args)
        runBlocking {
            assertArrayEquals(IntArray(4) { 3 }, s.readInts(x))
            assertArrayEquals(IntArray(4) { 9 }, s.readInts(y))
        }
        rt.shutdown()
        rt.close()
    }

    @Test
    fun `an encoded execute allocates no JNA structure`() {
        // The generated path allocates JNA structures (native memory that
        // JNA's one cleaner thread frees) for every call: kilobytes a call.
        // The encoded path allocates nothing once compiled; interpreted, a
        // few boxes at most.
        val rt = Backends.open("cpu")
        val s = rt.defaultStream()
        val x = s.zeros(16, ElementType.U32)
        val kernel = BuiltinOp.FILL_U32.kernel()
        val args = listOf(x.writes(), scalar(1u))
        val threads = ManagementFactory.getThreadMXBean() as com.sun.management.ThreadMXBean
        val me = Thread.currentThread().id
        repeat(1_000) { s.execute(kernel, single, args) }
        runBlocking { s.sync() }
        val calls = 10_000
        val before = threads.getThreadAllocatedBytes(me)
        repeat(calls) { s.execute(kernel, single, args) }
        val perCall = (threads.getThreadAllocatedBytes(me) - before).toDouble() / calls
        println("ExecuteTest: an encoded execute allocates %.1f bytes of JVM heap".format(perCall))
        assertTrue(perCall < 256, "an encoded execute allocated $perCall bytes per call")
        rt.shutdown()
        rt.close()
    }
}
