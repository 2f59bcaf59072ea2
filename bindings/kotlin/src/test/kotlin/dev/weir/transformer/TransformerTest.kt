package dev.weir.transformer

import dev.weir.Backends
import dev.weir.WeirException
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions
import org.junit.jupiter.api.Test
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

/**
 * The Kotlin transformer example at its small size, on each GPU backend the
 * suite runs (lavapipe's wgpu in CI; CUDA with cuBLAS on a GPU): every
 * request's output, on one stream and on several, matches the host's.
 */
class TransformerTest {
    @ParameterizedTest
    @MethodSource("dev.weir.Backends#names")
    fun `the transformer block at small size matches the host on every stream`(backend: String) {
        Assumptions.assumeTrue(backend != "cpu") { "the transformer example runs on GPU backends (its kernels are CUDA and WGSL)" }
        Backends.open(backend).use { rt ->
            val report = runBlocking(Dispatchers.Default) { run(rt, Shape.SMALL, requests = 12, inFlight = 4) }
            assertTrue(report.worst <= TOLERANCE, report.summary)
            assertTrue(report.figures.first { it.first == "tokens/s, 4 streams" }.second > 0, "${report.figures}")
            // On wgpu every op of the block is a kernel: it records, and its replays' outputs were checked too.
            if (backend == "wgpu") {
                val replayed = report.figures.firstOrNull { it.first == "tokens/s, 4 streams, each request a replayed graph" }
                assertTrue(replayed != null && replayed.second > 0, "${report.figures}")
            }
            // Where the device takes timestamps, how busy it was is measured each way.
            val timestamps = try { rt.defaultStream().timestamp().close(); true } catch (e: WeirException.Unsupported) { false }
            if (timestamps) {
                for (name in listOf("device busy fraction, one stream", "device busy fraction, 4 streams")) {
                    val busy = report.figures.firstOrNull { it.first == name }?.second
                    assertTrue(busy != null && busy > 0 && busy <= 1, "$name: ${report.figures}")
                }
            }
            rt.shutdown()
        }
    }

    @Test
    fun `the busy fraction counts time covered by any span once`() {
        // 0-4 and 2-6 overlap (6 covered), 8-9 apart (1 more), 8-8 empty: 7 of 10.
        assertEquals(0.7, busyFraction(listOf(2L..6L, 8L..9L, 0L..4L, 8L..8L), 10), 1e-9)
        // A span inside another adds nothing; more than the wall is capped.
        assertEquals(1.0, busyFraction(listOf(0L..10L, 1L..2L), 10), 1e-9)
        assertEquals(1.0, busyFraction(listOf(0L..12L), 10), 1e-9)
    }
}
