package dev.weir.java;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

// On-demand, as an application would: no Weir name hides one of java.lang.
import dev.weir.*;

/**
 * The Java surface, used from Java as an application would (outside the
 * package): futures, blocking calls, typed exceptions, cancellation.
 */
class JavaApiTest {
    private static final String BACKENDS = "dev.weir.Backends#names";
    private static final long TIMEOUT_SECONDS = 20;

    /** A test body on one runtime. */
    private interface OnRuntime {
        void run(WeirRuntime runtime) throws Exception;
    }

    /** Runs {@code body} on a fresh runtime of {@code backend}, shut down and closed afterwards. */
    private static void onRuntime(String backend, OnRuntime body) throws Exception {
        try (WeirRuntime runtime = Backends.open(backend)) {
            body.run(runtime);
            runtime.shutdown();
        }
    }

    /** The future's value, failing the test instead of hanging it. */
    private static <T> T within(CompletableFuture<T> future) {
        return future.orTimeout(TIMEOUT_SECONDS, TimeUnit.SECONDS).join();
    }

    @Test
    void listsDevicesAndOpensEachAsListed() throws WeirException {
        List<DeviceInfo> devices = WeirJava.devices();
        assertEquals(1, devices.stream().filter(d -> d.getBackend() == Backend.CPU).count());
        for (DeviceInfo device : devices) {
            try (WeirRuntime runtime = WeirJava.open(device)) {
                assertEquals(device, runtime.info());
                // Listed in index order within its backend.
                long listed = devices.stream().filter(d -> d.getBackend() == device.getBackend()).toList().indexOf(device);
                assertEquals(listed, WeirJava.index(device));
                runtime.shutdown();
            }
        }
    }

