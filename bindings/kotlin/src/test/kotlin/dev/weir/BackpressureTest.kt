package dev.weir

import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.async
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.util.concurrent.Executors

/** The bound on queued work: full queues refuse, suspend or block, as the caller chose. */
class BackpressureTest {
    private fun limited(ops: Long): WeirRuntime =
        WeirRuntime.openWith(Backend.CPU, RuntimeOptions(queueLimitOps = ops.toULong()))

    @Test
    fun `a full queue refuses a non-waiting admission, and admit suspends without blocking its thread`() {
        val rt = limited(ops = 4)
        val stream = rt.newStream()
        val buffer = stream.zeros(8, ElementType.F32)
        runBlocking { stream.sync() }
        val blocker = Blocker(stream)
        val eager = stream.withoutWaiting()
        repeat(4) { eager.memsetZero(buffer) }
        val full = assertThrows<WeirException.QueueFull> { eager.memsetZero(buffer) }
        assertEquals(4uL, full.ops)
        assertEquals(4uL, rt.diagnostics().opsInQueue)
        // One thread runs both coroutines: the second can only finish if the
        // first suspended instead of blocking it.
        val single = Executors.newSingleThreadExecutor().asCoroutineDispatcher()
        runBlocking {
            withContext(single) {
                val admission = async { stream.admit { write(buffer, floatArrayOf(1f, 2f, 3f, 4f, 5f, 6f, 7f, 8f)) } }
                val beside = async { "ran beside" }
                assertEquals("ran beside", withTimeout(5_000) { beside.await() })
                assertFalse(admission.isCompleted, "admitted into a full queue")
                blocker.release()
                withTimeout(10_000) { admission.await() }
            }
            assertArrayEquals(floatArrayOf(1f, 2f, 3f, 4f, 5f, 6f, 7f, 8f), stream.readFloats(buffer))
        }
        single.close()
        eager.close()
        blocker.close()
        rt.shutdown()
        rt.close()
    }

    @Test
    fun `a plain admission blocks its thread until the queue has room`() {
        val rt = limited(ops = 2)
        val stream = rt.newStream()
        val buffer = stream.zeros(4, ElementType.F32)
        runBlocking { stream.sync() }
        val blocker = Blocker(stream)
        repeat(2) { stream.memsetZero(buffer) }
        val producer = Thread { stream.write(buffer, floatArrayOf(9f, 9f, 9f, 9f)) }
        producer.start()
        producer.join(200)
        assertTrue(producer.isAlive, "a blocking admission did not wait for room")
        blocker.release()
        producer.join(10_000)
        assertFalse(producer.isAlive, "the admission never got room")
        runBlocking { assertArrayEquals(floatArrayOf(9f, 9f, 9f, 9f), stream.readFloats(buffer)) }
        blocker.close()
        rt.shutdown()
        rt.close()
    }
}
