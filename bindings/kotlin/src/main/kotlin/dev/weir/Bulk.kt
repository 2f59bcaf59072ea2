/**
 * Bulk data without a `RustBuffer` in between: uploads that Rust copies
 * straight from the caller's memory, and reads copied once into the caller's
 * array. (`upload(FloatArray)`, `readFloats` and their `Int` forms in
 * `Weir.kt` go through here too.) Java sees these as static methods of `WeirBulk`.
 */
@file:JvmName("WeirBulk")

package dev.weir

import com.sun.jna.Pointer
import java.lang.ref.Reference
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.concurrent.ConcurrentLinkedQueue

/** Bytes per staging chunk, for uploads from JVM arrays (which JNA cannot lend to Rust). */
@PublishedApi
internal const val CHUNK_BYTES = 1 shl 21

/** Bytes per staging chunk of an array copied natively (see [NativeCopy]). */
internal const val NATIVE_CHUNK_BYTES = 32 shl 20

/** Staging chunks kept for the next upload, at most [KEPT_CHUNKS]. */
@PublishedApi
internal val chunks = ConcurrentLinkedQueue<ByteBuffer>()
@PublishedApi
internal const val KEPT_CHUNKS = 4

/**
 * A buffer of [element]s (by default raw bytes) holding the remaining bytes
 * of [data] (from its position to its limit), a whole number of elements;
 * its position does not move. A direct buffer is lent to Rust for the call,
 * which copies it once, as an upload from Rust does; a heap buffer goes
 * through staging chunks as arrays do. (The generated `uploadFromRawMemory`
 * takes `remaining()` bytes from a direct buffer's start, not its position.)
 */
@JvmOverloads
@Throws(WeirException::class)
fun WeirStream.upload(data: ByteBuffer, element: ElementType = ElementType.BYTES): Buffer {
    if (data.isDirect) return lentRemaining(data) { uploadFromRawMemory(it, element) }
    val source = data.slice()
    val width = element.width
    if (source.remaining() % width != 0) {
        throw WeirException.InvalidArgument("invalid argument: ${source.remaining()} bytes are not a whole number of ${element.rustName} elements")
    }
    return uploadStaged(source.remaining() / width, element, { _, _, _ -> 0L }) { chunk, at, count ->
        chunk.put(source.slice(at * width, count * width))
    }
}

/**
 * Host memory holding a copy of [data] (little-endian `f32`s), for
 * [writeHost]: page-locked on CUDA and HIP, so uploads from it need no host
 * copy (plain memory elsewhere). Make it once, upload it as often as needed,
 * close it when done.
 */
@Throws(WeirException::class)
fun WeirRuntime.hostBytes(data: FloatArray): HostBytes {
    val direct = ByteBuffer.allocateDirect(wordBytes(data.size, "f32")).order(ByteOrder.LITTLE_ENDIAN)
    direct.asFloatBuffer().put(data)
    return lent(direct) { hostBytesFromRawMemory(it) }
}

/**
 * Host memory holding a copy of the remaining bytes of [data] (from its
 * position to its limit; the position does not move), for [writeHost], as
 * `hostBytes(FloatArray)` makes. A direct buffer is lent to Rust for the
 * call; a heap buffer is accepted too, copied into a direct buffer first
 * (one more copy of its bytes). Java: `WeirBulk.hostBytes(runtime, buffer)`.
 * (The generated `hostBytesFromRawMemory` takes `remaining()` bytes from a
 * direct buffer's start, not its position, refuses a heap buffer with an
 * `IllegalArgumentException`, and does not keep the buffer reachable.)
 */
@Throws(WeirException::class)
fun WeirRuntime.hostBytes(data: ByteBuffer): HostBytes = lentRemaining(data) { hostBytesFromRawMemory(it) }

/**
 * Enqueues writing the remaining bytes of [data] (from its position to its
 * limit, a whole number of [buffer]'s elements; the position does not move)
 * into [buffer] at element [offset]; returns once admitted (the bytes are
 * copied by then), not once done. A direct buffer is lent to Rust for the
 * call; a heap buffer is copied into a direct buffer first. Java:
 * `WeirBulk.write(stream, buffer, data)`. (The generated `writeFromRawMemory`
 * takes `remaining()` bytes from a direct buffer's start, not its position.)
 */
