// Recorded graphs: ops recorded once, admitted as one op per replay.

import Foundation
import Testing
import Weir

@Suite("Graphs")
struct GraphTests {
    @Test("a recorded graph admits nothing until replayed, then runs all its ops as one, on any stream",
          arguments: TestBackend.allCases)
    func recordedGraphReplays(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (s, t) = (runtime.defaultStream(), try runtime.newStream())
        let x = try s.zeros(count: 4, of: Float.self)
        let y = try s.upload([Float(1), 2, 3, 4])
        try await s.sync()
        let before = runtime.diagnostics().admittedOps
        let graph = try s.record { b in
            b.fill(x, with: Float(2))
            b.axpy(3, x, y)  // y = 3x + y
            try b.write([Float(100)], to: y, at: 3)
        }
        #expect(graph.opCount() == 3)
        #expect(runtime.diagnostics().admittedOps == before, "recording admitted ops")
        #expect(try await s.read(y, as: Float.self) == [1, 2, 3, 4])
        let beforeReplays = runtime.diagnostics().admittedOps
        try s.replay(graph: graph)
        try t.replay(graph: graph)  // waits for the first replay's write of y
        #expect(runtime.diagnostics().admittedOps - beforeReplays == 2, "a replay is one op")
        #expect(try await t.read(y, as: Float.self) == [13, 14, 15, 100])
        #expect(throws: WeirError.self) { try s.record { _ in } }
        try runtime.shutdown()
    }
}
