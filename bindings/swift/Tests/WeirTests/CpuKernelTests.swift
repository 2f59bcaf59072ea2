// One custom kernel, a Swift closure for the CPU and a source per GPU
// backend, launched with one grid and one argument list everywhere.

import Foundation
import Testing
import Weir

/// `out[i] = a · x[i] + (i mod block)` for `i < n`: the thread's index in its
/// block shows which block size ran.
private let wgsl = """
    @group(0) @binding(0) var<storage, read> x: array<f32>;
    @group(0) @binding(1) var<storage, read_write> out: array<f32>;
    struct Scalars { a: f32, n: u32 }
    @group(0) @binding(2) var<uniform> p: Scalars;
    override block_x: u32 = 64;
    @compute @workgroup_size(block_x)
    fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
        if (id.x < p.n) { out[id.x] = p.a * x[id.x] + f32(local.x); }
    }
    """

private let cudaC = """
    extern "C" __global__ void scaled(const float* x, float* out, float a, unsigned int n) {
        unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) { out[i] = a * x[i] + (float)threadIdx.x; }
    }
    """

/// What the CPU closure throws for a negative scale.
private struct NegativeScale: Error, CustomStringConvertible {
    let scale: Float
    var description: String { "a negative scale \(scale)" }
}

/// The kernel's CPU implementation: the same arithmetic as the sources.
@Sendable private func scaled(_ args: CpuKernelArguments) throws {
    let x = try args.values(0, as: Float.self)
    let (a, n) = (try args.scalar(0, as: Float.self), Int(try args.scalar(1, as: UInt32.self)))
    let block = Int(args.grid.blockX)
    guard a >= 0 else { throw NegativeScale(scale: a) }
    try args.update(1, as: Float.self) { out in
        for i in 0..<n {
            out[i] = a * x[i] + Float(i % block)
        }
    }
}

private let sources = (
    wgsl: KernelSource(code: wgsl, entry: "main"),
    cuda: KernelSource(code: cudaC, entry: "scaled")
)

/// The arguments `scaled` takes, in order: buffers, then scalars.
private func arguments(_ x: Buffer, _ out: Buffer, a: Float, n: Int) -> [Arg] {
    [.read(x), .write(out), .f32(value: a), .u32(value: UInt32(n))]
}

/// What a closure saw inside its call, and its arguments kept past it, for
/// the test to check afterwards (the closure runs on a worker thread, where
/// no test is current).
private final class Observed: @unchecked Sendable {
    private let lock = NSLock()
    private var notes: [String] = []
    private var arguments: CpuKernelArguments?

    func note(_ what: String, _ attempt: () throws -> Any) {
        let outcome: String
        do { outcome = "\(what): \(try attempt())" } catch { outcome = "\(what) refused: \(error)" }
        lock.withLock { notes.append(outcome) }
    }

    func keep(_ arguments: CpuKernelArguments) { lock.withLock { self.arguments = arguments } }
    var seen: [String] { lock.withLock { notes } }
    var kept: CpuKernelArguments? { lock.withLock { arguments } }
}

@Suite("Custom CPU kernels")
struct CpuKernelTests {
    @Test("a kernel with a CPU closure and GPU sources runs with one grid and one argument list",
          arguments: TestBackend.allCases)
    func oneKernelRunsWithTheGridsBlockEverywhere(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        let kernel = Kernel.custom(name: "scaled", wgsl: sources.wgsl, cuda: sources.cuda, hip: sources.cuda, cpu: scaled)
        let n = 1000
        let x = try s.upload((0..<n).map(Float.init))
        for block in [32, 128] {
            let out = try s.zeros(count: n, of: Float.self)
            try await s.executeAndWait(
                kernel: kernel, grid: gridLinear(items: UInt32(n), block: UInt32(block)),
                args: arguments(x, out, a: 2, n: n))
            let expected = (0..<n).map { 2 * Float($0) + Float($0 % block) }
            #expect(try await s.read(out, as: Float.self) == expected, "block \(block) on \(backend)")
        }
    }

