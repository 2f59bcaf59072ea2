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
 * `Weir` (`Weir.zeros(stream, 3, ElementType.F32)`: three elements); [WeirJava], [WeirFutures] and
 * [WeirBlocking] hold what else Java needs.
 */
@file:JvmName("Weir")

package dev.weir

import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.concurrent.ConcurrentHashMap
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.ensureActive

/** Opens the best available backend: CUDA, then HIP, then a hardware wgpu adapter, then the CPU. */
@Throws(WeirException::class)
fun WeirRuntime.Companion.open(): WeirRuntime = WeirRuntime.open(Backend.AUTO)

/**
 * Opens [device], one of those [devices] lists: the runtime's `info()` is
 * then [device] itself.
 */
@Throws(WeirException::class)
fun WeirRuntime.Companion.open(device: DeviceInfo): WeirRuntime = openDevice(device.backend, device.index)

/**
 * Admits what [admission] admits on this stream without blocking the calling
 * thread, and returns what it returns. [admission] runs on a handle of this
 * stream that never waits for room ([WeirStream.withoutWaiting]): while the
 * runtime's queue is full (`RuntimeOptions.queueLimitOps`,
 * `queueLimitHostBytes`) its admission throws [WeirException.QueueFull], and
 * this suspends until the queue has room ([WeirStream.room]), then runs
 * [admission] again. So [admission] should admit one op (or one [batch]):
 * what it admitted before the refusal would be admitted twice.
 *
 * A plain admission (`stream.execute(…)`) blocks its thread while the queue
 * is full, which is what Java callers and blocking code want.
 */
@Throws(WeirException::class)
suspend fun <T> WeirStream.admit(admission: WeirStream.() -> T): T {
    val eager = withoutWaiting()
    try {
        while (true) {
            try {
                return eager.admission()
            } catch (_: WeirException.QueueFull) {
                room()
            }
        }
    } finally {
        eager.close()
    }
}

/** A buffer of [count] zeroed [element]s (zeroed on the device, no host data). */
@Throws(WeirException::class)
fun WeirStream.zeros(count: Long, element: ElementType): Buffer = zeros(count.toCount(), element)

/** A buffer of [count] [element]s with unspecified contents. */
@Throws(WeirException::class)
fun WeirStream.empty(count: Long, element: ElementType): Buffer = empty(count.toCount(), element)

/**
 * An `f32` buffer holding [data] (little-endian, as devices store them),
 * copied into the runtime's staging memory chunk by chunk (32 MiB, with
 * `memcpy` on up to four threads; 2 MiB through NIO where the library's JNI
 * entries did not link), never as a second whole array.
 */
@Throws(WeirException::class)
fun WeirStream.upload(data: FloatArray): Buffer =
    uploadStaged(data.size, ElementType.F32, { stream, at, count -> NativeCopy.stageFloats(stream, data, at, count) }) { chunk, at, count ->
        chunk.asFloatBuffer().put(data, at, count)
    }

/** An `i32` buffer holding [data], copied through staging chunks as `upload(FloatArray)` does. */
@Throws(WeirException::class)
fun WeirStream.upload(data: IntArray): Buffer =
    uploadStaged(data.size, ElementType.I32, { stream, at, count -> NativeCopy.stageInts(stream, data, at, count) }) { chunk, at, count ->
        chunk.asIntBuffer().put(data, at, count)
    }

/**
 * Enqueues writing [data] into [buffer] (of `f32`s, or raw bytes) at element
 * [offset]; returns once admitted (the data is copied by then), not once done.
 */
@JvmOverloads
@Throws(WeirException::class)
fun WeirStream.write(buffer: Buffer, data: FloatArray, offset: Long = 0) =
    write(buffer, data.toLittleEndianBytes(), ElementType.F32, offset.toOffset())

/**
 * Enqueues writing [data] into [buffer] (of `i32`s, `u32`s as their bits, or
 * raw bytes) at element [offset]; returns once admitted, not once done.
 */
@JvmOverloads
@Throws(WeirException::class)
fun WeirStream.write(buffer: Buffer, data: IntArray, offset: Long = 0) =
    write(buffer, data.toLittleEndianBytes(), ElementType.I32, offset.toOffset())

/** Enqueues writing raw [data] into [buffer] at element [offset] (a whole number of its elements). */
@JvmOverloads
@Throws(WeirException::class)
fun WeirStream.write(buffer: Buffer, data: ByteArray, offset: Long = 0) =
    write(buffer, data, ElementType.BYTES, offset.toOffset())

/** Writes [data] into [buffer] at element [offset] as [write] does, then suspends until this stream has done it. */
@Throws(WeirException::class)
suspend fun WeirStream.writeAndWait(buffer: Buffer, data: FloatArray, offset: Long = 0, cancel: CancelToken? = null) =
    writeAndWait(buffer, data.toLittleEndianBytes(), ElementType.F32, offset.toOffset(), cancel)

