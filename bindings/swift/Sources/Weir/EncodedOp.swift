// One op admitted through one C call: the Swift side of weir-ffi's `encoded.rs`.

import Foundation
import WeirFFI

extension WeirStream {
    /// Admits `kernel` over `args` on the default grid through weir-ffi's C
    /// entry for one encoded op: the op written on the stack as one op of the
    /// batch encoding (`Batch.swift`), the handles lent (`LentHandles`).
    /// The generated `execute` serialises its grid and its argument list into
    /// two `RustBuffer`s instead, each allocated by a call into Rust and
    /// parsed there, and clones every handle by a call of its own. False
    /// where the entry does not take the op (an encoding it cannot read, or
    /// handles that cannot be lent): make the generated call then. Throws
    /// the core's refusal, typed as every error is.
    func admitEncoded(_ kernel: Kernel, _ args: [Arg]) throws -> Bool {
        guard LentHandles.readable else { return false }
        var buffers = 0
        // The op's tag, kernel slot, grid tag and argument count, then each argument.
        var size = 10
        for arg in args {
            size += arg.encodedSize
            if case .buffer = arg { buffers += 1 }
        }
        // The objects stay alive until the entry returns: it only borrows their handles.
        let outcome = withExtendedLifetime((self, kernel, args)) {
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: size) { bytes in
                withUnsafeTemporaryAllocation(of: UInt64.self, capacity: max(buffers, 1)) { handles in
                    var op = OpWriter(bytes)
                    op.put(EncodedTag.execute)
                    op.put(UInt32(0))  // kernel slot 0: `kernel`
                    op.put(EncodedTag.defaultGrid)
                    op.put(UInt32(args.count))
                    var slot = 0
                    for arg in args {
                        op.put(arg, slot: UInt32(slot))
                        if let buffer = arg.bufferArgument {
                            handles[slot] = LentHandles.handle(of: buffer)
                            slot += 1
                        }
                    }
                    return weir_ffi_execute_encoded(
                        LentHandles.handle(of: self), LentHandles.handle(of: kernel),
                        op.start, op.count, UnsafePointer(handles.baseAddress), slot)
                }
            }
        }
        switch outcome {
        case 1: return true
        case 2:
            try takeExecuteRefusal()
            return true
        default: return false
        }
    }
}

/// UniFFI's handles of Weir's objects, read in place for a call that only
/// borrows them. A generated Swift object hands its handle over only through
/// `uniffiCloneHandle()`, a call into Rust that the callee's release
/// matches: for a one-buffer fill, three pairs around the one call that
/// admits it, most of what the binding adds to the op. UniFFI's object
/// template keeps the handle as each class's first stored property
/// (`fileprivate let handle: UInt64`), at a fixed place in the object, so
/// it is read there, as long as the object is kept alive around the call.
///
/// The place is checked once, on a kernel, by reflection (the `handle` that
/// `Mirror` shows is the word read there); the three classes come from the
/// one template. Should an upgrade of UniFFI move or rename it, nothing is
/// read and every op takes the generated call, and `EncodedOpTests` fails
/// (the suite sees this type as the `Testing` SPI).
@_spi(Testing) public enum LentHandles {
    /// True where the handle is where it is read.
    public static let readable: Bool = {
        let probe = Kernel.builtin(op: .fillU32)
        guard let first = Mirror(reflecting: probe).children.first, first.label == "handle",
              let handle = first.value as? UInt64
        else { return false }
        return handle != 0 && handle == Self.handle(of: probe)
    }()

    /// `object`'s handle, for a call that only borrows it: the word after
    /// the object's header (its type and its reference counts).
    public static func handle(of object: AnyObject) -> UInt64 {
        Unmanaged.passUnretained(object).toOpaque().load(fromByteOffset: 2 * MemoryLayout<Int>.size, as: UInt64.self)
    }
}

/// Writes one op's bytes, little-endian, into stack memory sized for them:
/// plain stores, no per-byte calls, so one admission costs what its bytes do.
private struct OpWriter: OpBytes {
    private let bytes: UnsafeMutableRawBufferPointer
    /// Where the bytes start, for the C call.
    let start: UnsafePointer<UInt8>?
    /// Bytes written so far.
    private(set) var count = 0

    init(_ bytes: UnsafeMutableBufferPointer<UInt8>) {
        self.bytes = UnsafeMutableRawBufferPointer(bytes)
        start = UnsafePointer(bytes.baseAddress)
    }

    mutating func put(_ byte: UInt8) {
        bytes.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    mutating func put(_ word: UInt32) {
        bytes.storeBytes(of: word.littleEndian, toByteOffset: count, as: UInt32.self)
        count += 4
    }

    mutating func put(_ word: UInt64) {
        bytes.storeBytes(of: word.littleEndian, toByteOffset: count, as: UInt64.self)
        count += 8
    }

    mutating func put(_ data: Data) {
        data.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: bytes[count...]).copyMemory(from: $0) }
        count += data.count
    }
}
