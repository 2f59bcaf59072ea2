/**
 * The Kotlin demo: Weir's main job, the chunked pipeline of the Rust demo
 * (`cargo xtask demo`), from coroutines.
 *
 * Host data is uploaded on one stream, a kernel transforms each chunk on a
 * second, and the results are read back on a third, with `--in-flight K`
 * chunks' device buffers reused in a ring. No wait is placed by hand: reusing
 * a slot is a write after the previous chunk's read of it, so Weir orders the
 * upload of chunk i + K after the compute of chunk i, and that compute's
 * output after the read of chunk i - K. The chunks live in [HostBytes]
 * (page-locked on CUDA and HIP), so uploads copy straight from them and reads
 * hand back the memory the device copied into. The demo prints each chunk's
 * timeline and the throughput beside each stage alone and beside the same
 * work on one stream.
 *
 * Run it with `cargo xtask demo --kotlin [--backend cpu|wgpu|cuda|hip]
 * [--chunks N] [--chunk-mib M] [--in-flight K]`.
 */
package dev.weir.demo

import dev.weir.Backend
import dev.weir.Buffer
import dev.weir.ElementType
import dev.weir.Fence
import dev.weir.Grid
import dev.weir.HostBytes
import dev.weir.Kernel
import dev.weir.KernelSource
import dev.weir.PendingRead
import dev.weir.Timeline
import dev.weir.TimelineBar
import dev.weir.TimelineWait
import dev.weir.WeirRuntime
import dev.weir.WeirStream
import dev.weir.copyInto
import dev.weir.cpuKernel
import dev.weir.enqueueRead
import dev.weir.execute
import dev.weir.hostBytes
import dev.weir.linear
import dev.weir.reads
import dev.weir.scalar
import dev.weir.sync
import dev.weir.timelineSvg
import dev.weir.writeHost
import dev.weir.writes
import dev.weir.zeros
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.runBlocking
import java.io.File
import java.time.Duration
import kotlin.math.abs
import kotlin.system.exitProcess

/** `y = x`, then `y = y / 2 + 1/2` `iters` times: work that scales with `iters`. */
private const val CUDA = """extern "C" __global__ void transform(const float* x, float* y, unsigned n, unsigned iters) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float v = x[i];
        for (unsigned k = 0; k < iters; ++k) v = v * 0.5f + 0.5f;
        y[i] = v;
    }
}"""

private const val WGSL = """
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
struct Params { n: u32, iters: u32 }
@group(0) @binding(2) var<uniform> params: Params;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    for (var i = id.x; i < params.n; i += groups.x * 256u) {
        var v = x[i];
        for (var k = 0u; k < params.iters; k += 1u) { v = v * 0.5 + 0.5; }
        y[i] = v;
    }
}"""

private fun transformKernel(): Kernel = Kernel.custom(
    "transform",
    wgsl = KernelSource(WGSL, "main"),
    cuda = KernelSource(CUDA, "transform"),
    hip = KernelSource(CUDA, "transform"),
    cpu = cpuKernel { args ->
        val (x, y, iters) = Triple(args.floats(0), args.floats(1), args.uint(1).toInt())
        for (i in 0 until x.limit()) {
            var v = x[i]
            repeat(iters) { v = v * 0.5f + 0.5f }
            y.put(i, v)
        }
    },
)

private fun expected(value: Float, iters: Int): Float {
    var v = value
    repeat(iters) { v = v * 0.5f + 0.5f }
    return v
}

/** The device buffers of one in-flight chunk. */
private class Slot(val input: Buffer, val output: Buffer)

/** Where each stage of one chunk ended, in ns from the start of its run. */
private class Ends(val upload: Long, val compute: Long, val download: Long)

