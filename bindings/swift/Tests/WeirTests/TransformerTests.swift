// The Swift transformer example at its small size, on each GPU backend the
// suite runs (lavapipe's wgpu in CI; CUDA with cuBLAS on a GPU): every
// request's output, on one stream and on several, matches the host's.

import Testing
import Weir
import WeirTransformer

@Suite("Transformer example")
struct TransformerTests {
    @Test("the transformer block at small size matches the host on every stream", arguments: TestBackend.allCases)
    func smallBlock(backend: TestBackend) async throws {
        guard backend != .cpu else {
            print("⤼ skipped the transformer example on cpu: it runs on GPU backends (its kernels are CUDA and WGSL)")
            return
        }
        guard let runtime = try backend.open() else { return }
        let report = try await run(runtime, shape: .small, requests: 12, inFlight: 4)
        #expect(report.worst <= tolerance, "\(report.summary)")
        #expect((report.figures.first { $0.0 == "tokens/s, 4 streams" }?.1 ?? 0) > 0)
        try runtime.shutdown()
    }
}
