package dev.weir

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * CUDA modules nvcc built elsewhere, loaded from their files: the C++
 * template `weir_test::affine<float>` of `rust/core/tests/cuda/kernels.cu`,
 * as PTX, CUBIN and fatbin, taking a struct by value, a `double` and a
 * `size_t`. The folder of nvcc's output is `WEIR_CUDA_MODULES` (the GPU
 * bundle builds it there); without CUDA or that folder the test is skipped
 * by name.
 */
class ModuleFileTest {
    /** `struct Affine { double scale; float shift; int bias; }`, as the device lays it out. */
    private fun affine(scale: Double, shift: Float, bias: Int): ByteArray =
        ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN).putDouble(scale).putFloat(shift).putInt(bias).array()

    private fun modules(): File {
        val dir = System.getenv("WEIR_CUDA_MODULES")
        Assumptions.assumeTrue(dir != null) { "cuda modules: skipped (WEIR_CUDA_MODULES names no folder of nvcc's output)" }
        return File(dir!!)
    }

    @Test
    fun `a kernel loaded from PTX, CUBIN and fatbin files runs by its C++ name with 64-bit scalars and a struct`(): Unit =
        Backends.open("cuda").use { rt ->
            val dir = modules()
            val n = 1000
            val scale = 0.5
            val shift = 0.25f
            val bias = 3
            val step = 0.125
            val s = rt.defaultStream()
            val other = rt.newStream()
            val x = s.upload(FloatArray(n) { it.toFloat() })
            for (file in listOf("kernels.ptx", "kernels.cubin", "kernels.fatbin")) {
                val image = File(dir, file).readBytes()
                Kernel.custom("affine", cudaModule = KernelModule(image, "weir_test::affine<float>")).use { kernel ->
                    val y = s.upload(FloatArray(n))
                    val args = listOf(
                        x.reads(), y.writes(),
                        structArg(affine(scale, shift, bias)),
                        scalar(step), scalar(n.toULong()),
                    )
                    // Another stream launches it: it waits for the uploads' versions.
                    runBlocking { other.executeAndWait(kernel, Grid.linear(n, 128), args) }
                    val want = FloatArray(n) { (scale * it + shift + bias * step).toFloat() }
                    assertEquals(want.toList(), runBlocking { s.readFloats(y) }.toList(), "$file")
                }
            }
            rt.shutdown()
        }

    @Test
    fun `a module file for another architecture or of garbage is refused, and the stream goes on`(): Unit =
        Backends.open("cuda").use { rt ->
            val dir = modules()
            val s = rt.defaultStream()
            val (x, y) = s.upload(FloatArray(16)) to s.upload(FloatArray(16))
            val args = listOf(x.reads(), y.writes(), structArg(affine(1.0, 0f, 0)), scalar(1.0), scalar(16uL))
            for ((image, says) in listOf(
                File(dir, "kernels_other_arch.cubin").readBytes() to "cannot run on this",
                "not a module".toByteArray() to "cannot run on this",
            )) {
                Kernel.custom("affine", cudaModule = KernelModule(image, "weir_test::affine<float>")).use { kernel ->
                    val refused = assertThrows<WeirException.InvalidArgument> {
                        s.execute(kernel, Grid.linear(16, 16), args)
                    }
                    assertTrue(refused.message!!.contains(says), refused.message)
                }
            }
            // The stream goes on.
            s.execute(BuiltinOp.FILL_F32, y.writes(), scalar(1f))
            assertEquals(List(16) { 1.0f }, runBlocking { s.readFloats(y) }.toList())
            rt.shutdown()
        }
}
