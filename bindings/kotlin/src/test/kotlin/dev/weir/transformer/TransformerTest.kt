package dev.weir.transformer

import dev.weir.Backends
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions
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
            rt.shutdown()
        }
    }
}
