// Typed buffers: a buffer knows its element type, counts in its elements,
// refuses data and ops of another type, reads back as its own type, and a
// view of a range is an argument like any, ordered as its whole buffer.

import Foundation
import Testing
import Weir

@Suite("Typed buffers")
struct TypedBufferTests {
    @Test("sizes, offsets and lengths are in the buffer's elements", arguments: TestBackend.allCases)
    func sizesAreInElements(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        let floats = try s.zeros(count: 3, of: Float.self)
        #expect((floats.elementType, floats.count, floats.sizeBytes()) == (.f32, 3, 12))
        let words = try s.empty(count: 5, of: UInt32.self)
        #expect((words.elementType, words.count, words.sizeBytes()) == (.u32, 5, 20))
        let signed = try s.upload([Int32(-1), 2])
        #expect((signed.elementType, signed.count, signed.sizeBytes()) == (.i32, 2, 8))
        let bytes = try s.upload([UInt8](repeating: 1, count: 5))
        #expect((bytes.elementType, bytes.count, bytes.sizeBytes()) == (.bytes, 5, 5))

        // A write's offset counts elements: element 1 is bytes 4..<8.
        try s.write([Float(5.5)], to: floats, at: 1)
        #expect(try await s.read(floats, as: Float.self) == [0, 5.5, 0])
        try s.iota(words, from: 10)
        // The generated read's offset and length count elements too: 2 u32s from element 1.
        let range = try await s.read(buffer: words, offset: 1, length: 2)
        #expect(range.count == 8)
        #expect(range.withUnsafeBytes { Array($0.bindMemory(to: UInt32.self)) } == [11, 12])
        var two = [UInt32](repeating: 0, count: 2)
        try await s.read(words, into: &two, at: 3)
        #expect(two == [13, 14])
        // A view counts its own range.
        let tail = try words.view(first: 3, count: 2)
        #expect((tail.count, tail.firstElement(), tail.sizeBytes(), tail.elementType) == (2, 3, 8, .u32))
        #expect(try await s.read(tail, as: UInt32.self) == [13, 14])
        try runtime.shutdown()
    }

    @Test("typed reads round-trip Float, Int32, UInt32 and UInt8, each as its own type",
          arguments: TestBackend.allCases)
    func typedReadsRoundTripEachType(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (s, t) = (runtime.defaultStream(), try runtime.newStream())
        try await roundTrips([Float(-0.0), 1.5, -2.25, .greatestFiniteMagnitude, .leastNonzeroMagnitude], s, t)
        try await roundTrips([Int32.min, -1, 0, 7, Int32.max], s, t)
        try await roundTrips([UInt32.max, 0, 1, 1 << 31], s, t)
        try await roundTrips([UInt8](0...255), s, t)
        try runtime.shutdown()
    }

    /// Uploads `values` on `s`, then reads them on `t` every way a typed read
    /// goes: `as:`, the type inferred from the result, into an array, and zeros.
    private func roundTrips<T: WeirElement>(_ values: [T], _ s: WeirStream, _ t: WeirStream) async throws {
        let buffer = try s.upload(values)
        #expect(buffer.elementType == T.elementType && buffer.count == values.count, "\(T.self)")
        #expect(try await t.read(buffer, as: T.self) == values, "\(T.self)")
        let inferred: [T] = try await t.read(buffer)
        #expect(inferred == values, "\(T.self), the type inferred from the result")
        var into = [T](repeating: values[0], count: values.count - 1)
        try await t.read(buffer, into: &into, at: 1)
        #expect(into == Array(values.dropFirst()), "\(T.self), into an array from element 1")
        let written = try t.zeros(count: values.count, of: T.self)
        let zero = try await t.read(written, as: T.self)
        #expect(zero.count == values.count && zero.withUnsafeBytes { $0.allSatisfy { $0 == 0 } }, "\(T.self) zeros")
        try await t.writeAndWait(values, to: written)
        #expect(try await s.read(written, as: T.self) == values, "\(T.self), written and read on another stream")
    }