@JvmOverloads
@Throws(WeirException::class)
fun WeirStream.write(buffer: Buffer, data: ByteBuffer, offset: Long = 0) {
    val start = offset.toOffset()
    lentRemaining(data) { writeFromRawMemory(buffer, start, it, ElementType.BYTES) }
}

/**
 * [call] given [buffer], a direct buffer it lends to Rust. UniFFI's lowering
 * of a borrowed `&[u8]` keeps only the buffer's address, so nothing else
 * would keep the buffer reachable while Rust copies from it, and a
 * collection could free its memory under the copy. It lends the first
 * `remaining()` bytes at the buffer's address, whatever its position: pass a
 * buffer at position 0 (a `slice()`), or use [lentRemaining].
 */
internal inline fun <T> lent(buffer: ByteBuffer, call: (ByteBuffer) -> T): T =
    try {
        call(buffer)
    } finally {
        Reference.reachabilityFence(buffer)
    }

/**
 * [call] given the remaining bytes of [data] (position to limit) as a direct
 * buffer at position 0, lent as [lent] lends it: a slice of [data] where it
 * is direct (which keeps [data]'s memory), else a direct copy of those bytes.
 * [data]'s position does not move.
 */
internal inline fun <T> lentRemaining(data: ByteBuffer, call: (ByteBuffer) -> T): T {
    val direct = if (data.isDirect) {
        data.slice()
    } else {
        ByteBuffer.allocateDirect(data.remaining()).put(data.duplicate()).flip()
    }
    return lent(direct, call)
}

/**
 * Enqueues a copy of all of [host] (a whole number of [buffer]'s elements)
 * into [buffer] at element [offset], straight from it where it is
 * page-locked; returns once admitted. The upload keeps the bytes alive
 * until its copy is done, so [host] may be closed at once.
 */
@JvmOverloads
@Throws(WeirException::class)
fun WeirStream.writeHost(buffer: Buffer, host: HostBytes, offset: Long = 0) =
    writeHost(buffer, offset.toOffset(), host, ElementType.BYTES)

/**
 * Copies [destination]`.size` little-endian `f32`s of these bytes, from byte
 * [offset], into [destination]. It keeps nothing of the bytes, so closing
 * this handle frees them at once: what a loop of reads should use, since
 * page-locked memory freed goes back to the runtime for the next read, while
 * bytes a view from [asByteBuffer] holds wait for a garbage collection. Java:
 * `WeirBulk.copyInto(host, array)`.
 */
@JvmOverloads
@Throws(WeirException::class)
fun HostBytes.copyInto(destination: FloatArray, offset: Long = 0) {
    // A count of bytes, not an array's size: any FloatArray's bytes fit a Long.
    val bytes = destination.size * 4L
    val len = len().toLong()
    if (offset < 0 || offset > len - bytes) {
        throw WeirException.InvalidArgument("invalid argument: $bytes bytes from byte $offset do not fit in $len host bytes")
    }
    copyOut({ NativeCopy.toFloats(it, offset, destination, 0, destination.size) }) { it.read(offset, destination, 0, destination.size) }
}

/**
 * The bytes as a read-only little-endian direct buffer over Rust's memory,
 * with no copy. The buffer, and every buffer made from it (`slice`,
 * `duplicate`, `asFloatBuffer`, …), keeps the bytes alive while it is
 * reachable: [HostBytes.close] (or dropping this handle) frees them only once
 * no such buffer is left, which may be long after (to copy the bytes out and
 * free them at once, use [copyInto]). Bytes of more than 2 GiB − 1, more than
 * one `ByteBuffer` holds, are refused with `InvalidArgument`: read those with
 * [copyInto] in parts. Throws `IllegalStateException` once closed, as every
 * call on a closed handle does.
 */
