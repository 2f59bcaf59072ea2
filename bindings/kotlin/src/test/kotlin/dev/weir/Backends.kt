package dev.weir

import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.launch
import org.junit.jupiter.api.Assertions.fail
import org.junit.jupiter.api.Assumptions
import java.util.concurrent.CompletableFuture
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.ExecutionException
import java.util.concurrent.TimeUnit
import java.util.concurrent.TimeoutException

/**
 * The backends the suite runs on.
 *
 * `WEIR_TEST_BACKENDS` (default `cpu,wgpu`) names them; a backend that cannot
 * open is skipped with its name and the reason, unless `WEIR_REQUIRE_BACKENDS`
 * lists it, in which case the test fails.
 */
object Backends {
    private fun list(variable: String, default: String): List<String> =
        (System.getenv(variable) ?: default).split(',').map { it.trim().lowercase() }.filter { it.isNotEmpty() }

    private val required: Set<String> = list("WEIR_REQUIRE_BACKENDS", "").toSet()

    /** Backend names for `@MethodSource`. */
    @JvmStatic
    fun names(): List<String> = list("WEIR_TEST_BACKENDS", "cpu,wgpu")

    private val reported = ConcurrentHashMap.newKeySet<String>()

    /** Opens [name], or skips (fails, if required) the calling test when it cannot open. */
    @JvmStatic
    fun open(name: String): WeirRuntime {
        val backend = Backend.entries.firstOrNull { it.name.equals(name, ignoreCase = true) }
            ?: fail("unknown backend $name in WEIR_TEST_BACKENDS")
        return try {
            WeirRuntime.open(backend)
        } catch (e: WeirException.Unavailable) {
            if (name in required) fail<WeirRuntime>("backend $name is required (WEIR_REQUIRE_BACKENDS) but: ${e.message}")
            if (reported.add(name)) System.err.println("weir: skipping backend $name: ${e.message}")
            Assumptions.abort<WeirRuntime>("backend $name unavailable: ${e.message}")
        }
    }
}

/**
 * Holds this stream for [micros] microseconds: a device-side delay op.
 * `BuiltinOp.DELAY` is a test hook (weir-ffi's `test-support` feature, which
 * xtask builds the suites' library with), so this lives with the tests.
 */
fun WeirStream.enqueueDelay(micros: UInt) = execute(BuiltinOp.DELAY, scalar(micros))

/**
 * Runs [body] on a fresh runtime of [backend], shut down and closed once it
 * returns (closing the handle alone would end nothing while its streams live
 * on). When [body] fails, the handle is left to the cleaner: a shutdown could
 * wait forever behind a hung test.
 */
inline fun <T> onRuntime(backend: String, body: (WeirRuntime) -> T): T {
    val rt = Backends.open(backend)
    val result = body(rt)
    rt.shutdown()
    rt.close()
    return result
}

/**
 * Keeps a stream busy until released: a gate where the backend has one (CPU),
 * otherwise a long device-side delay (released by waiting it out).
 */
class Blocker(private val stream: WeirStream) : AutoCloseable {
    private val hold: Hold? = try {
        stream.hold()
    } catch (_: WeirException.Unsupported) {
        stream.enqueueDelay(DELAY_MICROS)
        null
    }

    /** True when the stream waits for [release] (a gate), not for a delay to run out. */
    val isGate: Boolean get() = hold != null

    /** Lets the stream go on (a delay simply runs out). */
    fun release() {
        hold?.release()
    }

    override fun close() {
        release()
        hold?.close()
    }

    companion object {
        const val DELAY_MICROS: UInt = 3_000_000u
    }
}

/** Polls [probe] until it holds, or fails after [timeoutMs]. */
fun eventually(timeoutMs: Long = 5_000, what: String, probe: () -> Boolean) {
    val deadline = System.nanoTime() + timeoutMs * 1_000_000
    while (System.nanoTime() < deadline) {
        if (probe()) return
        Thread.sleep(1)
    }
    fail<Unit>("timed out waiting for: $what")
}

/**
 * Runs `System.gc()` and `System.runFinalization()` with short sleeps until
 * [probe] holds (UniFFI frees an unreachable handle on its cleaner thread,
 * after a collection), or fails after [timeoutMs].
 */
fun collectGarbageUntil(timeoutMs: Long = 10_000, what: String, probe: () -> Boolean) {
    val deadline = System.nanoTime() + timeoutMs * 1_000_000
    while (System.nanoTime() < deadline) {
        if (probe()) return
        collectGarbage(rounds = 1)
    }
    if (!probe()) fail<Unit>("timed out collecting garbage until: $what")
}

/** [rounds] of `System.gc()`, `System.runFinalization()` and a short sleep (for the cleaner thread). */
fun collectGarbage(rounds: Int) {
    repeat(rounds) {
        System.gc()
        System.runFinalization()
        Thread.sleep(10)
    }
}

/**
 * Runs [body] as a coroutine on `Dispatchers.Unconfined` (it starts on this
 * thread and, after each suspension, goes on on whichever thread resumed it)
 * and returns its result; fails if it is not done within [timeoutMs], printing
 * the JVM's threads, so that a hang fails the test instead of the build. A
 * native hang needs `jstack -m` or gdb beside this.
 */
fun <T> finishesWithin(timeoutMs: Long = 20_000, what: String, body: suspend () -> T): T {
    val result = CompletableFuture<T>()
    CoroutineScope(Dispatchers.Unconfined).launch {
        try {
            result.complete(body())
        } catch (e: Throwable) {
            result.completeExceptionally(e)
        }
    }
    return try {
        result.get(timeoutMs, TimeUnit.MILLISECONDS)
    } catch (e: ExecutionException) {
        throw e.cause ?: e
    } catch (_: TimeoutException) {
        for ((thread, stack) in Thread.getAllStackTraces()) {
            System.err.println("\"${thread.name}\" ${thread.state}")
            stack.forEach { System.err.println("    at $it") }
        }
        fail<T>("$what did not finish within $timeoutMs ms (the JVM's threads are printed above)")
    }
}
