package dev.weir

import com.sun.jna.Library
import com.sun.jna.Native
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertSame
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

/**
 * Where suspended calls resume: on `weir-wake`, one long-lived thread per
 * process that holds no Weir lock, so a coroutine resumed there inline may
 * call any Weir API; the thread stays attached to the JVM between wake-ups.
 */
class WakeTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a coroutine resumed inline by a completion calls back into Weir on the same and another stream`(
        backend: String,
    ): Unit = onRuntime(backend) { rt ->
        val s = rt.defaultStream()
        val t = rt.newStream()
        val n = 1024
        val xs = FloatArray(n) { it.toFloat() }
        val threads = finishesWithin(what = "the calls from inside the resumed coroutine") {
            val seen = mutableListOf<String>()
            val x = s.upload(xs)
            s.enqueueDelay(20_000u)
            s.sync() // pending: resumed on the thread that delivers the completion
            seen += nativeThreadName()
            // From here on, every call runs on that thread, inside its wake-up.
            val fence = s.fence()
            val y = s.zeros(n * 4L, ElementType.BYTES)
            s.execute(BuiltinOp.AXPY, x.reads(), y.readsWrites(), scalar(2f)) // y = 2x
            s.enqueueDelay(10_000u)
            fence.await()
            fence.close()
            s.sync()
            seen += nativeThreadName()
            assertArrayEquals(FloatArray(n) { 2f * it }, s.readFloats(y))
            // Another stream: waits for s's writes, suspends and resumes again.
            val z = t.empty(n * 4L, ElementType.BYTES)
            t.enqueueDelay(10_000u)
            t.executeAndWait(BuiltinOp.ADD, x.reads(), y.reads(), z.writes()) // z = 3x
            seen += nativeThreadName()
            assertArrayEquals(FloatArray(n) { 3f * it }, t.readFloats(z))
            // Blocking waits on the waking thread are woken by the completion itself.
            t.enqueueDelay(10_000u)
            t.fence().use { it.waitBlocking() }
            val bytes = s.readBlocking(z)
            assertEquals(n * 4, bytes.size)
            // A new stream, writes, reads and a runtime-wide sync, all from here.
            val u = rt.newStream()
            val w = u.upload(FloatArray(n) { 1f })
            s.writeAndWait(y, FloatArray(n) { 5f })
            u.executeAndWait(BuiltinOp.AXPY, y.reads(), w.readsWrites(), scalar(1f)) // w = 1 + 5
            assertArrayEquals(FloatArray(n) { 6f }, u.readFloats(w))
            u.enqueueDelay(10_000u)
            rt.sync()
            seen += nativeThreadName()
            listOf(x, y, z, w).forEach { it.close() }
            u.close()
            seen
        }
        assertEquals(List(threads.size) { WakerThreads.THREAD_NAME }, threads, "resumed on these (native) threads")
    }

    /**
     * Resumes the calling coroutine on weir-wake (an awaited `sync()` of [s]),
     * then retires a new stream with 200 ms of work still queued; returns a
     * fence on that work.
     */
    private suspend fun resumeOnWakeBesideARetiredStream(rt: WeirRuntime, s: WeirStream): Fence {
        s.enqueueDelay(10_000u)
        s.sync()
        // The blocking wait that follows must run on weir-wake, where a wait for itself would hang.
        assertEquals(WakerThreads.THREAD_NAME, nativeThreadName(), "resumed on weir-wake")
        val u = rt.newStream()
        u.enqueueDelay(200_000u)
        val fence = u.fence()
        u.close() // its last handle: retired with its work still queued
        return fence
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a blocking wait on weir-wake covers a retired stream's queued work`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            finishesWithin(what = "a runtime-wide blocking wait from the resumed coroutine") {
                val fence = resumeOnWakeBesideARetiredStream(rt, s)
                rt.fence().use { it.waitBlocking() }
                assertTrue(fence.isComplete(), "the runtime-wide wait returned before the retired stream's work")
                fence.close()
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `shutdown on weir-wake waits for a retired stream's queued work`(backend: String) {
        val rt = Backends.open(backend)
        val s = rt.defaultStream()
        finishesWithin(what = "shutdown() from the resumed coroutine") {
            val fence = resumeOnWakeBesideARetiredStream(rt, s)
            rt.shutdown()
            assertTrue(fence.isComplete(), "shutdown() returned before the retired stream's work")
            fence.close()
        }
        rt.close()
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `the weir-wake thread resumes coroutines and stays attached to the JVM between wake-ups`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val stream = rt.defaultStream()
            val resumedOn = finishesWithin(what = "three wake-ups") {
                List(3) {
                    stream.enqueueDelay(5_000u)
                    stream.sync() // woken by the delivery thread, which resumes this coroutine inline
                    Thread.currentThread() to nativeThreadName()
                }
            }
            val waker = resumedOn.first().first
            assertEquals(List(3) { WakerThreads.THREAD_NAME }, resumedOn.map { it.second }, "resumed on these (native) threads")
            assertEquals(WakerThreads.THREAD_NAME, waker.baseName)
            resumedOn.forEach { assertSame(waker, it.first, "every wake-up comes from the same attached thread") }
            assertTrue(waker.isAlive && waker.isDaemon, "the waking thread stays attached, as a daemon")
            val named = Thread.getAllStackTraces().keys.filter { it.baseName == WakerThreads.THREAD_NAME }
            assertEquals(listOf(waker), named, "one waking thread per process")
        }
}

/** The thread's name without the " @coroutine#N" the coroutine debugger (on under `-ea`) adds while one runs there. */
private val Thread.baseName: String get() = name.substringBefore(" @coroutine#")

/** The C library calls that name the calling native thread. */
@Suppress("FunctionName")
private interface Pthreads : Library {
    fun pthread_self(): Long

    fun pthread_getname_np(thread: Long, name: ByteArray, length: Long): Int
}

private val pthreads: Pthreads by lazy { Native.load("c", Pthreads::class.java) }

/** The calling thread's native name: what Rust named it, whatever the JVM calls it once attached. */
private fun nativeThreadName(): String {
    val name = ByteArray(64)
    check(pthreads.pthread_getname_np(pthreads.pthread_self(), name, name.size.toLong()) == 0)
    return name.decodeToString().substringBefore('\u0000')
}