@Throws(WeirException::class)
fun HostBytes.asByteBuffer(): ByteBuffer {
    // The JDK makes a direct buffer's capacity an Int: past it, the view was
    // refused with IllegalArgumentException, or from 4 GiB silently short.
    if (len() > Int.MAX_VALUE.toULong()) {
        throw WeirException.InvalidArgument("invalid argument: ${len()} host bytes are more than one ByteBuffer holds; copy them out with copyInto, in parts")
    }
    // A direct buffer made over an address holds nothing of its owner, so the
    // view itself holds a borrow of this handle, as a call does, and gives it
    // back from the cleaner once no view is reachable. Every view made from it
    // keeps it reachable: the JDK's derived direct buffers hold their root.
    uniffiBeginBorrow()
    try {
        val root = Pointer(address().toLong()).getByteBuffer(0, len().toLong())
        UniffiLib.CLEANER.register(root, EndBorrow(this))
        return root.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN)
    } catch (failure: Throwable) {
        uniffiEndBorrow()
        throw failure
    }
}

/**
 * Gives back a borrow of [host] (freeing it if it was closed meanwhile).
 * A class of its own, not a lambda, so that it holds [host] and nothing of
 * the view it is registered on, which would then never be collected; holding
 * [host] keeps UniFFI's own cleaner from freeing it while a view is alive.
 */
private class EndBorrow(private val host: HostBytes) : Runnable {
    override fun run() = host.uniffiEndBorrow()
}

/**
 * Admits a read of all of [buffer] now, in order on this stream, to await
 * later with [PendingRead.bytes] (a suspend read admits only once it runs):
 * what a pipeline that reuses [buffer] needs, so its next write waits for
 * this read. The bytes come back as [HostBytes], page-locked on CUDA and HIP.
 */
@Throws(WeirException::class)
fun WeirStream.enqueueRead(buffer: Buffer): PendingRead =
    enqueueReadHost(buffer, 0uL, buffer.elementCount(), ElementType.BYTES)

/**
 * Reads [destination]`.size` `f32`s of [buffer] from element [offset] into
 * [destination], once its latest write (on any stream) is done: one copy out
 * of Rust, no array allocated (a copy of many MiB is split among up to four
 * threads: one thread writes the JVM's heap more slowly than other memory).
 * [buffer] holds `f32`s, or raw bytes, whose [offset] then counts bytes.
 */
@Throws(WeirException::class)
suspend fun WeirStream.readInto(buffer: Buffer, destination: FloatArray, offset: Long = 0, cancel: CancelToken? = null) =
    readHostInto(buffer, offset, destination.size * 4L, ElementType.F32, cancel) { host -> host.copyInto(destination) }

/** Reads [destination]`.size` 32-bit integers of [buffer] (`i32`s, `u32`s or raw bytes) from element [offset] into [destination]. */
@Throws(WeirException::class)
suspend fun WeirStream.readInto(buffer: Buffer, destination: IntArray, offset: Long = 0, cancel: CancelToken? = null) =
    readHostInto(buffer, offset, destination.size * 4L, ElementType.I32, cancel) { host ->
        host.copyOut({ NativeCopy.toInts(it, 0, destination, 0, destination.size) }) { it.read(0, destination, 0, destination.size) }
    }

/**
 * Reads [destination]`.remaining()` bytes of [buffer] (of any type; a whole
 * number of its elements) from element [offset] into [destination] (direct
 * or not), advancing its position, as NIO reads do.
 */
@Throws(WeirException::class)
suspend fun WeirStream.readInto(buffer: Buffer, destination: ByteBuffer, offset: Long = 0, cancel: CancelToken? = null) {
    val bytes = destination.remaining()
    readHostInto(buffer, offset, bytes.toLong(), ElementType.BYTES, cancel) { host ->
        val at = destination.position()
        host.copyOut({
            when {
                destination.isReadOnly -> false // NIO's put raises what a read-only buffer does
                destination.isDirect -> NativeCopy.toDirect(it, 0, destination, at, bytes)
                destination.hasArray() -> NativeCopy.toBytes(it, 0, destination.array(), destination.arrayOffset() + at, bytes)
                else -> false
            }.also { copied -> if (copied) destination.position(at + bytes) }
        }) { destination.put(it.getByteBuffer(0, bytes.toLong())) }
    }
}

