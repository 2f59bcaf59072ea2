package dev.weir

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.util.concurrent.CompletableFuture
import java.util.concurrent.ExecutionException
import java.util.concurrent.TimeUnit

/** Errors: one sealed hierarchy, a typed subclass per variant, a message that says what happened. */
class ErrorTest {
    @Test
    fun `every error variant arrives as its typed WeirException with its message`() {
        val expected = mapOf(
            "Unavailable" to (WeirException.Unavailable::class to "no probe device"),
            "Unsupported" to (WeirException.Unsupported::class to "probing"),
            "InvalidArgument" to (WeirException.InvalidArgument::class to "probe argument"),
            "OutOfRange" to (WeirException.OutOfRange::class to "8 bytes at offset 8 do not fit in a buffer of 12 bytes"),
            "ForeignHandle" to (WeirException.ForeignHandle::class to "belongs to another runtime"),
            "Closed" to (WeirException.Closed::class to "closed"),
            "OutOfMemory" to (WeirException.OutOfMemory::class to "out of device memory"),
            "OpFailed" to (WeirException.OpFailed::class to "probe op failed"),
            "Backend" to (WeirException.Backend::class to "probe call failed"),
            "DeviceLost" to (WeirException.DeviceLost::class to "CUDA_ERROR_ILLEGAL_ADDRESS"),
            "Bug" to (WeirException.Bug::class to "a bug in Weir"),
            "Cancelled" to (WeirException.Cancelled::class to "cancelled"),
            "QueueFull" to (WeirException.QueueFull::class to "queue is full"),
        )
        // The sealed hierarchy has exactly these subclasses: a new core variant must be added here.
        val subclasses = WeirException::class.java.declaredClasses.filter { WeirException::class.java.isAssignableFrom(it) }
        assertEquals(expected.values.map { it.first.java }.toSet(), subclasses.toSet())
        for ((variant, pair) in expected) {
            val (type, text) = pair
            val error = assertThrows<WeirException> { debugErrorProbe(variant) }
            assertEquals(type, error::class, variant)
            assertTrue(error.message!!.contains(text), "$variant: '${error.message}' lacks '$text'")
        }
        assertThrows<WeirException.InvalidArgument> { debugErrorProbe("NoSuchVariant") }
    }

    @Test
    fun `a failed call leaves its thread's next calls clean, on many threads at once`() {
        // Every call on a thread shares that thread's call status: a failure must not linger in it.
        val failures = java.util.concurrent.ConcurrentLinkedQueue<Throwable>()
        val threads = List(4) { i ->
            kotlin.concurrent.thread(name = "errors-$i") {
                try {
                    repeat(5_000) {
                        val error = assertThrows<WeirException.OutOfRange> { debugErrorProbe("OutOfRange") }
                        assertTrue(error.message!!.contains("do not fit"), error.message)
                        assertEquals(4u, gridLinear(16u, 4u).groupsX) // a call that succeeds
                    }
                } catch (e: Throwable) {
                    failures += e
                }
            }
        }
        threads.forEach { it.join() }
        failures.firstOrNull()?.let { throw it }
    }