    @Test
    void opensARuntimeAndRunsAJobWithoutTouchingKotlinTypes() throws WeirException {
        try (WeirRuntime runtime = WeirJava.open(Backend.CPU)) {
            assertEquals(Backend.CPU, runtime.info().getBackend());
            assertTrue(WeirJava.maxBufferBytes(runtime.info()) > 0);
            WeirStream s = runtime.defaultStream();
            WeirStream t = runtime.newStream();
            assertEquals(0, WeirJava.index(s));
            assertEquals(1, WeirJava.index(t));
            Buffer x = Weir.upload(s, new float[] {1f, 2f, 3f});
            Buffer y = Weir.zeros(s, 3, ElementType.F32);
            assertEquals(3, WeirJava.size(y));
            assertEquals(12, WeirJava.sizeBytes(y));
            Buffer out = Weir.empty(t, 3, ElementType.F32);
            CompletableFuture<Void> axpy =
                    WeirFutures.executeAndWait(s, BuiltinOp.AXPY, Weir.reads(x), Weir.readsWrites(y), Weir.scalar(2f));
            CompletableFuture<Void> add = WeirFutures.executeAndWait(t, BuiltinOp.ADD, Weir.reads(x), Weir.reads(y), Weir.writes(out));
            within(CompletableFuture.allOf(axpy, add));
            assertArrayEquals(new float[] {3f, 6f, 9f}, within(WeirFutures.readFloats(t, out)));
            within(WeirFutures.sync(runtime));
            runtime.shutdown();
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    void uploadExecuteAndSyncThroughFutures(String backend) throws Exception {
        onRuntime(backend, runtime -> {
            WeirStream stream = runtime.defaultStream();
            Buffer buffer = Weir.zeros(stream, 64, ElementType.U32);
            within(WeirFutures.executeAndWait(stream, BuiltinOp.FILL_U32, List.of(Weir.writes(buffer), WeirJava.unsignedScalar(7))));
            int[] sevens = within(WeirFutures.readInts(stream, buffer));
            assertEquals(64, sevens.length);
            for (int value : sevens) assertEquals(7, value);
            within(WeirFutures.writeAndWait(stream, buffer, new int[] {1, 2}, 62L));
            within(WeirFutures.writeAndWait(stream, buffer, new byte[] {9, 0, 0, 0}, 0L)); // raw bytes go anywhere
            int[] written = within(WeirFutures.readInts(stream, buffer));
            assertEquals(9, written[0]);
            assertEquals(7, written[1]);
            assertEquals(2, written[63]);
            within(WeirFutures.memsetZeroAndWait(stream, buffer));
            assertArrayEquals(new byte[4 * 64], within(WeirFutures.read(stream, buffer)));
            try (Fence fence = stream.fence()) {
                within(WeirFutures.await(fence));
                assertTrue(fence.isComplete());
            }
            within(WeirFutures.sync(stream));
        });
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    void aFutureCompletesOnItsExecutorNeverOnAWeirThread(String backend) throws Exception {
        ExecutorService executor = Executors.newSingleThreadExecutor(r -> new Thread(r, "java-test-executor"));
        try {
            onRuntime(backend, runtime -> {
                WeirStream stream = runtime.newStream();
                try (Blocker blocker = new Blocker(stream)) {
                    CompletableFuture<Void> given = WeirFutures.sync(stream, null, executor);
                    CompletableFuture<Void> common = WeirFutures.sync(stream);
                    // Registered before completion: these run on the completing thread.
                    CompletableFuture<String> givenThread = given.thenApply(v -> Thread.currentThread().getName());
                    CompletableFuture<String> commonThread = common.thenApply(v -> Thread.currentThread().getName());
                    assertFalse(given.isDone(), "a held stream cannot be synced yet");
                    blocker.release();
                    // (Under -ea, kotlinx.coroutines' debug mode appends the coroutine's name.)
                    String givenName = within(givenThread);
                    assertTrue(givenName.startsWith("java-test-executor"), "completed on " + givenName);
                    String commonName = within(commonThread);
                    assertTrue(commonName.startsWith("ForkJoinPool.commonPool"), "completed on " + commonName);
                    assertFalse(commonName.startsWith(WakerThreads.THREAD_NAME));
                }
            });
        } finally {
            executor.shutdownNow();
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    void blockingVariantsReturnOnceDone(String backend) throws Exception {
        onRuntime(backend, runtime -> {
            WeirStream stream = runtime.defaultStream();
            Buffer x = Weir.upload(stream, new float[] {1f, 2f, 3f, 4f});
            Buffer y = Weir.upload(stream, new float[] {10f, 20f, 30f, 40f});
            WeirBlocking.executeAndWait(stream, BuiltinOp.AXPY, Weir.reads(x), Weir.readsWrites(y), Weir.scalar(3f));
            assertArrayEquals(new float[] {13f, 26f, 39f, 52f}, WeirBlocking.readFloats(stream, y));
            WeirBlocking.writeAndWait(stream, y, new float[] {-1f}, 3L);
            assertArrayEquals(new float[] {13f, 26f, 39f, -1f}, WeirBlocking.readFloats(stream, y));
            // Element 1 of y: 26f, little-endian.
            byte[] second = WeirBlocking.read(stream, y, 1, 1);
            assertEquals(26f, Float.intBitsToFloat(
                    (second[0] & 0xff) | (second[1] & 0xff) << 8 | (second[2] & 0xff) << 16 | (second[3] & 0xff) << 24));
            Buffer grid = Weir.zeros(stream, 4, ElementType.U32);
            WeirBlocking.executeAndWait(
                    stream, Weir.kernel(BuiltinOp.FILL_U32), WeirJava.linearGrid(4), List.of(Weir.writes(grid), WeirJava.unsignedScalar(3)));
            assertArrayEquals(new int[] {3, 3, 3, 3}, WeirBlocking.readInts(stream, grid));
            WeirBlocking.memsetZeroAndWait(stream, grid);
            assertArrayEquals(new int[4], WeirBlocking.readInts(stream, grid));
            // Host bytes from Java: an upload from them, and reads admitted now, awaited both ways.
            try (HostBytes host = WeirBulk.hostBytes(runtime, new float[] {5f, 6f, 7f, 8f})) {
                WeirBulk.writeHost(stream, y, host);
            }
            try (PendingRead blocking = WeirBulk.enqueueRead(stream, y); PendingRead future = WeirBulk.enqueueRead(stream, y);
                    HostBytes blocked = WeirBlocking.bytes(blocking); HostBytes awaited = within(WeirFutures.bytes(future))) {
                assertEquals(16, WeirBulk.asByteBuffer(blocked).remaining());
                float[] back = new float[4];
                WeirBulk.asByteBuffer(awaited).asFloatBuffer().get(back);
                assertArrayEquals(new float[] {5f, 6f, 7f, 8f}, back);
                float[] copied = new float[2];
                WeirBulk.copyInto(blocked, copied, 8L);
                assertArrayEquals(new float[] {7f, 8f}, copied);
            }
            // Byte buffers from Java: their remaining bytes, from the position, heap or direct.
            java.nio.ByteBuffer heap = java.nio.ByteBuffer.allocate(12).order(java.nio.ByteOrder.LITTLE_ENDIAN);
            heap.putFloat(0f).putFloat(9f).putFloat(10f).position(4);
            try (HostBytes host = WeirBulk.hostBytes(runtime, heap)) {
                assertEquals(8, WeirBulk.asByteBuffer(host).remaining());
                WeirBulk.writeHost(stream, y, host, 2L);
            }
            java.nio.ByteBuffer direct = java.nio.ByteBuffer.allocateDirect(8).order(java.nio.ByteOrder.LITTLE_ENDIAN);
            direct.putFloat(0f).putFloat(11f).position(4);
            WeirBulk.write(stream, y, direct);
            assertArrayEquals(new float[] {11f, 6f, 9f, 10f}, WeirBlocking.readFloats(stream, y));
            Weir.execute(stream, BuiltinOp.DELAY, WeirJava.unsignedScalar(20_000));
            try (Fence fence = stream.fence()) {
                WeirBlocking.sync(runtime);
                assertTrue(fence.isComplete(), "the runtime's sync returned before the stream's work was done");
            }
        });
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    void plainVerbsEnqueueFromJavaAndReturnBeforeTheWorkIsDone(String backend) throws Exception {
        onRuntime(backend, runtime -> {
            WeirStream stream = runtime.defaultStream();
            Buffer floats = Weir.zeros(stream, 4, ElementType.F32);
            Buffer bytes = Weir.zeros(stream, 8, ElementType.BYTES);
            Buffer cleared = Weir.upload(stream, new int[] {1, 2});
            Buffer doubled = Weir.zeros(stream, 4, ElementType.F32);
            try (Blocker blocker = new Blocker(stream)) {
                Weir.write(stream, floats, new float[] {1.5f, 2.5f}, 2L);
                Weir.write(stream, bytes, new byte[] {7, 0, 0, 0}, 4L);
                stream.memsetZero(cleared);
                Weir.execute(stream, BuiltinOp.SCALE, Weir.reads(floats), Weir.writes(doubled), Weir.scalar(2f));
                try (Fence fence = stream.fence()) {
                    assertFalse(fence.isComplete(), "an enqueued op ran past a held stream");
                    blocker.release();
                    WeirBlocking.sync(stream);
                    assertTrue(fence.isComplete());
                }
            }
            assertArrayEquals(new float[] {0f, 0f, 1.5f, 2.5f}, WeirBlocking.readFloats(stream, floats));
            assertArrayEquals(new float[] {0f, 0f, 3f, 5f}, WeirBlocking.readFloats(stream, doubled));
            assertArrayEquals(new byte[] {7, 0, 0, 0}, within(WeirFutures.read(stream, bytes, 4, 4)));
            assertArrayEquals(new int[2], WeirBlocking.readInts(stream, cleared));
        });
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    void typedExceptionsAreCaughtInJavaAndTheRuntimeStaysUsable(String backend) throws Exception {
        onRuntime(backend, runtime -> {
            WeirStream stream = runtime.defaultStream();
            try {
                Weir.zeros(stream, -1, ElementType.F32);
                fail("a negative size was accepted");
            } catch (WeirException.InvalidArgument e) {
                assertTrue(e.getMessage().contains("negative"), e.getMessage());
            } catch (WeirException e) {
                fail("expected InvalidArgument, got " + e);
            }
            try {
                WeirJava.unsignedScalar(-1);
                fail("a negative u32 was accepted");
            } catch (WeirException e) {
                assertInstanceOf(WeirException.InvalidArgument.class, e);
            }
            try {
                Buffer small = Weir.zeros(stream, 8, ElementType.BYTES);
                WeirBlocking.read(stream, small, 4, 8);
                fail("a read past the end was accepted");
            } catch (WeirException.OutOfRange e) {
                assertTrue(e.getMessage().length() > 0);
            } catch (WeirException e) {
                fail("expected OutOfRange, got " + e);
            }
            Buffer small = Weir.zeros(stream, 2, ElementType.F32);
            // A future of bad input fails with the typed exception; nothing was changed.
            CompletionException failed = assertThrows(
                    CompletionException.class, () -> within(WeirFutures.writeAndWait(stream, small, new float[] {1f, 2f}, 1L)));
            assertInstanceOf(WeirException.OutOfRange.class, failed.getCause());
            assertTrue(failed.getCause().getMessage().contains("f32 elements at offset 1"), failed.getCause().getMessage());
            assertArrayEquals(new float[2], within(WeirFutures.readFloats(stream, small)));
            CompletionException negative = assertThrows(
                    CompletionException.class, () -> within(WeirFutures.writeAndWait(stream, small, new byte[4], -4L)));
            assertInstanceOf(WeirException.InvalidArgument.class, negative.getCause());
            within(WeirFutures.writeAndWait(stream, small, new float[] {5f, 6f}));
            assertArrayEquals(new float[] {5f, 6f}, WeirBlocking.readFloats(stream, small));
        });
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    void cancellingFuturesLeavesNoLiveWaiterAndTheWorkStillRuns(String backend) throws Exception {
        onRuntime(backend, runtime -> {
            WeirStream stream = runtime.defaultStream();
            try (Blocker blocker = new Blocker(stream)) {
                Buffer buffer = Weir.zeros(stream, 4, ElementType.U32);
                Fence fence = stream.fence();
                Arg five = WeirJava.unsignedScalar(5);
                List<java.util.function.Supplier<CompletableFuture<?>>> waits = List.of(
                        () -> WeirFutures.sync(stream),
                        () -> WeirFutures.memsetZeroAndWait(stream, buffer),
                        () -> WeirFutures.executeAndWait(stream, BuiltinOp.FILL_U32, Weir.writes(buffer), five),
                        () -> WeirFutures.read(stream, buffer),
                        () -> WeirFutures.await(fence));
                List<CompletableFuture<?>> futures = new java.util.ArrayList<>();
                for (var wait : waits) {
                    futures.add(wait.get());
                    long expected = futures.size();
                    BackendsKt.eventually(5_000, expected + " registered waiters",
                            () -> WeirJava.diagnostics(runtime).getLiveWaiters() == expected);
                }
                for (CompletableFuture<?> future : futures) assertTrue(future.cancel(false));
                for (CompletableFuture<?> future : futures) assertTrue(future.isCancelled());
                BackendsKt.eventually(5_000, "no live waiter", () -> WeirJava.diagnostics(runtime).getLiveWaiters() == 0);
                fence.close();
                assertEquals(0, WeirJava.diagnostics(runtime).getLiveFences());
                blocker.release();
                WeirBlocking.sync(stream);
                // Only the waits were cancelled: the last op admitted, the fill, ran.
                assertArrayEquals(new int[] {5, 5, 5, 5}, WeirBlocking.readInts(stream, buffer));
            }
        });
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource(BACKENDS)
    void aCancelTokenFailsTheFutureWithCancelled(String backend) throws Exception {
        onRuntime(backend, runtime -> {
            WeirStream stream = runtime.defaultStream();
            try (Blocker blocker = new Blocker(stream); CancelToken token = new CancelToken()) {
                CompletableFuture<Void> wait = WeirFutures.sync(stream, token);
                BackendsKt.eventually(5_000, "a registered waiter", () -> WeirJava.diagnostics(runtime).getLiveWaiters() == 1);
                token.cancel();
                CompletionException failed = assertThrows(CompletionException.class, () -> within(wait));
                assertInstanceOf(WeirException.Cancelled.class, failed.getCause());
                assertEquals(0, WeirJava.diagnostics(runtime).getLiveWaiters());
                blocker.release();
                WeirBlocking.sync(stream);
            }
        });
    }

    @Test
    void groupsRunCollectivesAndPeerCopiesFromJava() throws Exception {
        DeviceGroup group = WeirJava.openGroup(Backend.CPU, 0, 1);
        try {
            assertEquals(0, WeirJava.rank(group));
            assertEquals(2, WeirJava.ranks(group));
            List<WeirStream> streams = List.of(WeirJava.device(group, 0).newStream(), WeirJava.device(group, 1).newStream());
            List<Buffer> buffers = List.of(
                    Weir.upload(streams.get(0), new float[] {1f, 2f}),
                    Weir.upload(streams.get(1), new float[] {10f, 20f}));
            within(WeirFutures.allReduceAndWait(group, streams, buffers, ReduceOp.SUM));
            assertArrayEquals(new float[] {11f, 22f}, WeirBlocking.readFloats(streams.get(1), buffers.get(1)));
            within(WeirFutures.broadcastAndWait(group, streams, buffers, 1));
            Buffer copy = Weir.zeros(streams.get(0), 2, ElementType.F32);
            within(WeirFutures.copyFromPeerAndWait(streams.get(0), buffers.get(1), copy));
            assertArrayEquals(new float[] {11f, 22f}, WeirBlocking.readFloats(streams.get(0), copy));
            within(WeirFutures.sync(group));
            WeirBlocking.sync(group);
            assertThrows(WeirException.InvalidArgument.class, () -> WeirJava.broadcast(group, streams, buffers, 2));
        } finally {
            group.shutdown();
            group.close();
        }
    }

    @Test
    void twoRanksJoinThroughAGroupIdFromJava() throws Exception {
        try (GroupId id = new GroupId(Backend.CPU); GroupId theirs = GroupId.Companion.fromBytes(id.toBytes())) {
            CompletableFuture<DeviceGroup> first = WeirFutures.join(Backend.CPU, 0, id, 2, 0);
            DeviceGroup second = WeirBlocking.join(Backend.CPU, 0, theirs, 2, 1);
            DeviceGroup joined = within(first);
            try {
                assertEquals(1, WeirJava.rank(second));
                List<DeviceGroup> groups = List.of(joined, second);
                List<CompletableFuture<Void>> sums = new java.util.ArrayList<>();
                List<WeirStream> streams = new java.util.ArrayList<>();
                List<Buffer> buffers = new java.util.ArrayList<>();
                for (int rank = 0; rank < 2; rank++) {
                    WeirStream stream = WeirJava.device(groups.get(rank), 0).newStream();
                    Buffer buffer = Weir.upload(stream, new int[] {rank + 1, 5});
                    streams.add(stream);
                    buffers.add(buffer);
                    sums.add(WeirFutures.allReduceAndWait(groups.get(rank), List.of(stream), List.of(buffer), ReduceOp.MAX));
                }
                sums.forEach(JavaApiTest::within);
                for (int rank = 0; rank < 2; rank++) {
                    assertArrayEquals(new int[] {2, 5}, WeirBlocking.readInts(streams.get(rank), buffers.get(rank)));
                }
            } finally {
                for (DeviceGroup group : List.of(joined, second)) {
                    group.shutdown();
                    group.close();
                }
            }
        }
    }

    /** What a Java CPU kernel keeps of its arguments never reaches device memory; asking them later throws. */
    @Test
    void aJavaCpuKernelsKeptBuffersNeverReachDeviceMemory() throws Exception {
        try (WeirRuntime runtime = WeirJava.open(Backend.CPU)) {
            WeirStream stream = runtime.defaultStream();
            java.nio.FloatBuffer[] kept = new java.nio.FloatBuffer[1];
            CpuKernelArgs[] keptArgs = new CpuKernelArgs[1];
            CpuKernelBody body = WeirCpuKernels.cpuKernel(args -> {
                keptArgs[0] = args;
                kept[0] = args.floats(0);
                kept[0].put(0, 1f);
            });
            try (Kernel kernel = Kernel.Companion.custom("keeper", null, null, null, body, null, null)) {
                Buffer out = Weir.zeros(stream, 4, ElementType.F32);
                WeirBlocking.executeAndWait(stream, kernel, WeirJava.linearGrid(4, 4), List.of(Weir.writes(out)));
                assertArrayEquals(new float[] {1f, 0f, 0f, 0f}, WeirBlocking.readFloats(stream, out));
                kept[0].put(1, 42f);
                assertArrayEquals(new float[] {1f, 0f, 0f, 0f}, WeirBlocking.readFloats(stream, out), "a write after return was seen");
                assertThrows(WeirException.InvalidArgument.class, () -> keptArgs[0].floats(0));
                out.close();
                kept[0].put(2, 44f);
            }
            runtime.shutdown();
        }
    }

    @Test
    void aJavaAdmissionBlocksWhileTheQueueIsFullAndANonWaitingOneThrows() throws Exception {
        try (WeirRuntime runtime = WeirJava.open(Backend.CPU, 2, 1 << 20)) {
            WeirStream stream = runtime.newStream();
            Buffer buffer = Weir.zeros(stream, 4, ElementType.F32);
            WeirBlocking.sync(stream);
            Hold hold = stream.hold();
            stream.memsetZero(buffer);
            stream.memsetZero(buffer);
            try (WeirStream eager = stream.withoutWaiting()) {
                WeirException.QueueFull full =
                        assertThrows(WeirException.QueueFull.class, () -> eager.memsetZero(buffer));
                assertTrue(full.getMessage().contains("queue is full"), full.getMessage());
            }
            assertEquals(2, WeirJava.diagnostics(runtime).getOpsInQueue());
            Thread producer = new Thread(() -> {
                try {
                    Weir.write(stream, buffer, new float[] {5f, 6f, 7f, 8f});
                } catch (WeirException e) {
                    throw new RuntimeException(e);
                }
            });
            producer.start();
            producer.join(200);
            assertTrue(producer.isAlive(), "a blocking admission did not wait for room");
            hold.release();
            producer.join(10_000);
            assertFalse(producer.isAlive(), "the admission never got room");
            assertArrayEquals(new float[] {5f, 6f, 7f, 8f}, WeirBlocking.readFloats(stream, buffer));
            hold.close();
            runtime.shutdown();
        }
    }

    @Test
    void aJavaCpuKernelGetsSixtyFourBitScalarsAsGiven() throws Exception {
        try (WeirRuntime runtime = WeirJava.open(Backend.CPU)) {
            WeirStream stream = runtime.defaultStream();
            Object[] seen = new Object[2];
            CpuKernelBody body = WeirCpuKernels.cpuKernel(args -> {
                seen[0] = args.scalarI64(0);
                seen[1] = args.scalarF64(1);
            });
            try (Kernel kernel = Kernel.Companion.custom("wide", null, null, null, body, null, null)) {
                WeirBlocking.executeAndWait(stream, kernel, WeirJava.linearGrid(1, 1),
                        List.of(Weir.scalar(-(1L << 40)), Weir.scalar(Math.E)));
            }
            assertEquals(-(1L << 40), seen[0]);
            assertEquals(Math.E, seen[1]);
            runtime.shutdown();
        }
    }

    /**
     * The Kotlin-written calls that throw declare it, so that Java catches
     * their typed exceptions where they are made: a catch of a checked
     * exception the try block does not declare does not compile.
     */
    @Test
    void javaCatchesTypedExceptionsOfKernelArgumentsAndBatchesWhereTheyAreMade() throws Exception {
        try (WeirRuntime runtime = WeirJava.open(Backend.CPU)) {
            WeirStream stream = runtime.defaultStream();
            String[] refused = new String[2];
            CpuKernelBody body = WeirCpuKernels.cpuKernel(args -> {
                try {
                    args.scalarF32(3);
                } catch (WeirException.InvalidArgument e) {
                    refused[0] = e.getMessage();
                }
            });
            try (Kernel kernel = Kernel.Companion.custom("asks", null, null, null, body, null, null)) {
                WeirBlocking.executeAndWait(stream, kernel, WeirJava.linearGrid(1, 1), List.of(Weir.scalar(1f)));
            }
            assertTrue(refused[0] != null && refused[0].contains("no scalar argument 3"), refused[0]);
            Buffer buffer = Weir.zeros(stream, 2, ElementType.F32);
            WeirBatch.batch(stream, batch -> {
                try {
                    batch.write(buffer, new float[] {1f}, -1L);
                } catch (WeirException.InvalidArgument e) {
                    refused[1] = e.getMessage();
                } catch (WeirException e) { // a Kotlin block cannot throw it on
                    refused[1] = "not InvalidArgument: " + e;
                }
                return kotlin.Unit.INSTANCE;
            });
            assertTrue(refused[1] != null && refused[1].contains("negative element offset"), refused[1]);
            runtime.shutdown();
        }
    }

    /**
     * A CUDA module nvcc built, loaded from its file (`WEIR_CUDA_MODULES`,
     * see ModuleFileTest): the C++ template `weir_test::affine<float>` with
     * a struct by value, a {@code double} and a {@code size_t} (a Java
     * {@code long}: CUDA checks widths). Skipped by name without CUDA.
     */
    @Test
    void aKernelFromAModuleFileRunsWithSixtyFourBitScalars() throws Exception {
        try (WeirRuntime runtime = Backends.open("cuda")) {
            String dir = System.getenv("WEIR_CUDA_MODULES");
            org.junit.jupiter.api.Assumptions.assumeTrue(dir != null,
                    "cuda modules: skipped (WEIR_CUDA_MODULES names no folder of nvcc's output)");
            byte[] image = java.nio.file.Files.readAllBytes(java.nio.file.Path.of(dir, "kernels.cubin"));
            byte[] affine = java.nio.ByteBuffer.allocate(16).order(java.nio.ByteOrder.LITTLE_ENDIAN)
                    .putDouble(2.0).putFloat(-0.5f).putInt(1).array();
            int n = 512;
            float[] xs = new float[n];
            float[] want = new float[n];
            for (int i = 0; i < n; i++) {
                xs[i] = i;
                want[i] = (float) (2.0 * i - 0.5 + 1 * 0.25);
            }
            WeirStream stream = runtime.defaultStream();
            Buffer x = Weir.upload(stream, xs);
            Buffer y = Weir.upload(stream, new float[n]);
            KernelModule module = new KernelModule(image, "weir_test::affine<float>");
            try (Kernel kernel = Kernel.Companion.custom("affine", null, null, null, null, module, null)) {
                WeirBlocking.executeAndWait(runtime.newStream(), kernel, WeirJava.linearGrid(n, 128),
                        List.of(Weir.reads(x), Weir.writes(y), Weir.structArg(affine), Weir.scalar(0.25),
                                Weir.scalar((long) n)));
            }
            assertArrayEquals(want, WeirBlocking.readFloats(stream, y));
            runtime.shutdown();
        }
    }
}
