package dev.weir

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.MethodSource

/** `devices()` lists what every backend sees, each device as opening it then reports it. */
class DevicesTest {
    @Test
    fun `the CPU is listed once, as device 0, with the host's memory`() {
        val cpus = devices().filter { it.backend == Backend.CPU }
        assertEquals(1, cpus.size, "$cpus")
        val cpu = cpus.single()
        assertEquals(0u, cpu.index)
        assertTrue(cpu.software, "$cpu")
        if (System.getProperty("os.name").startsWith("Linux")) {
            assertTrue((cpu.memoryBytes ?: 0uL) > 1uL shl 20, "the host's memory on Linux: $cpu")
        }
        WeirRuntime.open(Backend.CPU).use { rt ->
            assertEquals(cpu, rt.info())
            rt.shutdown()
        }
    }

    @Test
    fun `every listed device opens and reports what the listing says`() {
        for (device in devices()) {
            WeirRuntime.open(device).use { rt ->
                assertEquals(device, rt.info(), "opened ${device.backend} ${device.index}")
                println("${device.backend} ${device.index}: ${device.name}, ${device.memoryBytes} bytes, ${device.limits}")
                rt.shutdown()
            }
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    fun `a backend that opens lists the device it opens first`(backend: String): Unit = onRuntime(backend) { rt ->
        val info = rt.info()
        val first = devices().firstOrNull { it.backend == info.backend }
        assertEquals(info, first, "the default ${info.backend} device is the first listed")
        assertEquals(0u, info.index)
        assertTrue(info.limits.maxThreadsPerBlock >= 1u && info.limits.maxBlockX >= 1u && info.limits.maxGroupsX >= 1u)
    }

    @Test
    fun `an index past the listing is unavailable`() {
        val wgpu = devices().count { it.backend == Backend.WGPU }
        assertThrows<WeirException.Unavailable> { WeirRuntime.openDevice(Backend.WGPU, wgpu.toUInt()) }
        assertThrows<WeirException.InvalidArgument> { WeirRuntime.openDevice(Backend.AUTO, 1u) }
    }

    @Test
    fun `the wgpu adapter choice reaches the runtime as options`() {
        val missing = assertThrows<WeirException.Unavailable> {
            WeirRuntime.openWith(Backend.WGPU, RuntimeOptions(adapterNamed = "No Adapter Has This Name"))
        }
        assertTrue(missing.message!!.contains("no adapter has this name"), missing.message)
        val none = assertThrows<WeirException.Unavailable> {
            WeirRuntime.openWith(Backend.WGPU, RuntimeOptions(wgpuBackends = "glide"))
        }
        assertTrue(none.message!!.contains("name none"), none.message)
        // The listed adapter, named by part of its name, opens as device 0 of those it keeps.
        val listed = devices().firstOrNull { it.backend == Backend.WGPU } ?: return
        val part = listed.name.take(5).uppercase()
        WeirRuntime.openWith(Backend.WGPU, RuntimeOptions(adapterNamed = part)).use { rt ->
            assertTrue(rt.info().name.uppercase().contains(part), rt.info().name)
            rt.shutdown()
        }
    }
}
