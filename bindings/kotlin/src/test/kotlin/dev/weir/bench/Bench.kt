/**
 * Kotlin overhead of a trivial Weir call and of its suspend calls, beside the same calls made from
 * Rust in the same `cargo xtask bench --kotlin` run (passed in as arguments).
 *
 * Prints one JSON object per figure (the bench report's format), then a table.
 * Arguments: `--backend NAME`, `--processes N` (each figure the median of N fresh JVMs, 5 by
 * default) and, per figure, `--baseline NAME MICROS`.
 */
package dev.weir.bench

import dev.weir.ElementType
import dev.weir.Backend
import dev.weir.BuiltinOp
import dev.weir.Grid
import dev.weir.Kernel
import dev.weir.KernelSource
import dev.weir.cpuKernel
import dev.weir.WeirRuntime
import dev.weir.batch
import dev.weir.execute
import dev.weir.executeAndWait
import dev.weir.readInto
import dev.weir.reads
import dev.weir.scalar
import dev.weir.sync
import dev.weir.upload
import dev.weir.writes
import dev.weir.zeros
import java.io.File
import java.net.URLClassLoader
import kotlinx.coroutines.runBlocking

private class Figure(
    val backend: String,
    val name: String,
    val weir: Double,
    val baseline: Double?,
    val note: String,
    val unit: String = "us",
) {
    val ratio: Double? get() = baseline?.takeIf { it > 0 }?.let { weir / it }
    /** A rate (GB/s) is better higher; a time or a size, lower. */
    val higherIsBetter: Boolean get() = unit.endsWith("/s")
    fun json(): String = "{\"backend\":\"$backend\",\"bench\":\"$name\",\"unit\":\"$unit\",\"weir\":${"%.4f".format(weir)}," +
        "\"baseline\":${baseline?.let { "%.4f".format(it) } ?: "null"},\"ratio\":${ratio?.let { "%.3f".format(it) } ?: "null"}," +
        "\"higher_is_better\":$higherIsBetter,\"note\":\"${note.replace('"', '\'')}\"}"
}

/**
 * Median microseconds per call of [call], timed one call at a time after [warmUp] calls and
 * then [settle] (for ops, a sync: a warm-up longer than the queue's limit would leave the timed
 * calls waiting for room, timing the device instead of the admission).
 */
private inline fun medianMicros(iterations: Int, warmUp: Int = iterations / 10, settle: () -> Unit = {}, call: () -> Unit): Double {
    repeat(warmUp) { call() }
    settle()
    val samples = LongArray(iterations)
    for (i in 0 until iterations) {
        val start = System.nanoTime()
        call()
        samples[i] = System.nanoTime() - start
    }
    samples.sort()
    return samples[iterations / 2] / 1e3
}

/** Ops per batch in the batch figure. */
private const val BATCH = 1_000

/**
 * Calls before an admission figure: the JIT compiles the encoding path fully only after
 * some tens of thousands (a fill costs 0.7 us after 20 000 calls, 0.35 after 40 000).
 */
private const val ADMISSION_WARM_UP = 100_000

/**
 * Admission of one small op (a fill of 1 KiB: one buffer argument; an add: three, the most a
 * built-in op takes; a custom kernel over four) and of a batch of [BATCH] fills, per op; the
 * stream is synced, untimed, between figures and between batches.
 */
/** The four-buffer admission figure's kernel on wgpu, and on CUDA and HIP; on the CPU it does nothing. */
private const val FOUR_BUFFERS_WGSL = """
@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read> c: array<u32>;
@group(0) @binding(3) var<storage, read_write> d: array<u32>;
@compute @workgroup_size(1) fn main() { d[0] = a[0] + b[0] + c[0]; }
"""
private const val FOUR_BUFFERS_CUDA =
    "extern \"C\" __global__ void four(const unsigned* a, const unsigned* b, const unsigned* c, unsigned* d) { d[0] = a[0] + b[0] + c[0]; }"

