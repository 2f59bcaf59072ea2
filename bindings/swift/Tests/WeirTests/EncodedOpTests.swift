// The built-in ops' one C call lends its handles, read in place (`EncodedOp.swift`).

import Foundation
import Testing
@_spi(Testing) import Weir

@Suite("EncodedOp")
struct EncodedOpTests {
    /// The handle `Mirror` shows as `object`'s first stored property.
    private func reflectedHandle(_ object: AnyObject) -> UInt64? {
        Mirror(reflecting: object).children.first.flatMap { $0.label == "handle" ? $0.value as? UInt64 : nil }
    }

    @Test("handles are read where UniFFI keeps them, so built-in ops take the one C call")
    func handlesAreLent() throws {
        // False after an upgrade of UniFFI that moved the handle: every op would go the generated way.
        #expect(LentHandles.readable)
        let runtime = try WeirRuntime.open(backend: .cpu)
        let stream = runtime.defaultStream()
        let buffer = try stream.zeros(count: 16, of: UInt32.self)
        let kernel = Kernel.builtin(op: .fillU32)
        for object in [stream, buffer, kernel] as [AnyObject] {
            let handle = try #require(reflectedHandle(object), "\(type(of: object)) has no handle first")
            #expect(LentHandles.handle(of: object) == handle, "\(type(of: object))")
        }
        try runtime.shutdown()
    }

    @Test("lent handles are neither kept nor let go: buffers filled through the C call are freed once", arguments: TestBackend.allCases)
    func lentHandlesBalance(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let live = runtime.diagnostics().liveBuffers
        do {
            let buffers = try (0..<8).map { _ in try stream.zeros(count: 64, of: UInt32.self) }
            for round in 0..<100 {
                for (index, buffer) in buffers.enumerated() {
                    try stream.fill(buffer, with: UInt32(round * 8 + index))
                }
            }
            // Before the buffers' last use: an optimised build releases them right after it.
            #expect(runtime.diagnostics().liveBuffers == live + 8)
            for (index, buffer) in buffers.enumerated() {
                #expect(try await stream.read(buffer, as: UInt32.self) == Array(repeating: UInt32(99 * 8 + index), count: 64))
            }
        }
        try await stream.sync()
        let freed = await eventually(timeout: .seconds(10)) { runtime.diagnostics().liveBuffers == live }
        #expect(freed, "live buffers: \(runtime.diagnostics().liveBuffers), \(live) before")
        try runtime.shutdown()
    }
}
