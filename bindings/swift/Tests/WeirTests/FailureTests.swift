// Failures follow the data: a failed op fails what it writes, for every reader
// on every stream and what they write in turn; its own stream reports it to
// one fence and goes on; a full overwrite heals the buffer.
//
// `failWrite(buffer:message:)` (a test-support hook) is the failure: an op
// that writes the buffer and fails with the given message, on every backend.

import Foundation
import Testing
import Weir

/// Expects `body` to throw `WeirError.OpFailed` naming the failure `original`.
func expectFailure<T>(
    naming original: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> T
) async {
    await expectWeirError("OpFailed", mentioning: [original], sourceLocation: sourceLocation, body)
}

/// Expects `error`, if there is one, to be `WeirError.OpFailed` naming `original`.
func expectNothingOrFailure(
    naming original: String, _ error: (any Error)?, sourceLocation: SourceLocation = #_sourceLocation
) {
    guard let error else { return }
    #expect(caseName(error) == "OpFailed", "\(error)", sourceLocation: sourceLocation)
    #expect("\(error)".contains(original), "\(error) does not name \(original)", sourceLocation: sourceLocation)
}

@Suite("Failures follow the data")
struct FailureTests {
    @Test("a read of a failed buffer on another stream throws OpFailed naming the failure, not stale bytes",
          arguments: TestBackend.allCases)
    func readOfAFailedBufferFails(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (s, t) = (try runtime.newStream(), try runtime.newStream())
        let x = try s.upload([UInt32](repeating: 1, count: 256))
        try await s.sync()
        await expectFailure(naming: "deliberate failure A") { try s.failWrite(buffer: x, message: "deliberate failure A") }
        await expectFailure(naming: "deliberate failure A") { try await t.read(x, as: UInt32.self) }
        await expectFailure(naming: "deliberate failure A") { try t.readBlocking(buffer: x, offset: 0, length: 16) }
        // And on the failing stream itself.
        await expectFailure(naming: "deliberate failure A") { try await s.read(x, as: UInt32.self) }
    }

    @Test("a failure travels along a chain of streams to what its readers write", arguments: TestBackend.allCases)
    func failureTravelsAlongAChain(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (s, t, u) = (try runtime.newStream(), try runtime.newStream(), try runtime.newStream())
        let x = try s.upload([Float](repeating: 1, count: 256))
        let y = try t.upload([Float](repeating: 2, count: 256))
        let z = try t.upload([Float](repeating: 3, count: 256))
        try await t.sync()
        await expectFailure(naming: "deliberate failure B") { try s.failWrite(buffer: x, message: "deliberate failure B") }
        // T copies X into Y: refused at admission, or admitted and failing; either way Y fails.
        let copy = await outcome { try t.copy(x, to: y) }
        expectNothingOrFailure(naming: "deliberate failure B", copy.error)
        await expectFailure(naming: "deliberate failure B") { try await u.read(y, as: Float.self) }
        // One more link, through a read-write op on U (of the buffers' type, or it is refused): Y fails Z too.
        _ = await outcome { try u.axpy(1, y, z) }
        await expectFailure(naming: "deliberate failure B") { try await s.read(z, as: Float.self) }
        // T's fence reports its failed copy, once.
        await expectFailure(naming: "deliberate failure B") { try await t.sync() }
        try await t.sync()
    }

    @Test("the failing stream reports its failure to one sync and runs every later op",
          arguments: TestBackend.allCases)
    func failingStreamReportsOnceAndGoesOn(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (s, t) = (try runtime.newStream(), try runtime.newStream())
        let x = try s.upload([UInt32](repeating: 1, count: 64))
        let shared = try s.upload([UInt32](repeating: 4, count: 256))
        let written = try s.zeros(count: 256, of: UInt32.self)
        try await s.sync()
        await expectFailure(naming: "deliberate failure C") { try s.failWrite(buffer: x, message: "deliberate failure C") }
        // Work admitted on S after the failure runs, for every stream to see.
        let fresh = try s.upload((0..<256).map { UInt32(7 + $0) })
        try s.fill(shared, with: UInt32(9))
        try s.iota(written, from: 100)
        #expect(try await t.read(fresh, as: UInt32.self) == (0..<256).map { UInt32(7 + $0) },
                "an upload on S after its failure")
        #expect(try await t.read(shared, as: UInt32.self) == [UInt32](repeating: 9, count: 256),
                "a fill on S after its failure")
        #expect(try await t.read(written, as: UInt32.self) == (0..<256).map { UInt32(100 + $0) },
                "a kernel on S after its failure")
        // S's next sync reports the failure, once.
        await expectFailure(naming: "deliberate failure C") { try await s.sync() }
        try s.fill(shared, with: UInt32(11))
        try await s.sync()
        #expect(try await t.read(shared, as: UInt32.self) == [UInt32](repeating: 11, count: 256))
        try await s.sync()
        // Two failures before one sync: the first is reported, with a count.
        await expectFailure(naming: "deliberate failure D") { try s.failWrite(buffer: x, message: "deliberate failure D") }
        await expectFailure(naming: "deliberate failure E") {
            try s.failWrite(buffer: shared, message: "deliberate failure E")
        }
        await expectWeirError("OpFailed", mentioning: ["deliberate failure D", "1 more"]) { try await s.sync() }
        try await s.sync()
        // The runtime-wide sync finds nothing left to report either.
        try await runtime.sync()
    }

    @Test("a full overwrite heals a failed buffer, a partial write keeps it failed", arguments: TestBackend.allCases)
    func fullOverwritesHealPartialWritesDoNot(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (s, t, u) = (try runtime.newStream(), try runtime.newStream(), try runtime.newStream())
        let n = 256
        func failed(_ message: String) async throws -> Buffer {
            let buffer = try s.upload([UInt32](repeating: 1, count: n))
            await expectFailure(naming: message) { try s.failWrite(buffer: buffer, message: message) }
            return buffer
        }
        let filled = try await failed("deliberate failure F")
        let zeroed = try await failed("deliberate failure G")
        let rewritten = try await failed("deliberate failure H")
        let partial = try await failed("deliberate failure I")
        try t.fill(filled, with: UInt32(5))
        #expect(try await s.read(filled, as: UInt32.self) == [UInt32](repeating: 5, count: n), "a fill heals")
        try t.memsetZero(buffer: zeroed)
        #expect(try await s.read(zeroed, as: UInt32.self) == [UInt32](repeating: 0, count: n), "a memsetZero heals")
        try t.write((0..<n).map { UInt32(3 * $0) }, to: rewritten)
        #expect(try await s.read(rewritten, as: UInt32.self) == (0..<n).map { UInt32(3 * $0) },
                "a whole-buffer write heals")
        // Writing part of it leaves the rest as the failed op left it (on U,
        // which then has a failure of its own to report).
        let partly = await outcome { try await u.writeAndWait([UInt32](repeating: 8, count: 4), to: partial, at: 4) }
        expectNothingOrFailure(naming: "deliberate failure I", partly.error)
        await expectFailure(naming: "deliberate failure I") { try await s.read(partial, as: UInt32.self) }
        // A whole write after it does heal.
        try t.write([UInt32](repeating: 6, count: n), to: partial)
        #expect(try await s.read(partial, as: UInt32.self) == [UInt32](repeating: 6, count: n))
    }
}

extension Result {
    /// The error, if this is a failure.
    var error: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