private suspend fun admissions(stream: dev.weir.WeirStream, baselines: Map<String, Double>, name: String, figures: MutableList<Figure>) {
    val (a, b, c) = List(3) { stream.zeros(1024L, ElementType.BYTES) }
    val fill = medianMicros(20_000, ADMISSION_WARM_UP, { stream.sync() }) { stream.execute(BuiltinOp.FILL_U32, a.writes(), scalar(7u)) }
    stream.sync()
    figures += Figure(name, "kotlin: admit one op, 1 buffer argument", fill, baselines["admit_1_buffer"],
        "median per execute (fill of 1 KiB), after $ADMISSION_WARM_UP warm-up calls; baseline: the same weir-ffi call from Rust; target <= 2 us")
    val add = medianMicros(20_000, ADMISSION_WARM_UP, { stream.sync() }) { stream.execute(BuiltinOp.ADD, a.reads(), b.reads(), c.writes()) }
    stream.sync()
    figures += Figure(name, "kotlin: admit one op, 3 buffer arguments", add, baselines["admit_3_buffers"],
        "median per execute (add), after $ADMISSION_WARM_UP warm-up calls; baseline: the same weir-ffi call from Rust; target <= 2 us")
    val d = stream.zeros(1024L, ElementType.BYTES)
    val four = Kernel.custom(
        "four_buffers",
        wgsl = KernelSource(FOUR_BUFFERS_WGSL, "main"),
        cuda = KernelSource(FOUR_BUFFERS_CUDA, "four"),
        hip = KernelSource(FOUR_BUFFERS_CUDA, "four"),
        cpu = cpuKernel { },
    )
    val grid = Grid()
    val fourArgs = medianMicros(20_000, ADMISSION_WARM_UP, { stream.sync() }) {
        stream.execute(four, grid, listOf(a.reads(), b.reads(), c.reads(), d.writes()))
    }
    stream.sync()
    figures += Figure(name, "kotlin: admit one op, 4 buffer arguments", fourArgs, baselines["admit_4_buffers"],
        "median per execute (a custom kernel whose CPU body does nothing; no built-in op takes 4 buffers), " +
            "after $ADMISSION_WARM_UP warm-up calls; " +
            "baseline: the same weir-ffi call from Rust; target <= 2 us")
    baselines["cpu_kernel_call_4_buffers"]?.let { rust ->
        // On the CPU, that kernel's call on the worker: BATCH ops admitted in one batch (untimed:
        // the worker starts once the batch is in), then the wait until the worker ran them all.
        val args = listOf(a.reads(), b.reads(), c.reads(), d.writes())
        val rounds = (0 until 220).map {
            stream.batch { repeat(BATCH) { execute(four, grid, args) } }
            val start = System.nanoTime()
            stream.sync()
            System.nanoTime() - start
        }.drop(20).sorted()
        figures += Figure(name, "kotlin: CPU kernel call on the worker, 4 buffer arguments", rounds[rounds.size / 2] / 1e3 / BATCH, rust,
            "median of 200 batches of $BATCH ops, the wait for the worker after the batch is in, per op (a Kotlin body that does " +
                "nothing, called through JNI with its arguments packed); baseline: the same with a Rust body")
    }
    four.close()
    d.close()
    // A long warm-up: the JIT compiles the batch builder fully only after
    // some hundreds of batches (building one op takes 0.6 us before, 0.04 after).
    val warmUp = 1_000
    val samples = LongArray(warmUp + 200)
    for (round in samples.indices) {
        val start = System.nanoTime()
        stream.batch { for (i in 0 until BATCH) execute(BuiltinOp.FILL_U32, a.writes(), scalar(i.toUInt())) }
        samples[round] = System.nanoTime() - start
        stream.sync()
    }
    val perOp = samples.copyOfRange(warmUp, samples.size).sorted()[100] / 1e3 / BATCH
    figures += Figure(name, "kotlin: batch of $BATCH fills, per op", perOp, baselines["one_by_one_1000_per_op"],
        "median batch (built and admitted) / $BATCH, after $warmUp batches; baseline: the same $BATCH fills admitted " +
            "one by one from Rust, timed as a block (a median single admission: ${baselines["admit_1_buffer"]} us; " +
            "a Rust batch: ${baselines["batch_1000_per_op"]} us per op); target <= 1.5x")
    figures += Figure(name, "kotlin: batch of $BATCH fills, per op, beside a Rust batch", perOp, baselines["batch_1000_per_op"],
        "the same Kotlin batches; baseline: the same batch built and admitted from Rust, per op")
    listOf(a, b, c).forEach { it.close() }
}

