package example

import dev.weir.Backend
import dev.weir.BuiltinOp
import dev.weir.ElementType
import dev.weir.WeirRuntime
import dev.weir.empty
import dev.weir.execute
import dev.weir.executeAndWait
import dev.weir.readFloats
import dev.weir.reads
import dev.weir.readsWrites
import dev.weir.scalar
import dev.weir.upload
import dev.weir.writes
import dev.weir.zeros
import kotlinx.coroutines.runBlocking

/**
 * A tiny job on the CPU backend through the installed artifact: y = 2x + y on
 * one stream, then x + y on another, which waits for that write. Fails (a
 * non-zero exit) unless the result is exact and the artifact is the one
 * applications get, without the test hooks.
 */
fun main() {
    check(BuiltinOp.entries.none { it.name == "DELAY" }) { "the installed artifact carries the test hooks" }
    WeirRuntime.open(Backend.CPU).use { runtime ->
        val (s, t) = runtime.defaultStream() to runtime.newStream()
        val sum = runBlocking {
            val x = s.upload(floatArrayOf(1f, 2f, 3f))
            val y = s.zeros(3, ElementType.F32) // counts are in elements
            s.execute(BuiltinOp.AXPY, x.reads(), y.readsWrites(), scalar(2f)) // enqueued, not awaited
            val out = t.empty(3, ElementType.F32)
            t.executeAndWait(BuiltinOp.ADD, x.reads(), y.reads(), out.writes()) // t waits for s's write of y
            t.readFloats(out)
        }
        check(sum.contentEquals(floatArrayOf(3f, 6f, 9f))) { "expected [3, 6, 9], got ${sum.toList()}" }
        println("kotlin-consumer: ${runtime.info().name}: x + (2x + 0) = ${sum.toList()}")
        runtime.shutdown()
    }
}
