/*
 * A transformer block's forward pass (GPT-2's: layernorm, QKV projection,
 * causal attention, output projection, residual, layernorm, MLP with GELU,
 * residual) served from coroutines to several requests at once, each on a
 * stream of its own over the same read-only weights, every output checked
 * against the same arithmetic on the host: the Kotlin version of
 * rust/core/examples/transformer.rs, with the same kernels
 * (examples/transformer/kernels, on the test classpath as /transformer/).
 *
 * On CUDA the projections are cuBLAS GEMMs (Blas), ordered by Weir like any
 * op; on wgpu every step is a WGSL kernel. Prints tokens per second and
 * latency per request with K requests in flight on K streams beside the same
 * requests one after another on one stream.
 *
 * `cargo xtask transformer --kotlin [-- --backend cuda|wgpu] [--small]
 * [--requests N] [--in-flight K]`.
 */
package dev.weir.transformer

import dev.weir.Arg
import dev.weir.Backend
import dev.weir.Blas
import dev.weir.Buffer
import dev.weir.BuiltinOp
import dev.weir.ElementType
import dev.weir.Gemm
import dev.weir.Graph
import dev.weir.Grid
import dev.weir.Kernel
import dev.weir.KernelSource
import dev.weir.PendingRead
import dev.weir.Timeline
import dev.weir.TimelineBar
import dev.weir.WeirException
import dev.weir.WeirRuntime
import dev.weir.WeirStream
import dev.weir.copyInto
import dev.weir.enqueueRead
import dev.weir.execute
import dev.weir.kernel
import dev.weir.linear
import dev.weir.reads
import dev.weir.readsWrites
import dev.weir.record
import dev.weir.scalar
import dev.weir.timelineSvg
import dev.weir.upload
import dev.weir.write
import dev.weir.writes
import dev.weir.zeros
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.runBlocking
import java.io.File
import java.time.Duration
import kotlin.math.abs
import kotlin.math.exp
import kotlin.math.max
import kotlin.math.sqrt
import kotlin.math.tanh
import kotlin.system.exitProcess

/** The block's shape: model width, heads, tokens per request. */
data class Shape(val d: Int, val heads: Int, val tokens: Int) {
    companion object {
        val GPT2_SMALL = Shape(768, 12, 64)
        val SMALL = Shape(64, 4, 16)
    }
}

/** The outputs may differ from the host's by this much, relative (summation order, fused multiply-adds). */
const val TOLERANCE = 1e-4f

/** Threads per block of every kernel. */
private const val BLOCK = 64

/** A deterministic stream of numbers in (-scale, scale): the weights and inputs (the Rust version's xorshift64*). */
private class Numbers(private var state: Long) {
    fun take(count: Int, scale: Float): FloatArray = FloatArray(count) {
        state = state xor (state ushr 12)
        state = state xor (state shl 25)
        state = state xor (state ushr 27)
        val bits = (state * 0x2545f4914f6cdd1dL) ushr 40
        (bits.toFloat() / (1L shl 24).toFloat() * 2f - 1f) * scale
    }
}

/** The block's parameters, row-major: wQkv is d × 3d, wOut d × d, wUp d × 4d, wDown 4d × d. */
private class Weights(shape: Shape, seed: Long) {
    private val numbers = Numbers(seed)
    private val d = shape.d
    val ln1 = gain() to numbers.take(d, 0.1f)
    val wQkv = numbers.take(d * 3 * d, 0.05f)
    val bQkv = numbers.take(3 * d, 0.02f)
    val wOut = numbers.take(d * d, 0.05f)
    val bOut = numbers.take(d, 0.02f)
    val ln2 = gain() to numbers.take(d, 0.1f)
    val wUp = numbers.take(d * 4 * d, 0.05f)
    val bUp = numbers.take(4 * d, 0.02f)
    val wDown = numbers.take(4 * d * d, 0.05f)
    val bDown = numbers.take(d, 0.02f)

