package dev.weir

/**
 * Blocking variants of every waiting call, for Java (and any JVM code
 * without coroutines), under the names of the suspend calls: each admits its
 * op, then blocks the calling thread until it is done, and throws the
 * [WeirException] the suspend call would.
 *
 * Every wait blocks in Rust, none in `runBlocking` (as [Fence.waitBlocking]
 * does: a wait that would wait for itself is `InvalidArgument`, never a
 * hang). The calls that only enqueue
 * ([WeirStream.execute], [WeirStream.memsetZero], `Weir.write`, and
 * `WeirBulk.write` for a `ByteBuffer` at a `long` offset) need no variant. Futures are
 * in [WeirFutures].
 */
object WeirBlocking {
    /** Blocks until [read] is done; its bytes ([PendingRead.bytes]). */
    @JvmStatic
    @Throws(WeirException::class)
    fun bytes(read: PendingRead): HostBytes = read.bytesBlocking()

    /** Blocks until all work admitted on [stream] so far is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun sync(stream: WeirStream) = stream.fence().use { it.waitBlocking() }

    /** Blocks until all work admitted on every stream of [runtime] so far is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun sync(runtime: WeirRuntime) = runtime.fence().use { it.waitBlocking() }

    /** Enqueues [kernel] over [args] on [grid], then blocks until [stream] has run it. */
    @JvmStatic
    @Throws(WeirException::class)
    fun executeAndWait(stream: WeirStream, kernel: Kernel, grid: Grid, args: List<Arg>) {
        stream.execute(kernel, grid, args)
        sync(stream)
    }

    /** Enqueues the built-in [op] over [args], then blocks until [stream] has run it. */
    @JvmStatic
    @Throws(WeirException::class)
    fun executeAndWait(stream: WeirStream, op: BuiltinOp, vararg args: Arg) {
        stream.execute(op, *args)
        sync(stream)
    }

    /** Enqueues zeroing every byte of [buffer] on the device, then blocks until [stream] has done it. */
    @JvmStatic
    @Throws(WeirException::class)
    fun memsetZeroAndWait(stream: WeirStream, buffer: Buffer) {
        stream.memsetZero(buffer)
        sync(stream)
    }

    /** Enqueues a copy of raw [data] into [buffer] at element [offset], then blocks until [stream] has done it. */
    @JvmStatic
    @JvmOverloads
    @Throws(WeirException::class)
    fun writeAndWait(stream: WeirStream, buffer: Buffer, data: ByteArray, offset: Long = 0) {
        stream.write(buffer, data, offset)
        sync(stream)
    }

    /** Enqueues writing [data] into [buffer] at element [offset], then blocks until [stream] has done it. */
    @JvmStatic
    @JvmOverloads
    @Throws(WeirException::class)
    fun writeAndWait(stream: WeirStream, buffer: Buffer, data: FloatArray, offset: Long = 0) {
        stream.write(buffer, data, offset)
        sync(stream)
    }

    /** Enqueues writing [data] into [buffer] at element [offset], then blocks until [stream] has done it. */
    @JvmStatic
    @JvmOverloads
    @Throws(WeirException::class)
    fun writeAndWait(stream: WeirStream, buffer: Buffer, data: IntArray, offset: Long = 0) {
        stream.write(buffer, data, offset)
        sync(stream)
    }

    /** The whole of [buffer], once its latest write (on any stream) is done ([WeirStream.readBlocking]). */
    @JvmStatic
    @Throws(WeirException::class)
    fun read(stream: WeirStream, buffer: Buffer): ByteArray = stream.readBlocking(buffer)

    /** The bytes of [length] elements of [buffer] from element [offset], once its latest write (on any stream) is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun read(stream: WeirStream, buffer: Buffer, offset: Long, length: Long): ByteArray =
        stream.readBlocking(buffer, offset.toOffset(), length.toCount())

    /** An `f32` buffer (or raw bytes) as `f32`s, once its latest write (on any stream) is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun readFloats(stream: WeirStream, buffer: Buffer): FloatArray {
        buffer.checkReadAs(ElementType.F32)
        return read(stream, buffer).toFloatArray()
    }

    /** An `i32` or `u32` buffer (or raw bytes) as 32-bit integers, once its latest write (on any stream) is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun readInts(stream: WeirStream, buffer: Buffer): IntArray {
        buffer.checkReadAs(ElementType.I32)
        return read(stream, buffer).toIntArray()
    }

    /** Blocks until all work admitted on every member of [group] so far is done. */
    @JvmStatic
    @Throws(WeirException::class)
    fun sync(group: DeviceGroup) {
        // `devices()` makes a handle per member: closed here, each of them
        // even when a sync throws, not left to the cleaner.
        val members = group.devices()
        try {
            members.forEach { sync(it) }
        } finally {
            members.forEach { it.close() }
        }
    }

    /**
     * Joins the group [id] names as [rank] of [ranks] with [device] of this process, blocking
     * until every rank has joined ([DeviceGroup.Companion.join]).
     */
    @JvmStatic
    @Throws(WeirException::class)
    fun join(backend: Backend, device: Int, id: GroupId, ranks: Int, rank: Int): DeviceGroup =
        DeviceGroup.joinBlocking(
            backend,
            device.toLong().toCount("device").toUInt(),
            id,
            ranks.toLong().toCount("rank count").toUInt(),
            rank.toLong().toCount("rank").toUInt(),
        )
}
