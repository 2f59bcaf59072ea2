// A transformer block's forward pass (GPT-2's: layernorm, QKV projection,
// causal attention, output projection, residual, layernorm, MLP with GELU,
// residual) served from Swift Tasks to several requests at once, each on a
// stream of its own over the same read-only weights, every output checked
// against the same arithmetic on the host: the Swift version of
// rust/core/examples/transformer.rs, with the same kernel files
// (examples/transformer/kernels). On CUDA the projections are cuBLAS GEMMs
// (`Blas`), ordered by Weir like any op; on wgpu every step is a WGSL kernel.

import Foundation
import Weir

/// The block's shape: model width, heads, tokens per request.
public struct Shape: Sendable {
    public let d: Int, heads: Int, tokens: Int
    public static let gpt2Small = Shape(d: 768, heads: 12, tokens: 64)
    public static let small = Shape(d: 64, heads: 4, tokens: 16)
}

/// The outputs may differ from the host's by this much, relative (summation order, fused multiply-adds).
public let tolerance: Float = 1e-4

/// The kernels' folder in this repository, found from this file's place.
public let kernelsFolder = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().appendingPathComponent("../../../../examples/transformer/kernels").standardizedFileURL

/// Threads per block of every kernel.
private let block: UInt32 = 64

/// A deterministic stream of numbers in (-scale, scale): the Rust version's xorshift64*.
struct Numbers {
    var state: UInt64
    mutating func take(_ count: Int, scale: Float) -> [Float] {
        (0..<count).map { _ in
            state ^= state >> 12
            state ^= state << 25
            state ^= state >> 27
            let bits = (state &* 0x2545_f491_4f6c_dd1d) >> 40
            return (Float(bits) / Float(1 << 24) * 2 - 1) * scale
        }
    }
}

/// The block's parameters, row-major: wQkv is d × 3d, wOut d × d, wUp d × 4d, wDown 4d × d.
struct Weights: Sendable {
    let ln1: ([Float], [Float]), wQkv: [Float], bQkv: [Float], wOut: [Float], bOut: [Float]
    let ln2: ([Float], [Float]), wUp: [Float], bUp: [Float], wDown: [Float], bDown: [Float]

    init(_ shape: Shape, seed: UInt64) {
        var n = Numbers(state: seed)
        let d = shape.d
        func gain(_ n: inout Numbers) -> [Float] { n.take(d, scale: 0.1).map { 1 + $0 } }
        ln1 = (gain(&n), n.take(d, scale: 0.1))
        wQkv = n.take(d * 3 * d, scale: 0.05)
        bQkv = n.take(3 * d, scale: 0.02)
        wOut = n.take(d * d, scale: 0.05)
        bOut = n.take(d, scale: 0.02)
        ln2 = (gain(&n), n.take(d, scale: 0.1))
        wUp = n.take(d * 4 * d, scale: 0.05)
        bUp = n.take(4 * d, scale: 0.02)
        wDown = n.take(4 * d * d, scale: 0.05)
        bDown = n.take(d, scale: 0.02)
    }
}

/// One request's activations on the device: a slot reused by every K-th request.
struct Slot: Sendable {
    let x, normed, qkv, attended, projected, residual, hidden, out: Buffer
    init(_ s: WeirStream, _ shape: Shape) throws {
        let (t, d) = (shape.tokens, shape.d)
        func floats(_ count: Int) throws -> Buffer { try s.zeros(count: count, of: Float.self) }
        (x, normed, qkv, attended) = (try floats(t * d), try floats(t * d), try floats(t * 3 * d), try floats(t * d))
        (projected, residual, hidden, out) = (try floats(t * d), try floats(t * d), try floats(t * 4 * d), try floats(t * d))
    }
}

func grid(_ items: Int) -> Grid { gridLinear(items: UInt32(items), block: block) }

/// The model on one runtime: its kernels, the weights on the device, its GEMMs (cuBLAS on CUDA).
final class Model: Sendable {
    let shape: Shape
    let layernorm, biasAct, attention: Kernel
    let matmul: Kernel?
    let blas: Blas?
    let ln1, ln2: (Buffer, Buffer)
    let wQkv, bQkv, wOut, bOut, wUp, bUp, wDown, bDown: Buffer

