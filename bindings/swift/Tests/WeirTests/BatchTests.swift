// Batches: many ops admitted in one call, each its own op.

import Foundation
import Testing
import Weir

@Suite("Batches")
struct BatchTests {
    @Test("a batch runs its ops in order, each its own op", arguments: TestBackend.allCases)
    func batchRunsItsOpsInOrder(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        let x = try s.zeros(count: 4, of: Float.self)
        let y = try s.upload([Float(1), 2, 3, 4])
        let before = runtime.diagnostics().admittedOps
        try s.batch { b in
            b.fill(x, with: Float(2))
            b.axpy(3, x, y)  // y = 3x + y
            b.scale(y, by: 0.5, into: x)  // x = y / 2
            try b.write([Float(100)], to: y, at: 3)  // after the axpy and the scale
        }
        #expect(runtime.diagnostics().admittedOps - before == 4, "each op of the batch is its own op")
        #expect(try await s.read(y, as: Float.self) == [7, 8, 9, 100])
        #expect(try await s.read(x, as: Float.self) == [3.5, 4, 4.5, 5])
        let beforeEmpty = runtime.diagnostics().admittedOps
        try s.batch { _ in }
        #expect(runtime.diagnostics().admittedOps == beforeEmpty, "an empty batch admitted something")
        try runtime.shutdown()
    }

    @Test("a batch with a refused op admits none of its ops", arguments: TestBackend.allCases)
    func refusedBatchAdmitsNothing(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        let x = try s.upload([Float](repeating: 1, count: 4))
        let small = try s.zeros(count: 2, of: Float.self)
        let before = runtime.diagnostics().admittedOps
        #expect(throws: WeirError.self) {
            try s.batch { b in
                b.fill(x, with: Float(9))
                b.copy(x, to: small)  // sizes differ
            }
        }
        let pastTheEnd = await outcome {
            try s.batch { b in
                b.fill(x, with: Float(9))
                b.write(buffer: small, data: Data(count: 4), offset: 2)  // element 2 of 2
            }
        }
        guard case .failure(WeirError.outOfRange) = pastTheEnd else {
            Issue.record("a write past the end gave \(pastTheEnd)")
            return
        }
        #expect(throws: WeirError.self) { try s.batch { b in try b.write([Float(1)], to: small, at: 2) } }
        let wrongType = await outcome {
            try s.batch { b in
                b.fill(x, with: Float(9))
                try b.write([Int32(1)], to: x)  // i32s into an f32 buffer
            }
        }
        guard case .failure(WeirError.invalidArgument(description: let description)) = wrongType, description.contains("i32") else {
            Issue.record("a batch's write of Int32s into a Float buffer gave \(wrongType)")
            return
        }
        #expect(runtime.diagnostics().admittedOps == before, "a refused batch admitted ops")
        #expect(try await s.read(x, as: Float.self) == [1, 1, 1, 1], "the fill before the refused op ran")
        try s.batch { b in b.fill(x, with: Float(5)) }
        #expect(try await s.read(x, as: Float.self) == [5, 5, 5, 5])
        try runtime.shutdown()
    }

    @Test("a read on another stream waits for a batch's write", arguments: TestBackend.allCases)
    func readOnAnotherStreamWaitsForTheBatch(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (a, b) = (runtime.defaultStream(), try runtime.newStream())
        // The seed race around a batch: B syncs with A past the buffer's
        // allocation, then the batch is admitted on a held A from another
        // thread; B's read must wait for the batch's last write.
        for round in 0..<3 {
            let n = 1 << 12
            let x = try a.empty(count: n, of: Float.self)
            let unrelated = try a.upload([UInt32](repeating: 1, count: 16))
            try b.copy(unrelated, to: try b.empty(count: 16, of: UInt32.self))
            let gate = try Gate(a)
            let value = Float(round) + 0.5
            try await onThread {
                try a.batch { batch in
                    batch.fill(x, with: Float(-1))
                    batch.fill(x, with: value)
                }
            }
            let read = Task { try await b.read(x, as: Float.self) }
            if gate.isHeld {
                try await Task.sleep(for: .milliseconds(20))
                #expect(!(try b.fence().isComplete()), "the read must wait for the held batch")
            }
            gate.release()
            #expect(try await read.value == [Float](repeating: value, count: n), "round \(round) read stale data")
        }
        try runtime.shutdown()
    }
}
