package dev.weir

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.api.Test
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.lang.management.ManagementFactory
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CyclicBarrier
import java.util.concurrent.TimeUnit
import kotlin.concurrent.thread

/**
 * Sustained calls from several threads leave the heap flat, whether they
 * succeed or fail: a call allocates nothing that waits for JNA's cleaner
 * thread (one per JVM), so a small heap never fills however many threads
 * call, and once collected it is back where it started (a failing call's
 * exception is garbage at once, like any exception).
 *
 * Runs in a JVM of its own at `-Xmx128m` (the `bounded-heap` surefire
 * execution in pom.xml), never in the main suite's JVM.
 */
class HeapTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `4 threads x 10^6 trivial calls at -Xmx128m keep the heap bounded`(backend: String): Unit =
        sustained(backend, "trivial calls") { buffer -> if (buffer.sizeBytes() != 64uL) error("sizeBytes() changed") }

    /**
     * The failure path is the FFI's, whatever the backend: the CPU's is
     * enough. The call passes no `RustBuffer` (a closed runtime's stream
     * refusing a fence), so what is measured is the failure itself: a call
     * that passes or returns bytes, an option or a string makes one JNA
     * structure for them whether it fails or not.
     */
    @Test
    fun `4 threads x 10^6 failing calls at -Xmx128m keep the heap bounded`() {
        val closed = WeirRuntime.open(Backend.CPU)
        val stream = closed.defaultStream()
        closed.shutdown()
        try {
            sustained("cpu", "failing fences") { _ ->
                try {
                    stream.fence()
                    error("a closed runtime's stream made a fence")
                } catch (expected: WeirException.Closed) {
                }
            }
        } finally {
            closed.close()
        }
    }

    /** [call] made [CALLS] times from each of [THREADS] threads on one buffer; the heap's growth is bounded. */
    private fun sustained(backend: String, what: String, call: (Buffer) -> Unit): Unit = onRuntime(backend) { rt ->
        val maxHeap = java.lang.Runtime.getRuntime().maxMemory()
        assertTrue(maxHeap <= HEAP_LIMIT, "this test needs a JVM at -Xmx128m (the bounded-heap execution), not ${maxHeap shr 20} MiB")
        rt.defaultStream().zeros(64, ElementType.BYTES).use { buffer ->
            collectGarbage(rounds = 3)
            val baseline = liveHeap()
            var peak = baseline
            val done = java.util.concurrent.atomic.AtomicBoolean(false)
            val sampler = thread(name = "heap-sampler", isDaemon = true) {
                while (!done.get()) {
                    peak = maxOf(peak, liveHeap())
                    Thread.sleep(2)
                }
            }
            val failures = ConcurrentLinkedQueue<Throwable>()
            val start = CyclicBarrier(THREADS)
            val began = System.nanoTime()
            val callers = List(THREADS) { i ->
                thread(name = "caller-$i") {
                    try {
                        start.await()
                        repeat(CALLS) { call(buffer) }
                    } catch (e: Throwable) {
                        failures += e
                    }
                }
            }
            callers.forEach { it.join(TimeUnit.MINUTES.toMillis(5)) }
            val seconds = (System.nanoTime() - began) / 1e9
            done.set(true)
            sampler.join()
            if (callers.any { it.isAlive }) fail<Unit>("the callers did not finish within 5 minutes")
            failures.firstOrNull()?.let { throw AssertionError("a caller failed after ${seconds}s: $it", it) }
            // What the calls left behind: the heap once collected, against where it
            // started. A call whose arguments or result travel in a `RustBuffer`
            // (this read's) makes JNA structures that JNA's cleaner thread frees
            // after a collection: give it the moment it needs to catch up.
            collectGarbageUntil(timeoutMs = 10_000, what = "the heap back where it started") {
                liveHeap() - baseline < KEPT_LIMIT
            }
            val kept = liveHeap() - baseline
            println("HeapTest[$backend]: $THREADS threads x $CALLS $what in %.2f s; live heap after GC: baseline %.1f MiB, peak %.1f MiB during, %.1f MiB kept after of %d MiB"
                .format(seconds, baseline / MIB, peak / MIB, kept / MIB, maxHeap shr 20))
            assertTrue(kept < KEPT_LIMIT, "the calls left ${kept shr 20} MiB on the heap after ${THREADS * CALLS} $what")
            assertEquals(64uL, buffer.sizeBytes())
        }
    }

    /**
     * What the heap held after its latest collections: the live set, not the
     * garbage a busy young generation holds until the next one (failing
     * calls make an exception each, which is garbage at once).
     */
    private fun liveHeap(): Long = ManagementFactory.getMemoryPoolMXBeans()
        .filter { it.type == java.lang.management.MemoryType.HEAP }
        .sumOf { it.collectionUsage?.used ?: 0L }

    private companion object {
        const val THREADS = 4
        const val CALLS = 1_000_000
        const val HEAP_LIMIT = 128L shl 20
        const val KEPT_LIMIT = 8L shl 20
        const val MIB = 1024.0 * 1024.0
    }
}
