// The bound on queued work: a full queue refuses a non-waiting admission,
// `admit` suspends the task (no thread blocks), a plain admission blocks.

import Foundation
import Testing
import Weir

@Suite("Backpressure")
struct BackpressureTests {
    /// A CPU runtime that queues at most `ops` ops, and a held stream of it.
    func limited(ops: UInt64) async throws -> (WeirRuntime, WeirStream, Buffer, Hold) {
        let runtime = try WeirRuntime.openWith(backend: .cpu, options: RuntimeOptions(queueLimitOps: ops))
        let stream = try runtime.newStream()
        let buffer = try stream.zeros(count: 4, of: Float.self)
        try await stream.sync()
        let hold = try stream.hold()
        return (runtime, stream, buffer, hold)
    }

    @Test("a full queue refuses a non-waiting admission, and admit suspends until there is room")
    func aFullQueueRefusesAndAdmitSuspends() async throws {
        let (runtime, stream, buffer, hold) = try await limited(ops: 2)
        let eager = stream.withoutWaiting()
        try eager.memsetZero(buffer: buffer)
        try eager.memsetZero(buffer: buffer)
        #expect(throws: WeirError.self) { try eager.memsetZero(buffer: buffer) }
        #expect(runtime.diagnostics().opsInQueue == 2)
        let admitted = Flag()
        let admission = Task {
            try await stream.admit { try $0.write([1, 2, 3, 4] as [Float], to: buffer) }
            admitted.set()
        }
        // However slow the machine, nothing gets past a full queue whose stream is held.
        try await Task.sleep(for: .milliseconds(100))
        #expect(!admitted.isSet, "admitted into a full queue")
        hold.release()
        try await admission.value
        #expect(try await stream.read(buffer, as: Float.self) == [1, 2, 3, 4])
        try runtime.shutdown()
    }

    @Test("a plain admission blocks its thread until the queue has room")
    func aPlainAdmissionBlocks() async throws {
        let (runtime, stream, buffer, hold) = try await limited(ops: 1)
        try stream.memsetZero(buffer: buffer)
        let admitted = Flag()
        let producer = Task {
            try await onThread {
                try stream.write([7, 7, 7, 7] as [Float], to: buffer)
                admitted.set()
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        #expect(!admitted.isSet, "a blocking admission did not wait for room")
        hold.release()
        try await producer.value
        #expect(try await stream.read(buffer, as: Float.self) == [7, 7, 7, 7])
        try runtime.shutdown()
    }
}
