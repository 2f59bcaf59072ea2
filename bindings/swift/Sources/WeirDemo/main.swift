// `cargo xtask demo --swift`: Weir's main job from Swift, the chunked
// pipeline of the Rust demo (`cargo xtask demo`), on the CPU backend unless
// `--backend NAME` says otherwise.
//
// Host data is uploaded on one stream, a kernel transforms each chunk on a
// second, and the results are read back on a third, with `--in-flight K`
// chunks' device buffers reused in a ring. No wait is placed by hand: reusing
// a slot is a write after the previous chunk's read of it, so Weir orders the
// upload of chunk i + K after the compute of chunk i, and that compute's
// output after the read of chunk i - K. The chunks live in `HostBytes`
// (page-locked on CUDA and HIP), so uploads copy straight from them and reads
// hand back the memory the device copied into. The demo prints each chunk's
// timeline and the throughput beside each stage alone and beside the same
// work on one stream.
//
// Options: `--chunks N` (64), `--chunk-mib M` (1 on the CPU, 16 on a GPU),
// `--in-flight K` (8).

import Foundation
import Weir

/// `y = x`, then `y = y / 2 + 1/2` `iters` times: work that scales with `iters`.
let cudaSource = """
    extern "C" __global__ void transform(const float* x, float* y, unsigned n, unsigned iters) {
        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
            float v = x[i];
            for (unsigned k = 0; k < iters; ++k) v = v * 0.5f + 0.5f;
            y[i] = v;
        }
    }
    """

let wgslSource = """
    @group(0) @binding(0) var<storage, read> x: array<f32>;
    @group(0) @binding(1) var<storage, read_write> y: array<f32>;
    struct Params { n: u32, iters: u32 }
    @group(0) @binding(2) var<uniform> params: Params;
    @compute @workgroup_size(256)
    fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
        for (var i = id.x; i < params.n; i += groups.x * 256u) {
            var v = x[i];
            for (var k = 0u; k < params.iters; k += 1u) { v = v * 0.5 + 0.5; }
            y[i] = v;
        }
    }
    """

func transformKernel() -> Kernel {
    Kernel.custom(
        name: "transform", wgsl: KernelSource(code: wgslSource, entry: "main"),
        cuda: KernelSource(code: cudaSource, entry: "transform"), hip: KernelSource(code: cudaSource, entry: "transform")
    ) { args in
        let iters: UInt32 = try args.scalar(1)
        let x = try args.values(0, as: Float.self)
        try args.update(1, as: Float.self) { y in
            for i in 0..<x.count {
                var v = x[i]
                for _ in 0..<iters { v = v * 0.5 + 0.5 }
                y[i] = v
            }
        }
    }
}

func expected(_ value: Float, _ iters: UInt32) -> Float {
    (0..<iters).reduce(value) { v, _ in v * 0.5 + 0.5 }
}

struct Options {
    var backend: Backend = .cpu
    var chunks = 64
    var chunkMiB: Int?
    var inFlight = 8

    init?(_ arguments: [String]) {
        func value(_ name: String) -> String? {
            arguments.firstIndex(of: name).flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
        }
        if let name = value("--backend") {
            switch name.lowercased() {
            case "auto": backend = .auto
            case "cpu": backend = .cpu
            case "wgpu": backend = .wgpu
            case "cuda": backend = .cuda
            case "hip": backend = .hip
            default: return nil
            }
        }
        for (name, field) in [("--chunks", \Options.chunks), ("--in-flight", \Options.inFlight)] {
            if let text = value(name) {
                guard let number = Int(text), number > 0 else { return nil }
                self[keyPath: field] = number
            }
        }
        if let text = value("--chunk-mib") {
            guard let number = Int(text), number > 0 else { return nil }
            chunkMiB = number
        }
    }
}

/// The device buffers of one in-flight chunk.
struct Slot {
    let input: Buffer
    let output: Buffer
}

/// Where each stage of one chunk ended, from the start of its run.
struct Ends {
    let upload: Duration
    let compute: Duration
    let download: Duration
}

