// Task cancellation reaches Rust: a cancelled Task stops awaiting at once,
// throws CancellationError, and leaves no fence or waiter behind.

import Foundation
import Testing
import Weir

/// Every async call of the surface, as a wait on a held stream.
enum AsyncCall: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case streamSync, runtimeSync, fenceAwait, read, writeAndWait, executeAndWait, memsetZeroAndWait
    var testDescription: String { rawValue }

    func start(runtime: WeirRuntime, stream: WeirStream, buffer: Buffer) -> Task<Void, any Error> {
        Task {
            switch self {
            case .streamSync: try await stream.sync()
            case .runtimeSync: try await runtime.sync()
            case .fenceAwait: try await stream.fence().await()
            case .read: _ = try await stream.read(buffer: buffer)
            case .writeAndWait: try await stream.writeAndWait([Float(1)], to: buffer)
            case .executeAndWait:
                try await stream.executeAndWait(
                    kernel: Kernel.builtin(op: .fillF32), grid: Grid(), args: [.write(buffer), .f32(value: 2)])
            case .memsetZeroAndWait: try await stream.memsetZeroAndWait(buffer: buffer)
            }
        }
    }
}

@Suite("Cancellation")
struct CancellationTests {
    static let cases = TestBackend.allCases.flatMap { backend in AsyncCall.allCases.map { (backend, $0) } }

    @Test("Task.cancel() ends a gated wait promptly with CancellationError and leaks nothing",
          arguments: cases)
    func cancellingTheTaskEndsTheWait(backend: TestBackend, call: AsyncCall) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = try runtime.newStream()
        let buffer = try stream.zeros(count: 16, of: Float.self)
        let gate = try Gate(stream, fallback: .seconds(3))
        defer { gate.release() }

        let task = call.start(runtime: runtime, stream: stream, buffer: buffer)
        let parked = await eventually { runtime.diagnostics().liveWaiters >= 1 }
        #expect(parked, "the call should be waiting on the held stream")

        let watchdog = gate.watchdog()
        let cancelled = ContinuousClock.now
        task.cancel()
        let result = await task.result
        let elapsed = seconds(since: cancelled)
        watchdog.cancel()

        #expect(throws: CancellationError.self) { try result.get() }
        // Well inside the gate's 3 s fallback, loose enough for a busy host.
        #expect(elapsed < 1.5, "cancellation took \(elapsed) s")
        #expect(!(try stream.fence().isComplete()), "the wait ended before the work: it was cancelled, not finished")
        let diagnostics = runtime.diagnostics()
        #expect(diagnostics.liveWaiters == 0, "waiters left on the Rust side: \(diagnostics)")
        #expect(diagnostics.liveFences == 0, "fences left on the Rust side: \(diagnostics)")
    }

    @Test("a Task cancelled before it awaits fails at once", arguments: TestBackend.allCases)
    func aCancelledTaskFailsAtOnce(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let gate = try Gate(stream, fallback: .seconds(3))
        defer { gate.release() }
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await stream.sync()
        }
        let watchdog = gate.watchdog()
        let started = ContinuousClock.now
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(seconds(since: started) < 1.5)
        watchdog.cancel()
        #expect(runtime.diagnostics().liveWaiters == 0)
    }

    @Test("cancelling ends the wait, not the work", arguments: TestBackend.allCases)
    func cancellingEndsTheWaitNotTheWork(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let buffer = try stream.zeros(count: 1000, of: UInt32.self)
        let gate = try Gate(stream, fallback: .milliseconds(500))
        let task = Task {
            try await stream.executeAndWait(
                kernel: Kernel.builtin(op: .iota), grid: Grid(), args: [.write(buffer), .u32(value: 5)])
        }
        _ = await eventually { runtime.diagnostics().liveWaiters >= 1 }
        let watchdog = gate.watchdog()
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        watchdog.cancel()
        gate.release()
        #expect(try await stream.read(buffer, as: UInt32.self) == Array(5..<1005))
    }

    @Test("an explicit CancelToken ends the wait with WeirError.Cancelled", arguments: TestBackend.allCases)
    func anExplicitTokenEndsTheWaitWithCancelled(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let gate = try Gate(stream, fallback: .seconds(3))
        defer { gate.release() }
        let token = CancelToken()
        let task = Task { try await stream.sync(cancel: token) }
        _ = await eventually { runtime.diagnostics().liveWaiters >= 1 }
        let watchdog = gate.watchdog()
        token.cancel()
        let result = await task.result
        watchdog.cancel()
        guard case .failure(WeirError.cancelled(let message)) = result else {
            Issue.record("expected WeirError.cancelled, got \(result)")
            return
        }
        #expect(message.contains("cancel"))
        #expect(token.isCancelled())
        #expect(runtime.diagnostics().liveWaiters == 0)
    }
}
