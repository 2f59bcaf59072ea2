// The idiomatic layer over the generated bindings: typed buffers of 32-bit
// scalars, the built-in ops as methods, and error messages.
//
// Everything here is conversion and convenience; the behaviour lives in Rust.

import Foundation

// MARK: - Scalars

/// An element type Weir's buffers and built-in ops understand: 32 bits, stored
/// in the host's byte order (little-endian on every platform Swift targets).
public protocol DeviceScalar: BitwiseCopyable, Sendable, Equatable {}

extension Float: DeviceScalar {}
extension UInt32: DeviceScalar {}
extension Int32: DeviceScalar {}

extension Data {
    /// The bytes of `values`, as a buffer holds them.
    init<T: DeviceScalar>(scalars values: [T]) {
        self = values.withUnsafeBytes { Data($0) }
    }
}

func byteCount<T: DeviceScalar>(_ elements: Int, of type: T.Type) throws(WeirError) -> UInt64 {
    let (bytes, overflow) = elements.multipliedReportingOverflow(by: MemoryLayout<T>.stride)
    guard elements >= 0, !overflow else {
        throw .invalidArgument(description: "\(elements) elements of \(T.self) is not a buffer size")
    }
    return UInt64(bytes)
}

/// The byte offset of element `index` of `T`, for writing `count` elements
/// into `buffer`; refused in the caller's units (elements), not in bytes.
func byteOffset<T: DeviceScalar>(
    ofElement index: Int, writing count: Int, into buffer: Buffer, of type: T.Type
) throws(WeirError) -> UInt64 {
    guard index >= 0 else {
        throw .invalidArgument(description: "negative element offset \(index) (elements of \(T.self))")
    }
    let elements = buffer.count(of: T.self)
    guard index <= elements, count <= elements - index else {
        throw .outOfRange(
            description: "\(count) elements of \(T.self) at element offset \(index) do not fit in a buffer of \(elements) elements")
    }
    return UInt64(index) * UInt64(MemoryLayout<T>.stride)
}

extension Buffer {
    /// How many elements of `T` the buffer holds.
    public func count<T: DeviceScalar>(of type: T.Type) -> Int {
        Int(clamping: sizeBytes() / UInt64(MemoryLayout<T>.stride))
    }
}

// MARK: - Typed buffers

extension WeirStream {
    /// A buffer holding `values`, uploaded on this stream.
    /// The array is lent to Rust for the call, which copies it once, as an
    /// upload from Rust does: no `Data` or `RustBuffer` copy in between.
    public func upload<T: DeviceScalar>(_ values: [T]) throws -> Buffer {
        try values.withUnsafeBytes { try upload(bytes: $0) }
    }

    /// A zero-filled buffer of `count` elements of `T`: allocated, zeroed on
    /// the device and published in one admission, with no host data.
    public func zeros<T: DeviceScalar>(count: Int, of type: T.Type) throws -> Buffer {
        try zeros(bytes: byteCount(count, of: T.self))
    }

    /// A buffer of `count` elements of `T` with unspecified contents.
    public func empty<T: DeviceScalar>(count: Int, of type: T.Type) throws -> Buffer {
        try empty(bytes: byteCount(count, of: T.self))
    }

    /// Reads `buffer` as elements of `T`, once its latest write (on any stream)
    /// is done. Cancelling the Task ends the wait with `CancellationError`.
    /// The bytes are copied once out of Rust, into the new array.
    public func read<T: DeviceScalar>(_ buffer: Buffer, as type: T.Type) async throws -> [T] {
        let bytes = buffer.sizeBytes()
        let stride = MemoryLayout<T>.stride
        guard bytes % UInt64(stride) == 0, let count = Int(exactly: bytes / UInt64(stride)) else {
            throw WeirError.invalidArgument(description: "\(bytes) bytes are not a whole number of \(T.self) (\(stride) bytes each)")
        }
        guard count > 0 else { return [] }
        let host = try await cancellable { try await self.readHost(buffer: buffer, offset: 0, len: bytes, cancel: $0) }
        return [T](unsafeUninitializedCapacity: count) { storage, initialized in
            host.copy(into: UnsafeMutableRawBufferPointer(storage))
            initialized = count
        }
    }

    /// Enqueues writing `values` into `buffer` from element `index` on; returns
    /// once admitted (the values are copied by then), not once done. A bad
    /// `index` is reported in elements, as given.
    public func write<T: DeviceScalar>(_ values: [T], to buffer: Buffer, at index: Int = 0) throws {
        let offset = try byteOffset(ofElement: index, writing: values.count, into: buffer, of: T.self)
        try write(buffer: buffer, data: Data(scalars: values), offset: offset)
    }

