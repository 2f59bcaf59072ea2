package dev.weir

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.lang.management.ManagementFactory
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.CyclicBarrier
import java.util.concurrent.TimeUnit
import kotlin.concurrent.thread

/**
 * Sustained calls from several threads leave the heap flat: a trivial call
 * allocates nothing that waits for JNA's cleaner thread (one per JVM), so a
 * small heap never fills however many threads call.
 *
 * Runs in a JVM of its own at `-Xmx128m` (the `bounded-heap` surefire
 * execution in pom.xml), never in the main suite's JVM.
 */
class HeapTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `4 threads x 10^6 trivial calls at -Xmx128m keep the heap bounded`(backend: String): Unit = onRuntime(backend) { rt ->
        val maxHeap = java.lang.Runtime.getRuntime().maxMemory()
        assertTrue(maxHeap <= HEAP_LIMIT, "this test needs a JVM at -Xmx128m (the bounded-heap execution), not ${maxHeap shr 20} MiB")
        val heap = ManagementFactory.getMemoryMXBean()
        rt.defaultStream().zeros(64, ElementType.BYTES).use { buffer ->
            collectGarbage(rounds = 3)
            val baseline = heap.heapMemoryUsage.used
            var peak = baseline
            val done = java.util.concurrent.atomic.AtomicBoolean(false)
            val sampler = thread(name = "heap-sampler", isDaemon = true) {
                while (!done.get()) {
                    peak = maxOf(peak, heap.heapMemoryUsage.used)
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
                        repeat(CALLS) { if (buffer.sizeBytes() != 64uL) error("sizeBytes() changed") }
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
            val growth = peak - baseline
            println("HeapTest[$backend]: $THREADS threads x $CALLS sizeBytes() in %.2f s; heap baseline %.1f MiB, peak %.1f MiB (growth %.1f MiB) of %d MiB"
                .format(seconds, baseline / MIB, peak / MIB, growth / MIB, maxHeap shr 20))
            assertTrue(growth < GROWTH_LIMIT, "the heap grew by ${growth shr 20} MiB over ${THREADS * CALLS} trivial calls")
            assertEquals(64uL, buffer.sizeBytes())
        }
    }

    private companion object {
        const val THREADS = 4
        const val CALLS = 1_000_000
        const val HEAP_LIMIT = 128L shl 20
        const val GROWTH_LIMIT = 32L shl 20
        const val MIB = 1024.0 * 1024.0
    }
}