/** Writes [data] into [buffer] at element [offset] as [write] does, then suspends until this stream has done it. */
@Throws(WeirException::class)
suspend fun WeirStream.writeAndWait(buffer: Buffer, data: IntArray, offset: Long = 0, cancel: CancelToken? = null) =
    writeAndWait(buffer, data.toLittleEndianBytes(), ElementType.I32, offset.toOffset(), cancel)

/** Writes raw [data] into [buffer] at element [offset] as [write] does, then suspends until this stream has done it. */
@Throws(WeirException::class)
suspend fun WeirStream.writeAndWait(buffer: Buffer, data: ByteArray, offset: Long = 0, cancel: CancelToken? = null) =
    writeAndWait(buffer, data, ElementType.BYTES, offset.toOffset(), cancel)

/**
 * Reads an `f32` buffer (or raw bytes as `f32`s) once its latest write (on
 * any stream) is done, copied once out of Rust into the new array ([readInto]
 * reuses one). A buffer of another type is refused with `InvalidArgument`.
 */
@Throws(WeirException::class)
suspend fun WeirStream.readFloats(buffer: Buffer, cancel: CancelToken? = null): FloatArray =
    FloatArray(buffer.wholeWords("f32")).also { readInto(buffer, it, cancel = cancel) }

/** Reads an `i32` or `u32` buffer (or raw bytes) as 32-bit integers once its latest write is done. */
@Throws(WeirException::class)
suspend fun WeirStream.readInts(buffer: Buffer, cancel: CancelToken? = null): IntArray =
    IntArray(buffer.wholeWords("i32")).also { readInto(buffer, it, cancel = cancel) }

/** The [count] elements from element [first] of this buffer, as a buffer of its own sharing the memory. */
@Throws(WeirException::class)
fun Buffer.view(first: Long, count: Long): Buffer = view(first.toOffset(), count.toCount())

/** Number of elements, as a `Long`. */
val Buffer.size: Long get() = elementCount().toLong()

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

/** A 64-bit integer scalar argument (`long long`, `int64_t`). */
fun scalar(value: Long): Arg = Arg.I64(value)

/** An unsigned 64-bit scalar argument (`size_t`, `unsigned long long`). */
fun scalar(value: ULong): Arg = Arg.U64(value)

/** A 64-bit float scalar argument (`double`). */
fun scalar(value: Double): Arg = Arg.F64(value)

/** A struct passed by value, as its bytes in the device's layout (the kernel's parameter must be this size). */
fun structArg(bytes: ByteArray): Arg = Arg.Bytes(bytes)

/** One shared kernel handle per built-in op, created on first use and never closed. */
private val builtins = ConcurrentHashMap<BuiltinOp, Kernel>()

/** This built-in op's kernel (shared; do not close it). */
fun BuiltinOp.kernel(): Kernel = builtins.computeIfAbsent(this) { Kernel.builtin(it) }

/** A one-group grid: what built-in ops are given (they size themselves from their buffers). */
internal val single = Grid()

// The stream's own `sync`, `execute` and `executeAndWait`: each skips what
// UniFFI's generated call costs where it can, and otherwise makes that call
// (renamed in uniffi.toml: `syncThroughFuture`, `executeThroughBuffers`,
// `executeAndWaitThroughBuffers`), so the errors and the cancellation are the
// generated path's.

/**
 * Suspends until all work admitted on this stream so far is done.
 *
 * Without a token, it first asks [WeirStream.syncQuickly]: an idle stream, or
 * one whose work ends within moments (its fence watched for a bounded moment
 * where its recent waits were that quick), returns without suspending, a
 * failure thrown as the suspending wait throws it. Every UniFFI async call
 * creates a Rust future, lowers its arguments, polls (Rust calls back into
 * the JVM even when the future is ready), completes and frees it: several
 * times what the answer costs. Cancellation is checked as a suspension would:
 * cancelling the coroutine ends the wait (not the work) with
 * `CancellationException`; cancelling [cancel] ends it with
 * [WeirException.Cancelled].
 */
@Throws(WeirException::class)
suspend fun WeirStream.sync(cancel: CancelToken? = null) {
    if (cancel == null) {
        // Cancellation first, as a suspension checks it: a cancelled caller
        // gets CancellationException, and a failure the stream holds stays
        // for its next sync (asked first, it was thrown instead, or lost).
        currentCoroutineContext().ensureActive()
        if (syncQuickly()) return
    }
    syncThroughFuture(cancel)
}

/**
 * Enqueues [kernel] over [args] on [grid]. Returns once admitted, not once done.
 *
 * One JNI call with only handles and integers ([EncodedOps]) where the op
 * fits it; as generated, the call lowers its `Grid` and `List<Arg>` into a
 * `RustBuffer` each and clones every handle by a call of its own, about
 * 7 µs of a call Rust admits in 0.3.
 */
