// Batches: many ops admitted in one call, each its own op.

import Foundation

/// The ops of one `Stream.batch`, collected in the order they are made and
/// admitted together when the closure returns.
///
/// Its calls mirror the stream's (`execute`, the built-in ops, `write`), but
/// they only collect: nothing is checked or admitted until the closure
/// returns. Each buffer and kernel crosses into Rust once per batch, however
/// many ops use it.
public final class Batch {
    fileprivate var buffers: [Buffer] = []
    fileprivate var kernels: [Kernel] = []
    /// The ops in the encoding `Stream.submitBatch` reads (weir-ffi's `batch.rs`).
    fileprivate var encoded: [UInt8] = []
    /// How many ops were added.
    public private(set) var count = 0
    private var bufferSlots: [ObjectIdentifier: UInt32] = [:]
    private var kernelSlots: [ObjectIdentifier: UInt32] = [:]

    /// The grid built-in ops take, sent as the encoding's default.
    private static let defaultGrid = Grid()

    fileprivate init() {}

    /// Adds `kernel` over `args` on `grid`, as `Stream.execute` would enqueue it.
    public func execute(kernel: Kernel, grid: Grid, args: [Arg]) {
        encoded.append(Tag.execute)
        put(slot(of: kernel))
        if grid == Batch.defaultGrid {
            encoded.append(Tag.defaultGrid)
        } else {
            encoded.append(Tag.givenGrid)
            for field in [grid.groupsX, grid.groupsY, grid.groupsZ, grid.blockX, grid.blockY, grid.blockZ, grid.sharedBytes] {
                put(field)
            }
        }
        put(UInt32(args.count))
        for arg in args {
            switch arg {
            case .buffer(let buffer, let access):
                encoded.append(Tag.buffer)
                put(slot(of: buffer))
                encoded.append(Tag.access(access))
            case .u32(let value):
                encoded.append(Tag.u32)
                put(value)
            case .i32(let value):
                encoded.append(Tag.i32)
                put(UInt32(bitPattern: value))
            case .f32(let value):
                encoded.append(Tag.f32)
                put(value.bitPattern)
            }
        }
        count += 1
    }

    /// Adds a copy of `data` into `buffer` at byte `offset`.
    public func write(buffer: Buffer, data: Data, offset: UInt64 = 0) {
        encoded.append(Tag.write)
        put(slot(of: buffer))
        put(offset)
        put(UInt64(data.count))
        encoded.append(contentsOf: data)
        count += 1
    }

    /// Adds a copy of `values` into `buffer` from element `index` on; a bad
    /// `index` is reported in elements, as given, when it is added.
    public func write<T: DeviceScalar>(_ values: [T], to buffer: Buffer, at index: Int = 0) throws {
        let offset = try byteOffset(ofElement: index, writing: values.count, into: buffer, of: T.self)
        encoded.append(Tag.write)
        put(slot(of: buffer))
        put(offset)
        values.withUnsafeBytes { bytes in
            put(UInt64(bytes.count))
            encoded.append(contentsOf: bytes)
        }
        count += 1
    }

    private func builtin(_ op: BuiltinOp, _ args: [Arg]) {
        execute(kernel: Builtins.kernel(op), grid: Grid(), args: args)
    }

    /// Every element of `buffer` becomes `value`.
    public func fill(_ buffer: Buffer, with value: Float) { builtin(.fillF32, [.write(buffer), .f32(value: value)]) }

    /// Every element of `buffer` becomes `value`.
    public func fill(_ buffer: Buffer, with value: UInt32) { builtin(.fillU32, [.write(buffer), .u32(value: value)]) }

    /// Every element of `buffer` becomes `value`.
    public func fill(_ buffer: Buffer, with value: Int32) { builtin(.fillI32, [.write(buffer), .i32(value: value)]) }

    /// Copies `source` into `destination` (equal sizes).
    public func copy(_ source: Buffer, to destination: Buffer) { builtin(.copy, [.read(source), .write(destination)]) }

    /// `out = a + b`, element-wise over `Float`s.
    public func add(_ a: Buffer, _ b: Buffer, into out: Buffer) { builtin(.add, [.read(a), .read(b), .write(out)]) }

    /// `out = a · b`, element-wise over `Float`s.
    public func mul(_ a: Buffer, _ b: Buffer, into out: Buffer) { builtin(.mul, [.read(a), .read(b), .write(out)]) }

    /// `out = alpha · x` over `Float`s.
    public func scale(_ x: Buffer, by alpha: Float, into out: Buffer) {
        builtin(.scale, [.read(x), .write(out), .f32(value: alpha)])
    }

    /// `y = alpha · x + y` over `Float`s.
    public func axpy(_ alpha: Float, _ x: Buffer, _ y: Buffer) {
        builtin(.axpy, [.read(x), .readWrite(y), .f32(value: alpha)])
    }

    /// `out[i] = start + i` over `UInt32`s.
    public func iota(_ out: Buffer, from start: UInt32 = 0) { builtin(.iota, [.write(out), .u32(value: start)]) }

    private func put(_ value: UInt32) {
        withUnsafeBytes(of: value.littleEndian) { encoded.append(contentsOf: $0) }
    }

    private func put(_ value: UInt64) {
        withUnsafeBytes(of: value.littleEndian) { encoded.append(contentsOf: $0) }
    }

    // The arrays hold every object with a slot, so its identifier stays unique.
    private func slot(of buffer: Buffer) -> UInt32 {
        if let slot = bufferSlots[ObjectIdentifier(buffer)] { return slot }
        let slot = UInt32(buffers.count)
        buffers.append(buffer)
        bufferSlots[ObjectIdentifier(buffer)] = slot
        return slot
    }

    private func slot(of kernel: Kernel) -> UInt32 {
        if let slot = kernelSlots[ObjectIdentifier(kernel)] { return slot }
        let slot = UInt32(kernels.count)
        kernels.append(kernel)
        kernelSlots[ObjectIdentifier(kernel)] = slot
        return slot
    }
}

/// The tags of the batch encoding.
private enum Tag {
    static let execute: UInt8 = 0
    static let write: UInt8 = 1
    static let defaultGrid: UInt8 = 0
    static let givenGrid: UInt8 = 1
    static let buffer: UInt8 = 0
    static let u32: UInt8 = 1
    static let i32: UInt8 = 2
    static let f32: UInt8 = 3

    static func access(_ access: Access) -> UInt8 {
        switch access {
        case .read: 0
        case .write: 1
        case .readWrite: 2
        }
    }
}

extension Stream {
    /// Admits every op `build` adds, in order, in one call: each its own op
    /// (its own versions, its own failure), with no op of any stream between
    /// them. Everything is checked before anything is admitted, so one
    /// refused op admits none. Returns once admitted, not once done. An empty
    /// batch admits nothing.
    public func batch(_ build: (Batch) throws -> Void) throws {
        let batch = Batch()
        try build(batch)
        guard batch.count > 0 else { return }
        try submitBatch(buffers: batch.buffers, kernels: batch.kernels, ops: Data(batch.encoded))
    }
}