    init(_ runtime: WeirRuntime, _ w: Weights, _ shape: Shape, kernels: URL) throws {
        func source(_ file: String) throws -> String {
            try String(contentsOf: kernels.appendingPathComponent(file), encoding: .utf8)
        }
        func kernel(_ name: String, cuda: Bool = true) throws -> Kernel {
            Kernel.custom(
                name: name, wgsl: KernelSource(code: try source("\(name).wgsl"), entry: name),
                cuda: cuda ? KernelSource(code: try source("\(name).cu"), entry: name) : nil)
        }
        self.shape = shape
        (layernorm, biasAct, attention) = (try kernel("layernorm"), try kernel("bias_act"), try kernel("attention"))
        blas = runtime.info().backend == .cuda ? try Blas(runtime: runtime) : nil
        matmul = blas == nil ? try kernel("matmul", cuda: false) : nil
        let s = runtime.defaultStream()
        ln1 = (try s.upload(w.ln1.0), try s.upload(w.ln1.1))
        ln2 = (try s.upload(w.ln2.0), try s.upload(w.ln2.1))
        (wQkv, bQkv, wOut, bOut) = (try s.upload(w.wQkv), try s.upload(w.bQkv), try s.upload(w.wOut), try s.upload(w.bOut))
        (wUp, bUp, wDown, bDown) = (try s.upload(w.wUp), try s.upload(w.bUp), try s.upload(w.wDown), try s.upload(w.bDown))
    }

    /// `out[m × n] = a[m × k] · w[k × n] + bias`, GELU'd when asked: the GEMM by cuBLAS on `s`, or by a kernel.
    func linear(_ ops: BlockOps, _ s: WeirStream?, _ a: Buffer, _ w: Buffer, _ bias: Buffer, _ out: Buffer,
                m: Int, n: Int, k: Int, gelu: Bool) throws {
        if let blas {
            guard let s else {
                throw WeirError.invalidArgument(description: "cuBLAS calls run at admission: a recording cannot hold them")
            }
            // Row-major C = A · W is column-major Cᵀ = Wᵀ · Aᵀ.
            try blas.sgemm(stream: s, gemm: Gemm(m: UInt32(n), n: UInt32(m), k: UInt32(k)), a: w, b: a, c: out)
        } else if let matmul {
            try ops.execute(kernel: matmul, grid: grid(m * n), args: [
                .read(a), .read(w), .write(out), .u32(value: UInt32(m)), .u32(value: UInt32(n)), .u32(value: UInt32(k)),
            ])
        }
        try ops.execute(kernel: biasAct, grid: grid(m * n), args: [
            .readWrite(out), .read(bias), .u32(value: UInt32(m * n)), .u32(value: UInt32(n)), .u32(value: gelu ? 1 : 0),
        ])
    }

    func norm(_ ops: BlockOps, _ x: Buffer, _ params: (Buffer, Buffer), _ out: Buffer) throws {
        try ops.execute(kernel: layernorm, grid: grid(shape.tokens), args: [
            .read(x), .read(params.0), .read(params.1), .write(out),
            .u32(value: UInt32(shape.tokens)), .u32(value: UInt32(shape.d)),
        ])
    }

    /// The block's ops, from `slot`'s input to its output, into `ops`; cuBLAS calls on `s` (nil while recording).
    func block(_ ops: BlockOps, _ s: WeirStream?, _ slot: Slot) throws {
        let (d, heads, t) = (shape.d, shape.heads, shape.tokens)
        try norm(ops, slot.x, ln1, slot.normed)
        try linear(ops, s, slot.normed, wQkv, bQkv, slot.qkv, m: t, n: 3 * d, k: d, gelu: false)
        try ops.execute(kernel: attention, grid: grid(heads * t), args: [
            .read(slot.qkv), .write(slot.attended), .u32(value: UInt32(t)), .u32(value: UInt32(d)), .u32(value: UInt32(heads)),
        ])
        try linear(ops, s, slot.attended, wOut, bOut, slot.projected, m: t, n: d, k: d, gelu: false)
        try ops.add(slot.x, slot.projected, into: slot.residual)
        try norm(ops, slot.residual, ln2, slot.normed)
        try linear(ops, s, slot.normed, wUp, bUp, slot.hidden, m: t, n: 4 * d, k: d, gelu: true)
        try linear(ops, s, slot.hidden, wDown, bDown, slot.projected, m: t, n: d, k: 4 * d, gelu: false)
        try ops.add(slot.residual, slot.projected, into: slot.out)
    }

