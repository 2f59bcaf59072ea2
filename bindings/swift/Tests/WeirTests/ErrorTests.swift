// Errors: one typed enum, WeirError, with cases in lowerCamelCase as Swift
// code expects (`catch WeirError.invalidArgument`); each case carries the Rust
// error's typed fields (backend, stream index, sizes) and a description that
// says what went wrong.

import Foundation
import Testing
import Weir

/// The case of a WeirError, without its message. Exhaustive on purpose: a new
/// case in Rust does not compile here until the tests cover it.
func caseName(_ error: any Error) -> String {
    guard let error = error as? WeirError else { return "not a WeirError: \(type(of: error))" }
    switch error {
    case .unavailable: return "Unavailable"
    case .unsupported: return "Unsupported"
    case .invalidArgument: return "InvalidArgument"
    case .outOfRange: return "OutOfRange"
    case .foreignHandle: return "ForeignHandle"
    case .closed: return "Closed"
    case .outOfMemory: return "OutOfMemory"
    case .opFailed: return "OpFailed"
    case .backend: return "Backend"
    case .deviceLost: return "DeviceLost"
    case .bug: return "Bug"
    case .cancelled: return "Cancelled"
    case .queueFull: return "QueueFull"
    }
}

/// Expects `body` to throw the WeirError case `expected` whose message contains every one of `words`.
func expectWeirError<T>(
    _ expected: String, mentioning words: [String],
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> T
) async {
    switch await outcome(body) {
    case .success(let value):
        Issue.record("expected WeirError.\(expected), got \(value)", sourceLocation: sourceLocation)
    case .failure(let error):
        #expect(caseName(error) == expected, "\(error)", sourceLocation: sourceLocation)
        let message = (error as? WeirError)?.message ?? ""
        for word in words {
            #expect(message.localizedCaseInsensitiveContains(word),
                    "message \"\(message)\" should mention \(word)", sourceLocation: sourceLocation)
        }
    }
}

/// The message of the WeirError `body` throws; empty if it throws none.
func weirMessage<T>(_ body: () async throws -> T) async -> String {
    if case .failure(let error as WeirError) = await outcome(body) { return error.message }
    return ""
}

@Suite("Typed errors")
struct ErrorTests {
    @Test("every WeirError case arrives typed, with its message")
    func everyCaseArrivesTypedWithItsMessage() async {
        // What the Rust core error of each name converts to (test support in weir-ffi).
        let expected: [(String, String)] = [
            ("Unavailable", "no probe device"),
            ("Unsupported", "probing"),
            ("InvalidArgument", "probe argument"),
            ("OutOfRange", "8 bytes at offset 8 do not fit in a buffer of 12 bytes"),
            ("ForeignHandle", "belongs to another runtime"),
            ("Closed", "closed"),
            ("OutOfMemory", "out of device memory"),
            ("OpFailed", "probe op failed"),
            ("Backend", "probe call failed"),
            ("DeviceLost", "CUDA_ERROR_ILLEGAL_ADDRESS"),
            ("Bug", "a bug in Weir"),
            ("Cancelled", "cancelled"),
            ("QueueFull", "queue is full"),
        ]
        for (variant, text) in expected {
            await expectWeirError(variant, mentioning: [text]) { try debugErrorProbe(variant: variant) }
        }
        await expectWeirError("InvalidArgument", mentioning: ["NoSuchVariant"]) {
            try debugErrorProbe(variant: "NoSuchVariant")
        }
    }

    @Test("each case carries the Rust error's fields with their types")
    func casesCarryTypedFields() async throws {
        // The probe's core errors: Unavailable/Unsupported/Backend on the CPU,
        // OpFailed on stream 3, OutOfMemory of 2^40 device bytes.
        func probe(_ variant: String) -> WeirError? {
            do {
                try debugErrorProbe(variant: variant)
            } catch let error as WeirError {
                return error
            } catch {
                Issue.record("\(variant): not a WeirError: \(error)")
            }
            return nil
        }
        guard case .unavailable(let backend, _) = probe("Unavailable") else { Issue.record("Unavailable"); return }
        #expect(backend == .cpu)
        guard case .unsupported(let backend, _) = probe("Unsupported") else { Issue.record("Unsupported"); return }
        #expect(backend == .cpu)
        guard case .backend(let backend, let text) = probe("Backend") else { Issue.record("Backend"); return }
        #expect(backend == .cpu && text.contains("probe call failed"))
        guard case .opFailed(let stream, let text) = probe("OpFailed") else { Issue.record("OpFailed"); return }
        #expect(stream == 3 && text.contains("probe op failed"))
        guard case .outOfMemory(let bytes, let host, _) = probe("OutOfMemory") else { Issue.record("OutOfMemory"); return }
        #expect(bytes == 1 << 40 && !host)
    }

