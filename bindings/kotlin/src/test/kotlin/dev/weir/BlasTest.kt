package dev.weir

import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource
import kotlin.math.abs

/**
 * cuBLAS GEMMs as admitted ops from Kotlin: on CUDA a GEMM between two
 * Weir kernels on other streams, ordered by the versions it reads and
 * writes; on every other backend a typed refusal.
 */
class BlasTest {
    @ParameterizedTest
    @MethodSource("dev.weir.Backends#names")
    fun `a GEMM between Weir kernels on other streams reads and publishes the right versions`(backend: String): Unit =
        Backends.open(backend).use { rt ->
            if (backend != "cuda") {
                val refused = assertThrows<WeirException.Unsupported> { Blas(rt) }
                assertTrue(refused.message!!.contains("cuBLAS"), refused.message)
                rt.shutdown()
                return@use
            }
            val (m, n, k) = Triple(48, 40, 32)
            // Column-major, as cuBLAS reads them.
            val a = FloatArray(m * k) { ((it * 7) % 13 - 6) / 4f }
            val b = FloatArray(k * n) { ((it * 5) % 11 - 5) / 8f }
            val (s1, s2, s3) = Triple(rt.newStream(), rt.newStream(), rt.newStream())
            Blas(rt).use { blas ->
                val da = s1.upload(a)
                val twice = s1.upload(FloatArray(m * k))
                val db = s1.upload(b)
                val dc = s1.upload(FloatArray(m * n) { Float.NaN })
                val doubled = s1.upload(FloatArray(m * n))
                s1.execute(BuiltinOp.SCALE, da.reads(), twice.writes(), scalar(2f)) // 2A, on s1
                blas.sgemm(s2, Gemm(m.toUInt(), n.toUInt(), k.toUInt()), twice, db, dc) // C = 2A·B, on s2
                s3.execute(BuiltinOp.ADD, dc.reads(), dc.reads(), doubled.writes()) // 2C, on s3
                val got = runBlocking { s1.readFloats(doubled) }
                for (j in 0 until n) for (i in 0 until m) {
                    val want = 2 * (0 until k).sumOf { l -> 2.0 * a[i + l * m] * b[l + j * k] }
                    assertTrue(abs(got[i + j * m] - want) <= 1e-3 * (1 + abs(want)), "C[$i, $j] = ${got[i + j * m]}, want $want")
                }
                // A buffer too small for its matrix is refused, typed, and nothing is admitted.
                val small = s1.upload(FloatArray(4))
                assertThrows<WeirException.InvalidArgument> { blas.sgemm(s2, Gemm(m.toUInt(), n.toUInt(), k.toUInt()), small, db, dc) }
                assertEquals(m * n, runBlocking { s2.readFloats(dc) }.size)
            }
            rt.shutdown()
        }
}
