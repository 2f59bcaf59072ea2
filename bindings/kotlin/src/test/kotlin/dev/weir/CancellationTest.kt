package dev.weir

import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.cancel
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

/** Cancelling a wait drops it on the Rust side at once and leaks nothing; the work itself still runs. */
class CancellationTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `cancelling a coroutine that awaits a held op returns promptly and leaves no waiter`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val stream = rt.defaultStream()
            runBlocking {
                Blocker(stream).use { blocker ->
                    val buffer = stream.zeros(16, ElementType.BYTES)
                    val waits: List<suspend () -> Unit> = listOf(
                        { stream.sync() },
                        { stream.memsetZeroAndWait(buffer) },
                        { stream.executeAndWait(BuiltinOp.FILL_U32, buffer.writes(), scalar(5u)) },
                        { stream.writeAndWait(buffer, intArrayOf(9)) },
                        { stream.read(buffer) },
                        { stream.fence().use { it.await() } },
                    )
                    // One at a time, so the ops are admitted in this order: a wait is
                    // registered only after its op was admitted.
                    val jobs = waits.mapIndexed { index, wait ->
                        launch(Dispatchers.Default) { wait() }.also {
                            eventually(what = "${index + 1} registered waiters") {
                                rt.diagnostics().liveWaiters == (index + 1).toULong()
                            }
                        }
                    }
                    val start = System.nanoTime()
                    jobs.forEach { it.cancelAndJoin() }
                    val millis = (System.nanoTime() - start) / 1e6
                    assertTrue(millis < 2_000, "cancellation took $millis ms")
                    assertTrue(jobs.all { it.isCancelled })
                    eventually(what = "no live waiter or fence") {
                        rt.diagnostics().let { it.liveWaiters == 0uL && it.liveFences == 0uL }
                    }
                    blocker.release()
                    stream.sync()
                    // The work was not cancelled, only the waits: the fill and the write ran.
                    assertEquals(listOf(9, 5, 5, 5), stream.readInts(buffer).toList())
                }
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a cancel token ends a wait with Cancelled and drops it`(backend: String): Unit = onRuntime(backend) { rt ->
        val stream = rt.defaultStream()
        runBlocking {
            Blocker(stream).use { blocker ->
                CancelToken().use { token ->
                    val wait = async(Dispatchers.Default) { runCatching { stream.sync(token) } }
                    eventually(what = "a registered waiter") { rt.diagnostics().liveWaiters == 1uL }
                    token.cancel()
                    val error = wait.await().exceptionOrNull()
                    assertTrue(error is WeirException.Cancelled, "expected Cancelled, got $error")
                    assertTrue(error!!.message!!.contains("cancelled"), error.message)
                    assertEquals(0uL, rt.diagnostics().liveWaiters)
                    assertTrue(token.isCancelled())
                    // A cancelled token fails the next wait at once.
                    assertThrows<WeirException.Cancelled> { stream.sync(token) }
                }
                blocker.release()
                stream.sync()
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a cancelled coroutine's sync throws CancellationException, not the failure it would report`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.newStream()
            runBlocking {
                val x = s.upload(IntArray(4) { 1 })
                assertThrows<WeirException.OpFailed> { s.failWrite(x, "deliberate failure") }
                var thrown: Throwable? = null
                launch {
                    cancel()
                    thrown = runCatching { s.sync() }.exceptionOrNull()
                }.join()
                assertTrue(thrown is CancellationException, "a cancelled caller got $thrown")
                // The failure is still the stream's to report, once, to the next sync.
                assertThrows<WeirException.OpFailed> { s.sync() }
                s.sync()
            }
        }
}