    @Test("errors are caught by case, as Swift code expects", arguments: TestBackend.allCases)
    func errorsAreCaughtByCase(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let (s, t) = (try runtime.newStream(), try runtime.newStream())
        do {
            _ = try s.zeros(count: -1, of: Float.self)
            Issue.record("a negative count was accepted")
        } catch WeirError.invalidArgument {
            // The case a Swift caller names.
        }
        // A failed op names its stream by index; an op on another stream that
        // reads what it wrote fails on that stream, naming the original.
        let x = try s.upload([Float](repeating: 1, count: 4))
        do {
            try s.failWrite(buffer: x, message: "deliberate failure F")
            Issue.record("failWrite did not fail")
        } catch WeirError.opFailed(let stream, let text) {
            #expect(stream == s.index(), "\(text)")
        }
        do {
            _ = try await t.read(x, as: Float.self)
            Issue.record("a read of a failed buffer returned data")
        } catch WeirError.opFailed(let stream, let text) {
            #expect(stream == t.index(), "the read is T's: \(text)")
            #expect(text.contains("deliberate failure F") && text.contains("stream \(s.index())"), "\(text)")
        }
        // A copy on T of the failed buffer fails on T, naming the original.
        let y = try t.zeros(count: 4, of: Float.self)
        do {
            try t.copy(x, to: y)
            try await t.sync()
            Issue.record("a copy of a failed buffer succeeded")
        } catch WeirError.opFailed(let stream, let text) {
            #expect(stream == t.index(), "the failed copy is T's: \(text)")
            #expect(text.contains("deliberate failure F"))
        }
        // S's next fence reports its failure, by the same case.
        await expectFailure(naming: "deliberate failure F") { try await s.sync() }
    }

    @Test("a backend that cannot run here is Unavailable, naming it")
    func unavailableBackendsAreNamed() async throws {
        for backend in [Backend.cuda, .hip] {
            let name = "\(backend)"
            switch await outcome({ try WeirRuntime.open(backend: backend) }) {
            case .success(let runtime):
                print("\(name) opened here (\(runtime.info().name)); nothing to check")
            case .failure(let error):
                guard case WeirError.unavailable(let kind, let text) = error else {
                    Issue.record("expected WeirError.unavailable, got \(error)")
                    continue
                }
                #expect("\(kind)" == name && text.contains(name), "\(error)")  // BackendKind.cuda for Backend.cuda
            }
        }
    }

