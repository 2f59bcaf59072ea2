package dev.weir

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.joinAll
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.lang.management.ManagementFactory
import java.util.concurrent.atomic.AtomicBoolean
import kotlin.concurrent.thread

/** Fences: awaitable, waitable, many times, by many waiters, without a thread each. */
class FenceTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `await and waitBlocking both return once the work is done, as often as asked`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val stream = rt.defaultStream()
            val fence = Blocker(stream).use { blocker ->
                val fence = stream.fence()
                assertFalse(fence.isComplete(), "a fence behind a held stream is not complete")
                val blockedReturned = AtomicBoolean(false)
                val waiter = thread { fence.waitBlocking(); blockedReturned.set(true) }
                Thread.sleep(20)
                assertFalse(blockedReturned.get(), "waitBlocking returned before the work was done")
                blocker.release()
                runBlocking { fence.await() }
                assertTrue(fence.isComplete())
                waiter.join(10_000)
                assertTrue(blockedReturned.get())
                fence
            }
            runBlocking { fence.await() } // again: at once
            fence.waitBlocking()
            fence.close()
            assertEquals(0uL, rt.diagnostics().liveFences)
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `ten thousand coroutines await fences without a thread per waiter`(backend: String): Unit = onRuntime(backend) { rt ->
        val stream = rt.defaultStream()
        val threads = ManagementFactory.getThreadMXBean()
        val before = threads.threadCount
        var peak = 0
        // When each coroutine resumed: behind a delay (no gate on this backend) the
        // release is not when the fences complete, so the spread is what is timed.
        val resumedAt = LongArray(10_000)
        runBlocking {
            Blocker(stream).use { blocker ->
                val fences = List(10_000) { stream.fence() }
                val jobs = fences.mapIndexed { i, fence ->
                    launch(Dispatchers.Default) {
                        fence.await()
                        resumedAt[i] = System.nanoTime()
                    }
                }
                eventually(what = "10 000 registered waiters") { rt.diagnostics().liveWaiters == 10_000uL }
                peak = threads.threadCount
                assertTrue(fences.none { it.isComplete() }, "fences completed while the stream was held")
                blocker.release()
                jobs.joinAll()
                assertTrue(fences.all { it.isComplete() })
                fences.forEach { it.close() }
            }
        }
        val after = threads.threadCount
        println(
            "weir: $backend: 10 000 coroutines resumed within %.1f ms of the first; JVM threads before $before, with the waiters $peak, after $after"
                .format((resumedAt.max() - resumedAt.min()) / 1e6),
        )
        assertTrue(peak - before < 64, "threads grew from $before to $peak with 10 000 waiters")
        assertTrue(after - before < 64, "threads grew from $before to $after")
        val diagnostics = rt.diagnostics()
        assertEquals(0uL, diagnostics.liveWaiters)
        assertEquals(0uL, diagnostics.liveFences)
    }
}
