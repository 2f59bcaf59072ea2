// Batches: many ops admitted in one call, each its own op.

import Foundation

/// The ops of one `WeirStream.batch`, collected in the order they are made and
/// admitted together when the closure returns; or of one `WeirStream.record`,
/// recorded as a graph when the closure returns.
///
/// Its calls mirror the stream's (`execute`, the built-in ops, `write`), but
/// they only collect: nothing is checked or admitted until the closure
/// returns. Each buffer and kernel crosses into Rust once per batch, however
/// many ops use it.
public final class Batch {
    fileprivate var buffers: [Buffer] = []
    fileprivate var kernels: [Kernel] = []
    /// The ops in the encoding `WeirStream.submitBatch` reads (weir-ffi's `batch.rs`).
    fileprivate var encoded: [UInt8] = []
    /// How many ops were added.
    public private(set) var count = 0
    private var bufferSlots: [ObjectIdentifier: UInt32] = [:]
    private var kernelSlots: [ObjectIdentifier: UInt32] = [:]
    private var lastBuffer: ObjectIdentifier?
    private var lastBufferSlot: UInt32 = 0
    private var lastBuiltin: BuiltinOp?
    private var lastBuiltinSlot: UInt32 = 0

    /// The grid built-in ops take, sent as the encoding's default.
    private static let defaultGrid = Grid()

    fileprivate init() {}

    /// Adds `kernel` over `args` on `grid`, as `WeirStream.execute` would enqueue it.
    public func execute(kernel: Kernel, grid: Grid, args: [Arg]) {
        beginExecute(slot(of: kernel), grid: grid, arguments: args.count)
        for arg in args {
            switch arg {
            case .buffer(let buffer, let access): putBuffer(buffer, access)
            case .u32(let value): putScalar(EncodedTag.u32, value)
            case .i32(let value): putScalar(EncodedTag.i32, UInt32(bitPattern: value))
            case .f32(let value): putScalar(EncodedTag.f32, value.bitPattern)
            case .u64(let value): putWide(EncodedTag.u64, value)
            case .i64(let value): putWide(EncodedTag.i64, UInt64(bitPattern: value))
            case .f64(let value): putWide(EncodedTag.f64, value.bitPattern)
            case .bytes(let value):
                encoded.append(EncodedTag.bytes)
                put(UInt32(value.count))
                encoded.append(contentsOf: value)
            }
        }
        count += 1
    }

    /// Adds a copy of `data` (raw bytes, a whole number of the buffer's
    /// elements) into `buffer` at element `offset`.
    public func write(buffer: Buffer, data: Data, offset: UInt64 = 0) {
        beginWrite(buffer, element: .bytes, offset: offset, bytes: data.count)
        encoded.append(contentsOf: data)
        count += 1
    }

    /// Adds a copy of `values` into `buffer` from element `index` on. A
    /// negative `index` is refused here; the rest (the range, in elements,
    /// and `T` against the buffer's type) when the batch is admitted.
    public func write<T: WeirElement>(_ values: [T], to buffer: Buffer, at index: Int = 0) throws {
        let offset = try nonNegative(index, "element offset")
        values.withUnsafeBytes { bytes in
            beginWrite(buffer, element: T.elementType, offset: offset, bytes: bytes.count)
            encoded.append(contentsOf: bytes)
        }
        count += 1
    }

    @available(*, unavailable, message: "[1, 2, 3] is an [Int] in Swift, which no buffer holds: write [1, 2, 3] as [Int32] (or [UInt32], [Float])")
    public func write(_ values: [Int], to buffer: Buffer, at index: Int = 0) throws { fatalError("unavailable") }

    @available(*, unavailable, message: "[1.5, 2] is a [Double] in Swift, which no buffer holds: write [1.5, 2] as [Float]")
    public func write(_ values: [Double], to buffer: Buffer, at index: Int = 0) throws { fatalError("unavailable") }

    /// The write op's tag, buffer slot, data type, element offset and byte length.
    private func beginWrite(_ buffer: Buffer, element: ElementType, offset: UInt64, bytes: Int) {
        encoded.append(EncodedTag.write)
        put(slot(of: buffer))
        encoded.append(EncodedTag.element(element))
        put(offset)
        put(UInt64(bytes))
    }

    // The built-in ops encode their arguments directly: no `[Arg]` per op.

    /// Every element of `buffer` (of `Float`) becomes `value`.
    public func fill(_ buffer: Buffer, with value: Float) { fill(.fillF32, buffer, EncodedTag.f32, value.bitPattern) }

    /// Every element of `buffer` (of `UInt32`) becomes `value`.
    public func fill(_ buffer: Buffer, with value: UInt32) { fill(.fillU32, buffer, EncodedTag.u32, value) }

    /// Every element of `buffer` (of `Int32`) becomes `value`.
    public func fill(_ buffer: Buffer, with value: Int32) { fill(.fillI32, buffer, EncodedTag.i32, UInt32(bitPattern: value)) }

    /// Copies `source` into `destination` (one element type, equal sizes).
    public func copy(_ source: Buffer, to destination: Buffer) {
        builtin(.copy, arguments: 2)
        putBuffer(source, .read)
        putBuffer(destination, .write)
        count += 1
    }

    /// `out = a + b`, element-wise over `Float` buffers.
    public func add(_ a: Buffer, _ b: Buffer, into out: Buffer) { binary(.add, a, b, out) }

    /// `out = a · b`, element-wise over `Float` buffers.
    public func mul(_ a: Buffer, _ b: Buffer, into out: Buffer) { binary(.mul, a, b, out) }

