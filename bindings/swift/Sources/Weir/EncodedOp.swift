// One op admitted through one C call: the Swift side of weir-ffi's `encoded.rs`.

import Foundation
import WeirFFI

extension WeirStream {
    /// Admits `kernel` over `args` on the default grid through weir-ffi's C
    /// entry for one encoded op: the op written on the stack as one op of the
    /// batch encoding (`Batch.swift`), the handles handed over. The generated
    /// `execute` serialises its grid and its argument list into two
    /// `RustBuffer`s instead, each allocated by a call into Rust and parsed
    /// there. False where the entry does not take the op (an encoding it
    /// cannot read): make the generated call then. Throws the core's
    /// refusal, typed as every error is.
    func admitEncoded(_ kernel: Kernel, _ args: [Arg]) throws -> Bool {
        var buffers = 0
        // The op's tag, kernel slot, grid tag and argument count, then each argument.
        var size = 10
        for arg in args {
            size += arg.encodedSize
            if case .buffer = arg { buffers += 1 }
        }
        let outcome = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: size) { bytes in
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
                        handles[slot] = buffer.uniffiCloneHandle()
                        slot += 1
                    }
                }
                // Every handle given is the entry's to let go, whatever it answers.
                return weir_ffi_execute_encoded(
                    uniffiCloneHandle(), kernel.uniffiCloneHandle(),
                    op.start, op.count, UnsafePointer(handles.baseAddress), slot)
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
