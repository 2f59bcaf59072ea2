package dev.weir

import kotlinx.coroutines.runBlocking

/**
 * Blocking variants of every suspend call, for Java (and any JVM code
 * without coroutines): each admits its op, then blocks the calling thread
 * until it is done, and throws the [WeirException] the suspend call would.
 *
 * Waits on a stream or a fence block in Rust (as [Fence.waitBlocking] does:
 * a wait that would wait for itself is `InvalidArgument`, never a hang).
 * [memsetZero] and [write] run their suspend call in `runBlocking`, so,
 * like any `runBlocking`, they must not be called from a coroutine resumed on
 * Weir's waking thread (`Dispatchers.Unconfined`): that thread would wait for
 * its own wake-up. Futures are in [WeirFutures].
 */
object WeirBlocking {
    /** Blocks until all work admitted on [stream] so far is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun sync(stream: Stream) = stream.fence().use { it.waitBlocking() }

    /** Blocks until all work admitted on every stream of [runtime] so far is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun sync(runtime: Runtime) = runtime.fence().use { it.waitBlocking() }

    /** Enqueues [kernel] over [args] on [grid], then blocks until [stream] has run it. */
    @JvmStatic
    @Throws(WeirException::class)
    fun execute(stream: Stream, kernel: Kernel, grid: Grid, args: List<Arg>) {
        stream.execute(kernel, grid, args)
        sync(stream)
    }

    /** Enqueues the built-in [op] over [args], then blocks until [stream] has run it. */
    @JvmStatic
    @Throws(WeirException::class)
    fun execute(stream: Stream, op: BuiltinOp, vararg args: Arg) {
        stream.execute(op, *args)
        sync(stream)
    }

    /** Zeroes every byte of [buffer] on the device, then blocks until done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun memsetZero(stream: Stream, buffer: Buffer) = runBlocking { stream.memsetZero(buffer) }

    /** Copies [data] into [buffer] at byte [offset], then blocks until done. */
    @JvmStatic
    @JvmOverloads
    @Throws(WeirException::class)
    fun write(stream: Stream, buffer: Buffer, data: ByteArray, offset: Long = 0) {
        val at = offset.toByteOffset()
        runBlocking { stream.write(buffer, data, at) }
    }

    /** Writes [data] into [buffer] at element [offset], then blocks until done. */
    @JvmStatic
    @JvmOverloads
    @Throws(WeirException::class)
    fun write(stream: Stream, buffer: Buffer, data: FloatArray, offset: Int = 0) =
        runBlocking { stream.write(buffer, data, offset) }

    /** Writes [data] into [buffer] at element [offset], then blocks until done. */
    @JvmStatic
    @JvmOverloads
    @Throws(WeirException::class)
    fun write(stream: Stream, buffer: Buffer, data: IntArray, offset: Int = 0) =
        runBlocking { stream.write(buffer, data, offset) }

    /** The whole of [buffer], once its latest write (on any stream) is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun read(stream: Stream, buffer: Buffer): ByteArray = stream.readBlocking(buffer, 0u, buffer.sizeBytes())

    /** [length] bytes of [buffer] from byte [offset], once its latest write (on any stream) is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun read(stream: Stream, buffer: Buffer, offset: Long, length: Long): ByteArray =
        stream.readBlocking(buffer, offset.toByteOffset(), length.toByteCount())

    /** [buffer] as `f32`s, once its latest write (on any stream) is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun readFloats(stream: Stream, buffer: Buffer): FloatArray = read(stream, buffer).toFloatArray()

    /** [buffer] as 32-bit integers, once its latest write (on any stream) is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun readInts(stream: Stream, buffer: Buffer): IntArray = read(stream, buffer).toIntArray()
}
