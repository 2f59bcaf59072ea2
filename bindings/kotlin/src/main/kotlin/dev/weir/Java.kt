package dev.weir

/**
 * What Java cannot reach in the generated API, with Java's types.
 *
 * Kotlin's unsigned types are value classes: a method that takes or returns
 * one gets a mangled JVM name (`zeros-VKZWuLQ`), so Java sees neither
 * `WeirStream.index()`, `WeirStream.write(buffer, bytes, offset)`,
 * `Buffer.sizeBytes()`, the fields of [Grid],
 * [Diagnostics] and [DeviceInfo], nor `Arg.U32`. Constructors of the
 * generated classes are on their companions (`WeirRuntime.Companion.open`).
 * These take and return `int`/`long`, refuse a negative or too large value
 * with [WeirException.InvalidArgument], and are static. The rest of the
 * Kotlin helpers (`Weir.zeros(stream, count, element)`, `Weir.upload(stream, floats)`,
 * `Weir.write(stream, buffer, floats)`, `Weir.reads(buffer)`, `Weir.scalar(2f)`,
 * `Weir.execute(stream, op, args…)`) are static methods of the `Weir` class
 * already; suspend calls have [WeirFutures] and [WeirBlocking].
 *
 * The runtime is `WeirRuntime` so that `import dev.weir.*;` hides nothing of
 * `java.lang` (`java.lang.Runtime`).
 */
object WeirJava {
    /** Opens [backend] (by default the best available: CUDA, then HIP, then a hardware wgpu adapter, then the CPU). */
    @JvmStatic
    @JvmOverloads
    @Throws(WeirException::class)
    fun open(backend: Backend = Backend.AUTO): WeirRuntime = WeirRuntime.open(backend)

    /**
     * Opens [backend] with a bound on the work it holds queued: at most
     * [queueLimitOps] ops and [queueLimitHostBytes] host bytes (uploads'
     * data) admitted and not yet handed to the device. At the limit, every
     * admission blocks its thread until there is room; through
     * `stream.withoutWaiting()` it throws `WeirException.QueueFull` instead.
     */
    @JvmStatic
    @Throws(WeirException::class)
    fun open(backend: Backend, queueLimitOps: Long, queueLimitHostBytes: Long): WeirRuntime =
        WeirRuntime.openWith(
            backend,
            RuntimeOptions(
                queueLimitOps = queueLimitOps.toCount("queue limit (ops)"),
                queueLimitHostBytes = queueLimitHostBytes.toCount("queue limit (host bytes)"),
            ),
        )

    /** Every device of every backend compiled in, best backend first, as [open] takes them ([devices]). */
    @JvmStatic
    fun devices(): List<DeviceInfo> = dev.weir.devices()

    /** Opens [device], one of those [devices] lists; its `info()` is then [device]. */
    @JvmStatic
    @Throws(WeirException::class)
    fun open(device: DeviceInfo): WeirRuntime = WeirRuntime.open(device)

    /** The stream's index in its runtime (0 is the default stream). */
    @JvmStatic
    fun index(stream: WeirStream): Long = stream.index().toLong()

    /** The size of [buffer] in bytes. */
    @JvmStatic
    fun sizeBytes(buffer: Buffer): Long = buffer.byteSize

    /** The number of elements of [buffer]. */
    @JvmStatic
    fun size(buffer: Buffer): Long = buffer.size

    /** A `u32` scalar argument; [value] must be in `0..4294967295`. */
    @JvmStatic
    @Throws(WeirException::class)
    fun unsignedScalar(value: Long): Arg = scalar(value.toU32("u32 scalar"))

    /** Enough groups of [block] threads along x to cover [items] items. */
    @JvmStatic
    @JvmOverloads
    @Throws(WeirException::class)
    fun linearGrid(items: Long, block: Long = 64): Grid =
        gridLinear(items.toU32("item count"), block.toU32("block size"))

    /**
     * A launch shape: [groupsX] × [groupsY] × [groupsZ] work groups of
     * [blockX] × [blockY] × [blockZ] threads (on every backend; WGSL takes it
     * through `override` constants), [sharedBytes] of dynamic shared memory (CUDA/HIP).
     */
    @JvmStatic
    @JvmOverloads
    @Throws(WeirException::class)
    fun grid(
        groupsX: Long,
        groupsY: Long = 1,
        groupsZ: Long = 1,
        blockX: Long = 1,
        blockY: Long = 1,
        blockZ: Long = 1,
        sharedBytes: Long = 0,
    ): Grid = Grid(
        groupsX.toU32("groupsX"),
        groupsY.toU32("groupsY"),
        groupsZ.toU32("groupsZ"),
        blockX.toU32("blockX"),
        blockY.toU32("blockY"),
        blockZ.toU32("blockZ"),
        sharedBytes.toU32("sharedBytes"),
    )

