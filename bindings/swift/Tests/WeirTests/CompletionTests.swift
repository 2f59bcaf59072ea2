// Awaiting completions: sync, the enqueue and AndWait forms, read/write, fences.

import Foundation
import Testing
import Weir

@Suite("Completions")
struct CompletionTests {
    @Test("a runtime opens on the backend asked for and describes its device", arguments: TestBackend.allCases)
    func opensOnTheBackendAskedFor(backend: TestBackend) throws {
        guard let runtime = try backend.open() else { return }
        let info = runtime.info()
        print("\(backend): \(info.name), buffers up to \(info.maxBufferBytes) bytes")
        #expect(info.backend == backend.backend)
        #expect(!info.name.isEmpty)
        #expect(info.maxBufferBytes > 0)
        #expect(runtime.defaultStream().index() == 0)
        #expect(try runtime.newStream().index() == 1)
    }

    @Test("sync() returns once everything admitted on the stream is done", arguments: TestBackend.allCases)
    func syncWaitsForAdmittedWork(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        try await stream.sync()  // idle: answers at once

        let buffer = try stream.zeros(count: 1024, of: Float.self)
        let gate = try Gate(stream)
        try stream.fill(buffer, with: 7.5)
        let fence = try stream.fence()
        #expect(!fence.isComplete(), "the fill sits behind the gate")
        gate.release()
        try await stream.sync()
        #expect(fence.isComplete(), "sync() returned before the fill finished")
        #expect(try await stream.read(buffer, as: Float.self) == [Float](repeating: 7.5, count: 1024))
    }

    @Test("an idle stream's sync() answers without a Rust future", arguments: TestBackend.allCases)
    func idleSyncMakesNoFuture(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = try runtime.newStream()
        try await stream.sync()
        #expect(await eventually { stream.isSynced() }, "the idle stream never said it is synced")
        let futures = stream.debugFutureWaits()
        for _ in 0..<1_000 { try await stream.sync() }
        #expect(stream.debugFutureWaits() == futures, "an idle sync() waited through a Rust future")
        try await stream.sync(cancel: CancelToken())  // a token: the generated call
        #expect(stream.debugFutureWaits() == futures + 1, "a sync(cancel:) made no Rust future")
    }

    @Test("WeirRuntime.sync() covers every stream", arguments: TestBackend.allCases)
    func runtimeSyncCoversEveryStream(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (a, b) = (runtime.defaultStream(), try runtime.newStream())
        let (x, y) = (try a.zeros(count: 256, of: UInt32.self), try b.zeros(count: 256, of: UInt32.self))
        let gates = (try Gate(a), try Gate(b))
        try a.fill(x, with: UInt32(3))
        try b.fill(y, with: UInt32(4))
        let (fa, fb) = (try a.fence(), try b.fence())
        gates.0.release()
        gates.1.release()
        try await runtime.sync()
        #expect(fa.isComplete() && fb.isComplete())
    }

    @Test("executeAndWait returns once the kernel has run, with its exact result", arguments: TestBackend.allCases)
    func executeAndWaitRunsTheKernel(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let n: UInt32 = 10_000
        let out = try stream.zeros(count: Int(n), of: UInt32.self)
        let gate = try Gate(stream, fallback: .milliseconds(300))
        let returned = Flag()
        let started = ContinuousClock.now
        let running = Task {
            try await stream.executeAndWait(
                kernel: Kernel.builtin(op: .iota), grid: gridLinear(items: n, block: 64),
                args: [.write(out), .u32(value: 100)])
            returned.set()
        }
        if gate.isHeld {
            try await Task.sleep(for: .milliseconds(50))
            #expect(!returned.isSet, "executeAndWait returned while its kernel was held")
            gate.release()
        }
        try await running.value
        if !gate.isHeld {
            #expect(seconds(since: started) >= 0.25, "executeAndWait returned before the delay ahead of it ran")
        }
        #expect(try await stream.read(out, as: UInt32.self) == Array(100..<(100 + n)))
    }

