// Custom kernels for the CPU backend, written in Swift: the CPU backend runs
// no kernel source, so a custom kernel's CPU implementation is a closure,
// called on the stream's worker thread with the launch's memory.
//
// weir-ffi lends the memory by address for the call only (`CpuKernelCall`);
// this layer copies it in and out of Swift arrays under a lock that the
// call's end takes too, so nothing a closure keeps can reach that memory
// once the call is over, and turns a thrown error into the message that
// fails the op.

import Foundation

/// The arguments of one launch of a custom kernel's CPU closure, in
/// declaration order, buffers and scalars each counted on their own:
/// `[.read(x), .write(out), .f32(value: a), .u32(value: n)]` is buffers 0
/// and 1, scalars 0 and 1.
///
/// Buffers are read and written as Swift arrays: ``values(_:as:)`` copies
/// one out, ``update(_:as:_:)`` lends a copy to a closure and writes it back
/// when the closure returns. The device memory is lent for the call only: an
/// array kept past it is the caller's own copy, and every use of the
/// arguments after the kernel's closure returned (from any thread) throws
/// `.invalidArgument`, so nothing can reach memory the runtime owns.
public struct CpuKernelArguments {
    private let loan: Loan

    init(_ loan: Loan) {
        self.loan = loan
    }

    /// The grid the kernel was launched with (its block is the launch's, as
    /// on every backend).
    public var grid: Grid { loan.call.grid() }

    /// Number of buffer arguments.
    public var bufferCount: Int { Int(loan.call.bufferCount()) }

    /// Number of scalar arguments.
    public var scalarCount: Int { Int(loan.call.scalarCount()) }

    /// A copy of buffer argument `index` as `T`s (any argument, whatever its
    /// access). The call does not know which element type the buffer was made
    /// with: `T` must be it (or `UInt8`, its bytes), and a size that is not a
    /// whole number of `T`s is `.invalidArgument`.
    public func values<T: WeirElement>(_ index: Int, as type: T.Type = T.self) throws -> [T] {
        try loan.withMemory(of: index, as: T.self, writing: false) { memory in Array(memory.bindMemory(to: T.self)) }
    }

    /// Lends `body` buffer argument `index` as `T`s to change, then writes
    /// what it left there back to the device memory: for an argument
    /// declared `.write` or `.readWrite`. One declared `.read` is refused
    /// with `.invalidArgument` (its memory may be shared with other readers).
    /// If `body` throws, nothing is written back.
    public func update<T: WeirElement>(
        _ index: Int, as type: T.Type = T.self, _ body: (inout [T]) throws -> Void
    ) throws {
        var copy: [T] = try loan.withMemory(of: index, as: T.self, writing: true) { memory in Array(memory.bindMemory(to: T.self)) }
        try body(&copy)
        try loan.withMemory(of: index, as: T.self, writing: true) { (memory: UnsafeMutableRawBufferPointer) in
            // The same argument, so the same size: `copy` may have been resized by `body`.
            guard copy.count * MemoryLayout<T>.stride == memory.count else {
                throw WeirError.invalidArgument(
                    description: "buffer argument \(index) holds \(memory.count / MemoryLayout<T>.stride) \(T.self), not \(copy.count)")
            }
            copy.withUnsafeBytes { memory.copyMemory(from: $0) }
        }
    }

