// One op admitted through one C call: the Swift side of weir-ffi's `encoded.rs`.

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
                var at = 0
                func put(_ byte: UInt8) {
                    bytes[at] = byte
                    at += 1
                }
                func put(_ word: UInt32) { withUnsafeBytes(of: word.littleEndian) { $0.forEach { put($0) } } }
                func put(_ word: UInt64) { withUnsafeBytes(of: word.littleEndian) { $0.forEach { put($0) } } }
                put(EncodedTag.execute)
                put(UInt32(0))  // kernel slot 0: `kernel`
                put(EncodedTag.defaultGrid)
                put(UInt32(args.count))
                var slot = 0
                for arg in args {
                    switch arg {
                    case .buffer(let buffer, let access):
                        handles[slot] = buffer.uniffiCloneHandle()
                        put(EncodedTag.buffer)
                        put(UInt32(slot))
                        put(EncodedTag.access(access))
                        slot += 1
                    case .u32(let value): put(EncodedTag.u32); put(value)
                    case .i32(let value): put(EncodedTag.i32); put(UInt32(bitPattern: value))
                    case .f32(let value): put(EncodedTag.f32); put(value.bitPattern)
                    case .u64(let value): put(EncodedTag.u64); put(value)
                    case .i64(let value): put(EncodedTag.i64); put(UInt64(bitPattern: value))
                    case .f64(let value): put(EncodedTag.f64); put(value.bitPattern)
                    case .bytes(let value):
                        put(EncodedTag.bytes)
                        put(UInt32(value.count))
                        value.forEach { put($0) }
                    }
                }
                // Every handle given is the entry's to let go, whatever it answers.
                return weir_ffi_execute_encoded(
                    uniffiCloneHandle(), kernel.uniffiCloneHandle(),
                    UnsafePointer(bytes.baseAddress), at, UnsafePointer(handles.baseAddress), slot)
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
