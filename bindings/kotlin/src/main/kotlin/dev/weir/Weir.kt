/**
 * The idiomatic layer over the generated UniFFI bindings of Weir.
 *
 * The generated API (this same package, `dev.weir`) is the whole surface:
 * [WeirRuntime], [WeirStream], [Buffer], [Fence], [Timestamp], [Kernel], [CancelToken], [devices], the
 * [WeirException] hierarchy. Every handle is [AutoCloseable], so `use {}`
 * releases it. One naming rule throughout: a plain verb (`execute`,
 * `memsetZero`, `write`) enqueues and returns once the op is admitted; the
 * same verb with `AndWait` suspends until the stream has run it; `read`
 * suspends until the bytes are there, `readBlocking` blocks for them. This file adds what is awkward there: typed array uploads and
 * reads, `Long` sizes instead of `ULong`, kernel arguments from buffers, and
 * built-in ops by name. Java sees these as static methods of the class
 * `Weir` (`Weir.zeros(stream, 12)`); [WeirJava], [WeirFutures] and
 * [WeirBlocking] hold what else Java needs.
 */
@file:JvmName("Weir")

package dev.weir

import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.concurrent.ConcurrentHashMap

/** Opens the best available backend: CUDA, then HIP, then a hardware wgpu adapter, then the CPU. */
@Throws(WeirException::class)
fun WeirRuntime.Companion.open(): WeirRuntime = WeirRuntime.open(Backend.AUTO)

/**
 * Opens [device], one of those [devices] lists: the runtime's `info()` is
 * then [device] itself.
 */
@Throws(WeirException::class)
fun WeirRuntime.Companion.open(device: DeviceInfo): WeirRuntime = openDevice(device.backend, device.index)

/** A zero-filled buffer of [bytes] bytes (zeroed on the device, no host data). */
@Throws(WeirException::class)
fun WeirStream.zeros(bytes: Long): Buffer = zeros(bytes.toULongChecked())

/** A buffer of [bytes] bytes with unspecified contents. */
@Throws(WeirException::class)
fun WeirStream.empty(bytes: Long): Buffer = empty(bytes.toULongChecked())

/**
 * A buffer holding [data] (little-endian `f32`s, as devices store them),
 * copied to Rust through staging chunks of 2 MiB, never as a second whole array.
 */
@Throws(WeirException::class)
fun WeirStream.upload(data: FloatArray): Buffer = uploadStaged(data.size * 4L) { chunk, at, bytes ->
    chunk.asFloatBuffer().put(data, (at / 4).toInt(), bytes / 4)
}

/** A buffer holding [data] (little-endian 32-bit integers), copied through staging chunks of 2 MiB. */
@Throws(WeirException::class)
fun WeirStream.upload(data: IntArray): Buffer = uploadStaged(data.size * 4L) { chunk, at, bytes ->
    chunk.asIntBuffer().put(data, (at / 4).toInt(), bytes / 4)
}

/**
 * Enqueues writing [data] into [buffer] at element [offset]; returns once
 * admitted (the data is copied by then), not once done. A bad [offset] is
 * reported in elements, as given.
 */
@JvmOverloads
@Throws(WeirException::class)
fun WeirStream.write(buffer: Buffer, data: FloatArray, offset: Int = 0) =
    write(buffer, data.toLittleEndianBytes(), buffer.elementOffset(offset, data.size, "f32"))

/**
 * Enqueues writing [data] into [buffer] at element [offset]; returns once
 * admitted (the data is copied by then), not once done. A bad [offset] is
 * reported in elements, as given.
 */
@JvmOverloads
@Throws(WeirException::class)
fun WeirStream.write(buffer: Buffer, data: IntArray, offset: Int = 0) =
    write(buffer, data.toLittleEndianBytes(), buffer.elementOffset(offset, data.size, "32-bit integer"))

/** Writes [data] into [buffer] at element [offset] as [write] does, then suspends until this stream has done it. */
@Throws(WeirException::class)
suspend fun WeirStream.writeAndWait(buffer: Buffer, data: FloatArray, offset: Int = 0, cancel: CancelToken? = null) =
    writeAndWait(buffer, data.toLittleEndianBytes(), buffer.elementOffset(offset, data.size, "f32"), cancel)

/** Writes [data] into [buffer] at element [offset] as [write] does, then suspends until this stream has done it. */
@Throws(WeirException::class)
suspend fun WeirStream.writeAndWait(buffer: Buffer, data: IntArray, offset: Int = 0, cancel: CancelToken? = null) =
    writeAndWait(buffer, data.toLittleEndianBytes(), buffer.elementOffset(offset, data.size, "32-bit integer"), cancel)

/**
 * Reads [buffer] as `f32`s once its latest write (on any stream) is done,
 * copied once out of Rust into the new array ([readInto] reuses one).
 */
@Throws(WeirException::class)
suspend fun WeirStream.readFloats(buffer: Buffer, cancel: CancelToken? = null): FloatArray =
    FloatArray(buffer.wholeElements("f32")).also { readInto(buffer, it, cancel = cancel) }

