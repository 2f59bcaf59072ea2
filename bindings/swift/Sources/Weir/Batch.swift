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
    /// Why the batch cannot be admitted, found while collecting (its calls
    /// only collect): thrown when the closure returns, and nothing is admitted.
    fileprivate var refusal: WeirError?

    /// The grid built-in ops take, sent as the encoding's default.
    private static let defaultGrid = Grid()

    fileprivate init() {}

    /// Adds `kernel` over `args` on `grid`, as `WeirStream.execute` would enqueue it.
    public func execute(kernel: Kernel, grid: Grid, args: [Arg]) {
        guard lendable(args.reduce(0) { $0 + $1.encodedSize }) else { return }
        beginExecute(slot(of: kernel), grid: grid, arguments: args.count)
        for arg in args {
            encoded.put(arg, slot: arg.bufferArgument.map { slot(of: $0) } ?? 0)
        }
        count += 1
    }

    /// Adds a copy of `data` (raw bytes, a whole number of the buffer's
    /// elements) into `buffer` at element `offset`.
    public func write(buffer: Buffer, data: Data, offset: UInt64 = 0) {
        guard lendable(data.count) else { return }
        beginWrite(buffer, element: .bytes, offset: offset, bytes: data.count)
        encoded.put(data)
        count += 1
    }

    /// Adds a copy of `values` into `buffer` from element `index` on. A
    /// negative `index` is refused here; the rest (the range, in elements,
    /// and `T` against the buffer's type) when the batch is admitted.
    public func write<T: WeirElement>(_ values: [T], to buffer: Buffer, at index: Int = 0) throws {
        let offset = try nonNegative(index, "element offset")
        try Data.checkLendable(encoded.count + values.count * MemoryLayout<T>.stride)
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

    /// False, the batch refused, when `bytes` more would take its encoding
    /// past what one call lends to Rust (`Data.mostLent`).
    private func lendable(_ bytes: Int) -> Bool {
        if refusal == nil, bytes > Data.mostLent - encoded.count {
            refusal = Data.tooLong(encoded.count + bytes)
        }
        return refusal == nil
    }

    /// The write op's tag, buffer slot, data type, element offset and byte length.
    private func beginWrite(_ buffer: Buffer, element: ElementType, offset: UInt64, bytes: Int) {
        encoded.put(EncodedTag.write)
        encoded.put(slot(of: buffer))
        encoded.put(EncodedTag.element(element))
        encoded.put(offset)
        encoded.put(UInt64(bytes))
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
        encoded.put(EncodedTag.execute)
        encoded.put(kernel)
        if let grid, grid != Batch.defaultGrid {
            encoded.put(EncodedTag.givenGrid)
            for field in [grid.groupsX, grid.groupsY, grid.groupsZ, grid.blockX, grid.blockY, grid.blockZ, grid.sharedBytes] {
                encoded.put(field)
            }
        } else {
            encoded.put(EncodedTag.defaultGrid)
        }
        encoded.put(UInt32(arguments))
    }

    private func putBuffer(_ buffer: Buffer, _ access: Access) {
        encoded.putBuffer(slot: slot(of: buffer), access)
    }

    private func putScalar(_ tag: UInt8, _ bits: UInt32) {
        encoded.put(tag)
        encoded.put(bits)
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

/// Where an op's bytes go, little-endian: a batch's growing array, or one
/// op's stack memory (`EncodedOp.swift`).
protocol OpBytes {
    mutating func put(_ byte: UInt8)
    mutating func put(_ word: UInt32)
    mutating func put(_ word: UInt64)
    mutating func put(_ data: Data)
}

extension OpBytes {
    /// A buffer argument: its tag, its slot among the call's buffers, its access.
    mutating func putBuffer(slot: UInt32, _ access: Access) {
        put(EncodedTag.buffer)
        put(slot)
        put(EncodedTag.access(access))
    }

    /// One argument of an op: its tag, then its bits; a buffer's `slot`
    /// among the call's buffers (ignored for the others).
    mutating func put(_ arg: Arg, slot: UInt32) {
        switch arg {
        case .buffer(_, let access): putBuffer(slot: slot, access)
        case .u32(let value): put(EncodedTag.u32); put(value)
        case .i32(let value): put(EncodedTag.i32); put(UInt32(bitPattern: value))
        case .f32(let value): put(EncodedTag.f32); put(value.bitPattern)
        case .u64(let value): put(EncodedTag.u64); put(value)
        case .i64(let value): put(EncodedTag.i64); put(UInt64(bitPattern: value))
        case .f64(let value): put(EncodedTag.f64); put(value.bitPattern)
        case .bytes(let value):
            put(EncodedTag.bytes)
            put(UInt32(value.count))
            put(value)
        }
    }
}

extension Array: OpBytes where Element == UInt8 {
    mutating func put(_ byte: UInt8) { append(byte) }
    mutating func put(_ word: UInt32) { Swift.withUnsafeBytes(of: word.littleEndian) { append(contentsOf: $0) } }
    mutating func put(_ word: UInt64) { Swift.withUnsafeBytes(of: word.littleEndian) { append(contentsOf: $0) } }
    mutating func put(_ data: Data) { append(contentsOf: data) }
}

extension Arg {
    /// The buffer of a buffer argument.
    var bufferArgument: Buffer? {
        switch self {
        case .buffer(let buffer, _): buffer
        default: nil
        }
    }

    /// The bytes it takes in the encoding.
    var encodedSize: Int {
        switch self {
        case .buffer: 6
        case .u32, .i32, .f32: 5
        case .u64, .i64, .f64: 9
        case .bytes(let value): 5 + value.count
        }
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
        if let refusal = batch.refusal { throw refusal }
        try Data.checkLendable(batch.encoded.count)
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
        if let refusal = batch.refusal { throw refusal }
        try Data.checkLendable(batch.encoded.count)
        return try recordBatch(buffers: batch.buffers, kernels: batch.kernels, ops: Data(batch.encoded))
    }
}
