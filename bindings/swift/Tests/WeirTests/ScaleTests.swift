// Many waiters: 10 000 concurrent Tasks awaiting fences.

import Foundation
import Testing
import Weir

@Suite("Scale")
struct ScaleTests {
    @Test("10 000 concurrent Tasks awaiting fences all complete", arguments: TestBackend.allCases)
    func tenThousandTasksAwaitFences(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let streams = try [runtime.defaultStream()] + (0..<3).map { _ in try runtime.newStream() }
        let gates = try streams.map { try Gate($0, fallback: .seconds(1)) }
        let buffers = try streams.map { try $0.zeros(count: 256, of: UInt32.self) }
        for (index, (stream, buffer)) in zip(streams, buffers).enumerated() {
            try stream.fill(buffer, with: UInt32(index))
        }
        let fences = try streams.map { try $0.fence() }
        let tasks = 10_000

        // When each Task resumed: behind a delay (no gate on this backend) the
        // release is not when the fences complete, so the spread is what is timed.
        let resumes = try await withThrowingTaskGroup(of: ContinuousClock.Instant.self) { group in
            for task in 0..<tasks {
                let fence = fences[task % fences.count]
                group.addTask {
                    try await fence.await()
                    return ContinuousClock.now
                }
            }
            if gates.allSatisfy(\.isHeld) {
                let parked = await eventually(timeout: .seconds(30)) {
                    runtime.diagnostics().liveWaiters == UInt64(tasks)
                }
                #expect(parked, "all \(tasks) Tasks should be parked at once: \(runtime.diagnostics().liveWaiters)")
                #expect(fences.allSatisfy { !$0.isComplete() })
            }
            gates.forEach { $0.release() }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        if let first = resumes.min(), let last = resumes.max() {
            let spread = (last - first).components
            let millis = Double(spread.seconds) * 1e3 + Double(spread.attoseconds) / 1e15
            print("\(backend): \(tasks) Tasks awaiting 4 fences resumed within \(millis) ms of the first")
        }
        #expect(resumes.count == tasks)
        #expect(fences.allSatisfy { $0.isComplete() })
        #expect(runtime.diagnostics().liveWaiters == 0)
        for (index, (stream, buffer)) in zip(streams, buffers).enumerated() {
            #expect(try await stream.read(buffer, as: UInt32.self) == [UInt32](repeating: UInt32(index), count: 256))
        }
    }
}
