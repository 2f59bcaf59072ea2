package dev.weir

import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

/** Device groups from Kotlin: peer copies ordered by the versions on both devices. */
class DeviceGroupTest {
    /** Two devices of [backend] where it has them: two CPU devices, or one CUDA device twice. */
    private fun <T> onGroup(backend: String, body: (DeviceGroup) -> T) {
        val devices = when (backend) {
            "cpu" -> intArrayOf(0, 1)
            "cuda" -> intArrayOf(0, 0)
            else -> null
        }
        assumeTrue(devices != null, "peer copies run on CPU and CUDA groups")
        Backends.open(backend).use { it.shutdown() } // skipped, or required, as every test
        val kind = Backend.entries.first { it.name.equals(backend, ignoreCase = true) }
        DeviceGroup.open(kind, *devices!!).use { group ->
            try {
                body(group)
            } finally {
                group.shutdown()
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a consumer on device 1 reads through a peer copy what device 0 just wrote`(backend: String) = onGroup(backend) { group ->
        val (a, b) = group.device(0u) to group.device(1u)
        val (s, t) = a.newStream() to b.newStream()
        runBlocking {
            val unrelated = s.upload(IntArray(16) { 1 })
            val out = s.empty(1024, ElementType.I32)
            val (pre, seen) = t.zeros(16, ElementType.I32) to t.zeros(1024, ElementType.I32)
            t.copyFromPeerAndWait(unrelated, pre) // T has synchronised with S past out's allocation
            Blocker(s).use { blocker ->
                s.execute(BuiltinOp.FILL_I32, out.writes(), scalar(7))
                t.copyFromPeer(out, seen)
                val read = async(start = CoroutineStart.UNDISPATCHED) { t.readInts(seen) }
                delay(20)
                if (blocker.isGate) assertFalse(read.isCompleted, "device 1 read before device 0's held write")
                blocker.release()
                assertArrayEquals(IntArray(1024) { 7 }, read.await(), "device 1 read a stale copy")
            }
            assertArrayEquals(IntArray(16) { 1 }, t.readInts(pre))
            group.sync()
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a write on device 0 after a copy to device 1 waits for the copy`(backend: String) = onGroup(backend) { group ->
        val (s, t) = group.device(0u).newStream() to group.device(1u).newStream()
        runBlocking {
            val src = s.upload(IntArray(256) { 3 })
            val dst = t.zeros(256, ElementType.I32)
            group.sync()
            Blocker(t).use { blocker ->
                t.copyFromPeer(src, dst)
                s.execute(BuiltinOp.FILL_I32, src.writes(), scalar(9)) // must wait for the held copy's read
                val overwritten = s.fence()
                delay(20)
                if (blocker.isGate) assertFalse(overwritten.isComplete(), "device 0 overwrote what device 1 still copies")
                blocker.release()
                overwritten.use { it.await() }
            }
            assertArrayEquals(IntArray(256) { 3 }, t.readInts(dst))
            assertArrayEquals(IntArray(256) { 9 }, s.readInts(src))
            assertEquals(2, group.devices().size)
            assertThrows<WeirException.InvalidArgument> { t.copyFromPeer(src, t.zeros(255, ElementType.I32)) }
        }
    }
}