@Throws(WeirException::class)
fun WeirStream.execute(kernel: Kernel, grid: Grid, args: List<Arg>) {
    if (!EncodedOps.execute(this, kernel, grid, args)) executeThroughBuffers(kernel, grid, args)
}

/**
 * Enqueues [kernel] over [args] on [grid], then suspends until this stream
 * has run it: [execute], then [sync], as the Rust method admits and then
 * waits on the stream's completion.
 */
@Throws(WeirException::class)
suspend fun WeirStream.executeAndWait(kernel: Kernel, grid: Grid, args: List<Arg>, cancel: CancelToken? = null) {
    if (EncodedOps.executeSuspending(this, kernel, grid, args)) return sync(cancel)
    executeAndWaitThroughBuffers(kernel, grid, args, cancel)
}

/**
 * How a suspend call returns when it finished without suspending: in a
 * cancelled coroutine it throws `CancellationException`, as the generated
 * path does when its Rust future is ready on the first poll.
 */
internal suspend fun returnedAtOnce() = currentCoroutineContext().ensureActive()

/** Enqueues the built-in [op] over [args]; returns once admitted, not once done. */
@Throws(WeirException::class)
fun WeirStream.execute(op: BuiltinOp, vararg args: Arg) = execute(op.kernel(), single, args.asList())

/** Enqueues the built-in [op] over [args], then suspends until this stream has run it. */
@Throws(WeirException::class)
suspend fun WeirStream.executeAndWait(op: BuiltinOp, vararg args: Arg, cancel: CancelToken? = null) =
    executeAndWait(op.kernel(), single, args.asList(), cancel)

/** Enough groups of [block] threads along x to cover [items] items. */
@JvmOverloads
fun Grid.Companion.linear(items: Int, block: Int = 64): Grid =
    gridLinear(items.coerceAtLeast(0).toUInt(), block.coerceAtLeast(1).toUInt())

/** The type as Rust spells it, as in Rust's messages. */
internal val ElementType.rustName: String get() = if (this == ElementType.BYTES) "u8" else name.lowercase()

/** How many 4-byte words the buffer's bytes are; refused unless whole and within an array's reach. */
internal fun Buffer.wholeWords(element: String): Int {
    val size = sizeBytes()
    if (size % 4u != 0uL) throw WeirException.InvalidArgument("invalid argument: $size bytes are not whole ${element}s")
    if (size / 4u > Int.MAX_VALUE.toULong()) {
        throw WeirException.InvalidArgument("invalid argument: ${size / 4u} ${element}s do not fit in one JVM array")
    }
    return (size / 4u).toInt()
}

/**
 * The bytes of [count] 4-byte [element]s, refused where one JVM array cannot
 * hold them: `count * 4` in `Int` wraps past 2^29 elements, into a negative
 * or too small size that NIO would refuse untyped.
 */
internal fun wordBytes(count: Int, element: String): Int {
    val bytes = count * 4L
    if (bytes > Int.MAX_VALUE) {
        throw WeirException.InvalidArgument("invalid argument: $count ${element}s are $bytes bytes, more than one JVM array holds")
    }
    return bytes.toInt()
}

internal fun FloatArray.toLittleEndianBytes(): ByteArray {
    val out = ByteBuffer.allocate(wordBytes(size, "f32")).order(ByteOrder.LITTLE_ENDIAN)
    out.asFloatBuffer().put(this)
    return out.array()
}

internal fun IntArray.toLittleEndianBytes(): ByteArray {
    val out = ByteBuffer.allocate(wordBytes(size, "i32")).order(ByteOrder.LITTLE_ENDIAN)
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

/** Opens [devices] (device indices) of [backend] as a group. */
@Throws(WeirException::class)
fun DeviceGroup.Companion.open(backend: Backend, vararg devices: Int): DeviceGroup =
    DeviceGroup.open(backend, devices.map { it.toLong().toCount("device").toUInt() })

/**
 * Joins the group [id] names as [rank] of [ranks], with [device] of this process: one rank of a
 * group whose ranks live in several processes (CPU: processes of one host; CUDA: NCCL, across
 * hosts too). Rank 0's process makes the id (`GroupId(backend)`) and hands `id.toBytes()` to the
 * others, which rebuild it with `GroupId.fromBytes`. Suspends, on no thread of the caller's, until
 * every rank has joined; every rank must then admit the group's collectives in one order.
 */
@Throws(WeirException::class)
suspend fun DeviceGroup.Companion.join(backend: Backend, device: Int, id: GroupId, ranks: Int, rank: Int): DeviceGroup =
    DeviceGroup.join(
        backend,
        device.toLong().toCount("device").toUInt(),
        id,
        ranks.toLong().toCount("rank count").toUInt(),
        rank.toLong().toCount("rank").toUInt(),
    )
