package dev.weir

import kotlinx.coroutines.async
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.nio.ByteBuffer
import java.nio.ByteOrder

/** Bulk data: uploads lent to Rust or staged in chunks, reads into the caller's arrays. */
class BulkTest {
    /** More than two staging chunks of 2 MiB, and not a whole number of them. */
    private val floats = FloatArray((5 shl 20) / 4 + 3) { it * 0.5f - 7f }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `arrays upload through staging chunks and read back into the caller's arrays`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            runBlocking {
                s.upload(floats).use { buffer ->
                    assertEquals(floats.size * 4L, buffer.byteSize)
                    assertArrayEquals(floats, s.readFloats(buffer))
                    val part = FloatArray(1000)
                    s.readInto(buffer, part, offset = floats.size - 1000L)
                    assertArrayEquals(floats.copyOfRange(floats.size - 1000, floats.size), part)
                }
                val ints = IntArray(floats.size) { it * 31 - 5 }
                s.upload(ints).use { buffer ->
                    val back = IntArray(ints.size)
                    s.readInto(buffer, back)
                    assertArrayEquals(ints, back)
                    assertArrayEquals(ints, s.readInts(buffer))
                }
                s.upload(floatArrayOf(1f, 2f)).use { assertArrayEquals(floatArrayOf(1f, 2f), s.readFloats(it)) }
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `byte buffers upload from their position and read into their remaining bytes`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            runBlocking {
                for (source in listOf(ByteBuffer.allocateDirect(floats.size * 4 + 8), ByteBuffer.allocate(floats.size * 4 + 8))) {
                    source.order(ByteOrder.LITTLE_ENDIAN).putLong(-1L).asFloatBuffer().put(floats)
                    source.position(8) // the 8 bytes before the position are not uploaded
                    s.upload(source).use { buffer ->
                        assertEquals(8, source.position(), "an upload moved the source's position")
                        assertArrayEquals(floats, s.readFloats(buffer), "direct: ${source.isDirect}")
                        for (destination in listOf(ByteBuffer.allocateDirect(20), ByteBuffer.allocate(20))) {
                            destination.position(4).limit(12)
                            s.readInto(buffer, destination, offset = 4)
                            assertEquals(12, destination.position(), "a read moves the destination's position")
                            val read = destination.flip().position(4).slice().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer()
                            assertEquals(floats[1], read[0])
                            assertEquals(floats[2], read[1])
                        }
                    }
                }
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `bad ranges are refused in the caller's units and change nothing`(backend: String): Unit = onRuntime(backend) { rt ->
        val s = rt.defaultStream()
        runBlocking {
            s.upload(FloatArray(4) { 1f }).use { buffer ->
                val tooLong = assertThrows<WeirException.OutOfRange> { s.readInto(buffer, FloatArray(3), offset = 2) }
                assertEquals(true, tooLong.message!!.contains("f32 elements at offset 2"), tooLong.message)
                assertThrows<WeirException.InvalidArgument> { s.readInto(buffer, IntArray(1), offset = -1) }
                assertThrows<WeirException.OutOfRange> { s.readInto(buffer, ByteBuffer.allocate(8), offset = 12) }
                assertArrayEquals(FloatArray(4) { 1f }, s.readFloats(buffer))
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `host bytes upload as often as needed and a reader on another stream waits for the upload`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val (a, b) = rt.defaultStream() to rt.newStream()
            runBlocking {
                rt.hostBytes(floats).use { host ->
                    assertEquals(floats.size * 4L, host.len().toLong())
                    a.zeros(floats.size.toLong(), ElementType.F32).use { buffer ->
                        Blocker(a).use { blocker ->
                            a.writeHost(buffer, host)
                            val back = FloatArray(floats.size)
                            val read = async { b.readInto(buffer, back); back }
                            delay(20)
                            assertFalse(read.isCompleted, "the read finished while the upload was held")
                            blocker.release()
                            assertArrayEquals(floats, read.await())
                        }
                        a.execute(BuiltinOp.FILL_F32, buffer.writes(), scalar(3f))
                        a.writeHost(buffer, host)
                        assertArrayEquals(floats, b.readFloats(buffer), "a second upload of the same bytes")
                        assertThrows<WeirException.OutOfRange> { a.writeHost(buffer, host, offset = 1) }
                        // A read admitted now is ordered before a write admitted after it.
                        b.enqueueRead(buffer).use { pending ->
                            a.execute(BuiltinOp.FILL_F32, buffer.writes(), scalar(5f))
                            pending.bytes().use { bytes ->
                                val back = FloatArray(floats.size)
                                bytes.asByteBuffer().asFloatBuffer().get(back)
                                assertArrayEquals(floats, back, "the read saw the write admitted after it")
                            }
                            assertThrows<WeirException.InvalidArgument> { pending.bytes() }
                        }
                        assertArrayEquals(FloatArray(floats.size) { 5f }, b.readFloats(buffer))
                    }
                }
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a read into an array on another stream waits for the latest write`(backend: String): Unit = onRuntime(backend) { rt ->
        val (a, b) = rt.defaultStream() to rt.newStream()
        runBlocking {
            a.upload(floats).use { buffer ->
                Blocker(a).use { blocker ->
                    a.execute(BuiltinOp.FILL_F32, buffer.writes(), scalar(3f))
                    val back = FloatArray(floats.size)
                    val read = async { b.readInto(buffer, back); back }
                    delay(20)
                    assertFalse(read.isCompleted, "the read finished while the write was held")
                    blocker.release()
                    assertArrayEquals(FloatArray(floats.size) { 3f }, read.await())
                }
            }
        }
    }
}
