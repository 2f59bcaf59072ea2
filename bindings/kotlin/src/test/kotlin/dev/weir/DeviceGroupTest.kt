package dev.weir

import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.api.Test
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

    /** Two CPU devices: collectives need one device per member (NCCL refuses one twice), which CI has only on the CPU. */
    private fun onCpuGroup(body: suspend CoroutineScope.(DeviceGroup, List<WeirStream>) -> Unit) =
        DeviceGroup.open(Backend.CPU, 0, 1).use { group ->
            try {
                runBlocking { body(group, group.devices().map { it.newStream() }) }
            } finally {
                group.shutdown()
            }
        }

    @Test
    fun `collectives over two devices compute what the host does`() = onCpuGroup { group, streams ->
        val (s0, s1) = streams
        val a = s0.upload(FloatArray(256) { it.toFloat() })
        val b = s1.upload(FloatArray(256) { 1000f - it })
        group.allReduceAndWait(streams, listOf(a, b), ReduceOp.SUM)
        assertArrayEquals(FloatArray(256) { 1000f }, s1.readFloats(b), "member 1 holds the sum")
        assertArrayEquals(FloatArray(256) { 1000f }, s0.readFloats(a), "member 0 holds the sum")

        val (x, y) = s0.upload(IntArray(64) { 7 }) to s1.upload(IntArray(64) { -3 })
        group.allReduce(streams, listOf(x, y), ReduceOp.MIN)
        assertArrayEquals(IntArray(64) { -3 }, s0.readInts(x))
        group.broadcastAndWait(streams, listOf(x, s1.upload(IntArray(64) { 11 })), 1u)
        assertArrayEquals(IntArray(64) { 11 }, s0.readInts(x), "member 0 got member 1's buffer")

        val sends = listOf(s0.upload(IntArray(4) { 1 }), s1.upload(IntArray(4) { 2 }))
        val gathered = listOf(s0.zeros(8, ElementType.I32), s1.zeros(8, ElementType.I32))
        group.allGatherAndWait(streams, sends, gathered)
        assertArrayEquals(intArrayOf(1, 1, 1, 1, 2, 2, 2, 2), s1.readInts(gathered[1]))
        val parts = listOf(s0.zeros(4, ElementType.I32), s1.zeros(4, ElementType.I32))
        group.reduceScatterAndWait(streams, gathered, parts, ReduceOp.SUM)
        assertArrayEquals(intArrayOf(2, 2, 2, 2), s0.readInts(parts[0]), "chunk 0 of the sum of both gathers")
        assertArrayEquals(intArrayOf(4, 4, 4, 4), s1.readInts(parts[1]), "chunk 1 of the sum of both gathers")
    }

    @Test
    fun `a consumer on device 1 reads the all-reduce only after device 0's held input`() = onCpuGroup { group, streams ->
        val writer = group.device(0u).newStream()
        val consumer = group.device(1u).newStream()
        val (x0, x1) = streams[0].zeros(1024, ElementType.I32) to streams[1].upload(IntArray(1024) { 1 })
        group.sync()
        Blocker(writer).use { blocker ->
            writer.execute(BuiltinOp.FILL_I32, x0.writes(), scalar(5))
            group.allReduce(streams, listOf(x0, x1), ReduceOp.SUM)
            val read = async(start = CoroutineStart.UNDISPATCHED) { consumer.readInts(x1) }
            delay(20)
            assertFalse(read.isCompleted, "device 1 read the all-reduce before device 0's held input")
            blocker.release()
            assertArrayEquals(IntArray(1024) { 6 }, read.await(), "device 1 read a stale all-reduce")
        }
    }

    @Test
    fun `two ranks joined through a group id meet in their collectives, each with its own runtime`() = runBlocking {
        val id = GroupId(Backend.CPU)
        // Rank 1 as another process would be: from the id's bytes.
        val theirs = GroupId.fromBytes(id.toBytes())
        val groups = listOf(
            async(Dispatchers.Default) { DeviceGroup.join(Backend.CPU, 0, id, 2, 0) },
            async(Dispatchers.Default) { DeviceGroup.join(Backend.CPU, 0, theirs, 2, 1) },
        ).map { it.await() }
        try {
            assertEquals(listOf(0u to 2u, 1u to 2u), groups.map { it.rank() to it.ranks() })
            val streams = groups.map { it.device(0u).newStream() }
            val sends = streams.mapIndexed { rank, s -> s.upload(FloatArray(256) { rank + 1f }) }
            val gathered = streams.map { it.zeros(512, ElementType.F32) }
            groups.indices.map { rank ->
                async(Dispatchers.Default) {
                    groups[rank].allReduceAndWait(listOf(streams[rank]), listOf(sends[rank]), ReduceOp.SUM)
                    groups[rank].allGatherAndWait(listOf(streams[rank]), listOf(sends[rank]), listOf(gathered[rank]))
                }
            }.forEach { it.await() }
            for (rank in groups.indices) {
                assertArrayEquals(FloatArray(256) { 3f }, streams[rank].readFloats(sends[rank]), "rank $rank's sum")
                assertArrayEquals(FloatArray(512) { 3f }, streams[rank].readFloats(gathered[rank]), "rank $rank's gather")
            }
            // Sizes count both ranks: a gather into room for one send is refused at once.
            assertThrows<WeirException.InvalidArgument> {
                groups[0].allGather(listOf(streams[0]), listOf(sends[0]), listOf(streams[0].zeros(256, ElementType.F32)))
            }
        } finally {
            groups.forEach { it.shutdown(); it.close() }
            id.close()
            theirs.close()
        }
        // A rank out of range is refused before anyone is waited for.
        GroupId(Backend.CPU).use { fresh ->
            val refused = runCatching { DeviceGroup.join(Backend.CPU, 0, fresh, 2, 2) }.exceptionOrNull()
            assertTrue(refused is WeirException.InvalidArgument, "rank 2 of 2: $refused")
            // A negative one says which number it is (it said "negative element count").
            val negative = runCatching { DeviceGroup.join(Backend.CPU, 0, fresh, 2, -1) }.exceptionOrNull()
            assertTrue(negative is WeirException.InvalidArgument && "negative rank -1" in negative.message.orEmpty(), "$negative")
        }
    }

    @Test
    fun `cancelling a collective's wait leaves no waiter and the collective still runs`() = onCpuGroup { group, streams ->
        val buffers = listOf(streams[0].upload(IntArray(16) { 1 }), streams[1].upload(IntArray(16) { 2 }))
        group.sync()
        Blocker(streams[1]).use { blocker ->
            val wait = launch(Dispatchers.Default) { group.allReduceAndWait(streams, buffers, ReduceOp.SUM) }
            eventually(what = "a registered waiter") { group.device(0u).diagnostics().liveWaiters == 1uL }
            wait.cancelAndJoin()
            assertTrue(wait.isCancelled)
            eventually(what = "no live waiter or fence") {
                group.devices().all { it.diagnostics().let { d -> d.liveWaiters == 0uL && d.liveFences == 0uL } }
            }
            blocker.release()
        }
        assertArrayEquals(IntArray(16) { 3 }, streams[0].readInts(buffers[0]), "the work ran though its wait was cancelled")
        // Bad input admits nothing: a stream of member 1 given for member 0.
        assertThrows<WeirException.InvalidArgument> { group.allReduce(streams.reversed(), buffers, ReduceOp.SUM) }
        assertThrows<WeirException.InvalidArgument> { group.broadcast(streams, buffers, 2u) }
    }
}