    private fun gain(): FloatArray = numbers.take(d, 0.1f).map { 1f + it }.toFloatArray()
}

/** One request's activations on the device: a slot reused by every K-th request. */
private class Slot(s: WeirStream, shape: Shape) {
    private val t = shape.tokens.toLong()
    private val d = shape.d.toLong()
    val x = s.zeros(t * d, ElementType.F32)
    val normed = s.zeros(t * d, ElementType.F32)
    val qkv = s.zeros(t * 3 * d, ElementType.F32)
    val attended = s.zeros(t * d, ElementType.F32)
    val projected = s.zeros(t * d, ElementType.F32)
    val residual = s.zeros(t * d, ElementType.F32)
    val hidden = s.zeros(t * 4 * d, ElementType.F32)
    val out = s.zeros(t * d, ElementType.F32)
}

private fun kernelSource(file: String): String =
    Weights::class.java.getResource("/transformer/$file")?.readText()
        ?: error("the transformer's kernel $file is not on the classpath (examples/transformer/kernels)")

private fun kernel(name: String, cuda: Boolean = true): Kernel = Kernel.custom(
    name,
    wgsl = KernelSource(kernelSource("$name.wgsl"), name),
    cuda = if (cuda) KernelSource(kernelSource("$name.cu"), name) else null,
)

private fun grid(items: Int): Grid = Grid.linear(items, BLOCK)

/** Where the block's kernels go: a stream, or a graph being recorded (`WeirStream.record`'s `Batch`). */
private fun interface Ops {
    fun execute(kernel: Kernel, grid: Grid, args: List<Arg>)
}

/** The model on one runtime: its kernels, the weights on the device, and its GEMMs (cuBLAS on CUDA). */
private class Model(runtime: WeirRuntime, private val w: Weights, val shape: Shape) : AutoCloseable {
    private val layernorm = kernel("layernorm")
    private val biasAct = kernel("bias_act")
    private val attention = kernel("attention")
    private val blas = if (runtime.info().backend == Backend.CUDA) Blas(runtime) else null
    private val matmul = if (blas == null) kernel("matmul", cuda = false) else null
    private val s = runtime.defaultStream()
    private val ln1 = s.upload(w.ln1.first) to s.upload(w.ln1.second)
    private val wQkv = s.upload(w.wQkv)
    private val bQkv = s.upload(w.bQkv)
    private val wOut = s.upload(w.wOut)
    private val bOut = s.upload(w.bOut)
    private val ln2 = s.upload(w.ln2.first) to s.upload(w.ln2.second)
    private val wUp = s.upload(w.wUp)
    private val bUp = s.upload(w.bUp)
    private val wDown = s.upload(w.wDown)
    private val bDown = s.upload(w.bDown)

    /** `out[m × n] = a[m × k] · w[k × n] + bias`, GELU'd when asked: the GEMM by cuBLAS on [s], or by a kernel. */
    private fun linear(ops: Ops, s: WeirStream?, a: Buffer, w: Buffer, bias: Buffer, out: Buffer, m: Int, n: Int, k: Int, gelu: Boolean) {
        if (blas != null) {
            // Row-major C = A · W is column-major Cᵀ = Wᵀ · Aᵀ.
            blas.sgemm(s ?: error("cuBLAS calls run at admission: a recording cannot hold them"), Gemm(n.toUInt(), m.toUInt(), k.toUInt()), w, a, out)
        } else if (matmul != null) {
            ops.execute(matmul, grid(m * n), listOf(a.reads(), w.reads(), out.writes(), scalar(m.toUInt()), scalar(n.toUInt()), scalar(k.toUInt())))
        }
        ops.execute(biasAct, grid(m * n), listOf(out.readsWrites(), bias.reads(), scalar((m * n).toUInt()), scalar(n.toUInt()), scalar(if (gelu) 1u else 0u)))
    }

