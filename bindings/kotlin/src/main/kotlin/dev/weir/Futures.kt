package dev.weir

import kotlinx.coroutines.CoroutineName
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.ExecutorCoroutineDispatcher
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.future.future
import java.util.concurrent.CompletableFuture
import java.util.concurrent.Executor
import java.util.concurrent.ForkJoinPool

/**
 * `CompletableFuture` variants of every suspend call, for Java (and any JVM
 * code without coroutines), under the suspend calls' names. The calls that
 * only enqueue ([WeirStream.execute], [WeirStream.memsetZero], `Weir.write`,
 * `WeirBulk.write`) return once admitted and need no variant.
 *
 * Each call admits its op on the calling thread before it returns, exactly as
 * the suspend call does (so calls made one after another are admitted in that
 * order), then returns a future of the wait:
 *
 * - **Where it completes.** On the executor given as the last argument, by default
 *   `ForkJoinPool.commonPool()`, never on a Weir thread: the Rust side wakes
 *   the call on `weir-wake`, which only hands it to the executor. So
 *   dependent stages (`thenApply`, `thenRun`, …) run on the executor too, and
 *   may call any Weir API, block or wait. A call whose work is already done
 *   (an idle stream's `sync`, a complete fence) returns a completed future.
 * - **Failures.** The future completes exceptionally with the
 *   [WeirException] the suspend call throws (`join()` wraps it in a
 *   `CompletionException`, `get()` in an `ExecutionException`); bad input is
 *   refused at the call, changes nothing, and fails the returned future.
 * - **Cancellation.** `future.cancel(…)` ends the wait, as cancelling a
 *   coroutine does: the Rust side of the wait is dropped (no waiter is left;
 *   [Diagnostics.liveWaiters] goes back down), the op itself still runs. A
 *   [CancelToken] ends it with [WeirException.Cancelled] instead.
 *
 * Blocking variants are in [WeirBlocking].
 */
object WeirFutures {
    /** Where the futures complete unless an executor is given: `ForkJoinPool.commonPool()`. */
    @JvmStatic
    val defaultExecutor: Executor
        get() = ForkJoinPool.commonPool()

    /** The common pool as a dispatcher, made once. */
    private val commonPool: ExecutorCoroutineDispatcher = ForkJoinPool.commonPool().asCoroutineDispatcher()

    /**
     * The parent of every call's coroutine: a supervisor, so one call's failure
     * completes its own future and nothing else.
     */
    private val calls = CoroutineScope(SupervisorJob() + CoroutineName("weir-future"))

    /**
     * Runs [call] on this thread up to its first suspension (the admission),
     * then on [executor]; the future completes with its outcome.
     */
    private fun <T> launch(executor: Executor, call: suspend () -> T): CompletableFuture<T> {
        val dispatcher = if (executor === ForkJoinPool.commonPool()) commonPool else executor.asCoroutineDispatcher()
        return calls.future(dispatcher, CoroutineStart.UNDISPATCHED) { call() }
    }

    /** Completes once all work admitted on [stream] so far is done ([WeirStream.sync]). */
    @JvmStatic
    @JvmOverloads
    fun sync(stream: WeirStream, cancel: CancelToken? = null, executor: Executor = defaultExecutor): CompletableFuture<Void?> =
        launch(executor) { stream.sync(cancel); null }

    /** Completes once all work admitted on every stream of [runtime] so far is done ([WeirRuntime.sync]). */
    @JvmStatic
    @JvmOverloads
    fun sync(runtime: WeirRuntime, cancel: CancelToken? = null, executor: Executor = defaultExecutor): CompletableFuture<Void?> =
        launch(executor) { runtime.sync(cancel); null }

    /** Completes once the work [fence] covers is done ([Fence.await]). */
    @JvmStatic
    @JvmOverloads
    fun await(fence: Fence, cancel: CancelToken? = null, executor: Executor = defaultExecutor): CompletableFuture<Void?> =
        launch(executor) { fence.await(cancel); null }

    /** Completes with the bytes of [read] once it is done ([PendingRead.bytes]). */
    @JvmStatic
    @JvmOverloads
    fun bytes(read: PendingRead, cancel: CancelToken? = null, executor: Executor = defaultExecutor): CompletableFuture<HostBytes> =
        launch(executor) { read.bytes(cancel) }

