// cuBLAS GEMMs as admitted ops from Swift: on CUDA a GEMM between two Weir
// kernels on other streams, ordered by the versions it reads and writes; on
// every other backend a typed refusal.

import Foundation
import Testing
import Weir

@Suite("cuBLAS")
struct BlasTests {
    @Test("a GEMM between Weir kernels on other streams reads and publishes the right versions",
          arguments: TestBackend.allCases)
    func gemmBetweenKernels(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        guard backend == .cuda else {
            let refused = Result { try Blas(runtime: runtime) }
            guard case .failure(WeirError.unsupported(_, let description)) = refused else {
                Issue.record("a \(backend) runtime made a cuBLAS handle: \(refused)")
                return
            }
            #expect(description.contains("cuBLAS"))
            try runtime.shutdown()
            return
        }
        let (m, n, k) = (40, 24, 16)
        // Column-major, as cuBLAS reads them.
        let a = (0..<(m * k)).map { Float(($0 * 7) % 13 - 6) / 4 }
        let b = (0..<(k * n)).map { Float(($0 * 5) % 11 - 5) / 8 }
        let (s1, s2, s3) = (try runtime.newStream(), try runtime.newStream(), try runtime.newStream())
        let blas = try Blas(runtime: runtime)
        let (da, db) = (try s1.upload(a), try s1.upload(b))
        let twice = try s1.zeros(count: m * k, of: Float.self)
        let dc = try s1.upload([Float](repeating: .nan, count: m * n))
        let doubled = try s1.zeros(count: m * n, of: Float.self)
        try s1.scale(da, by: 2, into: twice)  // 2A, on s1
        try blas.sgemm(stream: s2, gemm: Gemm(m: UInt32(m), n: UInt32(n), k: UInt32(k)), a: twice, b: db, c: dc)
        try s3.add(dc, dc, into: doubled)  // 2C, on s3
        let got = try await s1.read(doubled, as: Float.self)
        for j in 0..<n {
            for i in 0..<m {
                let want = 2 * (0..<k).reduce(0.0) { $0 + 2 * Double(a[i + $1 * m]) * Double(b[$1 + j * k]) }
                #expect(abs(Double(got[i + j * m]) - want) <= 1e-3 * (1 + abs(want)), "C[\(i), \(j)]")
            }
        }
        try runtime.shutdown()
    }
}