final class Pipeline: @unchecked Sendable {
    let runtime: WeirRuntime
    let kernel = transformKernel()
    /// Each chunk's input, and the value all its floats hold.
    let host: [(bytes: HostBytes, value: Float)]
    let floats: Int
    let slots: [Slot]
    var iters: UInt32 = 1
    let clock = ContinuousClock()

    init(runtime: WeirRuntime, host: [(bytes: HostBytes, value: Float)], floats: Int, slots: [Slot]) {
        (self.runtime, self.host, self.floats, self.slots) = (runtime, host, floats, slots)
    }

    var bytes: Double { Double(host.count * floats * 4) }

    func slot(_ i: Int) -> Slot { slots[i % slots.count] }

    func compute(_ stream: WeirStream, _ slot: Slot) throws {
        try stream.execute(
            kernel: kernel, grid: gridLinear(items: UInt32(min(floats, 4096 * 256)), block: 256),
            args: [.read(slot.input), .write(slot.output), .u32(value: UInt32(floats)), .u32(value: iters)])
    }

    /// Runs every chunk on the streams given (the same stream three times
    /// for the one-stream run). One Task per stage awaits that stage's
    /// fences in order, so each end is taken as it happens; every chunk read
    /// back is checked after the run.
    func run(upload: WeirStream, compute: WeirStream, download: WeirStream) async throws -> (Duration, [Ends]) {
        try await runtime.sync()
        let start = clock.now
        let (uploads, uploaded) = AsyncStream<Fence>.makeStream()
        let (computes, computed) = AsyncStream<Fence>.makeStream()
        let (downloads, downloaded) = AsyncStream<PendingRead>.makeStream()
        let clock = self.clock
        func ends(_ fences: AsyncStream<Fence>) -> Task<[Duration], Error> {
            Task {
                var ends: [Duration] = []
                for await fence in fences {
                    try await fence.await()
                    ends.append(clock.now - start)
                }
                return ends
            }
        }
        let (uploadEnds, computeEnds) = (ends(uploads), ends(computes))
        let reads = Task {
            var reads: [(Duration, HostBytes)] = []
            for await pending in downloads {
                let bytes = try await pending.bytes()
                reads.append((clock.now - start, bytes))
            }
            return reads
        }
        // At most one chunk per slot in flight on the host side too: the next
        // upload into a slot is admitted once that slot's previous chunk was
        // read back, so page-locked memory stays bounded.
        var readBack: [Fence] = []
        for (i, chunk) in host.enumerated() {
            if readBack.count == slots.count { try await readBack.removeFirst().await() }
            let slot = slot(i)
            try upload.write(host: chunk.bytes, to: slot.input)
            uploaded.yield(try upload.fence())
            try self.compute(compute, slot)
            computed.yield(try compute.fence())
            // Admitted now, in order on its stream, before the slot's next write; awaited by the reader.
            downloaded.yield(try download.enqueueRead(slot.output))
            readBack.append(try download.fence())
        }
        uploaded.finish()
        computed.finish()
        downloaded.finish()
        let (ups, comps, read) = (try await uploadEnds.value, try await computeEnds.value, try await reads.value)
        var timeline: [Ends] = []
        for (i, (end, bytes)) in read.enumerated() {
            let want = expected(host[i].value, iters)
            let wrong = bytes.withUnsafeBytes { raw in
                raw.bindMemory(to: Float.self).filter { abs($0 - want) > 1e-5 * max(abs(want), 1) }.count
            }
            guard wrong == 0 else { throw WeirError.invalidArgument(description: "chunk \(i): \(wrong) floats are not \(want)") }
            timeline.append(Ends(upload: ups[i], compute: comps[i], download: end))
        }
        let elapsed = read.map { $0.0 }.max() ?? .zero
        return (elapsed, timeline)
    }

    /// Each stage alone over every chunk, on one stream: (upload, compute, download).
    func stagesAlone(_ stream: WeirStream) async throws -> [Duration] {
        func timed(_ work: () async throws -> Void) async throws -> Duration {
            try await runtime.sync()
            let start = clock.now
            try await work()
            try await stream.sync()
            return clock.now - start
        }
        let upload = try await timed {
            for (i, chunk) in host.enumerated() { try stream.write(host: chunk.bytes, to: slot(i).input) }
        }
        let compute = try await timed { for i in host.indices { try self.compute(stream, slot(i)) } }
        let download = try await timed {
            let reads = try host.indices.map { try stream.enqueueRead(slot($0).output) }
            for read in reads { _ = try await read.bytes() }
        }
        return [upload, compute, download]
    }
}