    /** [runtime]'s live objects and scheduler counts, as `long`s. */
    @JvmStatic
    fun diagnostics(runtime: WeirRuntime): Counts = Counts(runtime.diagnostics())

    /** Device memory in bytes where the backend knows it, else -1. */
    @JvmStatic
    fun memoryBytes(info: DeviceInfo): Long = info.memoryBytes?.toSignedOrMax() ?: -1

    /** The device's index among its backend's devices (what [open] of a [DeviceInfo] opens). */
    @JvmStatic
    fun index(info: DeviceInfo): Long = info.index.toLong()

    /** The largest buffer the device accepts, in bytes. */
    @JvmStatic
    fun maxBufferBytes(info: DeviceInfo): Long = info.maxBufferBytes.toSignedOrMax()

    /** Opens [devices] (device indices) of [backend] as a group ([DeviceGroup.Companion.open]). */
    @JvmStatic
    @Throws(WeirException::class)
    fun openGroup(backend: Backend, vararg devices: Int): DeviceGroup = DeviceGroup.open(backend, *devices)

    /** Member [index] of [group], in the order opened. */
    @JvmStatic
    @Throws(WeirException::class)
    fun device(group: DeviceGroup, index: Int): WeirRuntime = group.device(index.toLong().toU32("member index"))

    /** This process's rank in [group]: `0` unless joined. */
    @JvmStatic
    fun rank(group: DeviceGroup): Int = group.rank().toInt()

    /** How many ranks [group] has, in every process. */
    @JvmStatic
    fun ranks(group: DeviceGroup): Int = group.ranks().toInt()

    /** Enqueues a broadcast of member [root]'s buffer into every member's ([DeviceGroup.broadcast]). */
    @JvmStatic
    @Throws(WeirException::class)
    fun broadcast(group: DeviceGroup, streams: List<WeirStream>, buffers: List<Buffer>, root: Int) =
        group.broadcast(streams, buffers, root.toLong().toU32("root"))

    /** [Diagnostics] with `long` counters (a count past `Long.MAX_VALUE` reads as `Long.MAX_VALUE`). */
    class Counts internal constructor(private val counts: Diagnostics) {
        /** Fence handles alive. */
        val liveFences: Long get() = counts.liveFences.toSignedOrMax()

        /** Futures registered on, and threads blocked in, a pending completion. */
        val liveWaiters: Long get() = counts.liveWaiters.toSignedOrMax()

        /** Buffers with a live handle. */
        val liveBuffers: Long get() = counts.liveBuffers.toSignedOrMax()

        /** Released buffers whose memory waits for their last users. */
        val retiringBuffers: Long get() = counts.retiringBuffers.toSignedOrMax()

        /** Cross-stream waits the scheduler inserted. */
        val insertedWaits: Long get() = counts.insertedWaits.toSignedOrMax()

        /** Ops admitted. */
        val admittedOps: Long get() = counts.admittedOps.toSignedOrMax()

        /**
         * Backend events (CUevent, hipEvent, …) alive, beside the one a GPU
         * stream keeps for other streams to wait on.
         */
        val liveEvents: Long get() = counts.liveEvents.toSignedOrMax()

        /** Device allocations alive. */
        val liveAllocations: Long get() = counts.liveAllocations.toSignedOrMax()

        /** Host-to-device copies made so far. */
        val hostToDeviceCopies: Long get() = counts.hostToDeviceCopies.toSignedOrMax()

        /** Device-to-host copies made so far. */
        val deviceToHostCopies: Long get() = counts.deviceToHostCopies.toSignedOrMax()

        /** Conflicting overlapping accesses seen by the CPU backend's race detector. */
        val raceViolations: Long get() = counts.raceViolations.toSignedOrMax()

        /** Ops in the runtime's queue: admitted, not yet run or handed to the driver. */
        val opsInQueue: Long get() = counts.opsInQueue.toSignedOrMax()

        override fun toString(): String = counts.toString()
    }
}

/** A `u32` from Java's `long`, refused in the caller's terms when it does not fit. */
private fun Long.toU32(what: String): UInt {
    if (this < 0 || this > UInt.MAX_VALUE.toLong()) {
        throw WeirException.InvalidArgument("invalid argument: $what $this is not in 0..${UInt.MAX_VALUE}")
    }
    return toUInt()
}

private fun ULong.toSignedOrMax(): Long = if (this > Long.MAX_VALUE.toULong()) Long.MAX_VALUE else toLong()

/** An element offset from a `Long`; a negative one is refused. */
internal fun Long.toOffset(): ULong {
    if (this < 0) throw WeirException.InvalidArgument("invalid argument: negative element offset $this")
    return toULong()
}

/** A count from a `Long` ([what] it counts); a negative one is refused. */
internal fun Long.toCount(what: String = "element count"): ULong {
    if (this < 0) throw WeirException.InvalidArgument("invalid argument: negative $what $this")
    return toULong()
}