    @Test("bad arguments are InvalidArgument, OutOfRange or Unsupported, with details",
          arguments: TestBackend.allCases)
    func argumentErrorsAreTyped(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let buffer = try stream.zeros(count: 1024, of: Float.self)

        // Ranges are in the buffer's elements, however the data is given.
        await expectWeirError("OutOfRange", mentioning: ["2 f32 elements at offset 1023", "buffer of 1024 f32 elements"]) {
            try stream.write(buffer: buffer, data: Data(count: 8), element: .bytes, offset: 1023)
        }
        await expectWeirError("InvalidArgument", mentioning: ["6 bytes", "f32 elements"]) {
            try stream.write(buffer: buffer, data: Data(count: 6), element: .bytes, offset: 0)
        }
        await expectWeirError("InvalidArgument", mentioning: ["byte"]) {
            try stream.zeros(count: 0, of: Float.self)
        }
        await expectWeirError("InvalidArgument", mentioning: ["nothing to write"]) {
            try stream.write(buffer: buffer, data: Data(), element: .bytes, offset: 0)
        }
        await expectWeirError("InvalidArgument", mentioning: ["fill_f32"]) {
            try stream.execute(kernel: Kernel.builtin(op: .fillF32), grid: Grid(), args: [.write(buffer)])
        }
        // A kernel with only a source of another backend's language.
        let (name, foreign) = backend == .cuda
            ? ("only_wgsl", Kernel.custom(name: "only_wgsl", wgsl: KernelSource(code: "@compute @workgroup_size(1) fn k() {}", entry: "k")))
            : ("only_cuda", Kernel.custom(name: "only_cuda", cuda: KernelSource(code: "extern \"C\" __global__ void k() {}", entry: "k")))
        await expectWeirError("Unsupported", mentioning: [name, backend.rawValue]) {
            try stream.execute(kernel: foreign, grid: Grid(), args: [])
        }
        await expectWeirError("InvalidArgument", mentioning: ["limit"]) {
            try stream.zeros(count: Int.max, of: UInt8.self)
        }
        await expectWeirError("InvalidArgument", mentioning: ["more bytes than a u64 counts"]) {
            try stream.zeros(count: UInt64.max, element: .f32)
        }
        // The range as asked, not a saturated end.
        await expectWeirError("OutOfRange", mentioning: ["1 f32 elements at offset \(UInt64.max)", "do not fit"]) {
            try stream.write(buffer: buffer, data: Data(count: 4), element: .bytes, offset: UInt64.max)
        }
        await expectWeirError("OutOfRange", mentioning: ["2 f32 elements at offset \(UInt64.max)", "do not fit"]) {
            try stream.readBlocking(buffer: buffer, offset: UInt64.max, length: 2)
        }
        let (small, out) = (try stream.zeros(count: 2, of: Float.self), try stream.zeros(count: 1024, of: Float.self))
        await expectWeirError("InvalidArgument", mentioning: ["add", "equal size"]) {
            try await stream.executeAndWait(
                kernel: Kernel.builtin(op: .add), grid: Grid(), args: [.read(buffer), .read(small), .write(out)])
        }
        await expectWeirError("InvalidArgument", mentioning: ["twice"]) {
            try await stream.executeAndWait(
                kernel: Kernel.builtin(op: .add), grid: Grid(), args: [.read(buffer), .read(buffer), .write(buffer)])
        }
        await expectWeirError("InvalidArgument", mentioning: ["axpy"]) {
            try await stream.executeAndWait(kernel: Kernel.builtin(op: .axpy), grid: Grid(), args: [.read(buffer)])
        }
        await expectWeirError("InvalidArgument", mentioning: []) {
            try stream.empty(count: -1, of: Float.self)
        }
        // Typed reads check their element size.
        let odd = try stream.upload(data: Data([1, 2, 3]), element: .bytes)
        await expectWeirError("InvalidArgument", mentioning: ["3 bytes", "Float"]) {
            try await stream.read(odd, as: Float.self)
        }
        // And all the while the runtime kept working, on every stream.
        let other = try runtime.newStream()
        try other.write([Float(4), 5], to: buffer)
        #expect(try await stream.read(buffer, as: Float.self).prefix(2) == [4, 5])
    }

    @Test("typed writes report a bad offset in elements, as the caller gave it", arguments: TestBackend.allCases)
    func typedWritesReportElementOffsets(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let (floats, words) = (try stream.zeros(count: 4, of: Float.self), try stream.zeros(count: 4, of: UInt32.self))
        for write: () async throws -> Void in [
            { try stream.write([Float(1)], to: floats, at: -1) },
            { try stream.write([UInt32(1)], to: words, at: -1) },
            { try await stream.writeAndWait([Float(1)], to: floats, at: -1) },
        ] {
            await expectWeirError("InvalidArgument", mentioning: ["element offset -1"], write)
            let message = await weirMessage(write)
            #expect(!message.contains("-4"), "a byte offset: \(message)")
        }
        for (write, element) in [
            ({ try stream.write([Float(1), 2], to: floats, at: 3) }, "f32"),
            ({ try stream.write([UInt32(1), 2], to: words, at: 3) }, "u32"),
            ({ try await stream.writeAndWait([UInt32(1), 2], to: words, at: 3) }, "u32"),
        ] as [(() async throws -> Void, String)] {
            await expectWeirError(
                "OutOfRange", mentioning: ["2 \(element) elements at offset 3", "buffer of 4 \(element) elements"], write)
            let message = await weirMessage(write)
            #expect(!message.contains("12") && !message.contains("16"), "byte units: \(message)")
        }
        await expectWeirError("OutOfRange", mentioning: ["at offset \(Int.max)"]) {
            try stream.write([Float(1)], to: floats, at: Int.max)
        }
        // In range, the same helper writes where it says.
        try stream.write([UInt32(7)], to: words, at: 3)
        #expect(try await stream.read(words, as: UInt32.self) == [0, 0, 0, 7])
    }

