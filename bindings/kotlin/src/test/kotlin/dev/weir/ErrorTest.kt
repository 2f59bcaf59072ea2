package dev.weir

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

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
            "Cancelled" to (WeirException.Cancelled::class to "cancelled"),
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
        val error = assertThrows<WeirException.Unavailable> { Runtime.open(Backend.HIP) }
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
                val small = stream.zeros(4)
                // Sizes and ranges.
                assertThrows<WeirException.InvalidArgument> { stream.zeros(0) }
                assertThrows<WeirException.InvalidArgument> { stream.zeros(-1L) }
                assertThrows<WeirException.InvalidArgument> { stream.zeros(ULong.MAX_VALUE) }
                assertThrows<WeirException.OutOfRange> { stream.write(small, ByteArray(8)) }
                assertThrows<WeirException.OutOfRange> { stream.write(small, ByteArray(1), ULong.MAX_VALUE) }
                assertThrows<WeirException.OutOfRange> { stream.readBlocking(small, ULong.MAX_VALUE, 2u) }
                assertThrows<WeirException.InvalidArgument> { stream.write(small, ByteArray(0)) }
                // Kernel arguments.
                assertThrows<WeirException.InvalidArgument> { stream.executeAsync(BuiltinOp.AXPY, buffer.reads()) }
                assertThrows<WeirException.InvalidArgument> {
                    stream.executeAsync(BuiltinOp.FILL_F32, buffer.writes(), scalar(1u))
                }
                assertThrows<WeirException.InvalidArgument> {
                    stream.executeAsync(BuiltinOp.ADD, buffer.reads(), buffer.reads(), buffer.writes())
                }
                assertThrows<WeirException.InvalidArgument> {
                    stream.executeAsync(BuiltinOp.ADD, buffer.reads(), small.reads(), buffer.writes())
                }
                Kernel.custom("no_source_here").use { kernel ->
                    val error = assertThrows<WeirException.Unsupported> { stream.execute(kernel, Grid(), listOf()) }
                    assertTrue(error.message!!.contains("no_source_here"), error.message)
                }
                // Handles of another runtime.
                Runtime.open(Backend.CPU).use { foreign ->
                    val alien = foreign.defaultStream().zeros(4)
                    val error = assertThrows<WeirException.ForeignHandle> { stream.memsetZero(alien) }
                    assertTrue(error.message!!.contains("another runtime"), error.message)
                }
                // A handle already released is refused by the bindings, not a crash.
                val released = stream.zeros(4)
                released.close()
                assertThrows<IllegalStateException> { runBlocking { stream.read(released) } }
                // And all the while the runtime kept working, on both streams.
                other.sync()
                assertArrayEquals(floatArrayOf(1f, 2f, 3f), other.readFloats(buffer))
            }
        }
}