    @Test("a CPU closure goes beside a module built elsewhere, and the CPU runs the closure")
    func aClosureGoesBesideAModule() async throws {
        guard let runtime = try TestBackend.cpu.open() else { return }
        let s = runtime.defaultStream()
        // The module is only carried here: CUDA would load it, the CPU runs the closure.
        let module = KernelModule(image: Data(cudaC.utf8), entry: "scaled")
        let kernel = Kernel.custom(name: "scaled", cudaModule: module, cpu: scaled)
        let x = try s.upload([Float(1), 2, 3])
        let out = try s.zeros(count: 3, of: Float.self)
        try await s.executeAndWait(kernel: kernel, grid: gridLinear(items: 3, block: 4), args: arguments(x, out, a: 2, n: 3))
        #expect(try await s.read(out, as: Float.self) == [2, 5, 8])
        try runtime.shutdown()
    }

    @Test("a thrown error fails the op with its description and the runtime goes on",
          arguments: TestBackend.allCases)
    func aThrownErrorFailsTheOp(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let s = runtime.defaultStream()
        let kernel = Kernel.custom(name: "scaled", cpu: scaled)
        let x = try s.upload([Float(1), 2])
        let out = try s.zeros(count: 2, of: Float.self)
        guard runtime.info().backend == .cpu else {
            // Only the CPU runs a closure: elsewhere this kernel has no implementation.
            let refused = await outcome {
                try s.execute(kernel: kernel, grid: gridLinear(items: 2, block: 2), args: arguments(x, out, a: 1, n: 2))
            }
            guard case .failure(WeirError.unsupported(_, let message)) = refused else {
                Issue.record("a kernel without a \(backend) implementation gave \(refused)")
                return
            }
            #expect(message.contains("scaled"), "\(message)")
            #expect(try await s.read(out, as: Float.self) == [0, 0])
            return
        }
        try s.execute(kernel: kernel, grid: gridLinear(items: 2, block: 2), args: arguments(x, out, a: -1, n: 2))
        let read = await outcome { try await s.read(out, as: Float.self) }
        guard case .failure(WeirError.opFailed(_, let message)) = read else {
            Issue.record("a read of what the failed kernel wrote gave \(read)")
            return
        }
        #expect(message.contains("a negative scale -1.0"), "\(message)")
        let fence = await outcome { try await s.sync() }
        guard case .failure(WeirError.opFailed(_, let reported)) = fence else {
            Issue.record("the stream's fence after the failed kernel gave \(fence)")
            return
        }
        #expect(reported.contains("a negative scale -1.0"), "\(reported)")
        // The stream goes on, and a full overwrite heals the buffer.
        try await s.executeAndWait(kernel: kernel, grid: gridLinear(items: 2, block: 2), args: arguments(x, out, a: 3, n: 2))
        #expect(try await s.read(out, as: Float.self) == [3, 7])
    }

