// Bulk data: uploads lent to Rust for the call, reads into the caller's memory.

import Foundation
import Testing
import Weir

@Suite("Bulk data")
struct BulkTests {
    /// A few MiB, not a round number of anything.
    static let floats: [Float] = (0..<((5 << 20) / 4 + 3)).map { Float($0) * 0.5 - 7 }

    @Test("arrays upload without a copy and read back into the caller's array", arguments: TestBackend.allCases)
    func arraysRoundTrip(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        let floats = BulkTests.floats
        let buffer = try s.upload(floats)
        #expect(buffer.count == floats.count && buffer.sizeBytes() == UInt64(floats.count * 4))
        #expect(try await s.read(buffer, as: Float.self) == floats)
        var back = [Float](repeating: 0, count: floats.count)
        try await s.read(buffer, into: &back)
        #expect(back == floats)
        var tail = [Float](repeating: 0, count: 1000)
        try await s.read(buffer, into: &tail, at: floats.count - 1000)
        #expect(tail == Array(floats.suffix(1000)))
        try runtime.shutdown()
    }

    @Test("raw bytes upload, write and read through the caller's pointers", arguments: TestBackend.allCases)
    func rawBytesRoundTrip(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        let bytes = (0..<4096).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let buffer = try bytes.withUnsafeBytes { try s.upload(bytes: $0) }
        try [UInt8](repeating: 0xAB, count: 8).withUnsafeBytes { try s.write(bytes: $0, to: buffer, offset: 16) }
        var expected = bytes
        expected.replaceSubrange(16..<24, with: [UInt8](repeating: 0xAB, count: 8))
        let destination = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)
        defer { destination.deallocate() }
        try await s.read(buffer, into: destination)
        #expect(Array(destination) == expected)
        try await s.read(buffer, into: UnsafeMutableRawBufferPointer(rebasing: destination[0..<8]), offset: 12)
        #expect(Array(destination[0..<8]) == Array(expected[12..<20]))
        try runtime.shutdown()
    }

    @Test("bad ranges are refused in the caller's units and change nothing", arguments: TestBackend.allCases)
    func badRangesAreRefused(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        let buffer = try s.upload([Float](repeating: 1, count: 4))
        var three = [Float](repeating: 0, count: 3)
        let tooLong = await outcome { try await s.read(buffer, into: &three, at: 2) }
        guard case .failure(WeirError.outOfRange(let description)) = tooLong else {
            Issue.record("a read past the end gave \(tooLong)")
            return
        }
        #expect(description.contains("3 f32 elements at offset 2 do not fit in a buffer of 4 f32 elements"),
                "\(description)")
        // Raw memory counts its offset in the buffer's elements too, and holds whole ones.
        let destination = UnsafeMutableRawBufferPointer.allocate(byteCount: 8, alignment: 8)
        defer { destination.deallocate() }
        await expectWeirError("OutOfRange", mentioning: ["2 f32 elements at offset 3"]) {
            try await s.read(buffer, into: destination, offset: 3)
        }
        await expectWeirError("InvalidArgument", mentioning: ["6 bytes", "f32"]) {
            try await s.read(buffer, into: UnsafeMutableRawBufferPointer(rebasing: destination[0..<6]))
        }
        await expectWeirError("OutOfRange", mentioning: ["2 f32 elements at offset 3"]) {
            try [UInt8](repeating: 0, count: 8).withUnsafeBytes { try s.write(bytes: $0, to: buffer, offset: 3) }
        }
        await expectWeirError("InvalidArgument", mentioning: ["negative element offset -1"]) {
            try await s.read(buffer, into: &three, at: -1)
        }
        #expect(try await s.read(buffer, as: Float.self) == [1, 1, 1, 1])
        try runtime.shutdown()
    }

    @Test("host bytes upload as often as needed, and a reader on another stream waits for the upload",
          arguments: TestBackend.allCases)
    func hostBytesUpload(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (a, b) = (runtime.defaultStream(), try runtime.newStream())
        let floats = BulkTests.floats
        let host = try runtime.hostBytes(floats)
        #expect(host.len() == UInt64(floats.count * 4))
        let buffer = try a.zeros(count: floats.count, of: Float.self)
        let gate = try Gate(a)
        try a.write(host: host, to: buffer)
        let read = Task { try await b.read(buffer, as: Float.self) }
        if gate.isHeld {
            try await Task.sleep(for: .milliseconds(20))
            #expect(!(try b.fence().isComplete()), "the read must wait for the held upload")
        }
        gate.release()
        #expect(try await read.value == floats)
        try a.fill(buffer, with: Float(3))
        try a.write(host: host, to: buffer)
        #expect(try await b.read(buffer, as: Float.self) == floats, "a second upload of the same bytes")
        await expectWeirError("OutOfRange", mentioning: ["offset 1"]) {
            try a.write(host: host, to: buffer, offset: 1)
        }
        // A read admitted now is ordered before a write admitted after it.
        let pending = try b.enqueueRead(buffer)
        try a.fill(buffer, with: Float(5))
        let bytes = try await pending.bytes()
        #expect(bytes.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) } == floats,
                "the read saw the write admitted after it")
        await expectWeirError("InvalidArgument", mentioning: ["taken already"]) { _ = try await pending.bytes() }
        #expect(try await b.read(buffer, as: Float.self) == [Float](repeating: 5, count: floats.count))
        try runtime.shutdown()
    }

    @Test("a read into an array on another stream waits for the latest write", arguments: TestBackend.allCases)
    func readIntoWaitsForTheLatestWrite(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (a, b) = (runtime.defaultStream(), try runtime.newStream())
        let count = BulkTests.floats.count
        let buffer = try a.upload(BulkTests.floats)
        let gate = try Gate(a)
        try a.fill(buffer, with: Float(3))
        let read = Task {
            var back = [Float](repeating: 0, count: count)
            try await b.read(buffer, into: &back)
            return back
        }
        if gate.isHeld {
            try await Task.sleep(for: .milliseconds(20))
            #expect(!(try b.fence().isComplete()), "the read must wait for the held write")
        }
        gate.release()
        #expect(try await read.value == [Float](repeating: 3, count: count))
        try runtime.shutdown()
    }
    /// Every `Data` argument crosses into Rust with its length as an `Int32`
    /// (UniFFI's `ForeignBytes`), whose conversion traps past 2 GiB, ending
    /// the process. Past that, each way in is refused and the runtime goes
    /// on. The bytes are never read: one byte stands for all of them.
    @Test("more than 2 GiB in one call is refused, not a trap, and the runtime goes on")
    func tooManyBytesForOneCallAreRefused() async throws {
        guard let runtime = try TestBackend.cpu.open() else { return }
        let s = runtime.defaultStream()
        let byte = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)
        defer { byte.deallocate() }
        let count = Int(Int32.max) + 1
        let huge = UnsafeRawBufferPointer(start: byte, count: count)
        let data = Data(bytesNoCopy: byte, count: count, deallocator: .none)
        let buffer = try s.upload([Float](repeating: 1, count: 4))
        let words = ["\(count) bytes", "2 GiB"]
        await expectWeirError("InvalidArgument", mentioning: words) { _ = try s.upload(bytes: huge) }
        await expectWeirError("InvalidArgument", mentioning: words) { try s.write(bytes: huge, to: buffer) }
        await expectWeirError("InvalidArgument", mentioning: words) { _ = try s.upload(data: data, element: .bytes) }
        await expectWeirError("InvalidArgument", mentioning: words) { _ = try runtime.hostBytes(data: data) }
        await expectWeirError("InvalidArgument", mentioning: words) { try s.write(buffer: buffer, data: data, element: .bytes) }
        await expectWeirError("InvalidArgument", mentioning: words) {
            try await s.writeAndWait(buffer: buffer, data: data, element: .bytes)
        }
        // A batch only collects: the refusal comes when it would be admitted
        // (naming the whole encoding's bytes), and admits nothing.
        await expectWeirError("InvalidArgument", mentioning: ["2 GiB"]) {
            try s.batch { b in
                b.fill(buffer, with: Float(2))
                b.write(buffer: buffer, data: data)
            }
        }
        await expectWeirError("InvalidArgument", mentioning: ["2 GiB"]) {
            let kernel = Kernel.custom(name: "struct") { _ in }
            _ = try s.record { b in b.execute(kernel: kernel, grid: Grid(), args: [.bytes(value: data)]) }
        }
        #expect(try await s.read(buffer, as: Float.self) == [1, 1, 1, 1], "a refused batch admitted an op")
        try runtime.shutdown()
    }
}
