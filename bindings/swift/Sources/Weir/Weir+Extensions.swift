// The idiomatic layer over the generated bindings: typed buffers (elements,
// views), the built-in ops as methods, and error messages.
//
// Everything here is conversion and convenience; the behaviour lives in Rust.

import Foundation

// MARK: - Elements

/// A Swift type that Weir's buffers hold: `Float`, `Int32`, `UInt32`, or
/// `UInt8` for raw bytes. Each names its `ElementType`, so a buffer made from
/// it knows what it holds and its reads return it; values are stored in the
/// host's byte order (little-endian on every platform Swift targets).
public protocol WeirElement: BitwiseCopyable, Sendable, Equatable {
    /// What a buffer of this type holds.
    static var elementType: ElementType { get }
}

extension Float: WeirElement {
    public static var elementType: ElementType { .f32 }
}

extension Int32: WeirElement {
    public static var elementType: ElementType { .i32 }
}

extension UInt32: WeirElement {
    public static var elementType: ElementType { .u32 }
}

extension UInt8: WeirElement {
    public static var elementType: ElementType { .bytes }
}

extension ElementType {
    /// Bytes per element, as the core counts them.
    var stride: Int {
        switch self {
        case .bytes: 1
        case .f32, .i32, .u32: 4
        }
    }
}

/// `value` as a count or offset for Rust, refusing a negative one in the
/// caller's words.
func nonNegative(_ value: Int, _ what: String) throws(WeirError) -> UInt64 {
    guard let converted = UInt64(exactly: value) else {
        throw .invalidArgument(description: "negative \(what) \(value)")
    }
    return converted
}

/// How many of `buffer`'s elements `bytes` bytes of host memory are, refusing
/// a part of one (a buffer counts its ranges in its own elements).
func wholeElements(of buffer: Buffer, inBytes bytes: Int, of host: String) throws(WeirError) -> UInt64 {
    let element = buffer.elementType
    guard bytes % element.stride == 0 else {
        throw .invalidArgument(description: "\(bytes) bytes of \(host) are not a whole number of the buffer's \(element) elements")
    }
    return UInt64(bytes / element.stride)
}

extension Buffer {
    /// What the buffer holds.
    public var elementType: ElementType { elementTypeOfBuffer() }

    /// How many elements the buffer holds (a view: in its range). Every
    /// count and offset of a buffer is in its elements; `sizeBytes()` is the
    /// same in bytes.
    public var count: Int { Int(clamping: elementCount()) }

    /// The `count` elements from element `first` of this buffer (or view), as
    /// a buffer of its own over the same memory: an argument like any buffer,
    /// whose ops see only its range. A write to it publishes a new version of
    /// the whole buffer, so every stream orders after it as after a write to
    /// the buffer. A range past the end is `.outOfRange`; an empty one `.invalidArgument`.
    public func view(first: Int, count: Int) throws -> Buffer {
        try view(first: nonNegative(first, "first element"), count: nonNegative(count, "element count"))
    }
}

// MARK: - Typed buffers

extension WeirStream {
    /// A buffer of `T` holding `values`, uploaded on this stream.
    /// The array is lent to Rust for the call, which copies it once, as an
    /// upload from Rust does: no `Data` or `RustBuffer` copy in between.
    public func upload<T: WeirElement>(_ values: [T]) throws -> Buffer {
        try values.withUnsafeBytes { try uploadBorrowed(data: Data.borrowing($0), element: T.elementType) }
    }

    /// A buffer of `count` zeroed elements of `T`: allocated, zeroed on the
    /// device and published in one admission, with no host data.
    public func zeros<T: WeirElement>(count: Int, of type: T.Type) throws -> Buffer {
        try zeros(count: nonNegative(count, "element count"), element: T.elementType)
    }

    /// A buffer of `count` elements of `T` with unspecified contents.
    public func empty<T: WeirElement>(count: Int, of type: T.Type) throws -> Buffer {
        try empty(count: nonNegative(count, "element count"), element: T.elementType)
    }

    /// Reads the whole of `buffer` (or of a view) as `T`s, once its latest
    /// write (on any stream) is done: `T` is the buffer's element type (or
    /// any, for a raw-bytes buffer, or `UInt8`, its bytes); another is refused
    /// with `.invalidArgument`. `as:` may be left out where the result's type
    /// says it. Cancelling the Task ends the wait with `CancellationError`.
    /// The bytes are copied once out of Rust, into the new array.
    public func read<T: WeirElement>(_ buffer: Buffer, as type: T.Type = T.self) async throws -> [T] {
        let bytes = buffer.sizeBytes()
        let stride = MemoryLayout<T>.stride
        guard bytes % UInt64(stride) == 0, let count = Int(exactly: bytes / UInt64(stride)) else {
            throw WeirError.invalidArgument(description: "\(bytes) bytes are not a whole number of \(T.self) (\(stride) bytes each)")
        }
        let length = buffer.elementCount()
        let host = try await cancellable {
            try await self.readHost(buffer: buffer, offset: 0, len: length, element: T.elementType, cancel: $0)
        }
        return [T](unsafeUninitializedCapacity: count) { storage, initialized in
            host.copy(into: UnsafeMutableRawBufferPointer(storage))
            initialized = count
        }
    }

