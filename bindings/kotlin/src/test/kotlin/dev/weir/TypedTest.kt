package dev.weir

import kotlinx.coroutines.delay
import kotlinx.coroutines.async
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

/** Typed buffers: element types are checked, sizes count elements, views are buffers of a range. */
class TypedTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `sizes count elements and typed reads return the buffer's own type`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            runBlocking {
                val f = s.zeros(3, ElementType.F32)
                assertEquals(ElementType.F32, f.elementType())
                assertEquals(3L, f.size)
                assertEquals(12L, f.byteSize)
                s.write(f, floatArrayOf(5.5f), offset = 1)
                assertArrayEquals(floatArrayOf(0f, 5.5f, 0f), s.readFloats(f))
                val i = s.upload(intArrayOf(-1, 2, -3))
                assertEquals(ElementType.I32, i.elementType())
                assertArrayEquals(intArrayOf(-1, 2, -3), s.readInts(i))
                val u = s.empty(4, ElementType.U32)
                s.executeAndWait(BuiltinOp.IOTA, u.writes(), scalar(10u))
                assertArrayEquals(intArrayOf(10, 11, 12, 13), s.readInts(u), "u32s read as their bits")
                assertEquals(8, s.read(u, offset = 1u, length = 2u).size, "2 elements of u32 are 8 bytes")
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a wrong element type is refused with InvalidArgument and nothing runs`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            runBlocking {
                val f = s.upload(floatArrayOf(1f, 2f))
                val i = s.upload(intArrayOf(1, 2))
                val y = s.zeros(2, ElementType.F32)
                val axpy = assertThrows<WeirException.InvalidArgument> {
                    s.executeAndWait(BuiltinOp.AXPY, i.reads(), y.readsWrites(), scalar(2f))
                }
                assertTrue(axpy.message!!.contains("i32") && axpy.message!!.contains("f32"), axpy.message)
                assertThrows<WeirException.InvalidArgument> { s.readInts(f) }
                assertThrows<WeirException.InvalidArgument> { s.readFloats(i) }
                assertThrows<WeirException.InvalidArgument> { WeirBlocking.readInts(s, f) }
                assertThrows<WeirException.InvalidArgument> { s.write(f, intArrayOf(3)) }
                assertThrows<WeirException.InvalidArgument> { s.readInto(i, FloatArray(2)) }
                assertThrows<WeirException.InvalidArgument> { s.execute(BuiltinOp.FILL_U32, f.writes(), scalar(1u)) }
                s.executeAndWait(BuiltinOp.AXPY, f.reads(), y.readsWrites(), scalar(2f))
                assertArrayEquals(floatArrayOf(2f, 4f), s.readFloats(y))
                assertArrayEquals(intArrayOf(1, 2), s.readInts(i))
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a view write on one stream is what a held read of the whole buffer on another sees`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val (s, t) = rt.newStream() to rt.newStream()
            runBlocking {
                // Views start on 256-byte boundaries, which every wgpu device binds.
                val whole = s.zeros(128, ElementType.F32)
                val tail = whole.view(64, 64)
                assertEquals(64L, tail.size)
                assertEquals(64uL, tail.firstElement())
                s.sync()
                Blocker(s).use { blocker ->
                    s.execute(BuiltinOp.FILL_F32, tail.writes(), scalar(9f))
                    val read = async(start = CoroutineStart.UNDISPATCHED) { t.readFloats(whole) }
                    delay(20)
                    if (blocker.isGate) assertFalse(read.isCompleted, "T read the buffer before S's held view write")
                    blocker.release()
                    val floats = read.await()
                    assertArrayEquals(FloatArray(64), floats.copyOfRange(0, 64))
                    assertArrayEquals(FloatArray(64) { 9f }, floats.copyOfRange(64, 128), "a stale version")
                }
                assertArrayEquals(FloatArray(64) { 9f }, t.readFloats(tail))
                assertThrows<WeirException.OutOfRange> { whole.view(100, 64) }
            }
        }
}