    @Test("plain verbs return once admitted, their AndWait forms once the stream has run them",
          arguments: TestBackend.allCases)
    func plainVerbsEnqueueAndWaitFormsWait(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = try runtime.newStream()
        let values = try stream.upload([1, 2, 3, 4] as [UInt32])
        let copy = try stream.zeros(count: 4, of: UInt32.self)
        let gate = try Gate(stream, fallback: .milliseconds(300))
        try stream.write([7] as [UInt32], to: values, at: 1)
        try stream.execute(kernel: Kernel.builtin(op: .copy), grid: Grid(), args: [.read(values), .write(copy)])
        try stream.memsetZero(buffer: values)
        let fence = try stream.fence()
        #expect(!fence.isComplete(), "an enqueued op ran past a held stream")
        let returned = Flag()
        let waiting = Task {
            try await stream.writeAndWait([5] as [UInt32], to: copy, at: 3)
            try await stream.executeAndWait(kernel: Kernel.builtin(op: .fillU32), grid: Grid(),
                                            args: [.write(values), .u32(value: 9)])
            try await stream.memsetZeroAndWait(buffer: values)
            returned.set()
        }
        if gate.isHeld {
            try await Task.sleep(for: .milliseconds(50))
            #expect(!returned.isSet, "an AndWait call returned while its stream was held")
            gate.release()
        }
        try await waiting.value
        #expect(fence.isComplete(), "an AndWait call returned before the work ahead of it")
        #expect(try await stream.read(copy, as: UInt32.self) == [1, 7, 3, 5])
        #expect(try await stream.read(values, as: UInt32.self) == [0, 0, 0, 0])
    }

    @Test("memsetZero clears a dirty buffer, after its write on another stream", arguments: TestBackend.allCases)
    func memsetZeroClearsADirtyBuffer(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (a, b) = (runtime.defaultStream(), try runtime.newStream())
        let dirty = try a.upload(counting(4096))
        #expect(try await a.read(dirty, as: Float.self) == counting(4096))

        // A second write on `a`, held back: the memset on `b` must come after it.
        let gate = try Gate(a)
        try a.fill(dirty, with: Float(-1))
        let zeroing = Task { try await b.memsetZeroAndWait(buffer: dirty) }
        gate.release()
        try await zeroing.value
        #expect(try await b.read(dirty, as: Float.self) == [Float](repeating: 0, count: 4096))
        #expect(try await a.read(dirty, as: Float.self) == [Float](repeating: 0, count: 4096))
    }

    @Test("write and read round-trip Float, UInt32 and Int32, at offsets", arguments: TestBackend.allCases)
    func writeAndReadRoundTrip(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = try runtime.newStream()

        let floats = try stream.zeros(count: 8, of: Float.self)
        try stream.write([1.5, -2.25, 3e-7] as [Float], to: floats, at: 2)
        #expect(try await stream.read(floats, as: Float.self) == [0, 0, 1.5, -2.25, 3e-7, 0, 0, 0])

        let words = try stream.upload([UInt32.max, 0, 42] as [UInt32])
        try stream.write([7] as [UInt32], to: words, at: 1)
        #expect(try await stream.read(words, as: UInt32.self) == [UInt32.max, 7, 42])

        let signed = try stream.empty(count: 3, of: Int32.self)
        try stream.write([Int32.min, -1, Int32.max], to: signed)
        #expect(try await stream.read(signed, as: Int32.self) == [Int32.min, -1, Int32.max])
        #expect(signed.count == 3 && signed.elementType == .i32)

        // Raw bytes, through the generated API (offsets and lengths in the buffer's elements: bytes).
        let raw = try stream.upload(data: Data([1, 2, 3, 4]), element: .bytes)
        try stream.write(buffer: raw, data: Data([9, 9]), element: .bytes, offset: 1)
        #expect(try await stream.read(buffer: raw) == Data([1, 9, 9, 4]))
        #expect(try await stream.read(buffer: raw, offset: 1, length: 2) == Data([9, 9]))
        #expect(try stream.readBlocking(buffer: raw, offset: 2) == Data([9, 4]))
    }

    @Test("one fence is awaited by many Tasks and waited by threads", arguments: TestBackend.allCases)
    func aFenceIsAwaitedAndWaitedManyTimes(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let buffer = try stream.zeros(count: 64, of: UInt32.self)
        let gate = try Gate(stream)
        try stream.fill(buffer, with: UInt32(11))
        let fence = try stream.fence()

        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<16 {
                group.addTask { try await fence.await() }
            }
            for _ in 0..<2 {
                group.addTask { try await onThread { try fence.waitBlocking() } }
            }
            if gate.isHeld {
                let parked = await eventually { runtime.diagnostics().liveWaiters >= 18 }
                #expect(parked, "16 awaiting Tasks and 2 blocked threads should be waiting")
                #expect(!fence.isComplete())
            }
            gate.release()
            try await group.waitForAll()
        }
        #expect(fence.isComplete())
        try await fence.await()  // again, already complete
        try fence.waitBlocking()
        #expect(try await stream.read(buffer, as: UInt32.self) == [UInt32](repeating: 11, count: 64))
        #expect(runtime.diagnostics().liveWaiters == 0)
    }
}
