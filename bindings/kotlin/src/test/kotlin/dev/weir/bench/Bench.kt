/**
 * Kotlin overhead of a trivial Weir call and of its suspend calls, beside the same calls made from
 * Rust in the same `cargo xtask bench --kotlin` run (passed in as arguments).
 *
 * Prints one JSON object per figure (the bench report's format), then a table.
 * Arguments: `--backend NAME` and, per figure, `--baseline NAME MICROS`.
 */
package dev.weir.bench

import dev.weir.Backend
import dev.weir.BuiltinOp
import dev.weir.WeirRuntime
import dev.weir.WakerThreads
import dev.weir.executeAndWait
import dev.weir.scalar
import kotlinx.coroutines.runBlocking

private class Figure(val backend: String, val name: String, val weir: Double, val baseline: Double?, val note: String) {
    val ratio: Double? get() = baseline?.takeIf { it > 0 }?.let { weir / it }
    fun json(): String = "{\"backend\":\"$backend\",\"bench\":\"$name\",\"unit\":\"us\",\"weir\":${"%.4f".format(weir)}," +
        "\"baseline\":${baseline?.let { "%.4f".format(it) } ?: "null"},\"ratio\":${ratio?.let { "%.3f".format(it) } ?: "null"}," +
        "\"note\":\"${note.replace('"', '\'')}\"}"
}

/** Median microseconds per call of [call], timed one call at a time after a warm-up. */
private inline fun medianMicros(iterations: Int, call: () -> Unit): Double {
    repeat(iterations / 10) { call() }
    val samples = LongArray(iterations)
    for (i in 0 until iterations) {
        val start = System.nanoTime()
        call()
        samples[i] = System.nanoTime() - start
    }
    samples.sort()
    return samples[iterations / 2] / 1e3
}

fun main(args: Array<String>) {
    val list = args.toList()
    val name = list.windowed(2).firstOrNull { it[0] == "--backend" }?.get(1) ?: "cpu"
    val baselines = list.windowed(3).filter { it[0] == "--baseline" }.associate { it[1] to it[2].toDouble() }
    val backend = Backend.entries.first { it.name.equals(name, ignoreCase = true) }
    val wakers = if (WakerThreads.keepAttached) "the waking thread kept attached" else "the waking thread detached per wake (JNA default)"
    val figures = mutableListOf<Figure>()
    WeirRuntime.open(backend).use { runtime ->
        val stream = runtime.defaultStream()
        val noop = BuiltinOp.DELAY
        val index = medianMicros(200_000) { stream.index() }
        figures += Figure(name, "kotlin: index(), a trivial sync call", index, baselines["index"],
            "median per call on one thread; baseline: the same weir-ffi call from Rust")
        runBlocking {
            val sync = medianMicros(20_000) { stream.sync() }
            figures += Figure(name, "kotlin: suspend sync(), idle stream", sync, baselines["sync_idle"],
                "median round trip in one coroutine; baseline: the same weir-ffi call from Rust; $wakers")
            val execute = medianMicros(10_000) { stream.executeAndWait(noop, scalar(0u)) }
            figures += Figure(name, "kotlin: suspend executeAndWait(no-op kernel)", execute, baselines["execute_and_wait_noop"],
                "median round trip in one coroutine; baseline: the same weir-ffi call from Rust; $wakers")
        }
    }
    figures.forEach { println(it.json()) }
    println()
    println("%-8s %-44s %14s %14s %8s  %s".format("backend", "benchmark", "weir", "baseline", "ratio", "note"))
    for (f in figures) {
        println("%-8s %-44s %14s %14s %8s  %s".format(f.backend, f.name, "%.3f us".format(f.weir),
            f.baseline?.let { "%.3f us".format(it) } ?: "-", f.ratio?.let { "%.3f".format(it) } ?: "-", f.note))
    }
}
