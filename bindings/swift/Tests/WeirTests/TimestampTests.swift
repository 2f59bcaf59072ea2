// Timestamps: device time between two points of one stream, on every backend.

import Foundation
import Testing
import Weir

/// A timestamp on `stream`, or nil where wgpu's adapter cannot take one
/// (reported as a skip; the refusal must name the missing feature).
private func timestampOrSkip(_ stream: WeirStream) throws -> Timestamp? {
    do {
        return try stream.timestamp()
    } catch WeirError.unsupported(_, let description) {
        #expect(description.contains("TIMESTAMP_QUERY"), "the refusal names the missing feature: \(description)")
        print("⤼ skipped \(Test.current?.name ?? "test"): \(description)")
        return nil
    }
}

private let delay: TimeInterval = 0.020
private let bound: TimeInterval = 5

@Suite("Timestamps")
struct TimestampTests {
    @Test("elapsed across a delay is at least the delay, async or blocking", arguments: TestBackend.allCases)
    func elapsedAcrossADelay(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = try runtime.newStream()
        guard let before = try timestampOrSkip(s) else { return }
        try await s.sync()  // taken before the delay starts, however the backend delays
        #expect(before.isComplete())
        try s.delay(.milliseconds(20))
        let after = try s.timestamp()
        let elapsed = try await after.elapsedSince(earlier: before)
        print("\(backend): \(elapsed) s across a delay of \(delay) s")
        #expect(elapsed >= delay && elapsed < bound)
        #expect(try after.elapsedSinceBlocking(earlier: before) == elapsed)
        try runtime.shutdown()
    }

    @Test("a timestamp against itself is zero, and the later one first is refused", arguments: TestBackend.allCases)
    func againstItselfIsZero(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        guard let first = try timestampOrSkip(s) else { return }
        try s.fill(try s.zeros(count: 1 << 14, of: Float.self), with: Float(1.5))
        let second = try s.timestamp()
        #expect(try await first.elapsedSince(earlier: first) == 0)
        #expect(try await second.elapsedSince(earlier: first) < bound)
        await #expect(throws: WeirError.self) { try await first.elapsedSince(earlier: second) }
        try runtime.shutdown()
    }

    @Test("timestamps of two streams are refused", arguments: TestBackend.allCases)
    func twoStreamsAreRefused(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        guard let onS = try timestampOrSkip(runtime.defaultStream()) else { return }
        let onT = try runtime.newStream().timestamp()
        do {
            _ = try await onT.elapsedSince(earlier: onS)
            Issue.record("a pair of two streams was measured")
        } catch WeirError.invalidArgument {
        }
        try runtime.shutdown()
    }

    @Test("a failed op between two timestamps is timed, and the next sync reports it", arguments: TestBackend.allCases)
    func failedOpIsTimedAndReportedBySync(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = try runtime.newStream()
        guard let before = try timestampOrSkip(s) else { return }
        #expect(throws: WeirError.self) { try s.failWrite(buffer: try s.zeros(count: 16, of: Float.self), message: "a deliberate failure") }
        let after = try s.timestamp()
        #expect(try await after.elapsedSince(earlier: before) < bound)
        do {
            try await s.sync()
            Issue.record("the failure was not reported by the next sync")
        } catch WeirError.opFailed(_, let description) {
            #expect(description.contains("a deliberate failure"))
        }
        try await s.sync()
        try runtime.shutdown()
    }

    @Test("released timestamps leave no event behind", arguments: TestBackend.allCases)
    func releasedTimestampsLeaveNoEvent(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = try runtime.newStream()
        do {
            guard let first = try timestampOrSkip(s) else { return }
            let stamps = try (0..<15).map { _ in try s.timestamp() }
            _ = try await stamps[14].elapsedSince(earlier: first)
        }
        try await s.sync()
        #expect(await eventually { runtime.diagnostics().liveEvents == 0 })
        try runtime.shutdown()
    }
}