    /// `out = alpha · x` over `Float` buffers.
    public func scale(_ x: Buffer, by alpha: Float, into out: Buffer) {
        builtin(.scale, arguments: 3)
        putBuffer(x, .read)
        putBuffer(out, .write)
        putScalar(EncodedTag.f32, alpha.bitPattern)
        count += 1
    }

    /// `y = alpha · x + y` over `Float` buffers.
    public func axpy(_ alpha: Float, _ x: Buffer, _ y: Buffer) {
        builtin(.axpy, arguments: 3)
        putBuffer(x, .read)
        putBuffer(y, .readWrite)
        putScalar(EncodedTag.f32, alpha.bitPattern)
        count += 1
    }

    /// `out[i] = start + i` over a `UInt32` buffer.
    public func iota(_ out: Buffer, from start: UInt32 = 0) { fill(.iota, out, EncodedTag.u32, start) }

    /// `op(dst: write, scalar)`: the fills and iota.
    private func fill(_ op: BuiltinOp, _ buffer: Buffer, _ tag: UInt8, _ bits: UInt32) {
        builtin(op, arguments: 2)
        putBuffer(buffer, .write)
        putScalar(tag, bits)
        count += 1
    }

    private func binary(_ op: BuiltinOp, _ a: Buffer, _ b: Buffer, _ out: Buffer) {
        builtin(op, arguments: 3)
        putBuffer(a, .read)
        putBuffer(b, .read)
        putBuffer(out, .write)
        count += 1
    }

    private func builtin(_ op: BuiltinOp, arguments: Int) {
        if op != lastBuiltin {
            lastBuiltinSlot = slot(of: Builtins.kernel(op))
            lastBuiltin = op
        }
        beginExecute(lastBuiltinSlot, grid: nil, arguments: arguments)
    }

    /// The op's tag, kernel slot, grid (nil: the default) and argument count.
    private func beginExecute(_ kernel: UInt32, grid: Grid?, arguments: Int) {
        encoded.append(EncodedTag.execute)
        put(kernel)
        if let grid, grid != Batch.defaultGrid {
            encoded.append(EncodedTag.givenGrid)
            for field in [grid.groupsX, grid.groupsY, grid.groupsZ, grid.blockX, grid.blockY, grid.blockZ, grid.sharedBytes] {
                put(field)
            }
        } else {
            encoded.append(EncodedTag.defaultGrid)
        }
        put(UInt32(arguments))
    }

    private func putBuffer(_ buffer: Buffer, _ access: Access) {
        encoded.append(EncodedTag.buffer)
        put(slot(of: buffer))
        encoded.append(EncodedTag.access(access))
    }

    private func putScalar(_ tag: UInt8, _ bits: UInt32) {
        encoded.append(tag)
        put(bits)
    }

    private func putWide(_ tag: UInt8, _ bits: UInt64) {
        encoded.append(tag)
        put(bits)
    }

    private func put(_ value: UInt32) {
        withUnsafeBytes(of: value.littleEndian) { encoded.append(contentsOf: $0) }
    }

    private func put(_ value: UInt64) {
        withUnsafeBytes(of: value.littleEndian) { encoded.append(contentsOf: $0) }
    }

    // The arrays hold every object with a slot, so its identifier stays
    // unique. Ops in a row often name the same buffer: the last one found
    // skips the dictionary.
    private func slot(of buffer: Buffer) -> UInt32 {
        let id = ObjectIdentifier(buffer)
        if id == lastBuffer { return lastBufferSlot }
        let slot: UInt32
        if let found = bufferSlots[id] {
            slot = found
        } else {
            slot = UInt32(buffers.count)
            buffers.append(buffer)
            bufferSlots[id] = slot
        }
        (lastBuffer, lastBufferSlot) = (id, slot)
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

/// The tags of the batch encoding (weir-ffi's `batch.rs`), shared with `EncodedOp.swift`.
enum EncodedTag {
    static let execute: UInt8 = 0
    static let write: UInt8 = 1
    static let defaultGrid: UInt8 = 0
    static let givenGrid: UInt8 = 1
    static let buffer: UInt8 = 0
    static let u32: UInt8 = 1
    static let i32: UInt8 = 2
    static let f32: UInt8 = 3
    static let u64: UInt8 = 4
    static let i64: UInt8 = 5
    static let f64: UInt8 = 6
    static let bytes: UInt8 = 7

    static func access(_ access: Access) -> UInt8 {
        switch access {
        case .read: 0
        case .write: 1
        case .readWrite: 2
        }
    }

    /// A write's data type: raw bytes go into any buffer, the rest into one of their type.
    static func element(_ element: ElementType) -> UInt8 {
        switch element {
        case .bytes: 0
        case .f32: 1
        case .i32: 2
        case .u32: 3
        }
    }
}

extension WeirStream {
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

    /// Records every op `build` adds, in order, as a `Graph`, admitting none:
    /// `replay(_:)` then admits all of them as one op, any number of times, on
    /// any stream of this runtime (each replay waits for what its ops read and
    /// publishes one version of what they write). The buffers named stay alive
    /// while the graph does. Nothing recorded is `invalidArgument`, as is any
    /// op the stream would refuse.
    public func record(_ build: (Batch) throws -> Void) throws -> Graph {
        let batch = Batch()
        try build(batch)
        return try recordBatch(buffers: batch.buffers, kernels: batch.kernels, ops: Data(batch.encoded))
    }
}
