/**
 * Bulk data without a `RustBuffer` in between: uploads that Rust copies
 * straight from the caller's memory, and reads copied once into the caller's
 * array. (`upload(FloatArray)`, `readFloats` and their `Int` forms in
 * `Weir.kt` go through here too.) Java sees these as static methods of `WeirBulk`.
 */
@file:JvmName("WeirBulk")

package dev.weir

import com.sun.jna.Pointer
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.concurrent.ConcurrentLinkedQueue

/** Bytes per staging chunk, for uploads from JVM arrays (which JNA cannot lend to Rust). */
@PublishedApi
internal const val CHUNK_BYTES = 1 shl 21

/** Staging chunks kept for the next upload, at most [KEPT_CHUNKS]. */
@PublishedApi
internal val chunks = ConcurrentLinkedQueue<ByteBuffer>()
@PublishedApi
internal const val KEPT_CHUNKS = 4

/**
 * A buffer holding the remaining bytes of [data]; its position does not move.
 * A direct buffer is lent to Rust for the call, which copies it once, as an
 * upload from Rust does; a heap buffer goes through staging chunks as arrays do.
 */
@Throws(WeirException::class)
fun WeirStream.upload(data: ByteBuffer): Buffer {
    if (data.isDirect) return uploadBorrowed(data.slice())
    val source = data.slice()
    return uploadStaged(source.remaining().toLong()) { chunk, at, bytes ->
        chunk.put(source.slice(at.toInt(), bytes))
    }
}

/**
 * Reads [destination]`.size` `f32`s of [buffer] from element [offset] into
 * [destination], once its latest write (on any stream) is done: one copy out
 * of Rust, no array allocated.
 */
@Throws(WeirException::class)
suspend fun WeirStream.readInto(buffer: Buffer, destination: FloatArray, offset: Int = 0, cancel: CancelToken? = null) =
    readHostInto(buffer, offset, destination.size, "f32", cancel) { source -> source.read(0, destination, 0, destination.size) }

/** Reads [destination]`.size` 32-bit integers of [buffer] from element [offset] into [destination]. */
@Throws(WeirException::class)
suspend fun WeirStream.readInto(buffer: Buffer, destination: IntArray, offset: Int = 0, cancel: CancelToken? = null) =
    readHostInto(buffer, offset, destination.size, "32-bit integer", cancel) { source ->
        source.read(0, destination, 0, destination.size)
    }

/**
 * Reads [destination]`.remaining()` bytes of [buffer] from byte [offset] into
 * [destination] (direct or not), advancing its position, as NIO reads do.
 */
@Throws(WeirException::class)
suspend fun WeirStream.readInto(buffer: Buffer, destination: ByteBuffer, offset: Long = 0, cancel: CancelToken? = null) {
    if (offset < 0) throw WeirException.InvalidArgument("invalid argument: negative byte offset $offset")
    val bytes = destination.remaining()
    if (bytes == 0) return
    readHost(buffer, offset.toULong(), bytes.toULong(), cancel).use { host ->
        destination.put(Pointer(host.address().toLong()).getByteBuffer(0, bytes.toLong()))
    }
}

/** Reads [count] 4-byte elements from element [offset] and hands [copy] a pointer to them, valid during the call. */
private suspend inline fun WeirStream.readHostInto(
    buffer: Buffer,
    offset: Int,
    count: Int,
    element: String,
    cancel: CancelToken?,
    copy: (Pointer) -> Unit,
) {
    if (offset < 0) throw WeirException.InvalidArgument("invalid argument: negative element offset $offset")
    val elements = buffer.sizeBytes() / 4u
    if (offset.toULong() + count.toULong() > elements) {
        throw WeirException.OutOfRange(
            "$count ${element}s at element offset $offset do not fit in a buffer of $elements ${element}s",
        )
    }
    if (count == 0) return
    // The handle keeps the bytes alive, and where they are, until `use` closes it.
    readHost(buffer, offset.toULong() * 4u, count.toULong() * 4u, cancel).use { host -> copy(Pointer(host.address().toLong())) }
}

/**
 * A buffer of [bytes] bytes filled by [fill] (a chunk, its byte offset in
 * the buffer, its length) one staging chunk at a time, each lent to Rust,
 * which copies it. One chunk is one upload; more make an empty buffer and a
 * write per chunk, admitted before the buffer is returned, so nobody else can
 * see it half written.
 */
internal inline fun WeirStream.uploadStaged(bytes: Long, fill: (ByteBuffer, Long, Int) -> Unit): Buffer {
    val chunk = chunks.poll() ?: ByteBuffer.allocateDirect(CHUNK_BYTES).order(ByteOrder.LITTLE_ENDIAN)
    try {
        if (bytes <= CHUNK_BYTES) {
            chunk.clear()
            fill(chunk, 0, bytes.toInt())
            return uploadBorrowed(chunk.slice(0, bytes.toInt()))
        }
        val buffer = empty(bytes)
        try {
            var at = 0L
            while (at < bytes) {
                val length = minOf(CHUNK_BYTES.toLong(), bytes - at).toInt()
                chunk.clear()
                fill(chunk, at, length)
                writeBorrowed(buffer, at.toULong(), chunk.slice(0, length))
                at += length
            }
        } catch (failure: Throwable) {
            buffer.close()
            throw failure
        }
        return buffer
    } finally {
        if (chunks.size < KEPT_CHUNKS) chunks.offer(chunk)
    }
}
