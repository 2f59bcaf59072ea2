// Errors: one typed enum, WeirError, each case with a message that says what
// went wrong.

import Foundation
import Testing
import Weir

/// The case of a WeirError, without its message.
func caseName(_ error: any Error) -> String {
    guard let error = error as? WeirError else { return "not a WeirError: \(type(of: error))" }
    return String(describing: Mirror(reflecting: error).children.first?.label ?? "\(error)")
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

@Suite("Typed errors")
struct ErrorTests {
    @Test("a backend that cannot run here is Unavailable, naming it")
    func unavailableBackendsAreNamed() async throws {
        for backend in [Backend.cuda, .hip] {
            let name = "\(backend)"
            switch await outcome({ try Runtime.open(backend: backend) }) {
            case .success(let runtime):
                print("\(name) opened here (\(runtime.info().name)); nothing to check")
            case .failure(let error):
                #expect(caseName(error) == "Unavailable", "\(error)")
                #expect((error as? WeirError)?.message.contains(name) == true, "\(error)")
            }
        }
    }

    @Test("bad arguments are InvalidArgument, OutOfRange or Unsupported, with details",
          arguments: TestBackend.allCases)
    func argumentErrorsAreTyped(backend: TestBackend) async throws {
        guard let runtime = try backend.open() else { return }
        let stream = runtime.defaultStream()
        let buffer = try stream.zeros(bytes: 4096)

        await expectWeirError("OutOfRange", mentioning: ["4092", "4100", "4096"]) {
            try await stream.write(buffer: buffer, data: Data(count: 8), offset: 4092)
        }
        await expectWeirError("InvalidArgument", mentioning: ["byte"]) {
            try stream.zeros(bytes: 0)
        }
        await expectWeirError("InvalidArgument", mentioning: ["nothing to write"]) {
            try await stream.write(buffer: buffer, data: Data())
        }
        await expectWeirError("InvalidArgument", mentioning: ["fill_f32"]) {
            try stream.execute(kernel: Kernel.builtin(op: .fillF32), grid: Grid(), args: [.write(buffer)])
        }
        let cudaOnly = Kernel.custom(
            name: "only_cuda", cuda: KernelSource(code: "extern \"C\" __global__ void k() {}", entry: "k"))
        await expectWeirError("Unsupported", mentioning: ["only_cuda", backend.rawValue]) {
            try stream.execute(kernel: cudaOnly, grid: Grid(), args: [])
        }
        // Typed reads check their element size.
        let odd = try stream.upload(data: Data([1, 2, 3]))
        await expectWeirError("InvalidArgument", mentioning: ["3 bytes", "Float"]) {
            try await stream.read(odd, as: Float.self)
        }
    }

    @Test("a buffer of one runtime used in another is ForeignHandle", arguments: TestBackend.allCases)
    func foreignHandlesAreRejected(backend: TestBackend) async throws {
        guard let first = try backend.open(), let second = try backend.open() else { return }
        let theirs = try first.defaultStream().zeros(bytes: 16)
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
        let error = WeirError.OutOfRange(message: "range 1..9 is out of bounds for a buffer of 4 bytes")
        #expect(error.message == "range 1..9 is out of bounds for a buffer of 4 bytes")
        #expect("\(error)" == error.message)
        #expect(error.localizedDescription.contains("out of bounds"))
    }
}