/**
 * Reads [bytes] bytes of [buffer] from its element [offset], for an array of
 * [element]s, and hands them to [copy], open during the call.
 */
private suspend inline fun WeirStream.readHostInto(
    buffer: Buffer,
    offset: Long,
    bytes: Long,
    element: ElementType,
    cancel: CancelToken?,
    copy: (HostBytes) -> Unit,
) {
    val start = offset.toOffset()
    if (bytes == 0L) return
    val width = buffer.elementType().width
    if (bytes % width != 0L) {
        throw WeirException.InvalidArgument("invalid argument: $bytes bytes are not a whole number of the buffer's elements")
    }
    // The handle keeps the bytes alive, and where they are, until `use` closes it.
    readHost(buffer, start, (bytes / width).toULong(), element, cancel).use(copy)
}

/**
 * Copies out of these bytes with [native] (given their lent handle) where the
 * JNI entries are linked; else, or when [native] copied nothing, with
 * [generated] (given their address: JNA's or NIO's copy).
 */
private inline fun HostBytes.copyOut(native: (Long) -> Boolean, generated: (Pointer) -> Unit) {
    if (NativeLink.linked) {
        val handle = uniffiBeginBorrow()
        val copied = try {
            native(handle)
        } finally {
            uniffiEndBorrow()
        }
        if (copied) return
    }
    generated(Pointer(address().toLong()))
}

/** Bytes per element. */
internal val ElementType.width: Int get() = if (this == ElementType.BYTES) 1 else 4

/**
 * A buffer of [count] [element]s filled by [fill] (a chunk, the first element
 * it holds, how many) one chunk at a time. One chunk is one upload from a
 * direct buffer lent to Rust, which copies it. More make an empty buffer and
 * fill the runtime's staging memory ([WeirStream.staging]: page-locked on
 * CUDA and HIP, which the device copies from directly), one chunk per write,
 * all admitted before the buffer is returned, so nobody else can see it half
 * written: an array's upload then costs one host copy. [stage] (the lent
 * stream handle, the first element, how many) fills staging memory natively
 * (`NativeCopy.stageFloats`: `memcpy`, on several threads for a large
 * chunk) and gives its handle, or 0 to leave the chunk to [fill].
 */
internal inline fun WeirStream.uploadStaged(
    count: Int,
    element: ElementType,
    stage: (Long, Int, Int) -> Long,
    fill: (ByteBuffer, Int, Int) -> Unit,
): Buffer {
    val width = element.width
    if (count <= CHUNK_BYTES / width) {
        val chunk = chunks.poll() ?: ByteBuffer.allocateDirect(CHUNK_BYTES).order(ByteOrder.LITTLE_ENDIAN)
        try {
            chunk.clear()
            fill(chunk, 0, count)
            return lent(chunk.slice(0, count * width)) { uploadFromRawMemory(it, element) }
        } finally {
            if (chunks.size < KEPT_CHUNKS) chunks.offer(chunk)
        }
    }
    // Larger chunks where they are copied natively, so that several threads share each.
    val perChunk = (if (NativeLink.linked) NATIVE_CHUNK_BYTES else CHUNK_BYTES) / width
    val buffer = empty(count.toULong(), element)
    try {
        var at = 0
        while (at < count) {
            val length = minOf(perChunk, count - at)
            val bytes = length.toLong() * width
            val staged = if (NativeLink.linked) {
                val handle = uniffiBeginBorrow()
                try {
                    stage(handle, at, length)
                } finally {
                    uniffiEndBorrow()
                }
            } else {
                0L
            }
            // Written here before its one upload, which holds it until the copy is done.
            val host = if (staged != 0L) {
                HostBytes(UniffiWithHandle, staged)
            } else {
                staging(bytes.toULong()).also { host ->
                    fill(Pointer(host.address().toLong()).getByteBuffer(0, bytes).order(ByteOrder.LITTLE_ENDIAN), at, length)
                }
            }
            host.use { writeHost(buffer, at.toULong(), it, element) }
            at += length
        }
    } catch (failure: Throwable) {
        buffer.close()
        throw failure
    }
    return buffer
}
