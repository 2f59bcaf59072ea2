package dev.weir

import kotlinx.coroutines.runBlocking
import java.nio.FloatBuffer
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import org.junit.jupiter.params.provider.ValueSource

/** One custom kernel, a CPU function and a WGSL source, launched the same way on every backend. */
class CpuKernelTest {
    /** `out[i] = a · x[i] + (i mod block)`: the index in the block shows which block ran. */
    private val wgsl = """
        @group(0) @binding(0) var<storage, read> x: array<f32>;
        @group(0) @binding(1) var<storage, read_write> out: array<f32>;
        struct Scalars { a: f32, n: u32 }
        @group(0) @binding(2) var<uniform> p: Scalars;
        override block_x: u32 = 64;
        @compute @workgroup_size(block_x)
        fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
            if (id.x < p.n) { out[id.x] = p.a * x[id.x] + f32(local.x); }
        }
    """.trimIndent()

    private val cudaC = """
        extern "C" __global__ void scaled(const float* x, float* out, float a, unsigned int n) {
            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) { out[i] = a * x[i] + (float)threadIdx.x; }
        }
    """.trimIndent()

    private val cpu = cpuKernel { args ->
        val (x, out) = args.floats(0) to args.floats(1)
        val (a, n, block) = Triple(args.float(0), args.uint(1).toInt(), args.grid.blockX.toInt())
        if (a < 0f) throw IllegalArgumentException("a negative scale $a")
        for (i in 0 until n) out.put(i, a * x.get(i) + (i % block))
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a kernel with a CPU function and GPU sources runs with one grid and one argument list`(backend: String): Unit =
        onRuntime(backend) { rt ->
            val s = rt.defaultStream()
            val n = 1000
            val sources = Triple(KernelSource(wgsl, "main"), KernelSource(cudaC, "scaled"), KernelSource(cudaC, "scaled"))
            Kernel.custom("scaled", wgsl = sources.first, cuda = sources.second, hip = sources.third, cpu = cpu).use { kernel ->
                runBlocking {
                    val x = s.upload(FloatArray(n) { it.toFloat() })
                    for (block in listOf(32, 128)) {
                        val out = s.zeros(n.toLong(), ElementType.F32)
                        s.executeAndWait(kernel, Grid.linear(n, block), listOf(x.reads(), out.writes(), scalar(2f), scalar(n.toUInt())))
                        assertArrayEquals(FloatArray(n) { 2f * it + it % block }, s.readFloats(out), "block $block on $backend")
                    }
                }
            }
        }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `an exception in a CPU kernel fails the op with its message and the runtime goes on`(backend: String): Unit =
        onRuntime(backend) { rt ->
            org.junit.jupiter.api.Assumptions.assumeTrue(rt.info().backend == Backend.CPU, "a CPU function runs on the CPU backend")
            val s = rt.defaultStream()
            Kernel.custom("scaled", cpu = cpu).use { kernel ->
                runBlocking {
                    val x = s.upload(floatArrayOf(1f, 2f))
                    val out = s.zeros(2, ElementType.F32)
                    s.execute(kernel, Grid.linear(2, 2), listOf(x.reads(), out.writes(), scalar(-1f), scalar(2u)))
                    val failed = assertThrows<WeirException.OpFailed> { s.readFloats(out) }
                    assertTrue(failed.message!!.contains("a negative scale -1.0"), failed.message)
                    runCatching { s.sync() }
                    s.executeAndWait(kernel, Grid.linear(2, 2), listOf(x.reads(), out.writes(), scalar(3f), scalar(2u)))
                    assertArrayEquals(floatArrayOf(3f, 7f), s.readFloats(out))
                }
            }
        }

    @Test
    fun `what a CPU kernel keeps of its arguments never reaches device memory and asking them later throws`(): Unit =
        WeirRuntime.open(Backend.CPU).use { rt ->
            val s = rt.defaultStream()
            var keptFloats: FloatBuffer? = null
            var keptArgs: CpuKernelArgs? = null
            val fromAnotherThread = java.util.concurrent.atomic.AtomicReference<Throwable?>()
            val keeper = cpuKernel { args ->
                keptArgs = args
                keptFloats = args.floats(0).also { it.put(0, 1f) }
                // Handed to another thread during the call: the same copy, no crash.
                val other = Thread { runCatching { args.floats(0).put(3, 4f) }.onFailure(fromAnotherThread::set) }
                other.start()
                other.join()
            }
            Kernel.custom("keeper", cpu = keeper).use { kernel ->
                runBlocking {
                    val out = s.zeros(4, ElementType.F32)
                    s.executeAndWait(kernel, Grid.linear(4, 4), listOf(out.writes()))
                    assertArrayEquals(floatArrayOf(1f, 0f, 0f, 4f), s.readFloats(out), "the call's writes land")
                    assertEquals(null, fromAnotherThread.get())
                    // After the kernel returned: writes go nowhere, asking throws.
                    keptFloats!!.put(1, 42f)
                    assertEquals(1f, keptFloats!!.get(0))
                    assertArrayEquals(floatArrayOf(1f, 0f, 0f, 4f), s.readFloats(out), "a write after return was seen")
                    assertThrows<WeirException.InvalidArgument> { keptArgs!!.floats(0) }
                    assertThrows<WeirException.InvalidArgument> { keptArgs!!.bufferCount }
                    // After the buffer is gone, and after the runtime is closed: still nothing reaches it.
                    out.close()
                    keptFloats!!.put(2, 44f)
                    val fresh = s.zeros(4, ElementType.F32)
                    assertArrayEquals(FloatArray(4), s.readFloats(fresh))
                }
            }
            rt.shutdown()
            keptFloats!!.put(3, 45f)
            assertThrows<WeirException.InvalidArgument> { keptArgs!!.ints(0) }
        }

    @Test
    fun `CPU kernels run on the pool's workers, kept attached to the JVM as daemons, called through JNI`(): Unit =
        WeirRuntime.open(Backend.CPU).use { rt ->
            val s = rt.defaultStream()
            val ranOn = java.util.concurrent.ConcurrentLinkedQueue<Thread>()
            val calledFrom = java.util.concurrent.atomic.AtomicReference<List<String>>()
            val body = cpuKernel {
                ranOn.add(Thread.currentThread())
                calledFrom.compareAndSet(null, Thread.currentThread().stackTrace.map { "${it.className}.${it.methodName}" })
            }
            Kernel.custom("where", cpu = body).use { kernel ->
                runBlocking {
                    // Queued back to back: one worker runs them all, without going idle between.
                    repeat(20) { s.execute(kernel, Grid.linear(1, 1), emptyList()) }
                    s.sync()
                }
            }
            val threads = ranOn.toList()
            assertEquals(20, threads.size)
            assertTrue(threads.all { it.name.substringBefore(" @coroutine#") == "weir-cpu-worker" }, "ran on ${threads.map { it.name }.toSet()}")
            assertTrue(threads.all { it.isDaemon }, "a worker attached by the library is a daemon")
            // Attached once: a worker is one JVM thread for all its calls (JNA would attach a new one per call).
            assertTrue(threads.toSet().size < threads.size, "every call ran on a thread of its own: ${threads.toSet().size}")
            // The library calls the body through JNI, not through UniFFI's callback (a JNA callback).
            val frames = calledFrom.get()
            assertTrue(frames.any { it == "dev.weir.NativeKernels.run" }, "called from $frames")
            assertTrue(frames.none { it.startsWith("com.sun.jna.") }, "called from $frames")
            rt.shutdown()
        }

    /** Both ways a worker calls a Kotlin body: through JNI where it is bound (as here), and UniFFI's callback. */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = ["JNI", "callback"])
    fun `64-bit scalars and a struct by value reach a CPU kernel as given, and a wrong width is refused`(path: String): Unit =
        WeirRuntime.open(Backend.CPU).use { rt ->
            fun kernel(body: CpuKernelFunction) = if (path == "JNI") cpuKernel(body) else cpuKernelThroughCallback(body)
            val s = rt.defaultStream()
            var seen: List<Any>? = null
            val struct = java.nio.ByteBuffer.allocate(12).order(java.nio.ByteOrder.LITTLE_ENDIAN)
                .putInt(7).putFloat(0.5f).putInt(-3).array()
            val body = kernel { args ->
                val packed = args.struct(3)
                seen = listOf(args.ulong(0), args.long(1), args.double(2), packed.getInt(0), packed.getFloat(4), packed.getInt(8))
            }
            val wrongWidth = kernel { args -> args.uint(0) }
            Kernel.custom("wide", cpu = body).use { kernel ->
                val huge = ULong.MAX_VALUE - 1uL
                runBlocking {
                    s.executeAndWait(kernel, Grid.linear(1, 1), listOf(scalar(huge), scalar(-(1L shl 40)), scalar(Math.PI), structArg(struct)))
                }
                assertEquals(listOf<Any>(huge, -(1L shl 40), Math.PI, 7, 0.5f, -3), seen)
            }
            Kernel.custom("wrong_width", cpu = wrongWidth).use { kernel ->
                val failed = assertThrows<WeirException.OpFailed> {
                    runBlocking { s.executeAndWait(kernel, Grid.linear(1, 1), listOf(scalar(5uL))) }
                }
                assertTrue(failed.message!!.contains("not a u32"), failed.message)
            }
            rt.shutdown()
        }
}
