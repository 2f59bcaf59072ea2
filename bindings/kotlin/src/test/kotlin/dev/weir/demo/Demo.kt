/**
 * The Kotlin demo: a coroutine app running a two-stream pipeline.
 *
 * A producer stream scales the input into a staging buffer while a consumer
 * stream clears its accumulator; the consumer then adds the staging buffer in
 * (Weir makes it wait for the producer's write, and makes the producer's next
 * write wait for that read). Each batch ends by awaiting both streams' fences
 * concurrently. Run it with `cargo xtask demo --kotlin [--backend cpu|wgpu|…]`.
 */
package dev.weir.demo

import dev.weir.ElementType
import dev.weir.Backend
import dev.weir.BuiltinOp
import dev.weir.WeirRuntime
import dev.weir.executeAndWait
import dev.weir.readFloats
import dev.weir.reads
import dev.weir.readsWrites
import dev.weir.scalar
import dev.weir.upload
import dev.weir.writes
import dev.weir.zeros
import dev.weir.empty
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.runBlocking
import kotlin.system.exitProcess

private fun millis(since: Long) = "%.2f ms".format((System.nanoTime() - since) / 1e6)

fun main(args: Array<String>) {
    val name = args.toList().windowed(2).firstOrNull { it[0] == "--backend" }?.get(1) ?: "auto"
    val backend = Backend.entries.firstOrNull { it.name.equals(name, ignoreCase = true) }
        ?: run { System.err.println("unknown backend $name"); exitProcess(2) }
    WeirRuntime.open(backend).use { runtime ->
        val info = runtime.info()
        println("weir kotlin demo on ${info.backend.name.lowercase()} (${info.name})")
        val producer = runtime.defaultStream()
        val consumer = runtime.newStream()
        val n = 1 shl 20
        val input = producer.upload(FloatArray(n) { (it % 1000).toFloat() })
        val staging = producer.empty(n.toLong(), ElementType.F32)
        val accumulator = consumer.zeros(n.toLong(), ElementType.F32)
        runBlocking(Dispatchers.Default) {
            for (batch in 1..4) {
                val start = System.nanoTime()
                val factor = batch.toFloat()
                // Both streams at once: scale on the producer, clear on the consumer.
                listOf(
                    async { producer.executeAndWait(BuiltinOp.SCALE, input.reads(), staging.writes(), scalar(factor)) },
                    async { consumer.memsetZeroAndWait(accumulator) },
                ).awaitAll()
                val staged = millis(start)
                // The consumer reads what the producer wrote: Weir inserts exactly that wait.
                consumer.executeAndWait(BuiltinOp.AXPY, staging.reads(), accumulator.readsWrites(), scalar(1.0f))
                // Both streams' fences, awaited concurrently.
                val fences = listOf(producer.fence(), consumer.fence())
                fences.map { fence -> async { fence.await() } }.awaitAll()
                fences.forEach { it.close() }
                val result = consumer.readFloats(accumulator)
                val wrong = (0 until n).count { result[it] != factor * (it % 1000) }
                check(wrong == 0) { "batch $batch: $wrong wrong elements" }
                println("batch $batch: staged in $staged, done in ${millis(start)}, $n elements exact")
            }
            runtime.sync()
        }
        val d = runtime.diagnostics()
        println("ops admitted ${d.admittedOps}, cross-stream waits inserted ${d.insertedWaits}, live waiters ${d.liveWaiters}")
    }
}