/** Bytes per bulk call. */
private const val BULK_BYTES = 256 shl 20

/** This process's resident bytes, from /proc/self/statm (0 where there is none). */
private fun residentBytes(): Long =
    runCatching { java.io.File("/proc/self/statm").readText().split(' ')[1].toLong() * 4096 }.getOrDefault(0L)

/** Samples the resident size every millisecond, keeping the highest. */
private class PeakResident : AutoCloseable {
    val peak = java.util.concurrent.atomic.AtomicLong(residentBytes())
    @Volatile private var running = true
    private val sampler = Thread {
        while (running) {
            peak.accumulateAndGet(residentBytes(), ::maxOf)
            Thread.sleep(1)
        }
    }.apply { isDaemon = true; start() }

    override fun close() {
        running = false
        sampler.join()
    }
}

/** Seconds [call] took and the resident growth (MiB) it peaked at. */
private inline fun PeakResident.measure(call: () -> Unit): Pair<Double, Double> {
    val before = residentBytes()
    peak.set(before)
    val start = System.nanoTime()
    call()
    val seconds = (System.nanoTime() - start) / 1e9
    peak.accumulateAndGet(residentBytes(), ::maxOf)
    return seconds to (peak.get() - before) / 1048576.0
}

/**
 * Upload and read of 256 MiB, from a `FloatArray` (through staging chunks) and from a direct
 * `ByteBuffer` (lent to Rust), reads into caller-provided ones; best of three rounds, beside
 * the same calls from Rust (`rust/ffi/examples/bulk.rs`). Growth: the peak growth of resident
 * memory during the call (the source and destination exist before; on the CPU backend an
 * upload's growth includes the new buffer itself).
 */
private suspend fun bulk(stream: dev.weir.WeirStream, baselines: Map<String, Double>, name: String, figures: MutableList<Figure>) {
    val floats = FloatArray(BULK_BYTES / 4) { (it % 251).toFloat() }
    val back = FloatArray(floats.size)
    val direct = java.nio.ByteBuffer.allocateDirect(BULK_BYTES).order(java.nio.ByteOrder.LITTLE_ENDIAN)
    direct.asFloatBuffer().put(floats)
    val directBack = java.nio.ByteBuffer.allocateDirect(BULK_BYTES)
    val best = HashMap<String, Pair<Double, Double>>()
    fun keep(key: String, seconds: Double, growth: Double) {
        val gbps = BULK_BYTES / seconds / 1e9
        val (bestGbps, bestGrowth) = best[key] ?: (0.0 to 0.0)
        best[key] = maxOf(bestGbps, gbps) to maxOf(bestGrowth, growth)
    }
    PeakResident().use { sampler ->
        repeat(3) {
            var buffer: dev.weir.Buffer? = null
            sampler.measure { buffer = stream.upload(floats); stream.sync() }.let { (s, g) -> keep("upload floats", s, g) }
            sampler.measure { stream.readInto(buffer!!, back) }.let { (s, g) -> keep("read floats", s, g) }
            check(back.contentEquals(floats)) { "the read gave other floats than uploaded" }
            buffer!!.close()
            sampler.measure { buffer = stream.upload(direct); stream.sync() }.let { (s, g) -> keep("upload direct", s, g) }
            directBack.clear()
            sampler.measure { stream.readInto(buffer!!, directBack) }.let { (s, g) -> keep("read direct", s, g) }
            check(directBack.flip() == direct.duplicate().clear()) { "the read gave other bytes than uploaded" }
            buffer!!.close()
        }
    }
    val mib = BULK_BYTES shr 20
    for ((key, label, baseline) in listOf(
        Triple("upload floats", "upload 256 MiB from a FloatArray", "upload_256mib"),
        Triple("read floats", "read 256 MiB into a FloatArray", "read_256mib"),
        Triple("upload direct", "upload 256 MiB from a direct ByteBuffer", "upload_256mib"),
        Triple("read direct", "read 256 MiB into a direct ByteBuffer", "read_256mib"),
    )) {
        val (gbps, growth) = best.getValue(key)
        figures += Figure(name, "kotlin: $label", gbps, baselines["${baseline}_gbps"],
            "best of 3, sync included; baseline: Rust through the same weir-ffi calls; target ratio >= 0.8", unit = "GB/s")
        figures += Figure(name, "kotlin: $label, memory", growth, baselines["${baseline}_growth_mib"],
            "peak resident growth during the call (Rust beside it); target: at most $mib MiB beyond the new buffer",
            unit = "MiB")
    }
}

