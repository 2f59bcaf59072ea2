// Where awaits resume: Rust wakes every continuation from `weir-wake`, one
// long-lived thread per process that holds no Weir lock, so a Task that runs
// right there (inline, on a task executor that runs jobs where they are
// enqueued) may call any Weir API, on the stream that woke it or another.

import Foundation
import Testing
import Weir

@Suite("Wake-ups")
struct WakeTests {
    @Test("a Task resumed inline by a fence admits work from inside itself, on the same and another stream",
          arguments: TestBackend.allCases)
    func resumedTaskCallsBackIntoWeir(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (s, t) = (runtime.defaultStream(), try runtime.newStream())
        let n = 1024
        let xs = (0..<n).map(Float.init)
        let threads = try await finishes("the calls from inside the resumed Task", on: InlineExecutor()) {
            var seen: [String] = []
            let x = try s.upload(xs)
            try s.delay(.milliseconds(20))
            let held = try s.fence()
            try await held.await()  // pending: resumed where the completion is delivered
            seen.append(nativeThreadName())
            // From here on every call runs on that thread, inside its wake-up.
            let y = try s.zeros(count: n, of: Float.self)
            try s.axpy(2, x, y)  // y = 2x
            try s.delay(.milliseconds(10))
            try await s.fence().await()
            try await s.sync()
            seen.append(nativeThreadName())
            #expect(try await s.read(y, as: Float.self) == xs.map { 2 * $0 })
            // Another stream: waits for s's writes, suspends and resumes again.
            let z = try t.empty(count: n, of: Float.self)
            try t.delay(.milliseconds(10))
            try t.add(x, y, into: z)  // z = 3x
            try await t.sync()
            seen.append(nativeThreadName())
            #expect(try await t.read(z, as: Float.self) == xs.map { 3 * $0 })
            // Blocking waits on the waking thread are woken by the completion itself.
            try t.delay(.milliseconds(10))
            try t.fence().waitBlocking()
            #expect(try s.readBlocking(buffer: z).count == n * 4)
            // A new stream, writes, reads and a runtime-wide sync, all from here.
            let u = try runtime.newStream()
            let w = try u.upload([Float](repeating: 1, count: n))
            try await s.writeAndWait([Float](repeating: 5, count: n), to: y)
            try u.axpy(1, y, w)  // w = 1 + 5
            #expect(try await u.read(w, as: Float.self) == [Float](repeating: 6, count: n))
            try u.delay(.milliseconds(10))
            try await runtime.sync()
            seen.append(nativeThreadName())
            return seen
        }
        guard let threads else { return }
        #expect(threads == [String](repeating: "weir-wake", count: threads.count), "resumed on these threads")
        try runtime.shutdown()
    }

    @Test("every wake-up comes from the one weir-wake thread", arguments: TestBackend.allCases)
    func wakeUpsComeFromOneThread(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let threads = try await finishes("three wake-ups", on: InlineExecutor()) {
            var seen: [String] = []
            for _ in 0..<3 {
                try stream.delay(.milliseconds(5))
                try await stream.sync()
                seen.append(nativeThreadName())
            }
            return seen
        }
        guard let threads else { return }
        #expect(threads == ["weir-wake", "weir-wake", "weir-wake"])
        try runtime.shutdown()
    }
}
