package dev.weir

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.time.Duration

/** Timestamps: device time between two points of one stream, on every backend. */
class TimestampTest {
    private val delay: Duration = Duration.ofMillis(20)
    private val bound: Duration = Duration.ofSeconds(5)

    /** A timestamp on [stream], or the test skipped where wgpu's adapter cannot take one (the refusal names why). */
    private fun WeirStream.timestampOrSkip(): Timestamp = try {
        timestamp()
    } catch (e: WeirException.Unsupported) {
        assertTrue("TIMESTAMP_QUERY" in (e.message ?: ""), "the refusal names the missing feature: ${e.message}")
        Assumptions.abort<Timestamp>("timestamps unsupported here: ${e.message}")
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `elapsed across a delay is at least the delay, suspending or blocking`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.newStream()
            runBlocking {
                val before = s.timestampOrSkip()
                s.sync() // taken before the delay starts, however the backend delays
                assertTrue(before.isComplete())
                s.enqueueDelay(delay.toNanos().div(1000).toUInt())
                val after = s.timestamp()
                val elapsed = after.elapsedSince(before)
                println("$backend: $elapsed across a delay of $delay")
                assertTrue(elapsed >= delay && elapsed < bound, "$elapsed across a delay of $delay")
                assertEquals(elapsed, after.elapsedSinceBlocking(before))
                listOf(before, after).forEach { it.close() }
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a timestamp against itself is zero, and the later one first is refused`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            runBlocking {
                val first = s.timestampOrSkip()
                s.execute(BuiltinOp.FILL_F32, s.zeros(1 shl 16, ElementType.BYTES).writes(), scalar(1.5f))
                val second = s.timestamp()
                assertEquals(Duration.ZERO, first.elapsedSince(first))
                assertTrue(second.elapsedSince(first) < bound)
                assertThrows<WeirException.InvalidArgument> { first.elapsedSince(second) }
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `timestamps of two streams are refused`(backend: String): Unit = onRuntime(backend) { rt ->
        val onS = rt.defaultStream().timestampOrSkip()
        val onT = rt.newStream().timestamp()
        assertThrows<WeirException.InvalidArgument> { onT.elapsedSinceBlocking(onS) }
        runBlocking { assertThrows<WeirException.InvalidArgument> { onS.elapsedSince(onT) } }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a failed op between two timestamps is timed, and the next sync reports it`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.newStream()
            runBlocking {
                val before = s.timestampOrSkip()
                assertThrows<WeirException.OpFailed> { s.failWrite(s.zeros(64, ElementType.BYTES), "a deliberate failure") }
                val after = s.timestamp()
                assertTrue(after.elapsedSince(before) < bound)
                val reported = assertThrows<WeirException.OpFailed> { s.sync() }
                assertTrue("a deliberate failure" in (reported.message ?: ""), "${reported.message}")
                s.sync()
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `closed timestamps leave no event behind`(backend: String): Unit = onRuntime(backend) { rt ->
        val s = rt.newStream()
        val stamps = List(16) { if (it == 0) s.timestampOrSkip() else s.timestamp() }
        runBlocking { stamps.last().elapsedSince(stamps.first()) }
        stamps.forEach { it.close() }
        runBlocking { s.sync() }
        eventually(what = "no live backend event") { rt.diagnostics().liveEvents == 0uL }
    }
}