    /// Admits one request's forward pass on `s`: its input into `slot`, the block, the read of its output.
    func forward(_ s: WeirStream, _ slot: Slot, _ input: [Float]) throws -> PendingRead {
        try s.write(input, to: slot.x)
        try block(s, s, slot)
        return try s.enqueueRead(slot.out)
    }

    /// The block over `slot` recorded once as a graph, to replay per request (one op to admit
    /// instead of 14); nil on CUDA, whose cuBLAS calls are foreign code run at admission.
    func record(_ s: WeirStream, _ slot: Slot) throws -> Graph? {
        if blas != nil { return nil }
        return try s.record { batch in try block(batch, nil, slot) }
    }
}

/// Where the block's kernels go: a stream, or a graph being recorded (`WeirStream.record`'s `Batch`).
protocol BlockOps {
    func execute(kernel: Kernel, grid: Grid, args: [Arg]) throws
    func add(_ a: Buffer, _ b: Buffer, into out: Buffer) throws
}

extension WeirStream: BlockOps {}
extension Batch: BlockOps {}

/// The same block on the host, in f32 with f64 sums.
func forwardOnHost(_ shape: Shape, _ w: Weights, _ x: [Float]) -> [Float] {
    let (d, heads, t) = (shape.d, shape.heads, shape.tokens)
    func layernorm(_ x: [Float], _ p: ([Float], [Float])) -> [Float] {
        var out = [Float](repeating: 0, count: x.count)
        for row in 0..<t {
            let values = x[(row * d)..<(row * d + d)].map(Double.init)
            let mean = values.reduce(0, +) / Double(d)
            let variance = values.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(d)
            let scale = 1 / (variance + 1e-5).squareRoot()
            for i in 0..<d { out[row * d + i] = Float((values[i] - mean) * scale) * p.0[i] + p.1[i] }
        }
        return out
    }
    func linear(_ a: [Float], _ w: [Float], _ bias: [Float], _ n: Int, gelu: Bool) -> [Float] {
        let k = a.count / t
        var out = [Float](repeating: 0, count: t * n)
        for row in 0..<t {
            for col in 0..<n {
                var sum = 0.0
                for l in 0..<k { sum += Double(a[row * k + l]) * Double(w[l * n + col]) }
                let v = Float(sum) + bias[col]
                out[row * n + col] = gelu ? 0.5 * v * (1 + tanh(0.7978846 * (v + 0.044715 * v * v * v))) : v
            }
        }
        return out
    }
    let qkv = linear(layernorm(x, w.ln1), w.wQkv, w.bQkv, 3 * d, gelu: false)
    let size = d / heads
    var attended = [Float](repeating: 0, count: t * d)
    for head in 0..<heads {
        for token in 0..<t {
            let scores: [Double] = (0...token).map { s in
                var dot = 0.0
                for i in 0..<size { dot += Double(qkv[token * 3 * d + head * size + i]) * Double(qkv[s * 3 * d + d + head * size + i]) }
                return dot / Double(size).squareRoot()
            }
            let top = scores.max() ?? 0
            let weights = scores.map { exp($0 - top) }
            let total = weights.reduce(0, +)
            for i in 0..<size {
                var v = 0.0
                for s in 0...token { v += weights[s] * Double(qkv[s * 3 * d + 2 * d + head * size + i]) }
                attended[token * d + head * size + i] = Float(v / total)
            }
        }
    }
    let projected = linear(attended, w.wOut, w.bOut, d, gelu: false)
    let residual = zip(x, projected).map { $0 + $1 }
    let down = linear(linear(layernorm(residual, w.ln2), w.wUp, w.bUp, 4 * d, gelu: true), w.wDown, w.bDown, d, gelu: false)
    return zip(residual, down).map { $0 + $1 }
}