    @Test
    fun `an unavailable backend is Unavailable, naming it`() {
        // No AMD device anywhere this suite runs, and HIP is not compiled in by default.
        val error = assertThrows<WeirException.Unavailable> { WeirRuntime.open(Backend.HIP) }
        assertTrue(error.message!!.contains("hip"), error.message)
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `bad input raises a typed exception and the runtime keeps working`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val stream = rt.defaultStream()
            val other = rt.newStream()
            runBlocking {
                val buffer = stream.upload(floatArrayOf(1f, 2f, 3f))
                val small = stream.zeros(4, ElementType.BYTES)
                // Sizes and ranges.
                assertThrows<WeirException.InvalidArgument> { stream.zeros(0, ElementType.BYTES) }
                assertThrows<WeirException.InvalidArgument> { stream.zeros(-1L, ElementType.BYTES) }
                assertThrows<WeirException.InvalidArgument> { stream.zeros(ULong.MAX_VALUE, ElementType.BYTES) }
                assertThrows<WeirException.OutOfRange> { stream.write(small, ByteArray(8)) }
                assertThrows<WeirException.OutOfRange> { stream.write(small, ByteArray(1), ElementType.BYTES, ULong.MAX_VALUE) }
                assertThrows<WeirException.OutOfRange> { stream.readBlocking(small, ULong.MAX_VALUE, 2u) }
                assertThrows<WeirException.InvalidArgument> { stream.write(small, ByteArray(0)) }
                // Kernel arguments.
                assertThrows<WeirException.InvalidArgument> { stream.executeAndWait(BuiltinOp.AXPY, buffer.reads()) }
                assertThrows<WeirException.InvalidArgument> {
                    stream.executeAndWait(BuiltinOp.FILL_F32, buffer.writes(), scalar(1u))
                }
                assertThrows<WeirException.InvalidArgument> {
                    stream.executeAndWait(BuiltinOp.ADD, buffer.reads(), buffer.reads(), buffer.writes())
                }
                assertThrows<WeirException.InvalidArgument> {
                    stream.executeAndWait(BuiltinOp.ADD, buffer.reads(), small.reads(), buffer.writes())
                }
                Kernel.custom("no_source_here").use { kernel ->
                    val error = assertThrows<WeirException.Unsupported> { stream.execute(kernel, Grid(), listOf()) }
                    assertTrue(error.message!!.contains("no_source_here"), error.message)
                }
                // Handles of another runtime.
                WeirRuntime.open(Backend.CPU).use { foreign ->
                    val alien = foreign.defaultStream().zeros(4, ElementType.BYTES)
                    val error = assertThrows<WeirException.ForeignHandle> { stream.memsetZero(alien) }
                    assertTrue(error.message!!.contains("another runtime"), error.message)
                }
                // A handle already released is refused by the bindings, not a crash.
                val released = stream.zeros(4, ElementType.BYTES)
                released.close()
                assertThrows<IllegalStateException> { runBlocking { stream.read(released) } }
                // And all the while the runtime kept working, on both streams.
                other.sync()
                assertArrayEquals(floatArrayOf(1f, 2f, 3f), other.readFloats(buffer))
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `typed writes report a bad offset in elements, as the caller gave it`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val stream = rt.defaultStream()
            runBlocking {
                val buffer = stream.zeros(4, ElementType.F32)
                val ints = stream.zeros(4, ElementType.I32)
                for (write in listOf<suspend () -> Unit>(
                    { stream.write(buffer, floatArrayOf(1f), offset = -1) },
                    { stream.write(ints, intArrayOf(1), offset = -1) },
                )) {
                    val error = assertThrows<WeirException.InvalidArgument> { write() }
                    assertTrue(error.message!!.contains("-1"), error.message)
                    assertFalse(error.message!!.contains("-4"), "a byte offset: ${error.message}")
                }
                for (write in listOf<suspend () -> Unit>(
                    { stream.write(buffer, floatArrayOf(1f, 2f), offset = 3) },
                    { stream.write(ints, intArrayOf(1, 2), offset = 3) },
                )) {
                    val error = assertThrows<WeirException.OutOfRange> { write() }
                    val message = error.message!!
                    assertTrue(message.contains("2 ") && message.contains("offset 3") && message.contains("4 "), message)
                    assertFalse(message.contains("12") || message.contains("16"), "byte units: $message")
                }
                // In range, the same helpers write where they say.
                stream.write(ints, intArrayOf(7), offset = 3)
                assertArrayEquals(intArrayOf(0, 0, 0, 7), stream.readInts(ints))
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a kernel of one 1 000-term expression compiles off a default-stack thread and runs`(backend: String) =
        runsLongSum(backend, terms = 1_000)

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a kernel of one 10 000-term expression returns on a default-stack thread, never crashes the JVM`(
        backend: String,
    ) = runsLongSum(backend, terms = 10_000)

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a kernel of one 100 000-term expression returns on a default-stack thread, never crashes the JVM`(
        backend: String,
    ) = runsLongSum(backend, terms = 100_000)

    /**
     * Compiles and runs `a[0] = 1u + 1u + …` ([terms] terms, nested as deep:
     * the WGSL compiler recurses over it) from a plain JVM thread with the
     * default stack (-Xss): it returns the sum or a typed error, never crashes.
     */
    private fun runsLongSum(backend: String, terms: Int) {
        Assumptions.assumeTrue(backend == "wgpu", "custom WGSL kernels run on the wgpu backend only")
        onRuntime(backend) { rt ->
            val stream = rt.newStream()
            val out = stream.zeros(4, ElementType.BYTES)
            val code = "@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n" +
                "@compute @workgroup_size(1)\n" +
                "fn main() { a[0] = ${List(terms) { "1u" }.joinToString(" + ")}; }\n"
            Kernel.custom("long_sum_$terms", wgsl = KernelSource(code, "main")).use { kernel ->
                val outcome = onDefaultStackThread {
                    runCatching {
                        stream.execute(kernel, Grid.linear(1, 1), listOf(out.writes()))
                        runBlocking { stream.readInts(out) }
                    }
                }
                outcome.fold(
                    { values -> assertArrayEquals(intArrayOf(terms), values, "$terms terms") },
                    { error ->
                        // Refused is fine: a typed error, not a crash.
                        assertTrue(error is WeirException, "$terms terms: not a WeirException: $error")
                        System.err.println("weir: $terms terms: ${error::class.simpleName}: ${error.message?.take(200)}")
                    },
                )
            }
        }
    }

    private fun <T> onDefaultStackThread(body: () -> T): T {
        val result = CompletableFuture<T>()
        Thread({
            try {
                result.complete(body())
            } catch (e: Throwable) {
                result.completeExceptionally(e)
            }
        }, "weir-test-default-stack").start()
        return try {
            result.get(120, TimeUnit.SECONDS)
        } catch (e: ExecutionException) {
            throw e.cause ?: e
        }
    }
}