    private fun layernorm(ops: Ops, x: Buffer, params: Pair<Buffer, Buffer>, out: Buffer) =
        ops.execute(
            layernorm,
            grid(shape.tokens),
            listOf(x.reads(), params.first.reads(), params.second.reads(), out.writes(), scalar(shape.tokens.toUInt()), scalar(shape.d.toUInt())),
        )

    /** The block's ops, from [slot]'s input to its output, into [ops]; cuBLAS calls on [s] (null while recording). */
    private fun block(ops: Ops, s: WeirStream?, slot: Slot) {
        val (d, heads, tokens) = shape
        layernorm(ops, slot.x, ln1, slot.normed)
        linear(ops, s, slot.normed, wQkv, bQkv, slot.qkv, tokens, 3 * d, d, gelu = false)
        ops.execute(attention, grid(heads * tokens), listOf(slot.qkv.reads(), slot.attended.writes(), scalar(tokens.toUInt()), scalar(d.toUInt()), scalar(heads.toUInt())))
        linear(ops, s, slot.attended, wOut, bOut, slot.projected, tokens, d, d, gelu = false)
        ops.execute(BuiltinOp.ADD.kernel(), Grid(), listOf(slot.x.reads(), slot.projected.reads(), slot.residual.writes()))
        layernorm(ops, slot.residual, ln2, slot.normed)
        linear(ops, s, slot.normed, wUp, bUp, slot.hidden, tokens, 4 * d, d, gelu = true)
        linear(ops, s, slot.hidden, wDown, bDown, slot.projected, tokens, d, 4 * d, gelu = false)
        ops.execute(BuiltinOp.ADD.kernel(), Grid(), listOf(slot.residual.reads(), slot.projected.reads(), slot.out.writes()))
    }

    /** Admits one request's forward pass on [s]: its input into [slot], the block, the read of its output. */
    fun forward(s: WeirStream, slot: Slot, input: FloatArray): PendingRead {
        s.write(slot.x, input)
        block(Ops(s::execute), s, slot)
        return s.enqueueRead(slot.out)
    }

    /**
     * The block over [slot] recorded once as a graph, to replay per request (one op to admit
     * instead of 14); null on CUDA, whose cuBLAS calls are foreign code run at admission.
     */
    fun record(s: WeirStream, slot: Slot): Graph? = if (blas != null) null else s.record { block(Ops(this::execute), null, slot) }

    override fun close() {
        listOf(layernorm, biasAct, attention).forEach { it.close() }
        matmul?.close()
        blas?.close()
    }
}

/** The same block on the host, in f32 with f64 sums. */
private fun forwardOnHost(shape: Shape, w: Weights, x: FloatArray): FloatArray {
    val (d, heads, tokens) = shape
    fun layernorm(x: FloatArray, params: Pair<FloatArray, FloatArray>): FloatArray {
        val out = FloatArray(x.size)
        for (row in 0 until tokens) {
            var mean = 0.0
            for (i in 0 until d) mean += x[row * d + i]
            mean /= d
            var variance = 0.0
            for (i in 0 until d) variance += (x[row * d + i] - mean) * (x[row * d + i] - mean)
            val scale = 1.0 / sqrt(variance / d + 1e-5)
            for (i in 0 until d) out[row * d + i] = ((x[row * d + i] - mean) * scale).toFloat() * params.first[i] + params.second[i]
        }
        return out
    }
    fun linear(a: FloatArray, w: FloatArray, bias: FloatArray, n: Int, gelu: Boolean): FloatArray {
        val k = a.size / tokens
        val out = FloatArray(tokens * n)
        for (row in 0 until tokens) {
            for (col in 0 until n) {
                var sum = 0.0
                for (l in 0 until k) sum += a[row * k + l].toDouble() * w[l * n + col]
                val v = sum.toFloat() + bias[col]
                out[row * n + col] = if (gelu) 0.5f * v * (1f + tanh(0.7978846f * (v + 0.044715f * v * v * v))) else v
            }
        }
        return out
    }
    val qkv = linear(layernorm(x, w.ln1), w.wQkv, w.bQkv, 3 * d, false)
    val size = d / heads
    val attended = FloatArray(tokens * d)
    for (head in 0 until heads) {
        for (t in 0 until tokens) {
            val scores = DoubleArray(t + 1) { s ->
                var dot = 0.0
                for (i in 0 until size) dot += qkv[t * 3 * d + head * size + i].toDouble() * qkv[s * 3 * d + d + head * size + i]
                dot / sqrt(size.toDouble())
            }
            val top = scores.max()
            val weights = scores.map { exp(it - top) }
            val total = weights.sum()
            for (i in 0 until size) {
                var v = 0.0
                for (s in 0..t) v += weights[s] * qkv[s * 3 * d + 2 * d + head * size + i]
                attended[t * d + head * size + i] = (v / total).toFloat()
            }
        }
    }
    val projected = linear(attended, w.wOut, w.bOut, d, false)
    val residual = FloatArray(x.size) { x[it] + projected[it] }
    val down = linear(linear(layernorm(residual, w.ln2), w.wUp, w.bUp, 4 * d, true), w.wDown, w.bDown, d, false)
    return FloatArray(x.size) { residual[it] + down[it] }
}

