package dev.weir

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

/** `WeirStream.record` and `replay`: ops recorded once, admitted as one op per replay. */
class GraphTest {
    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a recorded graph admits nothing until replayed, then runs all its ops as one, on any stream`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val (s, t) = rt.defaultStream() to rt.newStream()
            runBlocking {
                val x = s.zeros(4, ElementType.F32)
                val y = s.upload(floatArrayOf(1f, 2f, 3f, 4f))
                s.sync()
                val before = rt.diagnostics().admittedOps
                val graph = s.record {
                    execute(BuiltinOp.FILL_F32, x.writes(), scalar(2f))
                    execute(BuiltinOp.AXPY, x.reads(), y.readsWrites(), scalar(3f)) // y = 3x + y
                    write(y, floatArrayOf(100f), offset = 3)
                }
                assertEquals(3uL, graph.opCount())
                assertEquals(before, rt.diagnostics().admittedOps, "recording admits nothing")
                assertArrayEquals(floatArrayOf(1f, 2f, 3f, 4f), s.readFloats(y))
                val beforeReplays = rt.diagnostics().admittedOps
                s.replay(graph)
                t.replay(graph) // waits for the first replay's write of y
                assertEquals(2uL, rt.diagnostics().admittedOps - beforeReplays, "a replay is one op")
                assertArrayEquals(floatArrayOf(13f, 14f, 15f, 100f), t.readFloats(y))
                val empty = assertThrows<WeirException.InvalidArgument> { s.record {} }
                assertTrue("nothing" in (empty.message ?: ""), "${empty.message}")
                graph.close()
            }
        }
}