    /// Scalar argument `index`, which must be an `.f32`; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: Float.Type = Float.self) throws -> Float {
        try loan.call.scalarF32(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// Scalar argument `index`, which must be an `.i32`; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: Int32.Type = Int32.self) throws -> Int32 {
        try loan.call.scalarI32(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// Scalar argument `index`, which must be a `.u32`; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: UInt32.Type = UInt32.self) throws -> UInt32 {
        try loan.call.scalarU32(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// Scalar argument `index`, which must be a `.u64`; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: UInt64.Type = UInt64.self) throws -> UInt64 {
        try loan.call.scalarU64(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// Scalar argument `index`, which must be an `.i64`; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: Int64.Type = Int64.self) throws -> Int64 {
        try loan.call.scalarI64(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// Scalar argument `index`, which must be an `.f64`; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: Double.Type = Double.self) throws -> Double {
        try loan.call.scalarF64(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// Scalar argument `index`, which must be a `.bytes` (a struct passed by
    /// value): a copy of its bytes; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: Data.Type = Data.self) throws -> Data {
        try loan.call.scalarBytes(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// `index` as the FFI's argument index, refusing one that cannot be an
    /// argument in the caller's words (Rust names the others the same way).
    private func argumentIndex(_ index: Int, _ kind: String, of count: Int) throws -> UInt32 {
        guard let at = UInt32(exactly: index) else {
            throw WeirError.invalidArgument(description: "no \(kind) argument \(index): the kernel has \(count)")
        }
        return at
    }
}

/// One call's lent memory: reached only under `lock`, and only while `open`.
/// The call's end takes the lock to close it, so a thread that found it
/// open finishes with the memory before the call can end.
final class Loan: @unchecked Sendable {
    let call: CpuKernelCall
    private let lock = NSLock()
    private var open = true

    init(_ call: CpuKernelCall) {
        self.call = call
    }

    /// Ends the loan: every later use of the memory is refused.
    func end() {
        lock.withLock { open = false }
    }

    /// Runs `body` over buffer argument `index`'s lent bytes, checked for
    /// size and alignment as `T`s and (when `writing`) the argument's access.
    func withMemory<T: WeirElement, R>(
        of index: Int, as type: T.Type, writing: Bool, _ body: (UnsafeMutableRawBufferPointer) throws -> R
    ) throws -> R {
        try lock.withLock {
            guard open else {
                throw WeirError.invalidArgument(
                    description: "invalid argument: this kernel call is over: its memory is no longer lent")
            }
            let count = Int(call.bufferCount())
            guard let at = UInt32(exactly: index), Int(at) < count else {
                throw WeirError.invalidArgument(description: "no buffer argument \(index): the kernel has \(count)")
            }
            if writing, try !call.bufferWritable(index: at) {
                throw WeirError.invalidArgument(
                    description: "buffer argument \(index) is declared read, so the kernel may not write it")
            }
            let (bytes, address) = (try call.bufferSizeBytes(index: at), try call.bufferAddress(index: at))
            let (stride, alignment) = (MemoryLayout<T>.stride, MemoryLayout<T>.alignment)
            guard bytes % UInt64(stride) == 0, let size = Int(exactly: bytes) else {
                throw WeirError.invalidArgument(
                    description: "buffer argument \(index) holds \(bytes) bytes, not a whole number of \(T.self) (\(stride) bytes each)")
            }
            guard address % UInt64(alignment) == 0 else {
                throw WeirError.invalidArgument(
                    description: "buffer argument \(index) starts at a byte that is not aligned for \(T.self)")
            }
            // The backend's memory, lent for the call and alive while the loan
            // is open (checked above, under the lock the call's end takes).
            let base = UnsafeMutableRawPointer(bitPattern: UInt(address))
            return try body(UnsafeMutableRawBufferPointer(start: size > 0 ? base : nil, count: size))
        }
    }
}

// The arguments are lent to one call on one worker thread: handing them to
// another thread (or keeping them past the call) is what they must not do.
@available(*, unavailable)
extension CpuKernelArguments: Sendable {}

/// A Swift closure as weir-ffi's `CpuKernelBody`: it runs the closure over
/// the call's arguments and reports a thrown error as the op's failure.
private final class CpuKernelClosure: CpuKernelBody {
    private let body: @Sendable (CpuKernelArguments) throws -> Void

    init(_ body: @escaping @Sendable (CpuKernelArguments) throws -> Void) {
        self.body = body
    }

    func run(call: CpuKernelCall) -> String? {
        let loan = Loan(call)
        defer { loan.end() }
        do {
            try body(CpuKernelArguments(loan))
            return nil
        } catch let error as LocalizedError where error.errorDescription != nil {
            return error.errorDescription
        } catch {
            return String(describing: error)
        }
    }
}

extension Kernel {
    /// A custom kernel named `name` whose CPU implementation is `cpu`, a
    /// Swift closure, beside the GPU sources it has (WGSL, CUDA C, HIP C).
    /// One launch, with one grid and one argument list, runs on every backend
    /// the kernel has an implementation for, when the sources take buffers
    /// first and then scalars, and the grid's block (see the README).
    ///
    /// The CPU backend calls `cpu` on the stream's worker thread, once per
    /// launch, with the launch's memory (``CpuKernelArguments``); launches on
    /// several streams may call it at once. An error it throws fails the op,
    /// and the buffers it writes, with the error's description (a
    /// `LocalizedError`'s `errorDescription`); the stream goes on. It runs
    /// while its stream is busy: it must not wait for work on its own stream.
    ///
    /// `cudaModule` and `hipModule` are modules built elsewhere (CUBIN, fatbin
    /// or PTX; HIP code objects), as the generated `custom` takes them.
    public static func custom(
        name: String, wgsl: KernelSource? = nil, cuda: KernelSource? = nil, hip: KernelSource? = nil,
        cudaModule: KernelModule? = nil, hipModule: KernelModule? = nil,
        cpu: @escaping @Sendable (CpuKernelArguments) throws -> Void
    ) -> Kernel {
        custom(
            name: name, wgsl: wgsl, cuda: cuda, hip: hip, cpu: CpuKernelClosure(cpu),
            cudaModule: cudaModule, hipModule: hipModule)
    }
}
