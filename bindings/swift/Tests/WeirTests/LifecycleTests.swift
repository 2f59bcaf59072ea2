// A runtime's life: shutdown() with work in flight, from two threads, twice,
// and using it after; releasing the WeirRuntime reference, which ends nothing
// (every stream, buffer and fence keeps the runtime alive) and never blocks.

import Foundation
import Testing
import Weir

@Suite("Runtime lifecycle")
struct LifecycleTests {
    @Test("shutdown() waits for the work in flight, then releases the device", arguments: TestBackend.allCases)
    func shutdownWaitsForWorkInFlight(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let buffer = try stream.zeros(count: 1024, of: Float.self)
        try stream.delay(.milliseconds(200))
        try stream.fill(buffer, with: Float(1))
        let fence = try stream.fence()
        #expect(!fence.isComplete())
        let started = ContinuousClock.now
        try runtime.shutdown()
        #expect(seconds(since: started) >= 0.1, "shutdown returned before the delay ran")
        #expect(fence.isComplete(), "work admitted before shutdown must be done when it returns")
    }

    @Test("a Task awaiting work when the runtime shuts down still completes", arguments: TestBackend.allCases)
    func awaitersCompleteAcrossShutdown(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        try stream.delay(.milliseconds(100))
        let waiting = Task { try await stream.sync() }
        _ = await eventually { runtime.diagnostics().liveWaiters >= 1 }
        try await onThread { try runtime.shutdown() }
        try await waiting.value
    }

    @Test("releasing the last WeirRuntime reference ends nothing: it returns at once, its stream keeps working",
          arguments: TestBackend.allCases)
    func releasingTheRuntimeKeepsItsStreams(backend: TestBackend) async throws {
        var runtime = try backend.open()  // the only reference
        guard let stream = runtime?.defaultStream(), let other = try runtime?.newStream() else { return }
        let buffer = try stream.upload([Float(1), 2, 3, 4])
        try stream.delay(.seconds(2))  // long, so a busy host cannot pass for a wait
        let fence = try stream.fence()
        let released = ContinuousClock.now
        runtime = nil  // the Swift handle goes; the streams keep the runtime alive
        #expect(seconds(since: released) < 1, "releasing the WeirRuntime waited for the queued work")
        #expect(!fence.isComplete(), "the queued work cannot be done yet")
        try await fence.await()
        for round in 1...3 {
            #expect(try await other.read(buffer, as: Float.self) == [1, 2, 3, 4].map { $0 + Float(round - 1) })
            let ones = try other.upload([Float](repeating: 1, count: 4))
            try other.axpy(1, ones, buffer)  // buffer += 1
            try await other.sync()
        }
        try stream.write([Float(9), 8, 7, 6], to: buffer)
        #expect(try await stream.read(buffer, as: Float.self) == [9, 8, 7, 6])
    }

    @Test("releasing every handle of a runtime with queued work returns at once", arguments: TestBackend.allCases)
    func releasingABusyRuntimeDoesNotBlock(backend: TestBackend) async throws {
        var runtime = try backend.open()
        var stream = runtime?.defaultStream()
        var other = try runtime?.newStream()
        guard stream != nil, other != nil else { return }
        var buffer = try other?.zeros(count: 1024, of: Float.self)
        try stream?.delay(.seconds(2))
        try other?.delay(.seconds(2))
        if let buffer { try other?.fill(buffer, with: Float(1)) }
        let released = ContinuousClock.now
        runtime = nil
        stream = nil
        buffer = nil
        other = nil  // the last handle: the work drains and the device goes in the background
        #expect(seconds(since: released) < 1, "releasing the last handles waited for the queued work")
    }

    @Test("shutdown() from two threads at once: both return only after the queued work",
          arguments: TestBackend.allCases)
    func concurrentShutdownsBothWait(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        try stream.delay(.milliseconds(300))
        let fence = try stream.fence()
        async let first = onThread { try runtime.shutdown(); return fence.isComplete() }
        async let second = onThread { try runtime.shutdown(); return fence.isComplete() }
        let (a, b) = try await (first, second)
        #expect(a && b, "a shutdown() returned before the queued work was done (\(a), \(b))")
        await expectWeirError("Closed", mentioning: ["closed"]) { try stream.fence() }
    }

    @Test("shutting down twice does nothing", arguments: TestBackend.allCases)
    func shutdownTwiceDoesNothing(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        try runtime.shutdown()
        try runtime.shutdown()
        #expect(runtime.diagnostics().liveWaiters == 0)
    }

    @Test("every call after shutdown fails with Closed", arguments: TestBackend.allCases)
    func useAfterShutdownIsClosed(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let buffer = try stream.upload([Float(1), 2, 3])
        try runtime.shutdown()

        await expectWeirError("Closed", mentioning: ["closed"]) { try runtime.newStream() }
        await expectWeirError("Closed", mentioning: ["closed"]) { try runtime.fence() }
        await expectWeirError("Closed", mentioning: ["closed"]) { try await runtime.sync() }
        await expectWeirError("Closed", mentioning: ["closed"]) { try stream.zeros(count: 1, of: Float.self) }
        await expectWeirError("Closed", mentioning: ["closed"]) { try stream.fence() }
        await expectWeirError("Closed", mentioning: ["closed"]) { try await stream.sync() }
        await expectWeirError("Closed", mentioning: ["closed"]) { try await stream.read(buffer: buffer) }
        await expectWeirError("Closed", mentioning: ["closed"]) { try stream.memsetZero(buffer: buffer) }
        await expectWeirError("Closed", mentioning: ["closed"]) { try stream.fill(buffer, with: Float(0)) }
        #expect(runtime.info().backend == backend.backend, "info stays readable after shutdown")
    }
}
