package dev.weir

import kotlinx.coroutines.async
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.lang.ref.WeakReference
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.FloatBuffer

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

    @Test
    fun `arrays of more bytes than one JVM array holds are refused, typed`() {
        // What write(FloatArray|IntArray) and hostBytes(FloatArray) size their bytes with
        // (an array that large would need 2 GiB of heap to try).
        assertEquals(Int.MAX_VALUE / 4 * 4, wordBytes(Int.MAX_VALUE / 4, "f32"))
        for (count in listOf(Int.MAX_VALUE / 4 + 1, 1 shl 30, Int.MAX_VALUE)) {
            val refused = assertThrows<WeirException.InvalidArgument>("$count") { wordBytes(count, "f32") }
            assertTrue(refused.message!!.contains("$count f32s"), refused.message)
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a view of host bytes keeps them alive while it is reachable, past close`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val values = FloatArray(4096) { it * 0.25f - 3f }
            for (close in listOf(false, true)) {
                val views = arrayOfNulls<FloatBuffer>(1)
                val host = viewOfLostHandle(rt, values, close, views)
                // Nothing but the view holds the handle: were the view not to
                // hold it, UniFFI's cleaner would free the bytes under it.
                collectGarbage(rounds = 5)
                assertNotNull(host.get(), "the handle went while a view of its bytes was reachable (closed: $close)")
                repeat(4) { rt.hostBytes(FloatArray(values.size) { -1f }).close() } // memory a freed block would go to
                assertArrayEquals(values, FloatArray(values.size).also { views[0]!!.get(0, it) }, "closed: $close")
                // Once the view goes, so does the handle: its borrow was given back.
                views[0] = null
                collectGarbageUntil(what = "the handle goes once its view does (closed: $close)") { host.get() == null }
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
    fun `host bytes copy into an array from a byte offset, and a range past their end is refused untouched`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val host = rt.hostBytes(floatArrayOf(1f, 2f, 3f, 4f))
            host.use {
                val two = FloatArray(2)
                it.copyInto(two, offset = 8)
                assertArrayEquals(floatArrayOf(3f, 4f), two)
                val all = FloatArray(4)
                it.copyInto(all)
                assertArrayEquals(floatArrayOf(1f, 2f, 3f, 4f), all)
                val untouched = floatArrayOf(9f, 9f)
                assertThrows<WeirException.InvalidArgument>("past the end") { it.copyInto(untouched, offset = 12) }
                assertThrows<WeirException.InvalidArgument>("negative offset") { it.copyInto(untouched, offset = -4) }
                assertThrows<WeirException.InvalidArgument>("longer than the bytes") { it.copyInto(FloatArray(5)) }
                assertArrayEquals(floatArrayOf(9f, 9f), untouched, "a refused copy wrote")
            }
            assertThrows<IllegalStateException>("closed") { host.copyInto(FloatArray(1)) }
        }

    @Test
    fun `an array of more than 2 GiB of f32s copies as any other, and host bytes past one ByteBuffer refuse a view`(): Unit =
        onRuntime("cpu") { rt ->
            // The CPU backend's staging is zeroed lazily: 2 GiB + 4 bytes cost no memory until read.
            rt.defaultStream().staging((1UL shl 31) + 4UL).use { host ->
                val failure = assertThrows<WeirException.InvalidArgument> { host.asByteBuffer() }
                assertTrue("ByteBuffer" in failure.message.orEmpty(), failure.message)
            }
            assumeTrue(java.lang.Runtime.getRuntime().maxMemory() > (3L shl 30), "an array of 2 GiB needs a heap of 3 GiB")
            rt.hostBytes(floatArrayOf(1f)).use { host ->
                // A range check, not a JVM array limit: the array is a valid one.
                val failure = assertThrows<WeirException.InvalidArgument> { host.copyInto(FloatArray((1 shl 29) + 1)) }
                assertTrue("4 host bytes" in failure.message.orEmpty(), failure.message)
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `host bytes from a byte buffer hold its remaining bytes, from its position, direct or heap`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val four = floatArrayOf(1f, 2f, 3f, 4f)
            val direct = ByteBuffer.allocateDirect(16).order(ByteOrder.LITTLE_ENDIAN)
            direct.asFloatBuffer().put(four)
            direct.position(8)
            rt.hostBytes(direct).use { host ->
                assertEquals(8L, host.len().toLong())
                val back = host.asByteBuffer().asFloatBuffer()
                assertEquals(3f, back[0], "bytes from the buffer's start, not its position")
                assertEquals(4f, back[1])
            }
            assertEquals(8, direct.position(), "the position moved")
            // A heap buffer is copied, its bytes 4 to 12 of an array it starts 4 bytes into.
            val backing = ByteBuffer.allocate(20).order(ByteOrder.LITTLE_ENDIAN)
            backing.position(4).slice().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().put(four)
            val heap = backing.position(4).slice().position(4).limit(12)
            rt.hostBytes(heap).use { host ->
                val back = host.asByteBuffer().asFloatBuffer()
                assertEquals(2, back.remaining())
                assertEquals(2f, back[0])
                assertEquals(3f, back[1])
            }
            assertEquals(4, heap.position(), "the position moved")
            rt.hostBytes(ByteBuffer.allocate(0)).use { assertEquals(0L, it.len().toLong()) }
            // Writes take the same bytes; the offset counts the buffer's elements.
            val s = rt.defaultStream()
            runBlocking {
                s.zeros(4, ElementType.F32).use { buffer ->
                    s.write(buffer, direct, offset = 1)
                    s.write(buffer, heap.duplicate().limit(8), offset = 3)
                    assertArrayEquals(floatArrayOf(0f, 3f, 4f, 2f), s.readFloats(buffer))
                    assertThrows<WeirException.InvalidArgument> { s.write(buffer, direct.duplicate().limit(10)) }
                    assertThrows<WeirException.InvalidArgument> { s.write(buffer, direct, offset = -1) }
                }
            }
            assertEquals(8, direct.position(), "a write moved the position")
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

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `arrays upload and read natively, into heap or direct buffers too, and the copies refuse what does not fit`(backend: String): Unit =
        onRuntime(backend) { rt ->
            assertTrue(NativeLink.linked, "the library's JNI entries did not link: reads copy the JNA way")
            val s = rt.defaultStream()
            // More than two of the native copy's 32 MiB slices (each copied by
            // several threads where there are cores), and not a whole number
            // of them; its upload is staged natively in as many chunks.
            val big = FloatArray((72 shl 20) / 4 + 5) { it * 0.25f }
            runBlocking {
                s.upload(big).use { buffer ->
                    val back = FloatArray(big.size)
                    s.readInto(buffer, back)
                    assertArrayEquals(big, back)
                    // A heap buffer's slice starts 8 bytes into its array; read into its bytes 4 to 12.
                    val backing = ByteBuffer.allocate(32)
                    val slice = backing.position(8).slice().position(4).limit(12)
                    s.readInto(buffer, slice, offset = 2)
                    assertEquals(12, slice.position())
                    val landed = backing.order(ByteOrder.LITTLE_ENDIAN).position(12).slice().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer()
                    assertEquals(big[2], landed[0])
                    assertEquals(big[3], landed[1])
                    assertEquals(0f, landed[2], "bytes past the slice's limit were written")
                    assertThrows<java.nio.ReadOnlyBufferException> { s.readInto(buffer, ByteBuffer.allocateDirect(8).asReadOnlyBuffer()) }
                }
            }
            rt.hostBytes(floatArrayOf(1f, 2f, 3f, 4f)).use { host ->
                val handle = host.uniffiBeginBorrow()
                try {
                    val into = FloatArray(6) { -1f }
                    assertTrue(NativeCopy.toFloats(handle, 4, into, 2, 3))
                    val copied = floatArrayOf(-1f, -1f, 2f, 3f, 4f, -1f)
                    assertArrayEquals(copied, into)
                    assertFalse(NativeCopy.toFloats(handle, 8, into, 0, 3), "past the host bytes' end")
                    assertFalse(NativeCopy.toFloats(handle, 0, into, 4, 3), "past the array's end")
                    assertFalse(NativeCopy.toFloats(handle, -4, into, 0, 1), "before the host bytes")
                    assertFalse(NativeCopy.toInts(handle, 0, IntArray(2), -1, 1), "before the array")
                    assertArrayEquals(copied, into, "a refused copy wrote")
                    val direct = ByteBuffer.allocateDirect(12).order(ByteOrder.LITTLE_ENDIAN)
                    assertTrue(NativeCopy.toDirect(handle, 8, direct, 4, 8))
                    assertEquals(3f, direct.getFloat(4))
                    assertEquals(4f, direct.getFloat(8))
                    assertFalse(NativeCopy.toDirect(handle, 0, direct, 8, 8), "past the buffer's capacity")
                    assertFalse(NativeCopy.toDirect(handle, 0, ByteBuffer.allocate(16), 0, 4), "a heap buffer is not direct")
                } finally {
                    host.uniffiEndBorrow()
                }
            }
            // Staging for uploads: filled from the range asked, none for a range outside the array.
            val stream = s.uniffiBeginBorrow()
            try {
                val source = floatArrayOf(1f, 2f, 3f, 4f)
                assertEquals(0L, NativeCopy.stageFloats(stream, source, 3, 2), "past the array's end")
                assertEquals(0L, NativeCopy.stageInts(stream, IntArray(2), -1, 1), "before the array")
                val staged = NativeCopy.stageFloats(stream, source, 1, 2)
                assertTrue(staged != 0L, "no staging memory was made")
                HostBytes(UniffiWithHandle, staged).use { host ->
                    val view = host.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer()
                    assertEquals(2, view.remaining())
                    assertEquals(2f, view[0])
                    assertEquals(3f, view[1])
                }
            } finally {
                s.uniffiEndBorrow()
            }
        }
}

/**
 * Puts into [views] a float view of new host bytes holding [values] (closed
 * at once if [close]) and returns a weak reference to their handle, which
 * nothing else then holds: a frame of its own, so no local keeps it.
 */
private fun viewOfLostHandle(rt: WeirRuntime, values: FloatArray, close: Boolean, views: Array<FloatBuffer?>): WeakReference<HostBytes> {
    val host = rt.hostBytes(values)
    views[0] = host.asByteBuffer().asFloatBuffer()
    if (close) host.close()
    return WeakReference(host)
}
