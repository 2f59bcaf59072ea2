// `cargo xtask transformer --swift [-- --backend cuda|wgpu] [--small] [--requests N]
// [--in-flight K] [--kernels DIR] [--raw-tokens-per-second R]`: the transformer example from Swift Tasks
// (Sources/WeirTransformer), its figures as JSON lines and a summary.

import Foundation
import Weir
import WeirTransformer

let arguments = CommandLine.arguments
func value(_ name: String) -> String? {
    arguments.firstIndex(of: name).flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
}
let shape: Shape = arguments.contains("--small") ? .small : .gpt2Small
let requests = max(1, Int(value("--requests") ?? "") ?? 32)
let inFlight = max(1, Int(value("--in-flight") ?? "") ?? 8)
let kernels = value("--kernels").map { URL(fileURLWithPath: $0) } ?? kernelsFolder

func open() throws -> WeirRuntime {
    switch value("--backend") {
    case "cuda": return try WeirRuntime.open(backend: .cuda)
    case "wgpu": return try WeirRuntime.open(backend: .wgpu)
    case nil:
        if let cuda = try? WeirRuntime.open(backend: .cuda) { return cuda }
        return try WeirRuntime.open(backend: .wgpu)
    case let other?: throw WeirError.invalidArgument(description: "--backend takes cuda or wgpu, not \(other)")
    }
}

do {
    let runtime = try open()
    let info = runtime.info()
    let backend = "\(info.backend)".lowercased()
    print("swift transformer block (d \(shape.d), \(shape.heads) heads, \(shape.tokens) tokens a request) on \(backend) "
        + "(\(info.name)): \(requests) requests, \(inFlight) in flight")
    let report = try await run(runtime, shape: shape, requests: requests, inFlight: inFlight, kernels: kernels)
    // The raw single-stream version's rate, measured by the Rust bench just before (xtask passes it).
    let raw = value("--raw-tokens-per-second").flatMap(Double.init)
    let againstRaw = raw.map { rate in
        report.figures.filter { $0.0.hasPrefix("tokens/s, ") }.map { ("\($0.0) / raw single stream", $0.1 / rate) }
    } ?? []
    for (name, figure) in report.figures + againstRaw {
        print("{\"backend\":\"\(backend)\",\"example\":\"swift transformer: \(name)\",\"value\":\(String(format: "%.3f", figure))}")
    }
    print(report.summary)
    let picture = URL(fileURLWithPath: "target/weir-transformer-timeline-swift.svg").standardizedFileURL
    do {
        try FileManager.default.createDirectory(at: picture.deletingLastPathComponent(), withIntermediateDirectories: true)
        try timelineSvg(timeline: report.timeline).write(to: picture, atomically: true, encoding: .utf8)
        print("the timeline as a picture: \(picture.path)")
    } catch {
        print("the timeline picture could not be written to \(picture.path): \(error)")
    }
    try runtime.shutdown()
    if report.worst > tolerance {
        print("an output is off the host's by \(report.worst) (relative), more than \(tolerance)")
        exit(1)
    }
} catch {
    print("weir-transformer: \(error)")
    exit(1)
}
