// `cargo xtask bench --swift`: the Swift cost of a trivial Weir call and of its
// async calls, beside the same weir-ffi calls made from Rust in the same run
// (measured by rust/ffi/examples/round_trip.rs and passed in as arguments).
//
// Prints one JSON object per figure (the bench report's format), then a table.
// Arguments: `--backend NAME`, `--processes N` (each figure the median of N
// fresh processes, 5 by default) and, per figure, `--baseline NAME MICROS`.

import Foundation
import Weir

struct Figure {
    let backend: String
    let name: String
    let weir: Double
    let baseline: Double?
    let note: String
    var unit = "us"

    var ratio: Double? { baseline.flatMap { $0 > 0 ? weir / $0 : nil } }

    var json: String {
        let number = { (value: Double?, digits: Int) in value.map { String(format: "%.\(digits)f", $0) } ?? "null" }
        let note = self.note.replacingOccurrences(of: "\"", with: "'")
        // A rate (GB/s) is better higher; a time or a size, lower.
        let higherIsBetter = unit.hasSuffix("/s")
        return "{\"backend\":\"\(backend)\",\"bench\":\"\(name)\",\"unit\":\"\(unit)\",\"weir\":\(number(weir, 4)),"
            + "\"baseline\":\(number(baseline, 4)),\"ratio\":\(number(ratio, 3)),"
            + "\"higher_is_better\":\(higherIsBetter),\"note\":\"\(note)\"}"
    }
}

/// Nanoseconds on a monotonic clock.
@inline(__always) func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

/// Median microseconds per call of `call`, timed one call at a time after a warm-up.
func medianMicros(_ iterations: Int, _ call: () throws -> Void) rethrows -> Double {
    for _ in 0..<iterations / 10 { try call() }
    var samples = [UInt64](repeating: 0, count: iterations)
    for i in 0..<iterations {
        let start = now()
        try call()
        samples[i] = now() - start
    }
    samples.sort()
    return Double(samples[iterations / 2]) / 1e3
}

/// The same, for an awaited call, all in the calling Task.
func medianMicros(_ iterations: Int, _ call: () async throws -> Void) async rethrows -> Double {
    for _ in 0..<iterations / 10 { try await call() }
    var samples = [UInt64](repeating: 0, count: iterations)
    for i in 0..<iterations {
        let start = now()
        try await call()
        samples[i] = now() - start
    }
    samples.sort()
    return Double(samples[iterations / 2]) / 1e3
}

/// The value after the last `flag`: a measuring process is started with
/// its parent's arguments and `--processes 1` after them.
func value(after flag: String, in arguments: [String]) -> String? {
    guard let index = arguments.lastIndex(of: flag), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}

func baselines(in arguments: [String]) -> [String: Double] {
    var found: [String: Double] = [:]
    var index = 0
    while index + 2 < arguments.count {
        if arguments[index] == "--baseline", let micros = Double(arguments[index + 2]) {
            found[arguments[index + 1]] = micros
            index += 3
        } else {
            index += 1
        }
    }
    return found
}

let arguments = CommandLine.arguments
let name = value(after: "--backend", in: arguments) ?? "cpu"
let backends: [String: Backend] = ["auto": .auto, "cpu": .cpu, "wgpu": .wgpu, "cuda": .cuda, "hip": .hip]
guard let backend = backends[name.lowercased()] else {
    print("usage: weir-bench [--backend auto|cpu|wgpu|cuda|hip] [--processes N] [--baseline NAME MICROS]…")
    exit(2)
}
let rust = baselines(in: arguments)