private class Pipeline(
    val runtime: WeirRuntime,
    val kernel: Kernel,
    /** Each chunk's input, and the value all its floats hold. */
    val host: List<Pair<HostBytes, Float>>,
    val floats: Int,
    val slots: List<Slot>,
) {
    var iters = 1
    val bytes: Double get() = host.size.toDouble() * floats * 4

    fun compute(stream: WeirStream, slot: Slot) = stream.execute(
        kernel,
        Grid.linear(minOf(floats, 4096 * 256), 256),
        listOf(slot.input.reads(), slot.output.writes(), scalar(floats.toUInt()), scalar(iters.toUInt())),
    )

    fun slot(i: Int) = slots[i % slots.size]

    /**
     * Runs every chunk on the streams given (the same stream three times for
     * the one-stream run). One coroutine per stage awaits that stage's fences
     * in order, so each end is taken as it happens. Returns the elapsed ns
     * and each chunk's ends, after checking every chunk read back.
     */
    suspend fun run(upload: WeirStream, compute: WeirStream, download: WeirStream): Pair<Long, List<Ends>> = coroutineScope {
        runtime.sync()
        val start = System.nanoTime()
        val uploads = Channel<Fence>(Channel.UNLIMITED)
        val computes = Channel<Fence>(Channel.UNLIMITED)
        val downloads = Channel<PendingRead>(Channel.UNLIMITED)
        fun endsOf(fences: Channel<Fence>) = async {
            val ends = mutableListOf<Long>()
            for (fence in fences) fence.use { it.await(); ends += System.nanoTime() - start }
            ends
        }
        val uploaded = endsOf(uploads)
        val computed = endsOf(computes)
        val read = async {
            val ends = mutableListOf<Pair<Long, HostBytes>>()
            for (pending in downloads) {
                val result = pending.use { it.bytes() }
                ends += (System.nanoTime() - start) to result
            }
            ends
        }
        // At most one chunk per slot in flight on the host side too: the next
        // upload into a slot is admitted once that slot's previous chunk was
        // read back, so page-locked memory stays bounded.
        val readBack = ArrayDeque<Fence>()
        for ((i, chunk) in host.withIndex()) {
            if (readBack.size == slots.size) readBack.removeFirst().use { it.await() }
            val slot = slot(i)
            upload.writeHost(slot.input, chunk.first)
            uploads.send(upload.fence())
            compute(compute, slot)
            computes.send(compute.fence())
            // Admitted now, in order on its stream, before the next write of the slot; awaited by the reader.
            downloads.send(download.enqueueRead(slot.output))
            readBack.addLast(download.fence())
        }
        readBack.forEach { it.close() }
        listOf(uploads, computes).forEach { it.close() }
        downloads.close()
        val (ups, comps, reads) = Triple(uploaded.await(), computed.await(), read.await())
        val elapsed = reads.maxOf { it.first }
        val chunk = FloatArray(floats)
        val timeline = reads.mapIndexed { i, (end, bytes) ->
            bytes.use { it.copyInto(chunk) }
            val want = expected(host[i].second, iters)
            val wrong = chunk.count { abs(it - want) > 1e-5f * maxOf(abs(want), 1f) }
            check(wrong == 0) { "chunk $i: $wrong floats are not $want" }
            Ends(ups[i], comps[i], end)
        }
        elapsed to timeline
    }

    /** Each stage alone over every chunk, on one stream: (upload, compute, download) ns. */
    suspend fun stagesAlone(stream: WeirStream): LongArray {
        suspend fun timed(work: suspend () -> Unit): Long {
            runtime.sync()
            val start = System.nanoTime()
            work()
            stream.sync()
            return System.nanoTime() - start
        }
        val upload = timed { host.forEachIndexed { i, (data, _) -> stream.writeHost(slot(i).input, data) } }
        val compute = timed { host.indices.forEach { compute(stream, slot(it)) } }
        val download = timed {
            val reads = host.indices.map { stream.enqueueRead(slot(it).output) }
            reads.forEach { pending -> pending.use { it.bytes().close() } }
        }
        return longArrayOf(upload, compute, download)
    }
}

private fun gbps(bytes: Double, ns: Long) = bytes / ns

