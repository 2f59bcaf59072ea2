package dev.weir

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

/**
 * Failures follow the data: a failed op fails what it writes, for every
 * reader on every stream and what they write in turn; its own stream reports
 * it to one fence and goes on; a full overwrite heals the buffer.
 *
 * `WeirStream.failWrite` (a `test-support` hook) is the failure: an op that
 * writes the buffer and fails with the given message, on every backend.
 */
class FailureTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a read of a failed buffer on another stream throws OpFailed naming the failure, not stale bytes`(
        backend: String,
    ): Unit = onRuntime(backend) { rt ->
        val (s, t) = rt.newStream() to rt.newStream()
        runBlocking {
            val x = s.upload(IntArray(256) { 1 })
            s.sync()
            val failed = assertThrows<WeirException.OpFailed> { s.failWrite(x, "deliberate failure A") }
            assertNamesTheFailure(failed, "deliberate failure A")
            val read = assertThrows<WeirException.OpFailed> { t.readInts(x) }
            assertNamesTheFailure(read, "deliberate failure A")
            val blocking = assertThrows<WeirException.OpFailed> { t.readBlocking(x, 0u, 16u) }
            assertNamesTheFailure(blocking, "deliberate failure A")
            // And on the failing stream itself.
            assertNamesTheFailure(assertThrows<WeirException.OpFailed> { s.readInts(x) }, "deliberate failure A")
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a failure travels along a chain of streams to what its readers write`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val (s, t, u) = Triple(rt.newStream(), rt.newStream(), rt.newStream())
            runBlocking {
                val x = s.upload(FloatArray(256) { 1f })
                val y = t.upload(FloatArray(256) { 2f })
                val z = t.upload(FloatArray(256) { 3f })
                t.sync()
                assertThrows<WeirException.OpFailed> { s.failWrite(x, "deliberate failure B") }
                // T copies X into Y: refused at admission, or admitted and failing; either way Y fails.
                val copy = runCatching { t.execute(BuiltinOp.COPY, x.reads(), y.writes()) }.exceptionOrNull()
                if (copy != null) assertNamesTheFailure(copy, "deliberate failure B")
                val read = assertThrows<WeirException.OpFailed> { u.readFloats(y) }
                assertNamesTheFailure(read, "deliberate failure B")
                // One more link, through a read-write op on U: Y fails Z too.
                runCatching { u.execute(BuiltinOp.AXPY, y.reads(), z.readsWrites(), scalar(1f)) }
                assertNamesTheFailure(assertThrows<WeirException.OpFailed> { s.readFloats(z) }, "deliberate failure B")
                // T's fence reports its failed copy, once.
                assertNamesTheFailure(assertThrows<WeirException.OpFailed> { t.sync() }, "deliberate failure B")
                t.sync()
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `the failing stream reports its failure to one sync and runs every later op`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val (s, t) = rt.newStream() to rt.newStream()
            runBlocking {
                val x = s.upload(IntArray(64) { 1 })
                val shared = s.upload(IntArray(256) { 4 })
                val written = s.zeros(256 * 4L, ElementType.BYTES)
                s.sync()
                assertThrows<WeirException.OpFailed> { s.failWrite(x, "deliberate failure C") }
                // Work admitted on S after the failure runs, for every stream to see.
                val fresh = s.upload(IntArray(256) { 7 + it })
                s.execute(BuiltinOp.FILL_I32, shared.writes(), scalar(9))
                s.execute(BuiltinOp.IOTA, written.writes(), scalar(100u))
                assertArrayEquals(IntArray(256) { 7 + it }, t.readInts(fresh), "an upload on S after its failure")
                assertArrayEquals(IntArray(256) { 9 }, t.readInts(shared), "a fill on S after its failure")
                assertArrayEquals(IntArray(256) { 100 + it }, t.readInts(written), "a kernel on S after its failure")
                // S's next sync reports the failure, once.
                assertNamesTheFailure(assertThrows<WeirException.OpFailed> { s.sync() }, "deliberate failure C")
                s.execute(BuiltinOp.FILL_I32, shared.writes(), scalar(11))
                s.sync()
                assertArrayEquals(IntArray(256) { 11 }, t.readInts(shared))
                s.sync()
                // Two failures before one sync: the first is reported, with a count.
                assertThrows<WeirException.OpFailed> { s.failWrite(x, "deliberate failure D") }
                assertThrows<WeirException.OpFailed> { s.failWrite(shared, "deliberate failure E") }
                val both = assertThrows<WeirException.OpFailed> { s.sync() }
                assertNamesTheFailure(both, "deliberate failure D")
                assertTrue(both.message!!.contains("1 more"), "no count of the other failure: ${both.message}")
                assertFalse(both.message!!.contains("deliberate failure E"), both.message)
                s.sync()
                // The runtime-wide sync saw nothing left to report either.
                rt.sync()
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a full overwrite heals a failed buffer, a partial write keeps it failed`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val (s, t, u) = Triple(rt.newStream(), rt.newStream(), rt.newStream())
            runBlocking {
                val n = 256
                fun failed(message: String): Buffer = s.upload(IntArray(n) { 1 }).also { buffer ->
                    assertThrows<WeirException.OpFailed> { s.failWrite(buffer, message) }
                }
                val filled = failed("deliberate failure F")
                val zeroed = failed("deliberate failure G")
                val rewritten = failed("deliberate failure H")
                val partial = failed("deliberate failure I")
                t.execute(BuiltinOp.FILL_I32, filled.writes(), scalar(5))
                assertArrayEquals(IntArray(n) { 5 }, s.readInts(filled), "a fill heals")
                t.memsetZero(zeroed)
                assertArrayEquals(IntArray(n), s.readInts(zeroed), "a memsetZero heals")
                t.write(rewritten, IntArray(n) { 3 * it })
                assertArrayEquals(IntArray(n) { 3 * it }, s.readInts(rewritten), "a whole-buffer write heals")
                // Writing part of it leaves the rest as the failed op left it (on U, which then
                // has a failure of its own to report).
                val partly = runCatching { u.writeAndWait(partial, IntArray(4) { 8 }, offset = 4) }.exceptionOrNull()
                if (partly != null) assertNamesTheFailure(partly, "deliberate failure I")
                assertNamesTheFailure(assertThrows<WeirException.OpFailed> { s.readInts(partial) }, "deliberate failure I")
                // A whole write after it does heal.
                t.write(partial, IntArray(n) { 6 })
                assertArrayEquals(IntArray(n) { 6 }, s.readInts(partial))
            }
        }

    private fun assertNamesTheFailure(error: Throwable, message: String) {
        assertTrue(error is WeirException.OpFailed, "not OpFailed: $error")
        assertTrue(error.message!!.contains(message), "'${error.message}' does not name the failure '$message'")
    }
}
