// Bulk data without a `RustBuffer` in between: uploads lent to Rust for the
// call (Rust copies them once, as an upload from Rust does), and reads copied
// once out of Rust into the caller's memory.

import Foundation

extension WeirStream {
    /// A buffer of raw bytes holding `bytes`, lent to Rust for the call.
    public func upload(bytes: UnsafeRawBufferPointer) throws -> Buffer {
        try uploadBorrowed(data: Data.borrowing(bytes), element: .bytes)
    }

    /// Enqueues a copy of `bytes`, lent to Rust for the call, into `buffer`
    /// (of any element type: raw bytes, a whole number of its elements) from
    /// element `offset` on; returns once admitted (the bytes are copied by
    /// then), not once done.
    public func write(bytes: UnsafeRawBufferPointer, to buffer: Buffer, offset: UInt64 = 0) throws {
        try writeBorrowed(buffer: buffer, offset: offset, data: Data.borrowing(bytes), element: .bytes)
    }

    /// Reads the bytes of `buffer` from element `offset` on into
    /// `destination` (a whole number of the buffer's elements, `destination.count`
    /// bytes) once its latest write (on any stream) is done. The memory must
    /// stay valid until this returns. Cancelling the Task ends the wait with
    /// `CancellationError`.
    public func read(_ buffer: Buffer, into destination: UnsafeMutableRawBufferPointer, offset: UInt64 = 0)
        async throws
    {
        let length = try wholeElements(of: buffer, inBytes: destination.count, of: "the destination")
        guard length > 0 else { return }
        let host = try await cancellable {
            try await self.readHost(buffer: buffer, offset: offset, len: length, element: .bytes, cancel: $0)
        }
        host.copy(into: destination)
    }

    /// Reads `destination.count` `T`s of `buffer` from element `index` on
    /// into `destination` (no new array): `T` is the buffer's element type
    /// (or any, for a raw-bytes buffer, whose `index` counts bytes; or
    /// `UInt8`), as `read(_:as:)` takes it. Cancelling the Task ends the wait
    /// with `CancellationError`.
    public func read<T: WeirElement>(_ buffer: Buffer, into destination: inout [T], at index: Int = 0) async throws {
        let offset = try nonNegative(index, "element offset")
        let length = try wholeElements(of: buffer, inBytes: destination.count * MemoryLayout<T>.stride, of: "[\(T.self)]")
        guard length > 0 else { return }
        let host = try await cancellable {
            try await self.readHost(buffer: buffer, offset: offset, len: length, element: T.elementType, cancel: $0)
        }
        destination.withUnsafeMutableBytes { host.copy(into: $0) }
    }
}

extension HostBytes {
    /// Copies every byte into the start of `destination` (as many as fit).
    func copy(into destination: UnsafeMutableRawBufferPointer) {
        withExtendedLifetime(self) {
            // The handle keeps the bytes where `address()` says until it goes.
            guard let source = UnsafeRawPointer(bitPattern: UInt(address())) else { return }
            let count = min(Int(len()), destination.count)
            destination.baseAddress?.copyMemory(from: source, byteCount: count)
        }
    }
}

extension Data {
    /// A `Data` over `bytes` without copying them: valid only while `bytes`
    /// is (Rust borrows it for one synchronous call). Small ones are copied
    /// inline by Foundation, which costs nothing that matters.
    static func borrowing(_ bytes: UnsafeRawBufferPointer) -> Data {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return Data() }
        return Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: base), count: bytes.count, deallocator: .none)
    }
}
