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
        // On wgpu every op of the block is a kernel: it records, and its replays' outputs were checked too.
        if backend == .wgpu {
            #expect((report.figures.first { $0.0 == "tokens/s, 4 streams, each request a replayed graph" }?.1 ?? 0) > 0)
        }
        // Where the device takes timestamps, how busy it was is measured each way.
        if (try? runtime.defaultStream().timestamp()) != nil {
            for name in ["device busy fraction, one stream", "device busy fraction, 4 streams"] {
                let busy = report.figures.first { $0.0 == name }?.1
                #expect(busy.map { $0 > 0 && $0 <= 1 } == true, "\(name): \(report.figures)")
            }
        }
        try runtime.shutdown()
    }

    @Test("the busy fraction counts time covered by any span once")
    func busyFractionCountsOnce() {
        // 0-4 and 2-6 overlap (6 covered), 8-9 apart (1 more), 8-8 empty: 7 of 10.
        #expect(abs(busyFraction([(2, 6), (8, 9), (0, 4), (8, 8)], wall: 10) - 0.7) < 1e-9)
        // A span inside another adds nothing; more than the wall is capped.
        #expect(busyFraction([(0, 10), (1, 2)], wall: 10) == 1)
        #expect(busyFraction([(0, 12)], wall: 10) == 1)
    }
}
