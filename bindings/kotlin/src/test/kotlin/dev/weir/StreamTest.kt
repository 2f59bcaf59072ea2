package dev.weir

import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.delay
import kotlinx.coroutines.job
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.util.concurrent.Executors

const val BACKENDS = "dev.weir.Backends#names"

/** Streams: every op gives exact results once awaited; plain verbs enqueue, `AndWait` forms wait. */
class StreamTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `sync returns once the stream's admitted work is done`(backend: String): Unit = onRuntime(backend) { rt ->
        val stream = rt.defaultStream()
        runBlocking {
            stream.sync() // idle: answers at once
            stream.enqueueDelay(30_000u)
            stream.fence().use { fence ->
                assertFalse(fence.isComplete(), "a 30 ms delay cannot be done yet")
                stream.sync()
                assertTrue(fence.isComplete(), "sync returned before the delay finished")
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `an idle sync returns at once, yet reports a failure once and honours cancellation`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val stream = rt.newStream()
            runBlocking {
                stream.sync()
                eventually(what = "the idle stream to say it is synced") { stream.isSynced() }
                val futures = stream.debugFutureWaits()
                repeat(1_000) { stream.sync() } // the fast path: no Rust future
                assertEquals(futures, stream.debugFutureWaits(), "an idle sync() waited through a Rust future")
                stream.sync(CancelToken()) // a token: the generated call
                assertEquals(futures + 1u, stream.debugFutureWaits(), "a sync() with a token made no Rust future")
                // A failure waiting to be reported: isSynced() takes nothing, the next sync reports it.
                val target = stream.zeros(16, ElementType.BYTES)
                assertThrows<WeirException> { stream.failWrite(target, "a deliberate failure") }
                repeat(3) { assertFalse(stream.isSynced(), "synced with a failure to report") }
                val failure = assertThrows<WeirException> { stream.sync() }
                assertTrue(failure.message!!.contains("deliberate"), failure.message)
                stream.sync()
                eventually(what = "the stream to be synced once the failure was reported") { stream.isSynced() }
                // In a cancelled coroutine an idle sync throws, as a ready Rust future does.
                val cancelled = launch(start = CoroutineStart.UNDISPATCHED) {
                    coroutineContext.job.cancel()
                    stream.sync()
                }
                cancelled.join()
                assertTrue(cancelled.isCancelled)
                target.close()
            }
            stream.close()
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `executeAndWait runs a built-in op and returns with its exact result`(backend: String): Unit = onRuntime(backend) { rt ->
        val stream = rt.defaultStream()
        runBlocking {
            val n = 4096
            val x = stream.upload(FloatArray(n) { it.toFloat() })
            val y = stream.upload(FloatArray(n) { 1.0f })
            stream.executeAndWait(BuiltinOp.AXPY, x.reads(), y.readsWrites(), scalar(0.5f))
            assertArrayEquals(FloatArray(n) { 0.5f * it + 1.0f }, stream.readFloats(y))
            val out = stream.empty(n * 4L, ElementType.BYTES)
            stream.executeAndWait(BuiltinOp.IOTA, out.writes(), scalar(7u))
            assertArrayEquals(IntArray(n) { it + 7 }, stream.readInts(out))
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `plain verbs return once admitted, their AndWait forms once the stream has run them`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val stream = rt.defaultStream()
            runBlocking {
                val buffer = stream.upload(intArrayOf(1, 2, 3, 4))
                val copy = stream.zeros(16, ElementType.BYTES)
                val bytes = stream.zeros(4, ElementType.BYTES)
                Blocker(stream).use { blocker ->
                    stream.write(buffer, intArrayOf(7), offset = 1)
                    stream.write(bytes, byteArrayOf(5, 0, 0, 0))
                    stream.execute(BuiltinOp.COPY, buffer.reads(), copy.writes())
                    stream.memsetZero(buffer)
                    stream.fence().use { fence ->
                        assertFalse(fence.isComplete(), "an enqueued op ran past a held stream")
                        val waits = listOf<suspend () -> Unit>(
                            { stream.writeAndWait(bytes, byteArrayOf(6, 0, 0, 0)) },
                            { stream.executeAndWait(BuiltinOp.FILL_I32, copy.writes(), scalar(-3)) },
                            { stream.memsetZeroAndWait(bytes) },
                        // Each admitted in turn, up to its first suspension.
                        ).map { wait -> async(start = CoroutineStart.UNDISPATCHED) { wait() } }
                        delay(20)
                        assertTrue(waits.none { it.isCompleted }, "an AndWait call returned while its stream was held")
                        blocker.release()
                        waits.awaitAll()
                        assertTrue(fence.isComplete(), "an AndWait call returned before the work ahead of it")
                    }
                }
                assertArrayEquals(IntArray(4), stream.readInts(buffer))
                assertArrayEquals(IntArray(4) { -3 }, stream.readInts(copy))
                assertArrayEquals(ByteArray(4), stream.read(bytes))
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `memsetZero clears a dirty buffer`(backend: String): Unit = onRuntime(backend) { rt ->
        val stream = rt.defaultStream()
        runBlocking {
            val dirty = stream.upload(IntArray(1000) { -1 - it })
            assertEquals(-1, stream.readInts(dirty)[0])
            stream.memsetZero(dirty)
            assertArrayEquals(IntArray(1000), stream.readInts(dirty))
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `write then read round-trips bytes exactly, at an offset too`(backend: String): Unit = onRuntime(backend) { rt ->
        val stream = rt.defaultStream()
        runBlocking {
            val buffer = stream.zeros(64, ElementType.BYTES)
            val bytes = ByteArray(64) { (it * 7 - 100).toByte() }
            stream.write(buffer, bytes)
            assertArrayEquals(bytes, stream.read(buffer))
            stream.write(buffer, floatArrayOf(1.5f, -2.25f), offset = 16) // a raw buffer counts bytes
            val floats = stream.readFloats(buffer)
            assertEquals(1.5f, floats[4])
            assertEquals(-2.25f, floats[5])
            assertArrayEquals(bytes.copyOfRange(0, 16), stream.read(buffer).copyOfRange(0, 16))
            assertArrayEquals(bytes.copyOfRange(24, 28), stream.readBlocking(buffer, 24u, 4u))
            assertArrayEquals(bytes.copyOfRange(24, 28), stream.read(buffer, 24u, 4u))
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a read on another stream waits for the latest write, from coroutines on two threads`(backend: String): Unit =
        onRuntime(backend) { rt ->
            // The seed race: the write is admitted on A, but A is held; the read is
            // admitted on B from another thread. B must wait for A's write, not for
            // the buffer's allocation.
            val a = rt.defaultStream()
            val b = rt.newStream()
            val writerThread = Executors.newSingleThreadExecutor().asCoroutineDispatcher()
            val readerThread = Executors.newSingleThreadExecutor().asCoroutineDispatcher()
            try {
                runBlocking {
                    repeat(3) { round ->
                        val n = 1 shl 14
                        val buffer = a.zeros(n * 4L, ElementType.BYTES)
                        val expected = FloatArray(n) { it + round * 0.5f }
                        Blocker(a).use { blocker ->
                            val before = rt.diagnostics().admittedOps
                            val writer = launch(writerThread) { a.writeAndWait(buffer, expected) }
                            eventually(what = "the write to be admitted") { rt.diagnostics().admittedOps > before }
                            val reader = async(readerThread) { b.readFloats(buffer) }
                            delay(20)
                            assertFalse(reader.isCompleted, "the read finished while the write was held")
                            blocker.release()
                            assertArrayEquals(expected, reader.await(), "round $round read stale data")
                            writer.join()
                        }
                    }
                }
            } finally {
                writerThread.close()
                readerThread.close()
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a two-stream pipeline awaited concurrently gives the exact sum`(backend: String): Unit = onRuntime(backend) { rt ->
        val s = rt.defaultStream()
        val t = rt.newStream()
        runBlocking(Dispatchers.Default) {
            val n = 2048
            val x = s.upload(FloatArray(n) { it.toFloat() })
            val y = s.zeros(n * 4L, ElementType.BYTES)
            val out = t.empty(n * 4L, ElementType.BYTES)
            // Admission order is program order: the write of y on s, then its read on t.
            s.execute(BuiltinOp.AXPY, x.reads(), y.readsWrites(), scalar(2.0f))
            val second = async { t.executeAndWait(BuiltinOp.ADD, x.reads(), y.reads(), out.writes()) }
            val first = async { s.sync() }
            listOf(first, second).awaitAll()
            assertArrayEquals(FloatArray(n) { 3.0f * it }, t.readFloats(out))
        }
    }
}
