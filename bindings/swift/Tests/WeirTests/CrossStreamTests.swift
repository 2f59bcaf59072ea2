// Ordering across streams: a reader on one stream sees the latest write made
// on another, however the two are interleaved.

import Foundation
import Testing
import Weir

@Suite("Cross-stream ordering")
struct CrossStreamTests {
    @Test("a read on another stream waits for the latest write", arguments: TestBackend.allCases)
    func readerOnAnotherStreamWaitsForTheLatestWrite(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (writer, reader) = (runtime.defaultStream(), try runtime.newStream())
        let x = try writer.zeros(count: 1 << 16, of: Float.self)
        let gate = try Gate(writer)
        try writer.fill(x, with: Float(9))
        let read = Task { try await reader.read(x, as: Float.self) }
        if gate.isHeld {
            try await Task.sleep(for: .milliseconds(20))
            #expect(!(try reader.fence().isComplete()), "the read must wait for the held write")
        }
        gate.release()
        #expect(try await read.value == [Float](repeating: 9, count: 1 << 16))
        #expect(runtime.diagnostics().insertedWaits >= 1)
    }

    @Test("two concurrent Tasks: writer on one stream, reader on another, 100 rounds",
          arguments: TestBackend.allCases)
    func writerAndReaderTasksRaceAcrossStreams(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (a, b) = (runtime.defaultStream(), try runtime.newStream())
        let count = 1 << 16
        let x = try a.zeros(count: count, of: Float.self)
        let rounds = 100
        // Round i: the writer enqueues (without waiting) a delay and a fill of
        // i on `a`, then hands i over; the reader reads on `b` at once. Only
        // the scheduler's cross-stream wait makes the read see i.
        let (written, toReader) = AsyncStream.makeStream(of: Int.self)
        let (acked, toWriter) = AsyncStream.makeStream(of: Int.self)

        let writerTask = Task {
            defer { toReader.finish() }
            var acks = acked.makeAsyncIterator()
            for round in 1...rounds {
                try a.delay(.microseconds(500))
                try a.fill(x, with: Float(round))
                toReader.yield(round)
                guard await acks.next() == round else { throw CancellationError() }
            }
        }
        let readerTask = Task {
            defer { toWriter.finish() }
            var wrong: [String] = []
            for await round in written {
                let values = try await b.read(x, as: Float.self)
                if values.contains(where: { $0 != Float(round) }) {
                    let seen = Set(values).sorted()
                    wrong.append("round \(round) read \(seen.prefix(4))")
                }
                toWriter.yield(round)
            }
            return wrong
        }
        try await writerTask.value
        let wrong = try await readerTask.value
        #expect(wrong.isEmpty, "reads raced the write on the other stream: \(wrong.prefix(5))")
    }

    @Test("a two-stream pipeline awaited concurrently gives the exact sum", arguments: TestBackend.allCases)
    func twoStreamPipelineAwaitedConcurrently(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (s, t) = (runtime.defaultStream(), try runtime.newStream())
        let n = 2048
        let x = try s.upload((0..<n).map(Float.init))
        let y = try s.zeros(count: n, of: Float.self)
        let out = try t.empty(count: n, of: Float.self)
        // Admission order is program order: the write of y on s, then its read on t.
        try s.axpy(2, x, y)
        async let second: Void = t.executeAndWait(
            kernel: Kernel.builtin(op: .add), grid: Grid(), args: [.read(x), .read(y), .write(out)])
        async let first: Void = s.sync()
        _ = try await (first, second)
        #expect(try await t.read(out, as: Float.self) == (0..<n).map { 3 * Float($0) })
    }

    @Test("reads on many streams of one fresh write all see it", arguments: TestBackend.allCases)
    func manyReadersSeeOneWrite(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let writer = runtime.defaultStream()
        let readers = try (0..<4).map { _ in try runtime.newStream() }
        let x = try writer.empty(count: 4096, of: UInt32.self)
        let gate = try Gate(writer)
        try writer.iota(x, from: 1)
        let results = try await withThrowingTaskGroup(of: [UInt32].self) { group in
            for reader in readers {
                group.addTask { try await reader.read(x, as: UInt32.self) }
            }
            gate.release()
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == 4)
        for values in results {
            #expect(values == Array(1...4096))
        }
    }
}
