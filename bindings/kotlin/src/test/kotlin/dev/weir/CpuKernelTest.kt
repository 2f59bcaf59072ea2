package dev.weir

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

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
}
