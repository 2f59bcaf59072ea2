// Bulk data without a `RustBuffer` in between: uploads lent to Rust for the
// call (Rust copies them once, as an upload from Rust does), and reads copied
// once out of Rust into the caller's memory.

import Foundation

extension WeirStream {
    /// A buffer of raw bytes holding `bytes`, lent to Rust for the call.
    public func upload(bytes: UnsafeRawBufferPointer) throws -> Buffer {
        try uploadBorrowed(data: Data.borrowing(bytes), element: .bytes)
    }

    /// A buffer of `element`s holding `data` (little-endian, a whole number of
    /// elements), lent to Rust for the call, which copies it once. (The
    /// generated form, excluded in `uniffi.toml`, copied `data` into a
    /// `RustBuffer` first, and trapped past 2 GiB.)
    public func upload(data: Data, element: ElementType) throws -> Buffer {
        try Data.checkLendable(data.count)
        return try uploadBorrowed(data: data, element: element)
    }

    /// Enqueues a copy of `data` (`element`s, little-endian: a whole number
    /// of the buffer's elements) into `buffer` at element `offset`, lent to
    /// Rust for the call. Data of another type than the buffer's is refused;
    /// raw `.bytes` go anywhere. Returns once admitted (the data is copied by
    /// then), not once done.
    public func write(buffer: Buffer, data: Data, element: ElementType, offset: UInt64 = 0) throws {
        try Data.checkLendable(data.count)
        try writeBorrowed(buffer: buffer, offset: offset, data: data, element: element)
    }

    /// Writes `data` into `buffer` as `write(buffer:data:element:offset:)`
    /// does, then suspends until this stream has done it, or `cancel` ends
    /// the wait (not the write).
    public func writeAndWait(buffer: Buffer, data: Data, element: ElementType, offset: UInt64, cancel: CancelToken?) async throws {
        try write(buffer: buffer, data: data, element: element, offset: offset)
        try await sync(cancel: cancel)
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

extension WeirRuntime {
    /// Host memory holding a copy of `values`, for `write(host:to:offset:)`:
    /// page-locked on CUDA and HIP, so uploads from it need no host copy
    /// (plain memory elsewhere). Make it once and upload it as often as needed.
    public func hostBytes<T: WeirElement>(_ values: [T]) throws -> HostBytes {
        try values.withUnsafeBytes { try hostBytesBorrowed(data: Data.borrowing($0)) }
    }

    /// Host memory holding a copy of `data`, as `hostBytes(_:)` makes it.
    /// More than 2 GiB - 1 bytes are refused with `.invalidArgument`. (The
    /// generated form, renamed in `uniffi.toml`, trapped past 2 GiB.)
    public func hostBytes(data: Data) throws -> HostBytes {
        try Data.checkLendable(data.count)
        return try hostBytesBorrowed(data: data)
    }
}

extension WeirStream {
    /// Enqueues a copy of all of `host` (a whole number of the buffer's
    /// elements) into `buffer` from element `offset` on, straight from it
    /// where it is page-locked; returns once admitted. The upload keeps the
    /// bytes alive until its copy is done.
    public func write(host: HostBytes, to buffer: Buffer, offset: UInt64 = 0) throws {
        try writeHost(buffer: buffer, offset: offset, host: host, element: .bytes)
    }

    /// Admits a read of all of `buffer` now, in order on this stream, to
    /// await later with `bytes()` (an async read admits only once it runs):
    /// what a pipeline that reuses `buffer` needs, so its next write waits
    /// for this read. The bytes come back as `HostBytes`, page-locked on
    /// CUDA and HIP.
    public func enqueueRead(_ buffer: Buffer) throws -> PendingRead {
        try enqueueReadHost(buffer: buffer, offset: 0, len: buffer.elementCount(), element: .bytes)
    }
}

extension PendingRead {
    /// The bytes, once the read completes; only one call gets them.
    /// Cancelling the Task ends the wait with `CancellationError`.
    public func bytes() async throws -> HostBytes {
        try await cancellable { try await self.bytes(cancel: $0) }
    }
}

extension HostBytes {
    /// Calls `body` with the bytes, valid during the call.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try withExtendedLifetime(self) {
            // The handle keeps the bytes where `address()` says until it goes.
            let base = UnsafeRawPointer(bitPattern: UInt(address()))
            return try body(UnsafeRawBufferPointer(start: base, count: base == nil ? 0 : Int(len())))
        }
    }

    /// Copies every byte into the start of `destination` (as many as fit).
    func copy(into destination: UnsafeMutableRawBufferPointer) {
        withUnsafeBytes { source in
            guard let from = source.baseAddress else { return }
            destination.baseAddress?.copyMemory(from: from, byteCount: min(source.count, destination.count))
        }
    }
}

extension Data {
    /// The most bytes one call lends to Rust. UniFFI's `ForeignBytes`, which
    /// every `Data` argument crosses in, counts its length in an `Int32`, and
    /// the generated code converts with `Int32(count)`: a longer `Data` would
    /// trap, ending the process, so it is refused before the call instead.
    static let mostLent = Int(Int32.max)

    /// `count` bytes, refused with `.invalidArgument` past `mostLent`.
    static func checkLendable(_ count: Int) throws {
        guard count <= mostLent else { throw tooLong(count) }
    }

    /// Why `count` bytes are not lent.
    static func tooLong(_ count: Int) -> WeirError {
        .invalidArgument(
            description: "\(count) bytes in one call: at most \(mostLent) (2 GiB - 1) cross into Rust at once; send larger data in parts")
    }

    /// A `Data` over `bytes` without copying them: valid only while `bytes`
    /// is (Rust borrows it for one synchronous call). Small ones are copied
    /// inline by Foundation, which costs nothing that matters. More than
    /// `mostLent` bytes are refused.
    static func borrowing(_ bytes: UnsafeRawBufferPointer) throws -> Data {
        try checkLendable(bytes.count)
        guard let base = bytes.baseAddress, bytes.count > 0 else { return Data() }
        return Data(bytesNoCopy: UnsafeMutableRawPointer(mutating: base), count: bytes.count, deallocator: .none)
    }
}