    @Test("a kernel of one 1 000-term expression compiles off a Task's thread and runs",
          arguments: TestBackend.allCases)
    func longSumOfAThousandTerms(backend: TestBackend) async throws {
        try await runsLongSum(on: backend, terms: 1_000)
    }

    @Test("a kernel of one 10 000-term expression returns from a Task, never crashes the process",
          arguments: TestBackend.allCases)
    func longSumOfTenThousandTerms(backend: TestBackend) async throws {
        try await runsLongSum(on: backend, terms: 10_000)
    }

    @Test("a kernel of one 100 000-term expression returns from a Task, never crashes the process",
          arguments: TestBackend.allCases)
    func longSumOfAHundredThousandTerms(backend: TestBackend) async throws {
        try await runsLongSum(on: backend, terms: 100_000)
    }

    /// Compiles and runs `a[0] = 1u + 1u + …` (`terms` terms, nested as deep:
    /// the WGSL compiler recurses over it) from a detached Task, on a thread of
    /// the cooperative pool: it returns the sum or a typed error, never crashes.
    private func runsLongSum(on backend: TestBackend, terms: Int) async throws {
        guard backend == .wgpu else {
            print("⤼ skipped \(Test.current?.name ?? "test") on \(backend.rawValue): custom WGSL kernels run on wgpu only")
            return
        }
        guard let runtime = try backend.open() else { return }
        let stream = try runtime.newStream()
        let out = try stream.zeros(count: 1, of: UInt32.self)
        let sum = [String](repeating: "1u", count: terms).joined(separator: " + ")
        let code = """
            @group(0) @binding(0) var<storage, read_write> a: array<u32>;
            @compute @workgroup_size(1)
            fn main() { a[0] = \(sum); }

            """
        let kernel = Kernel.custom(name: "long_sum_\(terms)", wgsl: KernelSource(code: code, entry: "main"))
        let result = await Task.detached {
            try stream.execute(kernel: kernel, grid: gridLinear(items: 1, block: 1), args: [.write(out)])
            return try await stream.read(out, as: UInt32.self)
        }.result
        switch result {
        case .success(let values):
            #expect(values == [UInt32(terms)], "\(terms) terms")
        case .failure(let error):
            // Refused is fine: a typed error, not a crash.
            #expect(error is WeirError, "\(terms) terms: not a WeirError: \(error)")
            print("\(terms) terms: \(caseName(error)): \(String(describing: error).prefix(200))")
        }
    }

    @Test("a buffer of one runtime used in another is ForeignHandle", arguments: TestBackend.allCases)
    func foreignHandlesAreRejected(backend: TestBackend) async throws {
        guard let first = try backend.open(), let second = try backend.open() else { return }
        let theirs = try first.defaultStream().zeros(count: 16, of: UInt8.self)
        await expectWeirError("ForeignHandle", mentioning: ["another runtime"]) {
            try await second.defaultStream().read(buffer: theirs)
        }
    }

    @Test("a cancelled token is Cancelled, outside Task cancellation", arguments: TestBackend.allCases)
    func cancelledTokensAreTyped(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let token = CancelToken()
        token.cancel()
        await expectWeirError("Cancelled", mentioning: ["cancelled"]) {
            try await runtime.defaultStream().sync(cancel: token)
        }
    }

    @Test("WeirError reads well: message, description, localized description")
    func errorsDescribeThemselves() {
        let error = WeirError.outOfRange(description: "range 1..9 is out of bounds for a buffer of 4 bytes")
        #expect(error.message == "range 1..9 is out of bounds for a buffer of 4 bytes")
        #expect("\(error)" == error.message)
        #expect(error.localizedDescription.contains("out of bounds"))
    }
}
