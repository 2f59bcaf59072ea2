// CUDA modules nvcc built elsewhere, loaded from their files: the C++
// template `weir_test::affine<float>` of rust/core/tests/cuda/kernels.cu as
// PTX, CUBIN and fatbin, taking a struct by value, a `double` and a `size_t`.
// The folder of nvcc's output is WEIR_CUDA_MODULES (the GPU bundle builds it
// there); without CUDA or that folder the test is reported skipped by name.

import Foundation
import Testing
import Weir

@Suite("Module files")
struct ModuleFileTests {
    /// `struct Affine { double scale; float shift; int bias; }` as the device lays it out.
    static func affine(scale: Double, shift: Float, bias: Int32) -> Data {
        var bytes = Data()
        withUnsafeBytes(of: scale.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: shift.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: bias.littleEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }

    @Test("a kernel loaded from PTX, CUBIN and fatbin files runs by its C++ name with 64-bit scalars and a struct")
    func moduleFilesRun() async throws {
        guard let runtime = try TestBackend.cuda.open() else { return }
        guard let dir = ProcessInfo.processInfo.environment["WEIR_CUDA_MODULES"] else {
            print("⤼ skipped module files: WEIR_CUDA_MODULES names no folder of nvcc's output")
            try runtime.shutdown()
            return
        }
        let n = 777
        let (scale, shift, bias, step) = (1.5, Float(0.75), Int32(-2), 0.5)
        let s = runtime.defaultStream()
        let other = try runtime.newStream()
        let x = try s.upload((0..<n).map(Float.init))
        let want = (0..<n).map { Float(scale * Double($0) + Double(shift) + Double(bias) * step) }
        for file in ["kernels.ptx", "kernels.cubin", "kernels.fatbin"] {
            let image = try Data(contentsOf: URL(fileURLWithPath: dir).appendingPathComponent(file))
            let kernel = Kernel.custom(
                name: "affine", cudaModule: KernelModule(image: image, entry: "weir_test::affine<float>"))
            let y = try s.upload([Float](repeating: 0, count: n))
            // Another stream launches it: it waits for the uploads' versions.
            try await other.executeAndWait(
                kernel: kernel, grid: gridLinear(items: UInt32(n), block: 128),
                args: [.read(x), .write(y), .bytes(value: Self.affine(scale: scale, shift: shift, bias: bias)),
                       .f64(value: step), .u64(value: UInt64(n))])
            #expect(try await s.read(y, as: Float.self) == want, "\(file)")
        }
        try runtime.shutdown()
    }
}