/// What a run found: the largest difference of an output from the host's
/// (relative), the figures, and the run with every stream as a timeline.
public struct Report: Sendable {
    public let worst: Float
    public let figures: [(String, Double)]
    public let summary: String
    public let timeline: Timeline
}

/// How one way of serving went: its wall time, and per request when it was
/// admitted and read back (from the start) and its output.
struct Served {
    let wall: Duration
    let spans: [(Duration, Duration)]
    let outputs: [[Float]]
    /// When each request was on the device, in seconds from the start; nil where the backend takes no timestamps.
    let onDevice: [(Double, Double)]?
    var latencies: [Duration] { spans.map { $0.1 - $0.0 } }
}

/// The fraction of `wall` seconds in which the device held at least one of `spans`. A span runs
/// from a timestamp its stream reached just before a request to one just after its read-back,
/// placed on the host's clock by a timestamp the stream took while idle (which the device
/// reaches as it is enqueued).
public func busyFraction(_ spans: [(Double, Double)], wall: Double) -> Double {
    var (covered, reach) = (0.0, 0.0)
    for (start, end) in spans.sorted(by: { $0.0 < $1.0 }) {
        let from = max(start, reach)
        if end > from {
            covered += end - from
            reach = end
        }
    }
    return min(1, covered / wall)
}

/// Serves `inputs` on `streams`: request i on stream i mod K with slot i mod K,
/// from a Task per stream, which awaits the slot's previous read before it
/// admits the next request into it.
func serve(_ model: Model, _ streams: [WeirStream], _ slots: [Slot], _ inputs: [[Float]]) async throws -> Served {
    try await serveWith(streams, inputs) { k, input in try model.forward(streams[k], slots[k], input) }
}

/// `serve`, each request admitted on stream k by `admit`.
func serveWith(_ streams: [WeirStream], _ inputs: [[Float]], _ admit: @escaping @Sendable (Int, [Float]) throws -> PendingRead)
    async throws -> Served
{
    typealias Done = (request: Int, admitted: Duration, read: Duration, output: [Float], onDevice: (Double, Double)?)
    let clock = ContinuousClock()
    let start = clock.now
    let results = try await withThrowingTaskGroup(of: [Done].self) { group in
        for k in streams.indices {
            group.addTask {
                let stream = streams[k]
                // The stream is idle: the device reaches this as it is enqueued.
                let origin = try? stream.timestamp()
                let originAt = seconds(clock.now - start)
                var done: [Done] = []
                for request in stride(from: k, to: inputs.count, by: streams.count) {
                    let admitted = clock.now - start
                    let before = try origin.map { _ in try stream.timestamp() }
                    let read = try admit(k, inputs[request])
                    let after = try before.map { _ in try stream.timestamp() }
                    let bytes = try await read.bytes()
                    let output = bytes.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
                    var onDevice: (Double, Double)?
                    if let origin, let before, let after {
                        onDevice = (originAt + (try await before.elapsedSince(earlier: origin)),
                                    originAt + (try await after.elapsedSince(earlier: origin)))
                    }
                    done.append((request, admitted, clock.now - start, output, onDevice))
                }
                return done
            }
        }
        var all: [Done] = []
        for try await done in group { all += done }
        return all.sorted { $0.request < $1.request }
    }
    let onDevice = results.compactMap(\.onDevice)
    return Served(wall: clock.now - start, spans: results.map { ($0.admitted, $0.read) }, outputs: results.map(\.output),
                  onDevice: onDevice.count == results.count ? onDevice : nil)
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
}