/** What a run found: the largest difference of an output from the host's (relative), the figures, and the run with every stream as a timeline. */
class Report(val worst: Float, val figures: List<Pair<String, Double>>, val summary: String, val timeline: Timeline)

/** How one way of serving went: its wall time (ns), each request's admission and read-back (ns from the start) and output. */
/**
 * A run: its wall time, each request's admission and read-back (nanoseconds from
 * the start), its outputs, and when each request was on the device (null where the
 * backend takes no timestamps).
 */
private class Served(
    val wall: Long,
    val admitted: LongArray,
    val readBack: LongArray,
    val outputs: List<FloatArray>,
    val onDevice: List<LongRange>?,
) {
    val latencies get() = LongArray(admitted.size) { readBack[it] - admitted[it] }
}

/**
 * The fraction of [wall] in which the device held at least one of [spans]. A span
 * runs from a timestamp its stream reached just before a request to one just after
 * its read-back, placed on the host's clock by a timestamp the stream took while
 * idle (which the device reaches as it is enqueued).
 */
fun busyFraction(spans: List<LongRange>, wall: Long): Double {
    var (covered, reach) = 0L to 0L
    for (span in spans.sortedBy { it.first }) {
        val from = maxOf(span.first, reach)
        if (span.last > from) {
            covered += span.last - from
            reach = span.last
        }
    }
    return minOf(1.0, covered.toDouble() / wall)
}

/**
 * Serves [inputs] on [streams]: request i on stream i mod K with slot i mod K,
 * from a coroutine per stream, which awaits the slot's previous read before it
 * admits the next request into it.
 */
private suspend fun serve(model: Model, streams: List<WeirStream>, slots: List<Slot>, inputs: List<FloatArray>): Served =
    serveWith(streams, inputs) { k, input -> model.forward(streams[k], slots[k], input) }