    @Test("arguments refuse a read-only buffer to write, a wrong scalar or size, and any use after the call")
    func argumentsRefuseMisuse() async throws {
        guard let runtime = try TestBackend.cpu.open() else { return }
        let s = runtime.defaultStream()
        let observed = Observed()
        let misuse = Kernel.custom(name: "misuse") { args in
            observed.keep(args)
            observed.note("counts") { "\(args.bufferCount) buffers, \(args.scalarCount) scalars" }
            observed.note("scalar 0 as Int32") { try args.scalar(0, as: Int32.self) }
            observed.note("scalar 1") { try args.scalar(1, as: Float.self) }
            observed.note("buffer -1") { try args.values(-1, as: Float.self).count }
            observed.note("6 bytes as Float") { try args.values(2, as: Float.self).count }
            observed.note("6 bytes") { try args.values(2, as: UInt8.self).count }
            observed.note("out") {
                var count = 0
                try args.update(1, as: Float.self) { count = $0.count }
                return count
            }
            try args.update(0, as: Float.self) { _ in }  // declared read: this throws, failing the op
        }
        let x = try s.upload([Float(1), 2, 3])
        let out = try s.zeros(count: 3, of: Float.self)
        let raw = try s.upload([UInt8](repeating: 0, count: 6))
        try s.execute(kernel: misuse, grid: Grid(), args: [.read(x), .write(out), .read(raw), .f32(value: 1)])
        let read = await outcome { try await s.read(out, as: Float.self) }
        guard case .failure(WeirError.opFailed(_, let message)) = read else {
            Issue.record("writing a read-only argument did not fail the op: \(read)")
            return
        }
        #expect(message.contains("buffer argument 0 is declared read"), "\(message)")
        _ = await outcome { try await s.sync() }
        #expect(observed.seen == [
            "counts: 3 buffers, 1 scalars",
            "scalar 0 as Int32 refused: invalid argument: scalar argument 0 is F32(1.0), not a i32",
            "scalar 1 refused: invalid argument: no scalar argument 1: the kernel has 1",
            "buffer -1 refused: no buffer argument -1: the kernel has 3",
            "6 bytes as Float refused: buffer argument 2 holds 6 bytes, not a whole number of Float (4 bytes each)",
            "6 bytes: 6",
            "out: 3",
        ])
        // The arguments of a call that is over lend nothing.
        let kept = try #require(observed.kept)
        #expect(throws: WeirError.self) { try kept.values(0, as: Float.self) }
        #expect(throws: WeirError.self) { try kept.update(1, as: Float.self) { $0[0] = 42 } }
        #expect(throws: WeirError.self) { try kept.scalar(0, as: Float.self) }
        #expect(try await s.read(x, as: Float.self) == [1, 2, 3], "the read-only argument was not written")
    }

    @Test("what a closure keeps of its arguments reaches no device memory, from any thread, after any end")
    func keptArgumentsReachNothing() async throws {
        guard let runtime = try TestBackend.cpu.open() else { return }
        let s = runtime.defaultStream()
        let observed = Observed()
        let keeper = Kernel.custom(name: "keeper") { args in
            observed.keep(args)
            try args.update(0, as: Float.self) { $0[0] = 1 }
        }
        let out = try s.zeros(count: 4, of: Float.self)
        try await s.executeAndWait(kernel: keeper, grid: Grid(), args: [.write(out)])
        #expect(try await s.read(out, as: Float.self) == [1, 0, 0, 0], "the call's write lands")
        let kept = try #require(observed.kept)
        // After the call, here and from another thread: refused, and nothing lands.
        #expect(throws: WeirError.self) { try kept.update(0, as: Float.self) { $0[1] = 42 } }
        let elsewhere = Thread {
            observed.note("from another thread") { try observed.kept?.update(0, as: Float.self) { $0[2] = 43 } as Any }
        }
        elsewhere.start()
        while !elsewhere.isFinished { try await Task.sleep(nanoseconds: 1_000_000) }
        #expect(try await s.read(out, as: Float.self) == [1, 0, 0, 0], "a write after the call was seen")
        #expect(observed.seen.last?.hasPrefix("from another thread refused") == true, "\(observed.seen)")
        // After the buffer is gone and the runtime closed: still refused, no crash.
        try runtime.shutdown()
        #expect(throws: WeirError.self) { try kept.values(0, as: Float.self) }
    }

    @Test("64-bit scalars and a struct by value reach a CPU kernel as given")
    func sixtyFourBitScalarsArriveAsGiven() async throws {
        guard let runtime = try TestBackend.cpu.open() else { return }
        let s = runtime.defaultStream()
        let seen = Seen64()
        let wide = Kernel.custom(name: "wide") { args in
            seen.set(
                try args.scalar(0, as: UInt64.self), try args.scalar(1, as: Int64.self),
                try args.scalar(2, as: Double.self), try args.scalar(3, as: Data.self))
            // Asked as another width: refused, typed.
            #expect(throws: WeirError.self) { try args.scalar(0, as: UInt32.self) }
        }
        let packed = Data([7, 0, 0, 0, 0, 0, 0, 63])
        try await s.executeAndWait(
            kernel: wide, grid: Grid(),
            args: [.u64(value: UInt64.max - 1), .i64(value: Int64(-(1 << 40))), .f64(value: Double.pi), .bytes(value: packed)])
        let (u, i, d, b) = try #require(seen.values)
        #expect(u == UInt64.max - 1)
        #expect(i == Int64(-(1 << 40)))
        #expect(d == Double.pi)
        #expect(b == packed)
        // Through a batch too: the encoding carries the wide scalars.
        try s.batch { batch in
            batch.execute(kernel: wide, grid: Grid(), args: [.u64(value: 5), .i64(value: -5), .f64(value: 0.25), .bytes(value: Data([1]))])
        }
        try await s.sync()
        let (u2, i2, d2, b2) = try #require(seen.values)
        #expect(u2 == 5 && i2 == -5 && d2 == 0.25 && b2 == Data([1]))
        try runtime.shutdown()
    }
}

/// What the wide-scalar kernel saw, set on the worker and read by the test.
final class Seen64: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: (UInt64, Int64, Double, Data)?
    func set(_ u: UInt64, _ i: Int64, _ d: Double, _ b: Data) { lock.withLock { seen = (u, i, d, b) } }
    var values: (UInt64, Int64, Double, Data)? { lock.withLock { seen } }
}