    /// Writes `values` into `buffer` from element `index` on as `write` does,
    /// then suspends until this stream has done it.
    /// Cancelling the Task ends the wait with `CancellationError`.
    public func writeAndWait<T: DeviceScalar>(_ values: [T], to buffer: Buffer, at index: Int = 0) async throws {
        let offset = try byteOffset(ofElement: index, writing: values.count, into: buffer, of: T.self)
        try await writeAndWait(buffer: buffer, data: Data(scalars: values), offset: offset)
    }
}

// MARK: - Built-in ops

/// One kernel object per built-in op, made once.
enum Builtins {
    static let kernels: [BuiltinOp: Kernel] = Dictionary(
        uniqueKeysWithValues: [
            BuiltinOp.memsetZero, .fillU32, .fillI32, .fillF32, .copy, .add, .mul, .scale, .axpy, .iota,
        ].map { ($0, Kernel.builtin(op: $0)) }
    )

    static func kernel(_ op: BuiltinOp) -> Kernel {
        kernels[op] ?? Kernel.builtin(op: op)
    }
}

extension Arg {
    /// `buffer`, read by the op.
    public static func read(_ buffer: Buffer) -> Arg { .buffer(buffer: buffer, access: .read) }
    /// `buffer`, overwritten by the op.
    public static func write(_ buffer: Buffer) -> Arg { .buffer(buffer: buffer, access: .write) }
    /// `buffer`, read and written by the op.
    public static func readWrite(_ buffer: Buffer) -> Arg { .buffer(buffer: buffer, access: .readWrite) }
}

/// The built-in ops, enqueued on the stream (they return once admitted, not
/// once done: await `sync()`, a fence or a read for that, or launch the
/// kernel with `executeAndWait`). The same on every backend.
extension WeirStream {
    private func builtin(_ op: BuiltinOp, _ args: [Arg]) throws {
        try execute(kernel: Builtins.kernel(op), grid: Grid(), args: args)
    }

    /// Every element of `buffer` becomes `value`.
    public func fill(_ buffer: Buffer, with value: Float) throws {
        try builtin(.fillF32, [.write(buffer), .f32(value: value)])
    }

    /// Every element of `buffer` becomes `value`.
    public func fill(_ buffer: Buffer, with value: UInt32) throws {
        try builtin(.fillU32, [.write(buffer), .u32(value: value)])
    }

    /// Every element of `buffer` becomes `value`.
    public func fill(_ buffer: Buffer, with value: Int32) throws {
        try builtin(.fillI32, [.write(buffer), .i32(value: value)])
    }

    /// Copies `source` into `destination` (equal sizes).
    public func copy(_ source: Buffer, to destination: Buffer) throws {
        try builtin(.copy, [.read(source), .write(destination)])
    }

    /// `out = a + b`, element-wise over `Float`s.
    public func add(_ a: Buffer, _ b: Buffer, into out: Buffer) throws {
        try builtin(.add, [.read(a), .read(b), .write(out)])
    }

    /// `out = a · b`, element-wise over `Float`s.
    public func mul(_ a: Buffer, _ b: Buffer, into out: Buffer) throws {
        try builtin(.mul, [.read(a), .read(b), .write(out)])
    }

    /// `out = alpha · x` over `Float`s.
    public func scale(_ x: Buffer, by alpha: Float, into out: Buffer) throws {
        try builtin(.scale, [.read(x), .write(out), .f32(value: alpha)])
    }

    /// `y = alpha · x + y` over `Float`s.
    public func axpy(_ alpha: Float, _ x: Buffer, _ y: Buffer) throws {
        try builtin(.axpy, [.read(x), .readWrite(y), .f32(value: alpha)])
    }

    /// `out[i] = start + i` over `UInt32`s.
    public func iota(_ out: Buffer, from start: UInt32 = 0) throws {
        try builtin(.iota, [.write(out), .u32(value: start)])
    }
}

// MARK: - WeirRuntime

extension WeirRuntime {
    /// Opens the best available backend: CUDA, then HIP, then a hardware wgpu
    /// adapter, then the CPU.
    public static func open() throws -> WeirRuntime {
        try open(backend: .auto)
    }

    /// Opens `device`, one of those `devices()` lists: the runtime's `info()`
    /// is then `device` itself.
    public static func open(device: DeviceInfo) throws -> WeirRuntime {
        try openDevice(backend: device.backend, index: device.index)
    }
}

// MARK: - Errors

extension WeirError: CustomStringConvertible {
    /// What went wrong, in words: the Rust error's text (the `description`
    /// every case carries after its typed fields).
    public var message: String {
        switch self {
        case .unavailable(_, let text), .unsupported(_, let text), .backend(_, let text), .deviceLost(_, let text):
            return text
        case .opFailed(_, let text):
            return text
        case .outOfMemory(_, _, let text):
            return text
        case .invalidArgument(let text), .outOfRange(let text), .foreignHandle(let text), .closed(let text),
            .bug(let text), .cancelled(let text):
            return text
        }
    }

    public var description: String { message }
}