/** [serve], each request admitted on stream k by [admit]. */
private suspend fun serveWith(streams: List<WeirStream>, inputs: List<FloatArray>, admit: (Int, FloatArray) -> PendingRead): Served = coroutineScope {
    val start = System.nanoTime()
    val admitted = LongArray(inputs.size)
    val readBack = LongArray(inputs.size)
    val outputs = arrayOfNulls<FloatArray>(inputs.size)
    val onDevice = arrayOfNulls<LongRange>(inputs.size)
    streams.indices.map { k ->
        async {
            val stream = streams[k]
            // The stream is idle: the device reaches this as it is enqueued.
            val origin = try { stream.timestamp() } catch (e: WeirException.Unsupported) { null }
            val originAt = System.nanoTime() - start
            origin.use {
                for (request in k until inputs.size step streams.size) {
                    admitted[request] = System.nanoTime() - start
                    val output = FloatArray(inputs[request].size)
                    val before = origin?.let { stream.timestamp() }
                    admit(k, inputs[request]).use { read ->
                        val after = before?.let { stream.timestamp() }
                        read.bytes().use { it.copyInto(output) }
                        if (origin != null && before != null && after != null) {
                            // Both were taken by the time the read is back (or microseconds after):
                            // the blocking form skips a suspension's round trip per timestamp.
                            onDevice[request] =
                                (originAt + before.elapsedSinceBlocking(origin).toNanos())..(originAt + after.elapsedSinceBlocking(origin).toNanos())
                        }
                        listOfNotNull(before, after).forEach { it.close() }
                    }
                    readBack[request] = System.nanoTime() - start
                    outputs[request] = output
                }
            }
        }
    }.awaitAll()
    val spans = onDevice.filterNotNull().takeIf { it.size == inputs.size }
    Served(System.nanoTime() - start, admitted, readBack, outputs.map { it ?: FloatArray(0) }, spans)
}

/** Serves [requests] requests both ways on [runtime], checks every output against the host's, and measures. */
suspend fun run(runtime: WeirRuntime, shape: Shape, requests: Int, inFlight: Int): Report = coroutineScope {
    val weights = Weights(shape, 0x5eed)
    Model(runtime, weights, shape).use { model ->
        val inputs = (0 until requests).map { Numbers(1L + it).take(shape.tokens * shape.d, 1f) }
        val k = minOf(inFlight, requests)
        val streams = (0 until k).map { runtime.newStream() }
        val slots = streams.map { Slot(streams[0], shape) }
        runtime.sync()
        // Warm-up, untimed: the first launches compile, and the JIT compiles
        // the serving code of both ways (as the demo's first run is untimed).
        serve(model, streams.take(1), slots.take(1), inputs.take(streams.size))
        serve(model, streams, slots, inputs.take(streams.size))
        // Then each way once, timed.
        val serial = serve(model, streams.take(1), slots.take(1), inputs)
        val overlapped = serve(model, streams, slots, inputs)
        // Each slot's block recorded once as a graph, replayed per request (one op to admit
        // instead of 14): on wgpu, where every op is a kernel; after an untimed pass, as above.
        val graphs = slots.map { slot -> model.record(streams[0], slot) }.takeIf { all -> all.none { it == null } }?.filterNotNull()
        val replayed = graphs?.let {
            val replay = { k: Int, input: FloatArray ->
                streams[k].write(slots[k].x, input)
                streams[k].replay(graphs[k])
                streams[k].enqueueRead(slots[k].out)
            }
            serveWith(streams, inputs.take(streams.size), replay)
            serveWith(streams, inputs, replay)
        }
        // The host's outputs, once the timed runs are over: computing them
        // meanwhile would take the cores the serving coroutines run on.
        val expected = inputs.map { input -> async(Dispatchers.Default) { forwardOnHost(shape, weights, input) } }
        var worst = 0f
        for ((request, want) in expected.awaitAll().withIndex()) {
            for (got in listOfNotNull(serial.outputs[request], overlapped.outputs[request], replayed?.outputs?.get(request))) {
                check(got.size == want.size) { "request $request: ${got.size} values read back, ${want.size} expected" }
                for (i in want.indices) {
                    val error = abs(got[i] - want[i]) / (1f + abs(want[i]))
                    worst = max(worst, if (error.isNaN()) Float.POSITIVE_INFINITY else error)
                }
            }
        }
        val tokens = requests.toDouble() * shape.tokens
        fun rate(wall: Long) = tokens / (wall / 1e9)
        fun medianMillis(latencies: LongArray) = latencies.sorted()[latencies.size / 2] / 1e6
        graphs?.forEach { it.close() }
        streams.forEach { it.close() }
        val timeline = Timeline(
            "kotlin transformer block on ${runtime.info().name}: $requests requests on $k streams",
            (0 until k).map { "stream $it" },
            inputs.indices.map { request ->
                TimelineBar((request % k).toUInt(), Duration.ofNanos(overlapped.admitted[request]), Duration.ofNanos(overlapped.readBack[request]), "request $request")
            },
            emptyList(),
        )
        Report(
            worst,
            listOf(
                "tokens/s, one stream" to rate(serial.wall),
                "tokens/s, $k streams" to rate(overlapped.wall),
                "throughput, streams / one stream" to serial.wall.toDouble() / overlapped.wall,
                "latency per request, one stream (ms)" to medianMillis(serial.latencies),
                "latency per request, $k streams (ms)" to medianMillis(overlapped.latencies),
            ) + listOfNotNull(replayed?.let { "tokens/s, $k streams, each request a replayed graph" to rate(it.wall) }) +
                listOf("one stream" to serial, "$k streams" to overlapped).mapNotNull { (name, served) ->
                    served.onDevice?.let { "device busy fraction, $name" to busyFraction(it, served.wall) }
                },
            "%d streams: %.0f tokens/s, %.2fx one stream; every output of every run within %.1e of the host's".format(
                k, rate(overlapped.wall), serial.wall.toDouble() / overlapped.wall, worst,
            ),
            timeline,
        )
    }
}

