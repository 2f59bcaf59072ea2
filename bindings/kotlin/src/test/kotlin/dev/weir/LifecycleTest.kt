package dev.weir

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

/**
 * Shutting a runtime down: `shutdown()` (or closing the last runtime handle)
 * waits for work in flight, then everything it made answers `Closed`; doing it
 * again does nothing.
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
        val buffer = stream.zeros(16)
        rt.shutdown()
        assertThrows<WeirException.Closed> { rt.newStream() }
        assertThrows<WeirException.Closed> { rt.fence() }
        assertThrows<WeirException.Closed> { stream.zeros(4) }
        assertThrows<WeirException.Closed> { stream.fence() }
        runBlocking {
            assertThrows<WeirException.Closed> { stream.sync() }
            assertThrows<WeirException.Closed> { rt.sync() }
            assertThrows<WeirException.Closed> { stream.read(buffer) }
            assertThrows<WeirException.Closed> { stream.write(buffer, ByteArray(4)) }
            assertThrows<WeirException.Closed> { stream.memsetZero(buffer) }
            assertThrows<WeirException.Closed> { stream.executeAsync(BuiltinOp.MEMSET_ZERO, buffer.writes()) }
        }
        val error = assertThrows<WeirException.Closed> { stream.zeros(4) }
        assertTrue(error.message!!.contains("closed"), error.message)
        rt.close()
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `closing the runtime handle shuts it down, and closing twice does nothing`(backend: String) {
        val rt = Backends.open(backend)
        val stream = rt.defaultStream()
        stream.enqueueDelay(50_000u)
        val fence = stream.fence()
        rt.close()
        assertTrue(fence.isComplete(), "close returned before the work in flight finished")
        assertThrows<WeirException.Closed> { runBlocking { stream.sync() } }
        rt.close()
        // The handle itself is gone: calls on it are refused by the bindings, not a crash.
        assertThrows<IllegalStateException> { rt.info() }
        fence.close()
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