/** Reads [buffer] as 32-bit integers once its latest write (on any stream) is done, copied once out of Rust. */
@Throws(WeirException::class)
suspend fun WeirStream.readInts(buffer: Buffer, cancel: CancelToken? = null): IntArray =
    IntArray(buffer.wholeElements("i32")).also { readInto(buffer, it, cancel = cancel) }

/** Size of the buffer in bytes, as a `Long`. */
val Buffer.byteSize: Long get() = sizeBytes().toLong()

/** This buffer as a kernel argument the op only reads. */
fun Buffer.reads(): Arg = Arg.Buffer(this, Access.READ)

/** This buffer as a kernel argument the op overwrites. */
fun Buffer.writes(): Arg = Arg.Buffer(this, Access.WRITE)

/** This buffer as a kernel argument the op reads and writes. */
fun Buffer.readsWrites(): Arg = Arg.Buffer(this, Access.READ_WRITE)

/** An `f32` scalar argument. */
fun scalar(value: Float): Arg = Arg.F32(value)

/** An `i32` scalar argument. */
fun scalar(value: Int): Arg = Arg.I32(value)

/** A `u32` scalar argument. */
fun scalar(value: UInt): Arg = Arg.U32(value)

/** One shared kernel handle per built-in op, created on first use and never closed. */
private val builtins = ConcurrentHashMap<BuiltinOp, Kernel>()

/** This built-in op's kernel (shared; do not close it). */
fun BuiltinOp.kernel(): Kernel = builtins.computeIfAbsent(this) { Kernel.builtin(it) }

/** A one-group grid: what built-in ops are given (they size themselves from their buffers). */
internal val single = Grid()

/** Enqueues the built-in [op] over [args]; returns once admitted, not once done. */
@Throws(WeirException::class)
fun WeirStream.execute(op: BuiltinOp, vararg args: Arg) = execute(op.kernel(), single, args.toList())

/** Enqueues the built-in [op] over [args], then suspends until this stream has run it. */
@Throws(WeirException::class)
suspend fun WeirStream.executeAndWait(op: BuiltinOp, vararg args: Arg, cancel: CancelToken? = null) =
    executeAndWait(op.kernel(), single, args.toList(), cancel)

/** Enough groups of [block] threads along x to cover [items] items. */
@JvmOverloads
fun Grid.Companion.linear(items: Int, block: Int = 64): Grid =
    gridLinear(items.coerceAtLeast(0).toUInt(), block.coerceAtLeast(1).toUInt())

private fun Long.toULongChecked(): ULong {
    if (this < 0) throw WeirException.InvalidArgument("invalid argument: negative size $this")
    return toULong()
}

/**
 * The byte offset of element [offset] of 4-byte elements, for writing [count]
 * of them; refused in the caller's units (elements), not in bytes.
 */
private fun Buffer.elementOffset(offset: Int, count: Int, element: String): ULong {
    if (offset < 0) throw WeirException.InvalidArgument("invalid argument: negative element offset $offset")
    val elements = sizeBytes() / 4u
    if (offset.toULong() + count.toULong() > elements) {
        throw WeirException.OutOfRange(
            "$count ${element}s at element offset $offset do not fit in a buffer of $elements ${element}s",
        )
    }
    return offset.toULong() * 4u
}

/** How many 4-byte elements the buffer holds; refused unless whole and within an array's reach. */
private fun Buffer.wholeElements(element: String): Int {
    val size = sizeBytes()
    if (size % 4u != 0uL) throw WeirException.InvalidArgument("invalid argument: $size bytes are not whole ${element}s")
    if (size / 4u > Int.MAX_VALUE.toULong()) {
        throw WeirException.InvalidArgument("invalid argument: ${size / 4u} ${element}s do not fit in one JVM array")
    }
    return (size / 4u).toInt()
}

private fun FloatArray.toLittleEndianBytes(): ByteArray {
    val out = ByteBuffer.allocate(size * 4).order(ByteOrder.LITTLE_ENDIAN)
    out.asFloatBuffer().put(this)
    return out.array()
}

private fun IntArray.toLittleEndianBytes(): ByteArray {
    val out = ByteBuffer.allocate(size * 4).order(ByteOrder.LITTLE_ENDIAN)
    out.asIntBuffer().put(this)
    return out.array()
}

internal fun ByteArray.toFloatArray(): FloatArray {
    if (size % 4 != 0) throw WeirException.InvalidArgument("invalid argument: $size bytes are not whole f32s")
    val out = FloatArray(size / 4)
    ByteBuffer.wrap(this).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out)
    return out
}

internal fun ByteArray.toIntArray(): IntArray {
    if (size % 4 != 0) throw WeirException.InvalidArgument("invalid argument: $size bytes are not whole i32s")
    val out = IntArray(size / 4)
    ByteBuffer.wrap(this).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(out)
    return out
}