private fun millis(ns: Long) = ns / 1e6

fun main(args: Array<String>) {
    val option = { name: String -> args.toList().windowed(2).firstOrNull { it[0] == name }?.get(1) }
    val number = { name: String, default: Int ->
        option(name)?.let { it.toIntOrNull() ?: run { System.err.println("$name takes a number, not $it"); exitProcess(2) } } ?: default
    }
    val name = option("--backend") ?: "cpu"
    val backend = Backend.entries.firstOrNull { it.name.equals(name, ignoreCase = true) }
        ?: run { System.err.println("unknown backend $name"); exitProcess(2) }
    WeirRuntime.open(backend).use { runtime ->
        val info = runtime.info()
        val gpu = info.backend != Backend.CPU
        val chunks = number("--chunks", 64).coerceAtLeast(1)
        val floats = (number("--chunk-mib", if (gpu) 16 else 1).coerceAtLeast(1) shl 20) / 4
        val inFlight = number("--in-flight", 8).coerceIn(1, chunks)
        println("weir kotlin demo on ${info.backend.name.lowercase()} (${info.name}): $chunks chunks of ${floats * 4 shr 20} MiB, $inFlight in flight")
        val s = runtime.defaultStream()
        val host = (0 until chunks).map { runtime.hostBytes(FloatArray(floats) { _ -> it.toFloat() }) to it.toFloat() }
        val slots = (0 until inFlight).map { Slot(s.zeros(floats * 4L, ElementType.BYTES), s.zeros(floats * 4L, ElementType.BYTES)) }
        val pipeline = Pipeline(runtime, transformKernel(), host, floats, slots)
        runBlocking(Dispatchers.Default) {
            // Balance the stages: the smallest power of two of iterations whose
            // compute takes as long as the slower copy. The first run only
            // warms up (it takes the page-locked memory the reads land in).
            pipeline.stagesAlone(s)
            var alone = pipeline.stagesAlone(s)
            while (alone[1] < maxOf(alone[0], alone[2]) && pipeline.iters < 1 shl 16) {
                pipeline.iters *= 2
                alone = pipeline.stagesAlone(s)
            }
            val bytes = pipeline.bytes
            val slowest = alone.max()
            println(
                "stages alone on one stream: upload %.2f GB/s, compute (%d iterations) %.2f GB/s, download %.2f GB/s".format(
                    gbps(bytes, alone[0]), pipeline.iters, gbps(bytes, alone[1]), gbps(bytes, alone[2]),
                ),
            )
            val (upload, compute, download) = Triple(runtime.newStream(), runtime.newStream(), runtime.newStream())
            // Untimed first: the JIT compiles the pipeline's own code on its first run.
            pipeline.run(upload, compute, download)
            // Then, as the Rust demo measures: the best of a few runs of each,
            // taken in turn, so that one slow moment of a shared machine lands
            // on neither side alone; the timeline is the best pipelined run's.
            var pipelined = Long.MAX_VALUE
            var timeline = emptyList<Ends>()
            var oneStream = Long.MAX_VALUE
            var waits = 0UL
            repeat(RUNS) {
                val waitsBefore = runtime.diagnostics().insertedWaits
                val (took, ends) = pipeline.run(upload, compute, download)
                waits = runtime.diagnostics().insertedWaits - waitsBefore
                if (took < pipelined) {
                    pipelined = took
                    timeline = ends
                }
                oneStream = minOf(oneStream, pipeline.run(s, s, s).first)
            }
            println("timeline of the pipelined run (ms from its start; a stage starts once its input and its stream are free):")
            println("%6s %18s %18s %18s".format("chunk", "upload", "compute", "download"))
            val bars = mutableListOf<TimelineBar>()
            val crossings = mutableListOf<TimelineWait>()
            for ((i, end) in timeline.withIndex()) {
                val before = { stage: (Ends) -> Long -> if (i > 0) stage(timeline[i - 1]) else 0L }
                val slotFree = { stage: (Ends) -> Long -> if (i >= inFlight) stage(timeline[i - inFlight]) else 0L }
                // The host admits a slot's next upload once its previous chunk was read back.
                val uploadStart = maxOf(before { it.upload }, slotFree { it.download })
                val computeStart = maxOf(before { it.compute }, end.upload, slotFree { it.download })
                val downloadStart = maxOf(before { it.download }, end.compute)
                val span = { from: Long, to: Long -> "%7.2f - %7.2f".format(millis(from), millis(maxOf(from, to))) }
                println("%6d %18s %18s %18s".format(i, span(uploadStart, end.upload), span(computeStart, end.compute), span(downloadStart, end.download)))
                val spans = listOf(uploadStart to end.upload, computeStart to end.compute, downloadStart to end.download)
                for ((row, span) in spans.withIndex()) {
                    bars += TimelineBar(row.toUInt(), Duration.ofNanos(span.first), Duration.ofNanos(span.second), "chunk $i")
                    if (row > 0) {
                        crossings += TimelineWait((row - 1).toUInt(), Duration.ofNanos(spans[row - 1].second), row.toUInt(), Duration.ofNanos(span.first))
                    }
                }
            }
            val rows = listOf("upload stream", "compute stream", "download stream")
            val picture = File("target/weir-demo-timeline-kotlin.svg").absoluteFile
            try {
                picture.parentFile.mkdirs()
                picture.writeText(timelineSvg(Timeline("Weir Kotlin demo on ${info.name}: $chunks chunks", rows, bars, crossings)))
                println("the timeline as a picture: $picture")
            } catch (e: java.io.IOException) {
                println("the timeline picture could not be written to $picture: ${e.message}")
            }
            val backendName = info.backend.name.lowercase()
            // On the CPU backend each stage is a thread doing the work itself: with
            // fewer cores than the stages and the feeding thread, the targets measure
            // the machine, not Weir, and the demo says so instead.
            val cores = Runtime.getRuntime().availableProcessors()
            val machineBound = info.backend == Backend.CPU && cores < CPU_CORES_FOR_TARGETS
            val target = { value: Double -> value.takeUnless { machineBound } }
            val figures = listOf(
                Triple("pipeline, 3 streams", gbps(bytes, pipelined), null),
                Triple("slowest stage alone", gbps(bytes, slowest), null),
                Triple("one stream", gbps(bytes, oneStream), null),
                Triple("pipeline / slowest stage", slowest.toDouble() / pipelined, target(0.85)),
                Triple("pipeline / one stream", oneStream.toDouble() / pipelined, target(2.0)),
            )
            for ((figure, value, target) in figures) {
                println("{\"backend\":\"$backendName\",\"demo\":\"kotlin: $figure\",\"value\":${"%.3f".format(value)},\"target\":${target ?: "null"}}")
            }
            println(
                "pipelined %.2f GB/s (%.2fx the slowest stage alone, %.2fx one stream; best of %d runs each); %d cross-stream waits inserted for %d chunks in a run".format(
                    gbps(bytes, pipelined), slowest.toDouble() / pipelined, oneStream.toDouble() / pipelined, RUNS, waits.toLong(), chunks,
                ),
            )
            if (machineBound) {
                println(
                    "this machine has $cores cores for three CPU stages and the thread that feeds them: the stages share " +
                        "cores, so no target applies here (they do with $CPU_CORES_FOR_TARGETS cores, or on a GPU)",
                )
            }
            println("every chunk read back correct")
            listOf(upload, compute, download).forEach { it.close() }
        }
        slots.forEach { it.input.close(); it.output.close() }
        host.forEach { it.first.close() }
        pipeline.kernel.close()
    }
}

/** Cores the CPU backend needs for the pipeline's targets to measure Weir: one per stage, one for the feeding thread. */
private const val CPU_CORES_FOR_TARGETS = 4

/** Runs of the pipelined and of the one-stream version; the best of each counts (as in the Rust demo). */
private const val RUNS = 3