fun main(args: Array<String>) {
    val option = { name: String -> args.toList().windowed(2).firstOrNull { it[0] == name }?.get(1) }
    val number = { name: String, default: Int ->
        option(name)?.let { it.toIntOrNull() ?: run { System.err.println("$name takes a number, not $it"); exitProcess(2) } } ?: default
    }
    val shape = if ("--small" in args) Shape.SMALL else Shape.GPT2_SMALL
    val (requests, inFlight) = number("--requests", 32).coerceAtLeast(1) to number("--in-flight", 8).coerceAtLeast(1)
    val runtime = when (option("--backend")) {
        null -> try { WeirRuntime.open(Backend.CUDA) } catch (e: WeirException.Unavailable) { WeirRuntime.open(Backend.WGPU) }
        "cuda" -> WeirRuntime.open(Backend.CUDA)
        "wgpu" -> WeirRuntime.open(Backend.WGPU)
        else -> { System.err.println("--backend takes cuda or wgpu"); exitProcess(2) }
    }
    runtime.use { rt ->
        val info = rt.info()
        val backend = info.backend.name.lowercase()
        println("kotlin transformer block (d ${shape.d}, ${shape.heads} heads, ${shape.tokens} tokens a request) on $backend (${info.name}): $requests requests, $inFlight in flight")
        val report = runBlocking(Dispatchers.Default) { run(rt, shape, requests, inFlight) }
        // The raw single-stream version's rate, measured by the Rust bench just before (xtask passes it).
        val raw = option("--raw-tokens-per-second")?.toDoubleOrNull()
        val figures = report.figures + (raw?.let { rate ->
            report.figures.filter { it.first.startsWith("tokens/s, ") }.map { (name, value) -> "$name / raw single stream" to value / rate }
        } ?: emptyList())
        for ((name, value) in figures) {
            println("{\"backend\":\"$backend\",\"example\":\"kotlin transformer: $name\",\"value\":${"%.3f".format(value)}}")
        }
        println(report.summary)
        val picture = File("target/weir-transformer-timeline-kotlin.svg").absoluteFile
        try {
            picture.parentFile.mkdirs()
            picture.writeText(timelineSvg(report.timeline))
            println("the timeline as a picture: $picture")
        } catch (e: java.io.IOException) {
            println("the timeline picture could not be written to $picture: ${e.message}")
        }
        rt.shutdown()
        if (report.worst > TOLERANCE) {
            System.err.println("an output is off the host's by ${report.worst} (relative), more than $TOLERANCE")
            exitProcess(1)
        }
    }
}