    /// Enqueues writing `values` into `buffer` from element `index` on; returns
    /// once admitted (the values are copied by then), not once done. `T` is the
    /// buffer's element type (or any, for a raw-bytes buffer, or `UInt8`: raw
    /// bytes, a whole number of the buffer's elements); another is refused with
    /// `.invalidArgument`. A range past the end is `.outOfRange`, in elements.
    /// The array is lent to Rust for the call.
    public func write<T: WeirElement>(_ values: [T], to buffer: Buffer, at index: Int = 0) throws {
        let offset = try nonNegative(index, "element offset")
        try values.withUnsafeBytes {
            try writeBorrowed(buffer: buffer, offset: offset, data: Data.borrowing($0), element: T.elementType)
        }
    }

    /// Writes `values` into `buffer` from element `index` on as `write` does,
    /// then suspends until this stream has done it.
    /// Cancelling the Task ends the wait with `CancellationError`.
    public func writeAndWait<T: WeirElement>(_ values: [T], to buffer: Buffer, at index: Int = 0) async throws {
        try write(values, to: buffer, at: index)
        try await sync()
    }
}

// Array literals of whole numbers are `[Int]` in Swift, and of fractions
// `[Double]`, neither of which a buffer holds: these say so at compile time,
// where the generic calls would only answer "no exact matches".

extension WeirStream {
    @available(*, unavailable, message: "[1, 2, 3] is an [Int] in Swift, which no buffer holds: write [1, 2, 3] as [Int32] (or [UInt32], [Float])")
    public func upload(_ values: [Int]) throws -> Buffer { fatalError("unavailable") }

    @available(*, unavailable, message: "[1.5, 2] is a [Double] in Swift, which no buffer holds: write [1.5, 2] as [Float]")
    public func upload(_ values: [Double]) throws -> Buffer { fatalError("unavailable") }

    @available(*, unavailable, message: "[1, 2, 3] is an [Int] in Swift, which no buffer holds: write [1, 2, 3] as [Int32] (or [UInt32], [Float])")
    public func write(_ values: [Int], to buffer: Buffer, at index: Int = 0) throws { fatalError("unavailable") }

    @available(*, unavailable, message: "[1.5, 2] is a [Double] in Swift, which no buffer holds: write [1.5, 2] as [Float]")
    public func write(_ values: [Double], to buffer: Buffer, at index: Int = 0) throws { fatalError("unavailable") }

    @available(*, unavailable, message: "[1, 2, 3] is an [Int] in Swift, which no buffer holds: write [1, 2, 3] as [Int32] (or [UInt32], [Float])")
    public func writeAndWait(_ values: [Int], to buffer: Buffer, at index: Int = 0) async throws { fatalError("unavailable") }

    @available(*, unavailable, message: "[1.5, 2] is a [Double] in Swift, which no buffer holds: write [1.5, 2] as [Float]")
    public func writeAndWait(_ values: [Double], to buffer: Buffer, at index: Int = 0) async throws { fatalError("unavailable") }
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
/// kernel with `executeAndWait`). The same on every backend. Each takes
/// buffers (or views) of one element type, named below; a buffer of another
/// is refused with `.invalidArgument` (a raw-bytes buffer goes with any).
extension WeirStream {
    private func builtin(_ op: BuiltinOp, _ args: [Arg]) throws {
        let kernel = Builtins.kernel(op)
        // One C call where it takes the op (`EncodedOp.swift`), else the generated one.
        if try admitEncoded(kernel, args) { return }
        try execute(kernel: kernel, grid: Grid(), args: args)
    }

    /// Every element of `buffer` (of `Float`) becomes `value`.
    public func fill(_ buffer: Buffer, with value: Float) throws {
        try builtin(.fillF32, [.write(buffer), .f32(value: value)])
    }

    /// Every element of `buffer` (of `UInt32`) becomes `value`.
    public func fill(_ buffer: Buffer, with value: UInt32) throws {
        try builtin(.fillU32, [.write(buffer), .u32(value: value)])
    }

    /// Every element of `buffer` (of `Int32`) becomes `value`.
    public func fill(_ buffer: Buffer, with value: Int32) throws {
        try builtin(.fillI32, [.write(buffer), .i32(value: value)])
    }

    /// Copies `source` into `destination` (one element type, equal sizes).
    public func copy(_ source: Buffer, to destination: Buffer) throws {
        try builtin(.copy, [.read(source), .write(destination)])
    }

    /// `out = a + b`, element-wise over `Float` buffers.
    public func add(_ a: Buffer, _ b: Buffer, into out: Buffer) throws {
        try builtin(.add, [.read(a), .read(b), .write(out)])
    }

    /// `out = a · b`, element-wise over `Float` buffers.
    public func mul(_ a: Buffer, _ b: Buffer, into out: Buffer) throws {
        try builtin(.mul, [.read(a), .read(b), .write(out)])
    }

    /// `out = alpha · x` over `Float` buffers.
    public func scale(_ x: Buffer, by alpha: Float, into out: Buffer) throws {
        try builtin(.scale, [.read(x), .write(out), .f32(value: alpha)])
    }

    /// `y = alpha · x + y` over `Float` buffers.
    public func axpy(_ alpha: Float, _ x: Buffer, _ y: Buffer) throws {
        try builtin(.axpy, [.read(x), .readWrite(y), .f32(value: alpha)])
    }

    /// `out[i] = start + i` over a `UInt32` buffer.
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
        case .outOfMemory(_, _, let text), .queueFull(_, _, let text):
            return text
        case .invalidArgument(let text), .outOfRange(let text), .foreignHandle(let text), .closed(let text),
            .bug(let text), .cancelled(let text):
            return text
        }
    }

    public var description: String { message }
}