    @Test("a wrong element type is refused with InvalidArgument, naming both, and changes nothing",
          arguments: TestBackend.allCases)
    func wrongElementTypesAreRefused(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        let (x, y) = (try s.upload([Float(1), 2]), try s.zeros(count: 2, of: Float.self))
        let (ints, words) = (try s.upload([Int32(3), 4]), try s.upload([UInt32(5), 6]))

        // Built-ins name the argument and both types.
        await expectWeirError("InvalidArgument", mentioning: ["axpy", "i32", "f32"]) { try s.axpy(2, x, ints) }
        await expectWeirError("InvalidArgument", mentioning: ["axpy", "i32", "f32"]) { try s.axpy(2, ints, y) }
        await expectWeirError("InvalidArgument", mentioning: ["add", "u32", "f32"]) { try s.add(x, x, into: words) }
        await expectWeirError("InvalidArgument", mentioning: ["scale", "u32"]) { try s.scale(words, by: 2, into: y) }
        await expectWeirError("InvalidArgument", mentioning: ["fill_f32", "i32"]) { try s.fill(ints, with: Float(1)) }
        await expectWeirError("InvalidArgument", mentioning: ["fill_u32", "f32"]) { try s.fill(x, with: UInt32(1)) }
        await expectWeirError("InvalidArgument", mentioning: ["iota", "f32"]) { try s.iota(x) }
        await expectWeirError("InvalidArgument", mentioning: ["copy", "f32", "i32"]) { try s.copy(x, to: ints) }
        await expectWeirError("InvalidArgument", mentioning: ["axpy", "i32"]) {
            try s.batch { b in b.axpy(2, x, ints) }
        }
        // Reads return the buffer's own type, never its bits as another.
        await expectWeirError("InvalidArgument", mentioning: ["read", "i32", "f32"]) {
            try await s.read(x, as: Int32.self)
        }
        await expectWeirError("InvalidArgument", mentioning: ["read", "f32", "i32"]) {
            try await s.read(ints, as: Float.self)
        }
        await expectWeirError("InvalidArgument", mentioning: ["read", "u32", "i32"]) {
            try await s.read(ints, as: UInt32.self)
        }
        var floats = [Float](repeating: 0, count: 2)
        await expectWeirError("InvalidArgument", mentioning: ["read", "f32", "u32"]) {
            try await s.read(words, into: &floats)
        }
        // Writes too.
        await expectWeirError("InvalidArgument", mentioning: ["write", "i32", "f32"]) {
            try s.write([Int32(1)], to: x)
        }
        await expectWeirError("InvalidArgument", mentioning: ["write", "f32", "u32"]) {
            try await s.writeAndWait([Float(1)], to: words)
        }
        await expectWeirError("InvalidArgument", mentioning: ["write", "f32", "i32"]) {
            try s.write(buffer: ints, data: Data(count: 4), element: .f32, offset: 0)
        }

        // Nothing was admitted by the refusals; the runtime goes on.
        try s.axpy(2, x, y)
        #expect(try await s.read(y, as: Float.self) == [2, 4])
        #expect(try await s.read(ints, as: Int32.self) == [3, 4])
        #expect(try await s.read(words, as: UInt32.self) == [5, 6])
    }

    @Test("raw bytes go with any type, and Int32 arrays with UInt32 buffers as their bits",
          arguments: TestBackend.allCases)
    func rawBytesGoWithAnyType(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        // A raw-bytes buffer takes and reads as any element type, counting bytes.
        let raw = try s.zeros(count: 8, of: UInt8.self)
        try s.write([Float(2.5)], to: raw, at: 4)
        #expect(try await s.read(raw, as: Float.self) == [0, 2.5])
        try s.fill(raw, with: UInt32(7))
        #expect(try await s.read(raw, as: UInt32.self) == [7, 7])
        // Any buffer reads as its bytes and takes raw bytes, a whole number of its elements.
        let x = try s.upload([Float(1)])
        #expect(try await s.read(x, as: UInt8.self) == withUnsafeBytes(of: Float(1)) { Array($0) })
        try withUnsafeBytes(of: Float(3)) { try s.write(bytes: $0, to: x) }
        #expect(try await s.read(x, as: Float.self) == [3])
        await expectWeirError("InvalidArgument", mentioning: ["2 bytes", "f32"]) {
            try s.write([UInt8(1), 2], to: x)
        }
        // weir-ffi's one exception (the JVM has no unsigned arrays), the same in Swift.
        let words = try s.zeros(count: 1, of: UInt32.self)
        try s.write([Int32(-1)], to: words)
        #expect(try await s.read(words, as: UInt32.self) == [UInt32.max])
        try runtime.shutdown()
    }