/// Every figure, measured in one Task off the main actor: top-level code runs
/// on the main actor, and each await from there of Weir's nonisolated calls
/// would hop to the cooperative pool and back, timing two thread switches
/// instead of the call.
@Sendable func measure() async throws -> [Figure] {
    let runtime = try WeirRuntime.open(backend: backend)
    let stream = runtime.defaultStream()
    // The delay op with 0 µs: an op that does nothing, on every backend (a test
    // hook, which the development package's library has).
    let noop = Kernel.builtin(op: .delay)
    let noopArgs: [Arg] = [.u32(value: 0)]
    let note = "median per call in one Task; baseline: the same weir-ffi call from Rust"
    var figures: [Figure] = []

    let index = medianMicros(200_000) { _ = stream.index() }
    figures.append(Figure(backend: name, name: "swift: index(), a trivial sync call", weir: index,
                          baseline: rust["index"], note: "median per call; baseline: the same weir-ffi call from Rust"))
    let token = medianMicros(100_000) { _ = CancelToken() }
    figures.append(Figure(backend: name, name: "swift: CancelToken() made and released", weir: token, baseline: nil,
                          note: "median per token; what each plain async call adds to set up Task cancellation"))
    let sync = try await medianMicros(20_000) { try await stream.sync() }
    figures.append(Figure(backend: name, name: "swift: sync(), idle stream", weir: sync, baseline: rust["sync_idle"],
                          note: "\(note); Task cancellation forwarded (the plain call); target <= 1 us"))
    let syncNoToken = try await medianMicros(20_000) { try await stream.sync(cancel: nil) }
    figures.append(Figure(backend: name, name: "swift: sync(cancel: nil), idle stream", weir: syncNoToken,
                          baseline: rust["sync_idle"], note: "\(note); no token: always the Rust future"))
    let execute = try await medianMicros(10_000) {
        try await stream.executeAndWait(kernel: noop, grid: Grid(), args: noopArgs)
    }
    figures.append(Figure(backend: name, name: "swift: executeAndWait(no-op kernel)", weir: execute,
                          baseline: rust["execute_and_wait_noop"],
                          note: "\(note); Task cancellation forwarded (the plain call); target <= Rust + 3 us"))
    let executeNoToken = try await medianMicros(10_000) {
        try await stream.executeAndWait(kernel: noop, grid: Grid(), args: noopArgs, cancel: nil)
    }
    figures.append(Figure(backend: name, name: "swift: executeAndWait(no-op, cancel: nil)", weir: executeNoToken,
                          baseline: rust["execute_and_wait_noop"], note: "\(note); no cancellation token"))
    figures += try await admissions(stream)
    figures += try await bulk(stream)
    try runtime.shutdown()
    return figures
}

/// Ops per batch in the batch figure.
let batchSize = 1_000

/// Admission of one small op (a fill of 1 KiB) and of a batch of `batchSize`
/// such fills, per op; the stream is synced, untimed, between batches.
@Sendable func admissions(_ stream: Weir.WeirStream) async throws -> [Figure] {
    let a = try stream.zeros(count: 256, of: UInt32.self)
    let fill = medianMicros(20_000) { try? stream.fill(a, with: UInt32(7)) }
    try await stream.sync()
    var samples: [UInt64] = []
    for _ in 0..<220 {
        let start = now()
        try stream.batch { b in
            for i in 0..<batchSize { b.fill(a, with: UInt32(i)) }
        }
        samples.append(now() - start)
        try await stream.sync()
    }
    let perOp = Double(samples.dropFirst(20).sorted()[100]) / 1e3 / Double(batchSize)
    let rustBatch = rust["batch_1000_per_op"].map { String(format: "%.4f", $0) } ?? "-"
    let rustSingle = rust["admit_1_buffer"].map { String(format: "%.4f", $0) } ?? "-"
    return [
        Figure(backend: name, name: "swift: admit one op, 1 buffer argument", weir: fill, baseline: rust["admit_1_buffer"],
               note: "median per fill of 1 KiB; baseline: the same weir-ffi call from Rust"),
        Figure(backend: name, name: "swift: batch of \(batchSize) fills, per op", weir: perOp,
               baseline: rust["one_by_one_1000_per_op"],
               note: "median batch (built and admitted) / \(batchSize); baseline: the same \(batchSize) fills "
                   + "admitted one by one from Rust, timed as a block (a median single admission: \(rustSingle) us; "
                   + "a Rust batch: \(rustBatch) us per op); target <= 1.5x"),
        Figure(backend: name, name: "swift: batch of \(batchSize) fills, per op, beside a Rust batch", weir: perOp,
               baseline: rust["batch_1000_per_op"],
               note: "the same Swift batches; baseline: the same batch built and admitted from Rust, per op"),
    ]
}

