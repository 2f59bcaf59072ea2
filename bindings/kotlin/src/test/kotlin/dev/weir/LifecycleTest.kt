package dev.weir

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.lang.ref.WeakReference
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CyclicBarrier
import kotlin.concurrent.thread

/**
 * A runtime's life: `shutdown()` (from any number of threads) waits for work
 * in flight, then everything it made answers `Closed`; doing it again does
 * nothing. Closing or collecting the `WeirRuntime` handle ends nothing: its
 * streams, buffers and fences keep it alive, and when the last of them goes
 * the work completes in the background, holding up no cleaner.
 */
class LifecycleTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `shutdown with work in flight waits for it and completes pending awaits`(backend: String) {
        val rt = Backends.open(backend)
        val stream = rt.defaultStream()
        stream.enqueueDelay(100_000u)
        val fence = stream.fence()
        runBlocking {
            val pending = async(Dispatchers.Default) { stream.sync() }
            eventually(what = "the pending sync to be waiting") { rt.diagnostics().liveWaiters == 1uL }
            rt.shutdown()
            assertTrue(fence.isComplete(), "shutdown returned before the work in flight finished")
            pending.await() // completed normally, not failed
        }
        fence.close()
        rt.close()
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `use after shutdown fails with Closed everywhere`(backend: String) {
        val rt = Backends.open(backend)
        val stream = rt.defaultStream()
        val buffer = stream.zeros(16, ElementType.BYTES)
        rt.shutdown()
        assertThrows<WeirException.Closed> { rt.newStream() }
        assertThrows<WeirException.Closed> { rt.fence() }
        assertThrows<WeirException.Closed> { stream.zeros(4, ElementType.BYTES) }
        assertThrows<WeirException.Closed> { stream.fence() }
        runBlocking {
            assertThrows<WeirException.Closed> { stream.sync() }
            assertThrows<WeirException.Closed> { rt.sync() }
            assertThrows<WeirException.Closed> { stream.read(buffer) }
            assertThrows<WeirException.Closed> { stream.write(buffer, ByteArray(4)) }
            assertThrows<WeirException.Closed> { stream.memsetZero(buffer) }
            assertThrows<WeirException.Closed> { stream.executeAndWait(BuiltinOp.MEMSET_ZERO, buffer.writes()) }
        }
        val error = assertThrows<WeirException.Closed> { stream.zeros(4, ElementType.BYTES) }
        assertTrue(error.message!!.contains("closed"), error.message)
        rt.close()
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `closing the runtime handle ends nothing and returns at once, and closing twice does nothing`(backend: String) {
        val rt = Backends.open(backend)
        val stream = rt.defaultStream()
        stream.enqueueDelay(2_000_000u) // long, so a busy host cannot pass for a wait
        val fence = stream.fence()
        val started = System.nanoTime()
        rt.close()
        val millis = (System.nanoTime() - started) / 1e6
        assertTrue(millis < 1_000, "close() took $millis ms: it waited for the queued work")
        assertFalse(fence.isComplete(), "the queued work cannot be done yet")
        runBlocking {
            fence.await()
            val buffer = stream.upload(floatArrayOf(1f, 2f, 3f))
            val doubled = stream.empty(12, ElementType.BYTES)
            stream.executeAndWait(BuiltinOp.SCALE, buffer.reads(), doubled.writes(), scalar(2f))
            assertArrayEquals(floatArrayOf(2f, 4f, 6f), stream.readFloats(doubled))
            buffer.close()
            doubled.close()
        }
        rt.close()
        // The handle itself is gone: calls on it are refused by the bindings, not a crash.
        assertThrows<IllegalStateException> { rt.info() }
        fence.close()
        stream.close()
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a stream and a buffer keep working after every reference to their runtime was collected`(backend: String) {
        val (streams, buffer, runtime) = streamsWithoutTheirRuntime(backend)
        val (s, t) = streams
        collectGarbageUntil(what = "the WeirRuntime object to be collected") { runtime.get() == null }
        runBlocking {
            for (round in 1..5) {
                collectGarbage(rounds = 3) // the cleaner has freed the WeirRuntime's handle by now
                assertArrayEquals(FloatArray(4) { it + round.toFloat() }, s.readFloats(buffer), "round $round")
                val ones = t.upload(FloatArray(4) { 1f })
                t.executeAndWait(BuiltinOp.AXPY, ones.reads(), buffer.readsWrites(), scalar(1f)) // buffer += 1
                t.sync()
                s.fence().use { it.await() }
                ones.close()
            }
            s.write(buffer, floatArrayOf(9f, 8f, 7f, 6f))
            assertArrayEquals(floatArrayOf(9f, 8f, 7f, 6f), t.readFloats(buffer))
        }
        buffer.close()
        s.close()
        t.close()
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a runtime released with long queued work does not hold up freeing another runtime's buffers`(backend: String) {
        val workMillis = BUSY_DELAYS * BUSY_DELAY_MICROS.toLong() / 1000
        val (busy, started) = abandonBusyRuntime(backend)
        onRuntime(backend) { other ->
            // The busy runtime's handles are unreachable, so the cleaner frees them first.
            collectGarbageUntil(what = "the busy runtime's handles to be collected") { busy.all { it.get() == null } }
            collectGarbage(rounds = 3)
            val stream = other.defaultStream()
            val before = other.diagnostics()
            val buffers = MutableList(200) { stream.zeros(4096, ElementType.BYTES) }
            assertEquals(before.liveBuffers + 200u, other.diagnostics().liveBuffers)
            buffers.clear() // now unreachable: only the cleaner can free them
            collectGarbageUntil(timeoutMs = workMillis / 2, what = "the other runtime's buffers to be freed") {
                val now = other.diagnostics()
                now.liveBuffers == before.liveBuffers && now.retiringBuffers == 0uL &&
                    now.liveAllocations == before.liveAllocations
            }
            val millis = (System.nanoTime() - started) / 1_000_000
            assertTrue(millis < workMillis / 2, "freed after $millis ms; the busy runtime's work takes $workMillis ms")
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `shutdown from two threads at once returns on both only after the queued work`(backend: String) {
        val rt = Backends.open(backend)
        val stream = rt.defaultStream()
        stream.enqueueDelay(300_000u)
        val fence = stream.fence()
        val together = CyclicBarrier(2)
        val outcomes = ConcurrentLinkedQueue<Result<Boolean>>()
        val callers = List(2) {
            thread(name = "shutdown-$it") {
                outcomes += runCatching {
                    together.await()
                    rt.shutdown()
                    fence.isComplete()
                }
            }
        }
        callers.forEach { it.join(10_000) }
        assertEquals(2, outcomes.size, "a shutdown() call did not return")
        for (outcome in outcomes) {
            assertTrue(outcome.getOrThrow(), "a shutdown() returned before the queued work was done")
        }
        assertThrows<WeirException.Closed> { stream.fence() }
        fence.close()
        rt.close()
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `shutdown twice does nothing the second time`(backend: String) {
        val rt = Backends.open(backend)
        rt.shutdown()
        rt.shutdown()
        assertEquals(0uL, rt.diagnostics().liveWaiters)
        rt.close()
        rt.close()
    }
}

/** How the busy runtime of the cleaner test is kept busy: delays of a second each. */
private const val BUSY_DELAYS = 4
private const val BUSY_DELAY_MICROS: UInt = 1_000_000u

/**
 * Opens a runtime and returns only two of its streams and a buffer, with a
 * weak reference to the runtime object (a separate frame, so no local slot
 * keeps the runtime reachable).
 */
private fun streamsWithoutTheirRuntime(backend: String): Triple<Pair<WeirStream, WeirStream>, Buffer, WeakReference<WeirRuntime>> {
    val rt = Backends.open(backend)
    val s = rt.defaultStream()
    val t = rt.newStream()
    val buffer = s.upload(floatArrayOf(1f, 2f, 3f, 4f))
    return Triple(s to t, buffer, WeakReference(rt))
}

/**
 * Opens a runtime, queues several seconds of delays on a stream, and drops
 * every handle; returns weak references to them and when the work started.
 */
private fun abandonBusyRuntime(backend: String): Pair<List<WeakReference<Any>>, Long> {
    val rt = Backends.open(backend)
    val stream = rt.newStream()
    val buffer = stream.zeros(4096, ElementType.BYTES)
    val started = System.nanoTime()
    repeat(BUSY_DELAYS) { stream.enqueueDelay(BUSY_DELAY_MICROS) }
    stream.execute(BuiltinOp.FILL_U32, buffer.writes(), scalar(1u))
    val fence = stream.fence()
    return listOf<Any>(rt, stream, buffer, fence).map { WeakReference(it) } to started
}
