// Custom kernels for the CPU backend, written in Swift: the CPU backend runs
// no kernel source, so a custom kernel's CPU implementation is a closure,
// called on the stream's worker thread with the launch's memory itself.
//
// weir-ffi lends the memory by address for the call only (`CpuKernelCall`);
// this layer turns the addresses into typed buffer pointers and a thrown
// error into the message that fails the op.

import Foundation

/// The arguments of one launch of a custom kernel's CPU closure, in
/// declaration order, buffers and scalars each counted on their own:
/// `[.read(x), .write(out), .f32(value: a), .u32(value: n)]` is buffers 0
/// and 1, scalars 0 and 1.
///
/// Buffers are the device memory itself (the CPU backend's), lent for the
/// call: like the pointer a `withUnsafeBufferPointer` closure gets, a pointer
/// from ``buffer(_:as:)`` or ``mutableBuffer(_:as:)`` is valid only until the
/// kernel's closure returns, and the arguments refuse every access after
/// that with `.invalidArgument`. A view's pointer covers its range only.
public struct CpuKernelArguments {
    private let call: CpuKernelCall

    init(_ call: CpuKernelCall) {
        self.call = call
    }

    /// The grid the kernel was launched with (its block is the launch's, as
    /// on every backend).
    public var grid: Grid { call.grid() }

    /// Number of buffer arguments.
    public var bufferCount: Int { Int(call.bufferCount()) }

    /// Number of scalar arguments.
    public var scalarCount: Int { Int(call.scalarCount()) }

    /// Buffer argument `index`, read as `T`s (any argument, whatever its
    /// access). The call does not know which element type the buffer was made
    /// with: `T` must be it (or `UInt8`, its bytes), and a size that is not a
    /// whole number of `T`s is `.invalidArgument`.
    public func buffer<T: WeirElement>(_ index: Int, as type: T.Type = T.self) throws -> UnsafeBufferPointer<T> {
        UnsafeBufferPointer(try memory(index, of: T.self, writing: false))
    }

    /// Buffer argument `index`, to read and write as `T`s: an argument
    /// declared `.write` or `.readWrite`. One declared `.read` is refused
    /// with `.invalidArgument` (its memory may be shared with other readers).
    public func mutableBuffer<T: WeirElement>(_ index: Int, as type: T.Type = T.self) throws
        -> UnsafeMutableBufferPointer<T>
    {
        try memory(index, of: T.self, writing: true)
    }

    /// Scalar argument `index`, which must be an `.f32`; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: Float.Type = Float.self) throws -> Float {
        try call.scalarF32(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// Scalar argument `index`, which must be an `.i32`; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: Int32.Type = Int32.self) throws -> Int32 {
        try call.scalarI32(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// Scalar argument `index`, which must be a `.u32`; another is `.invalidArgument`.
    public func scalar(_ index: Int, as type: UInt32.Type = UInt32.self) throws -> UInt32 {
        try call.scalarU32(index: argumentIndex(index, "scalar", of: scalarCount))
    }

    /// The lent memory of buffer argument `index` as `T`s, checked for size,
    /// alignment and (when `writing`) the argument's access.
    private func memory<T: WeirElement>(_ index: Int, of type: T.Type, writing: Bool) throws
        -> UnsafeMutableBufferPointer<T>
    {
        let at = try argumentIndex(index, "buffer", of: bufferCount)
        if writing, try !call.bufferWritable(index: at) {
            throw WeirError.invalidArgument(
                description: "buffer argument \(index) is declared read, so the kernel may not write it")
        }
        let (bytes, address) = (try call.bufferSizeBytes(index: at), try call.bufferAddress(index: at))
        let (stride, alignment) = (MemoryLayout<T>.stride, MemoryLayout<T>.alignment)
        guard bytes % UInt64(stride) == 0, let count = Int(exactly: bytes / UInt64(stride)) else {
            throw WeirError.invalidArgument(
                description: "buffer argument \(index) holds \(bytes) bytes, not a whole number of \(T.self) (\(stride) bytes each)")
        }
        guard address % UInt64(alignment) == 0 else {
            throw WeirError.invalidArgument(
                description: "buffer argument \(index) starts at a byte that is not aligned for \(T.self)")
        }
        guard count > 0, let base = UnsafeMutableRawPointer(bitPattern: UInt(address)) else {
            return UnsafeMutableBufferPointer(start: nil, count: 0)
        }
        // The backend's memory is untyped bytes, lent for the call: binding it
        // to a trivial type is how Swift reads and writes raw memory as `T`.
        return UnsafeMutableBufferPointer(start: base.bindMemory(to: T.self, capacity: count), count: count)
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
        do {
            try body(CpuKernelArguments(call))
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
    public static func custom(
        name: String, wgsl: KernelSource? = nil, cuda: KernelSource? = nil, hip: KernelSource? = nil,
        cpu: @escaping @Sendable (CpuKernelArguments) throws -> Void
    ) -> Kernel {
        custom(name: name, wgsl: wgsl, cuda: cuda, hip: hip, cpu: CpuKernelClosure(cpu))
    }
}
