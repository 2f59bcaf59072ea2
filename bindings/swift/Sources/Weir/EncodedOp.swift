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
            switch arg {
            case .buffer: (buffers, size) = (buffers + 1, size + 6)
            case .u32, .i32, .f32: size += 5
            case .u64, .i64, .f64: size += 9
            case .bytes(let value): size += 5 + value.count
            }
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
                    switch arg {
                    case .buffer(let buffer, let access):
                        handles[slot] = buffer.uniffiCloneHandle()
                        op.put(EncodedTag.buffer)
                        op.put(UInt32(slot))
                        op.put(EncodedTag.access(access))
                        slot += 1
                    case .u32(let value): op.put(EncodedTag.u32, value)
                    case .i32(let value): op.put(EncodedTag.i32, UInt32(bitPattern: value))
                    case .f32(let value): op.put(EncodedTag.f32, value.bitPattern)
                    case .u64(let value): op.put(EncodedTag.u64, value)
                    case .i64(let value): op.put(EncodedTag.i64, UInt64(bitPattern: value))
                    case .f64(let value): op.put(EncodedTag.f64, value.bitPattern)
                    case .bytes(let value):
                        op.put(EncodedTag.bytes, UInt32(value.count))
                        op.put(value)
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
private struct OpWriter {
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

    /// A scalar argument: its tag, then its bits.
    mutating func put(_ tag: UInt8, _ bits: UInt32) {
        put(tag)
        put(bits)
    }

    mutating func put(_ tag: UInt8, _ bits: UInt64) {
        put(tag)
        put(bits)
    }

    mutating func put(_ data: Data) {
        data.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: bytes[count...]).copyMemory(from: $0) }
        count += data.count
    }
}
