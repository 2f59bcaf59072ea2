// `cargo xtask demo --swift`: Weir's main job from Swift, on the CPU backend
// unless `--backend NAME` says otherwise. The same pipeline as the Rust and
// Kotlin demos.
//
// A three-stage pipeline over three streams: a loader stream brings chunks in,
// a compute stream transforms each chunk as soon as its load is done (the
// scheduler inserts exactly the waits the data needs), and a reduce stream
// accumulates the results. Every chunk's fence is awaited by its own Task, and
// the demo prints when each one resolved.

import Foundation
import Weir

let chunks = 8
let words = 1 << 16

func backend(from arguments: [String]) -> Backend? {
    guard let index = arguments.firstIndex(of: "--backend") else { return .cpu }
    guard index + 1 < arguments.count else { return nil }
    switch arguments[index + 1].lowercased() {
    case "auto": return .auto
    case "cpu": return .cpu
    case "wgpu": return .wgpu
    case "cuda": return .cuda
    case "hip": return .hip
    default: return nil
    }
}

func milliseconds(_ duration: Duration) -> String {
    let (seconds, attoseconds) = duration.components
    return String(format: "%7.2f ms", Double(seconds) * 1e3 + Double(attoseconds) / 1e15)
}

func runDemo() async throws -> Bool {
    guard let backend = backend(from: CommandLine.arguments) else {
        print("usage: weir-demo [--backend auto|cpu|wgpu|cuda|hip]")
        return false
    }
    let runtime = try WeirRuntime.open(backend: backend)
    print("weir demo (Swift) on \(runtime.info().backend) (\(runtime.info().name))")

    let (load, compute, reduce) = (try runtime.newStream(), try runtime.newStream(), try runtime.newStream())
    let total = try reduce.zeros(count: words, of: Float.self)
    // The load's latency: the device-side delay op, a test-support hook that
    // xtask builds the demo's library with.
    let latency = Kernel.builtin(op: .delay)
    let clock = ContinuousClock()
    let start = clock.now
    var fences: [(chunk: Int, fence: Fence)] = []
    for chunk in 0..<chunks {
        // Load: chunk i holds the value i everywhere, after a little I/O-like latency.
        let input = try load.empty(count: words, of: Float.self)
        try load.execute(kernel: latency, grid: Grid(), args: [.u32(value: 5_000)])  // 5 ms
        try load.fill(input, with: Float(chunk))
        // Compute: y = 2·x + 1, waiting only for this chunk's load.
        let y = try compute.empty(count: words, of: Float.self)
        try compute.fill(y, with: Float(1))
        try compute.axpy(2, input, y)
        // Reduce: total += y.
        try reduce.axpy(1, y, total)
        fences.append((chunk, try compute.fence()))
    }
    let diagnostics = runtime.diagnostics()
    print("admitted \(diagnostics.admittedOps) ops in \(milliseconds(clock.now - start)); "
        + "the scheduler inserted \(diagnostics.insertedWaits) cross-stream waits")

    // One Task per chunk, each awaiting its fence; report in chunk order.
    let resolved = try await withThrowingTaskGroup(of: (Int, Duration).self) { group in
        for (chunk, fence) in fences {
            group.addTask {
                try await fence.await()
                return (chunk, clock.now - start)
            }
        }
        return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
    }
    for chunk in 0..<chunks {
        if let at = resolved[chunk] {
            print("  chunk \(chunk): compute fence resolved after \(milliseconds(at))")
        }
    }
    let synced = clock.now
    try await reduce.sync()
    print("  reduce stream synced \(milliseconds(clock.now - synced)) later")

    let expected = (0..<chunks).map { 2 * Float($0) + 1 }.reduce(0, +)
    let values = try await reduce.read(total, as: Float.self)
    let correct = values.count == words && values.allSatisfy { $0 == expected }
    print("total = \(expected) everywhere: \(correct ? "correct" : "WRONG")")
    try runtime.shutdown()
    return correct
}

do {
    exit(try await runDemo() ? 0 : 1)
} catch {
    print("weir demo failed: \(error)")
    exit(1)
}