    @Test("a view write on one stream is seen by a read of the whole buffer on another, waiting for it",
          arguments: TestBackend.allCases)
    func viewWritesPublishTheWholeBuffer(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (a, b) = (runtime.defaultStream(), try runtime.newStream())
        let n = 256
        let whole = try a.upload(counting(n))
        try await a.sync()
        let waitsBefore = runtime.diagnostics().insertedWaits
        // Writes to two views, held back on A: a fill (a built-in, on a view
        // that starts 256 bytes in, as wgpu binds it) and a write at any element.
        let gate = try Gate(a)
        try a.fill(whole.view(first: 64, count: 64), with: Float(-1))
        try a.write([Float(100), 200], to: whole.view(first: 3, count: 2))
        let read = Task { try await b.read(whole, as: Float.self) }
        if gate.isHeld {
            try await Task.sleep(for: .milliseconds(20))
            #expect(!(try b.fence().isComplete()), "a read of the whole buffer must wait for the held view writes")
        }
        gate.release()
        var expected = counting(n)
        expected.replaceSubrange(64..<128, with: [Float](repeating: -1, count: 64))
        expected.replaceSubrange(3..<5, with: [100, 200])
        #expect(try await read.value == expected)
        #expect(runtime.diagnostics().insertedWaits > waitsBefore, "B's read waited for A's view writes")
        // A view's own read on B sees them too.
        #expect(try await b.read(whole.view(first: 2, count: 4), as: Float.self) == [3, 100, 200, 6])
        try runtime.shutdown()
    }

    @Test("views are arguments that see only their range, and bad ranges are refused",
          arguments: TestBackend.allCases)
    func viewsAreArguments(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        // Views start 64 elements (256 bytes) apart: the coarsest storage alignment wgpu allows.
        let n = 64
        let data = counting(3 * n)
        let whole = try s.upload(data)
        let (front, back) = (try whole.view(first: 0, count: n), try whole.view(first: n, count: n))
        // Disjoint views of one buffer in one op: back += 10 · front.
        try s.axpy(10, front, back)
        var expected = data
        for i in 0..<n { expected[n + i] += 10 * data[i] }
        #expect(try await s.read(whole, as: Float.self) == expected)
        // A view of a view counts from the view.
        let inner = try back.view(first: 1, count: 2)
        #expect(inner.firstElement() == UInt64(n + 1))
        #expect(try await s.read(inner, as: Float.self) == Array(expected[(n + 1)...(n + 2)]))
        // Ranges past the end, empty or negative are refused, in elements.
        await expectWeirError("OutOfRange", mentioning: ["2 f32 elements at offset 63", "buffer of 64 f32 elements"]) {
            try back.view(first: 63, count: 2)
        }
        await expectWeirError("InvalidArgument", mentioning: ["at least one element"]) { try whole.view(first: 0, count: 0) }
        await expectWeirError("InvalidArgument", mentioning: ["negative first element -1"]) {
            try whole.view(first: -1, count: 1)
        }
        await expectWeirError("OutOfRange", mentioning: ["2 f32 elements at offset 63"]) {
            try s.write([Float(1), 2], to: back, at: 63)
        }
        // Ops see only the view: a fill of the middle third leaves the rest.
        try s.fill(back, with: Float(0))
        #expect(try await s.read(front, as: Float.self) == Array(data[0..<n]))
        #expect(try await s.read(whole, as: Float.self)[n..<(2 * n)].allSatisfy { $0 == 0 })
        #expect(try await s.read(whole.view(first: 2 * n, count: n), as: Float.self) == Array(data[(2 * n)...]))
        try runtime.shutdown()
    }
}