/** Every figure, measured in this process. */
private fun measure(name: String, list: List<String>): List<Figure> {
    val baselines = list.windowed(3).filter { it[0] == "--baseline" }.associate { it[1] to it[2].toDouble() }
    val backend = Backend.entries.first { it.name.equals(name, ignoreCase = true) }
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
                "median round trip in one coroutine; baseline: the same weir-ffi call from Rust")
            val execute = medianMicros(10_000) { stream.executeAndWait(noop, scalar(0u)) }
            figures += Figure(name, "kotlin: suspend executeAndWait(no-op kernel)", execute, baselines["execute_and_wait_noop"],
                "median round trip in one coroutine; baseline: the same weir-ffi call from Rust")
            admissions(stream, baselines, name, figures)
            bulk(stream, baselines, name, figures)
        }
    }
    return figures
}

/**
 * Runs this bench [count] times, each in a fresh JVM (`--processes 1`), and gives each figure the
 * median of their values. On some hosts a process's threads land so that all its calls are fast,
 * or all slow (two clusters, several microseconds apart), so one process decides nothing; the Rust
 * baselines are medians across processes too (`round_trip`).
 */
private fun acrossProcesses(count: Int, list: List<String>): List<Figure> {
    val java = File(System.getProperty("java.home"), "bin/java").path
    // Run by Maven's exec:java, the classes come from the plugin's class loader, not the class path.
    val classpath = (Thread.currentThread().contextClassLoader as? URLClassLoader)?.urLs
        ?.joinToString(File.pathSeparator) { File(it.toURI()).path }
        ?: System.getProperty("java.class.path")
    val runs = List(count) {
        val command = listOf(java, "-cp", classpath, "dev.weir.bench.BenchKt") + list + listOf("--processes", "1")
        val child = ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start()
        val printed = child.inputStream.bufferedReader().readLines()
        check(child.waitFor() == 0) { "a measuring process exited with ${child.exitValue()}" }
        printed.mapNotNull(::parsed)
    }
    return runs.first().map { first ->
        val values = runs.mapNotNull { run -> run.firstOrNull { it.name == first.name }?.weir }.sorted()
        val theirs = values.joinToString { "%.3f".format(it) }
        Figure(first.backend, first.name, values[values.size / 2], first.baseline,
            "the median of ${values.size} processes (theirs: $theirs); in each: ${first.note}", first.unit)
    }
}

/** The JSON line [Figure.json] prints, as the figure; null for any other line. */
private val figureLine = Regex(
    "\\{\"backend\":\"([^\"]*)\",\"bench\":\"([^\"]*)\",\"unit\":\"([^\"]*)\",\"weir\":([^,]*)," +
        "\"baseline\":([^,]*),\"ratio\":[^,]*,\"higher_is_better\":[^,]*,\"note\":\"(.*)\"}",
)

private fun parsed(line: String): Figure? =
    figureLine.matchEntire(line)?.destructured?.let { (backend, name, unit, weir, baseline, note) ->
        Figure(backend, name, weir.toDouble(), baseline.toDoubleOrNull(), note, unit)
    }

fun main(args: Array<String>) {
    val list = args.toList()
    // The last one given: a measuring process gets its parent's arguments and `--processes 1` after them.
    val name = list.windowed(2).lastOrNull { it[0] == "--backend" }?.get(1) ?: "cpu"
    val processes = list.windowed(2).lastOrNull { it[0] == "--processes" }?.get(1)?.toInt() ?: 5
    val figures = if (processes > 1) acrossProcesses(processes, list) else measure(name, list)
    figures.forEach { println(it.json()) }
    println()
    println("%-8s %-44s %14s %14s %8s  %s".format("backend", "benchmark", "weir", "baseline", "ratio", "note"))
    for (f in figures) {
        println("%-8s %-44s %14s %14s %8s  %s".format(f.backend, f.name, "%.3f ${f.unit}".format(f.weir),
            f.baseline?.let { "%.3f ${f.unit}".format(it) } ?: "-", f.ratio?.let { "%.3f".format(it) } ?: "-", f.note))
    }
}