/// Serves `requests` requests both ways on `runtime`, checks every output against the host's, and measures.
public func run(_ runtime: WeirRuntime, shape: Shape, requests: Int, inFlight: Int, kernels: URL = kernelsFolder)
    async throws -> Report
{
    let weights = Weights(shape, seed: 0x5eed)
    let model = try Model(runtime, weights, shape, kernels: kernels)
    var numbers = (0..<requests).map { Numbers(state: 1 + UInt64($0)) }
    let inputs = numbers.indices.map { numbers[$0].take(shape.tokens * shape.d, scale: 1) }
    let k = min(inFlight, requests)
    let streams = try (0..<k).map { _ in try runtime.newStream() }
    let slots = try streams.map { _ in try Slot(streams[0], shape) }
    try await runtime.sync()
    // Warm-up (first launches compile), then each way once, timed.
    _ = try await serve(model, Array(streams.prefix(1)), Array(slots.prefix(1)), Array(inputs.prefix(1)))
    let serial = try await serve(model, Array(streams.prefix(1)), Array(slots.prefix(1)), inputs)
    let overlapped = try await serve(model, streams, slots, inputs)
    // Each slot's block recorded once as a graph, replayed per request (one op to admit instead
    // of 14): on wgpu, where every op is a kernel; after an untimed pass, as above.
    let recorded = try slots.map { try model.record(streams[0], $0) }
    var replayed: Served?
    if !recorded.contains(where: { $0 == nil }) {
        let graphs = recorded.compactMap { $0 }
        let replay: @Sendable (Int, [Float]) throws -> PendingRead = { k, input in
            try streams[k].write(input, to: slots[k].x)
            try streams[k].replay(graph: graphs[k])
            return try streams[k].enqueueRead(slots[k].out)
        }
        _ = try await serveWith(streams, Array(inputs.prefix(streams.count)), replay)
        replayed = try await serveWith(streams, inputs, replay)
    }
    // The host's outputs, once the timed runs are over (they would take the cores the Tasks run on).
    let expected = await withTaskGroup(of: (Int, [Float]).self) { group in
        for (i, input) in inputs.enumerated() { group.addTask { (i, forwardOnHost(shape, weights, input)) } }
        var all = [[Float]](repeating: [], count: inputs.count)
        for await (i, output) in group { all[i] = output }
        return all
    }
    var worst: Float = 0
    for (request, want) in expected.enumerated() {
        for got in [serial.outputs[request], overlapped.outputs[request]] + (replayed.map { [$0.outputs[request]] } ?? []) {
            guard got.count == want.count else {
                throw WeirError.invalidArgument(description: "request \(request): \(got.count) values read back, \(want.count) expected")
            }
            for i in want.indices {
                let error = abs(got[i] - want[i]) / (1 + abs(want[i]))
                worst = max(worst, error.isNaN ? .infinity : error)
            }
        }
    }
    let tokens = Double(requests * shape.tokens)
    func rate(_ wall: Duration) -> Double { tokens / seconds(wall) }
    func medianMillis(_ latencies: [Duration]) -> Double { seconds(latencies.sorted()[latencies.count / 2]) * 1e3 }
    let ratio = seconds(serial.wall) / seconds(overlapped.wall)
    let timeline = Timeline(
        title: "swift transformer block on \(runtime.info().name): \(requests) requests on \(k) streams",
        rows: (0..<k).map { "stream \($0)" },
        bars: overlapped.spans.enumerated().map { request, span in
            TimelineBar(row: UInt32(request % k), start: seconds(span.0), end: seconds(span.1), label: "request \(request)")
        },
        waits: [])
    return Report(
        worst: worst,
        figures: [
            ("tokens/s, one stream", rate(serial.wall)),
            ("tokens/s, \(k) streams", rate(overlapped.wall)),
            ("throughput, streams / one stream", ratio),
            ("latency per request, one stream (ms)", medianMillis(serial.latencies)),
            ("latency per request, \(k) streams (ms)", medianMillis(overlapped.latencies)),
        ] + (replayed.map { [("tokens/s, \(k) streams, each request a replayed graph", rate($0.wall))] } ?? [])
          + [("one stream", serial), ("\(k) streams", overlapped)].compactMap { name, served in
            served.onDevice.map { ("device busy fraction, \(name)", busyFraction($0, wall: seconds(served.wall))) }
        },
        summary: String(format: "%d streams: %.0f tokens/s, %.2fx one stream; every output of every run within %.1e of the host's",
                        k, rate(overlapped.wall), ratio, Double(worst)),
        timeline: timeline)
}