func seconds(_ duration: Duration) -> Double {
    let (whole, atto) = duration.components
    return Double(whole) + Double(atto) / 1e18
}

func gbps(_ bytes: Double, _ time: Duration) -> Double { bytes / seconds(time) / 1e9 }

func runDemo() async throws -> Bool {
    guard let options = Options(CommandLine.arguments) else {
        print("usage: weir-demo [--backend auto|cpu|wgpu|cuda|hip] [--chunks N] [--chunk-mib M] [--in-flight K]")
        return false
    }
    let runtime = try WeirRuntime.open(backend: options.backend)
    let info = runtime.info()
    let gpu = info.backend != .cpu
    let floats = ((options.chunkMiB ?? (gpu ? 16 : 1)) << 20) / 4
    let inFlight = min(options.inFlight, options.chunks)
    let backendName = "\(info.backend)".lowercased()
    print("weir swift demo on \(backendName) (\(info.name)): \(options.chunks) chunks of \((floats * 4) >> 20) MiB, "
        + "\(inFlight) in flight")
    let s = runtime.defaultStream()
    let host = try (0..<options.chunks).map { i in
        (bytes: try runtime.hostBytes([Float](repeating: Float(i), count: floats)), value: Float(i))
    }
    let slots = try (0..<inFlight).map { _ in
        Slot(input: try s.zeros(count: floats * 4, of: UInt8.self), output: try s.zeros(count: floats * 4, of: UInt8.self))
    }
    let pipeline = Pipeline(runtime: runtime, host: host, floats: floats, slots: slots)

    // Balance the stages: the smallest power of two of iterations whose
    // compute takes as long as the slower copy. The first run only warms up
    // (it takes the page-locked memory the reads land in).
    _ = try await pipeline.stagesAlone(s)
    var alone = try await pipeline.stagesAlone(s)
    while alone[1] < max(alone[0], alone[2]) && pipeline.iters < 1 << 16 {
        pipeline.iters *= 2
        alone = try await pipeline.stagesAlone(s)
    }
    let bytes = pipeline.bytes
    let slowest = alone.max() ?? .zero
    print(String(format: "stages alone on one stream: upload %.2f GB/s, compute (%d iterations) %.2f GB/s, download %.2f GB/s",
                 gbps(bytes, alone[0]), pipeline.iters, gbps(bytes, alone[1]), gbps(bytes, alone[2])))

    let (upload, compute, download) = (try runtime.newStream(), try runtime.newStream(), try runtime.newStream())
    // Untimed first, as the Kotlin demo must warm its JIT up: the same run on both.
    _ = try await pipeline.run(upload: upload, compute: compute, download: download)
    // Then, as the Rust demo measures: the best of a few runs of each, taken
    // in turn, so that one slow moment of a shared machine lands on neither
    // side alone; the timeline is the best pipelined run's.
    let runs = 3
    var (pipelined, timeline, oneStream) = (Duration.seconds(Int64.max), [Ends](), Duration.seconds(Int64.max))
    var waits: UInt64 = 0
    for _ in 0..<runs {
        let waitsBefore = runtime.diagnostics().insertedWaits
        let (took, ends) = try await pipeline.run(upload: upload, compute: compute, download: download)
        waits = runtime.diagnostics().insertedWaits - waitsBefore
        if took < pipelined {
            (pipelined, timeline) = (took, ends)
        }
        oneStream = min(oneStream, try await pipeline.run(upload: s, compute: s, download: s).0)
    }

    print("timeline of the pipelined run (ms from its start; a stage starts once its input and its stream are free):")
    print("\("chunk".padding(6))\("upload".padding(19))\("compute".padding(19))\("download".padding(19))")
    var bars: [TimelineBar] = []
    var crossings: [TimelineWait] = []
    for (i, end) in timeline.enumerated() {
        func before(_ stage: (Ends) -> Duration) -> Duration { i > 0 ? stage(timeline[i - 1]) : .zero }
        func slotFree(_ stage: (Ends) -> Duration) -> Duration { i >= inFlight ? stage(timeline[i - inFlight]) : .zero }
        // The host admits a slot's next upload once its previous chunk was read back.
        let uploadStart = max(before(\.upload), slotFree(\.download))
        let computeStart = max(before(\.compute), end.upload, slotFree(\.download))
        let downloadStart = max(before(\.download), end.compute)
        func span(_ from: Duration, _ to: Duration) -> String {
            String(format: "%7.2f - %7.2f", seconds(from) * 1e3, seconds(max(from, to)) * 1e3)
        }
        print("\(String(i).padding(6)) \(span(uploadStart, end.upload)) \(span(computeStart, end.compute)) "
            + "\(span(downloadStart, end.download))")
        let spans = [(uploadStart, end.upload), (computeStart, end.compute), (downloadStart, end.download)]
        for (row, (start, stop)) in spans.enumerated() {
            bars.append(TimelineBar(row: UInt32(row), start: seconds(start), end: seconds(stop), label: "chunk \(i)"))
            if row > 0 {
                crossings.append(TimelineWait(fromRow: UInt32(row - 1), from: seconds(spans[row - 1].1),
                                              toRow: UInt32(row), until: seconds(start)))
            }
        }
    }
    let picture = URL(fileURLWithPath: "target/weir-demo-timeline-swift.svg").standardizedFileURL
    let svg = timelineSvg(timeline: Timeline(
        title: "Weir Swift demo on \(info.name): \(options.chunks) chunks",
        rows: ["upload stream", "compute stream", "download stream"], bars: bars, waits: crossings))
    do {
        try FileManager.default.createDirectory(at: picture.deletingLastPathComponent(), withIntermediateDirectories: true)
        try svg.write(to: picture, atomically: true, encoding: .utf8)
        print("the timeline as a picture: \(picture.path)")
    } catch {
        print("the timeline picture could not be written to \(picture.path): \(error)")
    }
    // On the CPU backend each stage is a thread doing the work itself: with
    // fewer cores than the stages and the feeding thread, the targets measure
    // the machine, not Weir, and the demo says so instead.
    let cores = ProcessInfo.processInfo.activeProcessorCount
    // One core per stage, and one for the thread that feeds them.
    let cpuCoresForTargets = 4
    let machineBound = info.backend == .cpu && cores < cpuCoresForTargets
    func target(_ value: Double) -> Double? { machineBound ? nil : value }
    let figures: [(String, Double, Double?)] = [
        ("pipeline, 3 streams", gbps(bytes, pipelined), nil),
        ("slowest stage alone", gbps(bytes, slowest), nil),
        ("one stream", gbps(bytes, oneStream), nil),
        ("pipeline / slowest stage", seconds(slowest) / seconds(pipelined), target(0.85)),
        ("pipeline / one stream", seconds(oneStream) / seconds(pipelined), target(2.0)),
    ]
    for (name, value, target) in figures {
        let target = target.map { "\($0)" } ?? "null"
        print("{\"backend\":\"\(backendName)\",\"demo\":\"swift: \(name)\",\"value\":\(String(format: "%.3f", value)),\"target\":\(target)}")
    }
    print(String(format: "pipelined %.2f GB/s (%.2fx the slowest stage alone, %.2fx one stream; best of %d runs each); ",
                 gbps(bytes, pipelined), seconds(slowest) / seconds(pipelined), seconds(oneStream) / seconds(pipelined), runs)
        + "\(waits) cross-stream waits inserted for \(options.chunks) chunks in a run")
    if machineBound {
        print("this machine has \(cores) cores for three CPU stages and the thread that feeds them: the stages share "
            + "cores, so no target applies here (they do with \(cpuCoresForTargets) cores, or on a GPU)")
    }
    print("every chunk read back correct")
    try runtime.shutdown()
    return true
}

extension String {
    /// Right-aligned in `width` columns.
    func padding(_ width: Int) -> String { String(repeating: " ", count: max(0, width - count)) + self }
}

do {
    exit(try await runDemo() ? 0 : 1)
} catch {
    print("weir demo failed: \(error)")
    exit(1)
}