    /** Enqueues [kernel] over [args] on [grid]; completes once [stream] has run it ([WeirStream.executeAndWait]). */
    @JvmStatic
    @JvmOverloads
    fun executeAndWait(
        stream: WeirStream,
        kernel: Kernel,
        grid: Grid,
        args: List<Arg>,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> = launch(executor) { stream.executeAndWait(kernel, grid, args, cancel); null }

    /** Enqueues the built-in [op] over [args]; completes once [stream] has run it. */
    @JvmStatic
    @JvmOverloads
    fun executeAndWait(
        stream: WeirStream,
        op: BuiltinOp,
        args: List<Arg>,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> = launch(executor) { stream.executeAndWait(op, *args.toTypedArray(), cancel = cancel); null }

    /** Enqueues the built-in [op] over [args]; completes, on the default executor, once [stream] has run it. */
    @JvmStatic
    fun executeAndWait(stream: WeirStream, op: BuiltinOp, vararg args: Arg): CompletableFuture<Void?> =
        executeAndWait(stream, op, args.asList())

    /** Enqueues zeroing every byte of [buffer]; completes once [stream] has done it ([WeirStream.memsetZeroAndWait]). */
    @JvmStatic
    @JvmOverloads
    fun memsetZeroAndWait(
        stream: WeirStream,
        buffer: Buffer,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> = launch(executor) { stream.memsetZeroAndWait(buffer, cancel); null }

    /** Enqueues a copy of raw [data] into [buffer] at element [offset]; completes once [stream] has done it ([WeirStream.writeAndWait]). */
    @JvmStatic
    @JvmOverloads
    fun writeAndWait(
        stream: WeirStream,
        buffer: Buffer,
        data: ByteArray,
        offset: Long = 0,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> = launch(executor) { stream.writeAndWait(buffer, data, offset, cancel); null }

    /** Enqueues writing [data] into [buffer] at element [offset] (reported in elements when bad); completes once done. */
    @JvmStatic
    @JvmOverloads
    fun writeAndWait(
        stream: WeirStream,
        buffer: Buffer,
        data: FloatArray,
        offset: Long = 0,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> = launch(executor) { stream.writeAndWait(buffer, data, offset, cancel); null }

    /** Enqueues writing [data] into [buffer] at element [offset] (reported in elements when bad); completes once done. */
    @JvmStatic
    @JvmOverloads
    fun writeAndWait(
        stream: WeirStream,
        buffer: Buffer,
        data: IntArray,
        offset: Long = 0,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> = launch(executor) { stream.writeAndWait(buffer, data, offset, cancel); null }

    /** The bytes of [buffer] once its latest write (on any stream) is done ([WeirStream.read]). */
    @JvmStatic
    @JvmOverloads
    fun read(
        stream: WeirStream,
        buffer: Buffer,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<ByteArray> = launch(executor) { stream.read(buffer, cancel = cancel) }

    /** The bytes of [length] elements of [buffer] from element [offset] once its latest write (on any stream) is done ([WeirStream.read]). */
    @JvmStatic
    @JvmOverloads
    fun read(
        stream: WeirStream,
        buffer: Buffer,
        offset: Long,
        length: Long,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<ByteArray> =
        launch(executor) { stream.read(buffer, offset.toOffset(), length.toCount(), cancel) }

    /** [buffer] as `f32`s once its latest write (on any stream) is done ([readFloats]). */
    @JvmStatic
    @JvmOverloads
    fun readFloats(
        stream: WeirStream,
        buffer: Buffer,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<FloatArray> = launch(executor) { stream.readFloats(buffer, cancel) }

    /** [buffer] as 32-bit integers once its latest write (on any stream) is done ([readInts]). */
    @JvmStatic
    @JvmOverloads
    fun readInts(
        stream: WeirStream,
        buffer: Buffer,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<IntArray> = launch(executor) { stream.readInts(buffer, cancel) }

    /** Copies [source] (a buffer of another member of a group) into [destination]; completes once [stream] has done it. */
    @JvmStatic
    @JvmOverloads
    fun copyFromPeerAndWait(
        stream: WeirStream,
        source: Buffer,
        destination: Buffer,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> = launch(executor) { stream.copyFromPeerAndWait(source, destination, cancel); null }

    /** Completes once all work admitted on every member of [group] so far is done ([DeviceGroup.sync]). */
    @JvmStatic
    @JvmOverloads
    fun sync(group: DeviceGroup, cancel: CancelToken? = null, executor: Executor = defaultExecutor): CompletableFuture<Void?> =
        launch(executor) { group.sync(cancel); null }

    /** Enqueues an all-reduce with [op] over [buffers] (one per member, in place); completes once every stream has run it. */
    @JvmStatic
    @JvmOverloads
    fun allReduceAndWait(
        group: DeviceGroup,
        streams: List<WeirStream>,
        buffers: List<Buffer>,
        op: ReduceOp,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> = launch(executor) { group.allReduceAndWait(streams, buffers, op, cancel); null }

    /** Enqueues a broadcast of member [root]'s buffer into every member's; completes once every stream has run it. */
    @JvmStatic
    @JvmOverloads
    fun broadcastAndWait(
        group: DeviceGroup,
        streams: List<WeirStream>,
        buffers: List<Buffer>,
        root: Int,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> =
        launch(executor) { group.broadcastAndWait(streams, buffers, root.toLong().toCount("root").toUInt(), cancel); null }

    /** Enqueues an all-gather of [sends] into [receives]; completes once every stream has run it. */
    @JvmStatic
    @JvmOverloads
    fun allGatherAndWait(
        group: DeviceGroup,
        streams: List<WeirStream>,
        sends: List<Buffer>,
        receives: List<Buffer>,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> = launch(executor) { group.allGatherAndWait(streams, sends, receives, cancel); null }

    /** Enqueues a reduce-scatter with [op] of [sends] into [receives]; completes once every stream has run it. */
    @JvmStatic
    @JvmOverloads
    fun reduceScatterAndWait(
        group: DeviceGroup,
        streams: List<WeirStream>,
        sends: List<Buffer>,
        receives: List<Buffer>,
        op: ReduceOp,
        cancel: CancelToken? = null,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<Void?> =
        launch(executor) { group.reduceScatterAndWait(streams, sends, receives, op, cancel); null }

    /**
     * Joins the group [id] names as [rank] of [ranks] with [device] of this process
     * ([DeviceGroup.Companion.join]); completes with the group once every rank has joined.
     * The wait runs on a thread of Weir's own and cannot be cancelled.
     */
    @JvmStatic
    @JvmOverloads
    fun join(
        backend: Backend,
        device: Int,
        id: GroupId,
        ranks: Int,
        rank: Int,
        executor: Executor = defaultExecutor,
    ): CompletableFuture<DeviceGroup> = launch(executor) { DeviceGroup.join(backend, device, id, ranks, rank) }
}