/// Bytes per bulk call.
let bulkBytes = 256 << 20

/// This process's resident bytes, from /proc/self/statm (0 where there is none).
@Sendable func residentBytes() -> Int {
    let statm = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? ""
    return (statm.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0) * 4096
}

/// Samples the resident size every millisecond on a thread of its own, keeping the highest.
final class PeakResident: @unchecked Sendable {
    private let lock = NSLock()
    private var peak = residentBytes()
    private var running = true

    init() {
        Thread.detachNewThread { [self] in
            while lock.withLock({ running }) {
                let now = residentBytes()
                lock.withLock { peak = max(peak, now) }
                Thread.sleep(forTimeInterval: 0.001)
            }
        }
    }

    func stop() { lock.withLock { running = false } }

    /// Seconds `call` took and the resident growth (MiB) it peaked at.
    func measure(_ call: () async throws -> Void) async rethrows -> (seconds: Double, growth: Double) {
        let before = residentBytes()
        lock.withLock { self.peak = before }
        let start = now()
        try await call()
        let seconds = Double(now() - start) / 1e9
        let after = residentBytes()
        let highest = lock.withLock { max(self.peak, after) }
        return (seconds, Double(highest - before) / 1_048_576)
    }
}

/// Upload and read of 256 MiB from a `[Float]` (lent to Rust) and into a
/// caller's `[Float]`; best of three rounds, beside the same calls from Rust
/// (`rust/ffi/examples/bulk.rs`). Growth: the peak growth of resident memory
/// during the call (source and destination exist before; on the CPU backend
/// an upload's growth includes the new buffer itself).
@Sendable func bulk(_ stream: Weir.WeirStream) async throws -> [Figure] {
    let floats = (0..<bulkBytes / 4).map { Float($0 % 251) }
    var back = [Float](repeating: 0, count: floats.count)
    let sampler = PeakResident()
    defer { sampler.stop() }
    var upload = (gbps: 0.0, growth: 0.0)
    var read = (gbps: 0.0, growth: 0.0)
    let gbps = { (seconds: Double) in Double(bulkBytes) / seconds / 1e9 }
    for _ in 0..<3 {
        var buffer: Buffer?
        let up = try await sampler.measure {
            buffer = try stream.upload(floats)
            try await stream.sync()
        }
        upload = (max(upload.gbps, gbps(up.seconds)), max(upload.growth, up.growth))
        guard let buffer else { break }
        let down = try await sampler.measure { try await stream.read(buffer, into: &back) }
        read = (max(read.gbps, gbps(down.seconds)), max(read.growth, down.growth))
        guard back == floats else { throw WeirError.bug(description: "the read gave other floats than uploaded") }
    }
    let note = "best of 3, sync included; baseline: Rust through the same weir-ffi calls; target ratio >= 0.8"
    let memory = "peak resident growth during the call (Rust beside it); target: at most \(bulkBytes >> 20) MiB beyond the new buffer"
    return [
        Figure(backend: name, name: "swift: upload 256 MiB from a [Float]", weir: upload.gbps,
               baseline: rust["upload_256mib_gbps"], note: note, unit: "GB/s"),
        Figure(backend: name, name: "swift: upload 256 MiB from a [Float], memory", weir: upload.growth,
               baseline: rust["upload_256mib_growth_mib"], note: memory, unit: "MiB"),
        Figure(backend: name, name: "swift: read 256 MiB into a [Float]", weir: read.gbps,
               baseline: rust["read_256mib_gbps"], note: note, unit: "GB/s"),
        Figure(backend: name, name: "swift: read 256 MiB into a [Float], memory", weir: read.growth,
               baseline: rust["read_256mib_growth_mib"], note: memory, unit: "MiB"),
    ]
}

