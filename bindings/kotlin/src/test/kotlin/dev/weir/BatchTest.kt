package dev.weir

import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.async
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import java.util.concurrent.Executors

/** `WeirStream.batch`: many ops admitted in one call, each its own op. */
class BatchTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a batch runs its ops in order, each its own op`(backend: String): Unit = onRuntime(backend) { rt ->
        val s = rt.defaultStream()
        runBlocking {
            val x = s.zeros(16, ElementType.BYTES)
            val y = s.upload(floatArrayOf(1f, 2f, 3f, 4f))
            val before = rt.diagnostics().admittedOps
            s.batch {
                execute(BuiltinOp.FILL_F32, x.writes(), scalar(2f))
                execute(BuiltinOp.AXPY, x.reads(), y.readsWrites(), scalar(3f)) // y = 3x + y
                execute(BuiltinOp.SCALE, y.reads(), x.writes(), scalar(0.5f)) // x = y / 2
                write(y, floatArrayOf(100f), offset = 3) // after the axpy and the scale
            }
            assertEquals(4uL, rt.diagnostics().admittedOps - before, "each op of the batch is its own op")
            assertArrayEquals(floatArrayOf(7f, 8f, 9f, 100f), s.readFloats(y))
            assertArrayEquals(floatArrayOf(3.5f, 4f, 4.5f, 5f), s.readFloats(x))
            val beforeEmpty = rt.diagnostics().admittedOps
            s.batch {} // empty: admits nothing, no error
            assertEquals(beforeEmpty, rt.diagnostics().admittedOps)
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a batch with a refused op admits none of its ops and leaves the stream usable`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            runBlocking {
                val x = s.upload(floatArrayOf(1f, 1f, 1f, 1f))
                val small = s.zeros(8, ElementType.BYTES)
                val before = rt.diagnostics().admittedOps
                assertThrows<WeirException.InvalidArgument> {
                    s.batch {
                        execute(BuiltinOp.FILL_F32, x.writes(), scalar(9f))
                        execute(BuiltinOp.COPY, x.reads(), small.writes()) // sizes differ
                    }
                }
                assertThrows<WeirException.OutOfRange> {
                    s.batch {
                        execute(BuiltinOp.FILL_F32, x.writes(), scalar(9f))
                        write(small, ByteArray(4), offset = 8) // past the end
                    }
                }
                val wrongType = assertThrows<WeirException.InvalidArgument> {
                    s.batch {
                        execute(BuiltinOp.FILL_F32, x.writes(), scalar(9f))
                        write(x, intArrayOf(1), offset = 0) // i32s into an f32 buffer
                    }
                }
                assertTrue(wrongType.message!!.contains("i32") && wrongType.message!!.contains("f32"), wrongType.message)
                assertEquals(before, rt.diagnostics().admittedOps, "a refused batch admitted ops")
                assertArrayEquals(floatArrayOf(1f, 1f, 1f, 1f), s.readFloats(x), "the fill before the refused op ran")
                s.batch { execute(BuiltinOp.FILL_F32, x.writes(), scalar(5f)) }
                assertArrayEquals(floatArrayOf(5f, 5f, 5f, 5f), s.readFloats(x))
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a closed buffer in a batch is refused before anything crosses`(backend: String): Unit = onRuntime(backend) { rt ->
        val s = rt.defaultStream()
        val x = s.zeros(16, ElementType.BYTES)
        val closed = s.zeros(16, ElementType.BYTES).also { it.close() }
        val before = rt.diagnostics().admittedOps
        assertThrows<IllegalStateException> {
            s.batch {
                execute(BuiltinOp.FILL_U32, x.writes(), scalar(1u))
                execute(BuiltinOp.FILL_U32, closed.writes(), scalar(1u))
            }
        }
        assertEquals(before, rt.diagnostics().admittedOps)
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a read on another stream waits for a batch's write, from two threads`(backend: String): Unit =
        onRuntime(backend) { rt ->
            // The seed race around a batch: the batch is admitted on A while A is
            // held; the read is admitted on B from another thread and must wait for
            // the batch's last write of the buffer, not for its allocation.
            val a = rt.defaultStream()
            val b = rt.newStream()
            val writerThread = Executors.newSingleThreadExecutor().asCoroutineDispatcher()
            val readerThread = Executors.newSingleThreadExecutor().asCoroutineDispatcher()
            try {
                runBlocking {
                    repeat(3) { round ->
                        val n = 1 shl 12
                        val buffer = a.empty(n * 4L, ElementType.BYTES)
                        val unrelated = a.upload(IntArray(16) { 1 })
                        b.execute(BuiltinOp.COPY, unrelated.reads(), b.empty(64, ElementType.BYTES).writes()) // B has seen A
                        Blocker(a).use { blocker ->
                            val before = rt.diagnostics().admittedOps
                            val writer = launch(writerThread) {
                                a.batch {
                                    execute(BuiltinOp.FILL_F32, buffer.writes(), scalar(-1f))
                                    execute(BuiltinOp.FILL_F32, buffer.writes(), scalar(round + 0.5f))
                                }
                            }
                            eventually(what = "the batch to be admitted") { rt.diagnostics().admittedOps >= before + 2u }
                            val reader = async(readerThread) { b.readFloats(buffer) }
                            delay(20)
                            assertFalse(reader.isCompleted, "the read finished while the batch was held")
                            blocker.release()
                            assertArrayEquals(FloatArray(n) { round + 0.5f }, reader.await(), "round $round read stale data")
                            writer.join()
                        }
                    }
                }
            } finally {
                writerThread.close()
                readerThread.close()
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `batches larger than the memory a thread keeps, typed writes, given grids and a failed block all encode right`(
        backend: String,
    ): Unit = onRuntime(backend) { rt ->
        val s = rt.defaultStream()
        runBlocking {
            val counts = s.zeros(4, ElementType.U32)
            val floats = s.zeros(1 shl 17, ElementType.F32)
            // A builder that fails admits nothing and leaves the thread's memory usable.
            assertThrows<IllegalStateException> {
                s.batch {
                    execute(BuiltinOp.FILL_U32, counts.writes(), scalar(99u))
                    error("the builder failed")
                }
            }
            for (ops in listOf(10, 6_000)) { // 6 000 such ops take 294 KB, past the 256 KiB a thread keeps
                val before = rt.diagnostics().admittedOps
                s.batch {
                    for (i in 0 until ops) execute(BuiltinOp.IOTA.kernel(), Grid.linear(4, 2), listOf(counts.writes(), scalar(i.toUInt())))
                    write(floats, FloatArray(1 shl 17) { it * 0.5f }) // 512 KiB of data in the encoding
                    write(counts, intArrayOf(-1, -2), offset = 2)
                }
                assertEquals(ops.toULong() + 2u, rt.diagnostics().admittedOps - before, "$ops ops")
                assertArrayEquals(intArrayOf(ops - 1, ops, -1, -2), s.readInts(counts), "$ops ops")
                assertArrayEquals(FloatArray(1 shl 17) { it * 0.5f }, s.readFloats(floats))
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a batch kept past its block takes no more ops`(backend: String): Unit = onRuntime(backend) { rt ->
        val s = rt.defaultStream()
        val x = s.zeros(4, ElementType.U32)
        var kept: Batch? = null
        s.batch { kept = this; execute(BuiltinOp.FILL_U32, x.writes(), scalar(1u)) }
        val before = rt.diagnostics().admittedOps
        assertThrows<IllegalStateException> { kept!!.execute(BuiltinOp.FILL_U32, x.writes(), scalar(2u)) }
        s.batch { execute(BuiltinOp.FILL_U32, x.writes(), scalar(3u)) } // the memory it gave back serves the next batch
        assertEquals(before + 1u, rt.diagnostics().admittedOps)
        assertArrayEquals(intArrayOf(3, 3, 3, 3), runBlocking { s.readInts(x) })
    }
}
