// Shutting a runtime down: with work in flight, twice, and using it after.

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

    @Test("releasing the last Runtime reference shuts it down, after the work in flight",
          arguments: TestBackend.allCases)
    func releasingTheRuntimeShutsItDown(backend: TestBackend) async throws {
        var runtime = try backend.open()  // the only reference
        guard let stream = runtime?.defaultStream() else { return }
        try stream.delay(.milliseconds(50))
        let fence = try stream.fence()
        runtime = nil  // the Swift handle goes: Rust shuts the runtime down
        #expect(fence.isComplete(), "deinit returned before the work in flight finished")
        await expectWeirError("Closed", mentioning: ["closed"]) { try await stream.sync() }
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
        await expectWeirError("Closed", mentioning: ["closed"]) { try stream.zeros(bytes: 4) }
        await expectWeirError("Closed", mentioning: ["closed"]) { try stream.fence() }
        await expectWeirError("Closed", mentioning: ["closed"]) { try await stream.sync() }
        await expectWeirError("Closed", mentioning: ["closed"]) { try await stream.read(buffer: buffer) }
        await expectWeirError("Closed", mentioning: ["closed"]) { try await stream.memsetZero(buffer: buffer) }
        await expectWeirError("Closed", mentioning: ["closed"]) { try stream.fill(buffer, with: Float(0)) }
        #expect(runtime.info().backend == backend.backend, "info stays readable after shutdown")
    }
}