/// Runs this bench `count` times, each in a fresh process (`--processes 1`),
/// and gives each figure the median of their values. On some hosts a
/// process's threads land so that all its calls are fast, or all slow (two
/// clusters, a few microseconds apart), so one process decides nothing; the
/// Rust baselines are medians across processes too (`round_trip`).
func acrossProcesses(_ count: Int) throws -> [Figure] {
    var runs: [[Figure]] = []
    for _ in 0..<count {
        let command = startedAs()
        let child = Process()
        child.executableURL = URL(fileURLWithPath: command[0])
        child.arguments = Array(command.dropFirst()) + ["--processes", "1"]
        let output = Pipe()
        child.standardOutput = output
        try child.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        child.waitUntilExit()
        guard child.terminationStatus == 0 else {
            throw WeirError.bug(description: "a measuring process exited with \(child.terminationStatus)")
        }
        runs.append(String(decoding: printed, as: UTF8.self).split(separator: "\n").compactMap(parsed))
    }
    return (runs.first ?? []).map { first in
        let values = runs.compactMap { run in run.first { $0.name == first.name }?.weir }.sorted()
        let listed = values.map { String(format: "%.3f", $0) }.joined(separator: ", ")
        return Figure(backend: first.backend, name: first.name, weir: values[values.count / 2], baseline: first.baseline,
                      note: "the median of \(values.count) processes (theirs: \(listed)); in each: \(first.note)",
                      unit: first.unit)
    }
}

/// The command line this process was started with, to start a measuring
/// process the same way. On Linux it is read from /proc, which keeps what
/// `CommandLine` leaves out: a bundle runs the bench through its own dynamic
/// loader (`ld-linux.so --library-path … weir-bench …`), and the loader's
/// arguments are needed again.
func startedAs() -> [String] {
    if let raw = FileManager.default.contents(atPath: "/proc/self/cmdline") {
        let parts = raw.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        // Each argument ends with a NUL, so the last part is empty.
        if parts.count > 1 { return Array(parts.dropLast()) }
    }
    return [Bundle.main.executablePath ?? CommandLine.arguments[0]] + CommandLine.arguments.dropFirst()
}

/// A figure from its JSON line; nil for any other line.
func parsed(_ line: Substring) -> Figure? {
    guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
          let backend = object["backend"] as? String, let name = object["bench"] as? String,
          let weir = object["weir"] as? Double else { return nil }
    return Figure(backend: backend, name: name, weir: weir, baseline: object["baseline"] as? Double,
                  note: object["note"] as? String ?? "", unit: object["unit"] as? String ?? "us")
}

/// Fresh processes measured, each figure their median (5 by default; 1 measures in this one).
let processes = Int(value(after: "--processes", in: arguments) ?? "") ?? 5
let figures = processes > 1 ? try acrossProcesses(processes) : try await Task.detached(operation: measure).value
let sync = figures.first { $0.name.hasPrefix("swift: sync(),") }?.weir ?? .nan
let execute = figures.first { $0.name.hasPrefix("swift: executeAndWait(no-op kernel)") }?.weir ?? .nan
for figure in figures { print(figure.json) }
print()
func column(_ text: String, _ width: Int) -> String { text.padding(toLength: max(width, text.count), withPad: " ", startingAt: 0) }
func right(_ text: String, _ width: Int) -> String { String(repeating: " ", count: max(0, width - text.count)) + text }
print(column("backend", 8), column("benchmark", 44), right("weir", 14), right("baseline", 14), right("ratio", 8), " note")
for figure in figures {
    print(column(figure.backend, 8), column(figure.name, 44), right(String(format: "%.3f \(figure.unit)", figure.weir), 14),
          right(figure.baseline.map { String(format: "%.3f \(figure.unit)", $0) } ?? "-", 14),
          right(figure.ratio.map { String(format: "%.3f", $0) } ?? "-", 8), " \(figure.note)")
}
print()
print(String(format: "%@: idle sync() %.3f us (target <= 1 us); executeAndWait no-op %.3f us = Rust %+.3f us (target <= +3 us)",
             name, sync, execute, execute - (rust["execute_and_wait_noop"] ?? .nan)))
