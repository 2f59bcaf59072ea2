// Shared test support: the backend matrix, gates, timing.
//
// Every behavioural test runs once per backend in `TestBackend.allCases`
// (WEIR_TEST_BACKENDS, default cpu,wgpu). A backend
// that cannot open here is reported as skipped, by name, with the reason;
// listed in WEIR_REQUIRE_BACKENDS (e.g. `cpu,wgpu`), it fails the test instead.
//
// Tests are nonisolated: no MainActor hop per call.

import Dispatch
import Foundation
import Testing
import Weir

enum TestBackend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case cpu
    case wgpu
    case cuda

    var backend: Backend {
        switch self {
        case .cpu: .cpu
        case .wgpu: .wgpu
        case .cuda: .cuda
        }
    }

    /// The backends the suite runs on, what every test's `arguments:` names:
    /// those WEIR_TEST_BACKENDS lists (e.g. `cpu,wgpu,cuda`; unknown names are
    /// ignored), by default cpu and wgpu, as the Kotlin suite does. (The GPU
    /// bundle's `run-swift.sh` sets it to all three.)
    static var allCases: [TestBackend] {
        let listed = (ProcessInfo.processInfo.environment["WEIR_TEST_BACKENDS"] ?? "cpu,wgpu")
            .split(separator: ",")
            .compactMap { TestBackend(rawValue: $0.trimmingCharacters(in: .whitespaces).lowercased()) }
        return listed.isEmpty ? [.cpu, .wgpu] : listed
    }

    var testDescription: String { rawValue }

    /// Backends that must open (WEIR_REQUIRE_BACKENDS=cpu,wgpu).
    static let required: Set<String> = Set(
        (ProcessInfo.processInfo.environment["WEIR_REQUIRE_BACKENDS"] ?? "")
            .split(separator: ",")
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            .filter { !$0.isEmpty }
    )

    /// A runtime on this backend, or nil (reported as a skip, or as a failure
    /// if the backend is required) when it cannot run here.
    func open(sourceLocation: SourceLocation = #_sourceLocation) throws -> WeirRuntime? {
        do {
            return try WeirRuntime.open(backend: backend)
        } catch WeirError.unavailable(_, let message) {
            let test = Test.current?.name ?? "test"
            if Self.required.contains(rawValue) {
                Issue.record("\(rawValue) is required (WEIR_REQUIRE_BACKENDS) but unavailable: \(message)",
                             sourceLocation: sourceLocation)
            } else {
                print("⤼ skipped \(test) on \(rawValue): \(message)")
            }
            return nil
        }
    }
}

/// Something that holds a stream at a point: a real gate where the backend
/// has one (the CPU), else a long device-side delay.
struct Gate: Sendable {
    /// The gate, or nil for a delay (which opens by itself).
    let hold: Hold?
    /// True if the stream stays held until `release()`.
    var isHeld: Bool { hold != nil }

    /// Holds `stream` from here on; without gates, delays it by `fallback`.
    init(_ stream: WeirStream, fallback: Duration = .seconds(2)) throws {
        do {
            hold = try stream.hold()
        } catch WeirError.unsupported {
            hold = nil
            try stream.delay(fallback)
        }
    }

    func release() { hold?.release() }
}

extension WeirStream {
    /// Holds the stream for `duration`: the device-side delay op, a test hook
    /// (weir-ffi's `test-support` feature, which xtask builds the suites'
    /// library with), so it lives with the tests.
    func delay(_ duration: Duration) throws {
        let (seconds, attoseconds) = duration.components
        let micros = Double(seconds) * 1_000_000 + Double(attoseconds) / 1e12
        let clamped = micros.isNaN ? 0 : min(max(micros, 0), Double(UInt32.max))
        try execute(kernel: delayKernel, grid: Grid(), args: [.u32(value: UInt32(clamped))])
    }
}

/// The delay op's kernel, made once.
private let delayKernel = Kernel.builtin(op: .delay)

/// Seconds since `start`.
func seconds(since start: ContinuousClock.Instant) -> Double {
    let elapsed = ContinuousClock.now - start
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

/// Polls `condition` every millisecond until it holds or `timeout` passes.
func eventually(timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return condition()
}

/// Runs `body` on a Dispatch thread (not the Swift concurrency pool, which a
/// blocking call must not occupy) and returns its outcome.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async {
            continuation.resume(with: Result { try body() })
        }
    }
}

/// The outcome of `body` as a Result, to assert on the error's type.
func outcome<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do { return .success(try await body()) } catch { return .failure(error) }
}

/// `n` floats 1, 2, 3, … (never zero).
func counting(_ n: Int) -> [Float] { (1...n).map(Float.init) }

/// A flag set once, readable from any thread.
final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}

extension Gate {
    /// Releases the gate after `timeout` unless the returned task is cancelled
    /// first: a test whose wait fails to end then fails instead of hanging.
    func watchdog(after timeout: Duration = .seconds(2)) -> Task<Void, Never> {
        Task {
            if (try? await Task.sleep(for: timeout)) != nil {
                print("watchdog: releasing a gate after \(timeout)")
                release()
            }
        }
    }
}

/// A task executor that runs each job at once on the thread that enqueues it.
/// A Task preferring it resumes inline on whichever thread resumes its
/// continuation: for a Weir wait, the thread that delivers the completion
/// (the Swift counterpart of Kotlin's `Dispatchers.Unconfined`).
final class InlineExecutor: TaskExecutor {
    func enqueue(_ job: consuming ExecutorJob) {
        job.runSynchronously(on: asUnownedTaskExecutor())
    }
}

/// The calling thread's native name (what Rust named the thread).
func nativeThreadName() -> String {
    #if canImport(Darwin)
    var name = [CChar](repeating: 0, count: 64)
    guard pthread_getname_np(pthread_self(), &name, name.count) == 0 else { return "?" }
    return String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    #else
    // Glibc's pthread_getname_np is not in Swift's Glibc module; Linux names it here.
    let comm = try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)
    return comm?.trimmingCharacters(in: .newlines) ?? "?"
    #endif
}

/// Resumes a continuation once: with the first outcome offered, later ones dropped.
private final class FirstOutcome<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Result<T, any Error>?, Never>?

    init(_ continuation: CheckedContinuation<Result<T, any Error>?, Never>) {
        self.continuation = continuation
    }

    func offer(_ outcome: Result<T, any Error>?) {
        let continuation = lock.withLock { () -> CheckedContinuation<Result<T, any Error>?, Never>? in
            defer { self.continuation = nil }
            return self.continuation
        }
        continuation?.resume(returning: outcome)
    }
}

/// Runs `body` in a Task that prefers `executor` and returns its value, or
/// records an issue and returns nil if it is not done within `timeout`: a
/// hang fails the test instead of the run (the stuck Task is left behind).
func finishes<T: Sendable>(
    within timeout: Duration = .seconds(20), _ what: String, on executor: any TaskExecutor,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T? {
    let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>?, Never>) in
        let first = FirstOutcome(continuation)
        Task(executorPreference: executor) {
            do { first.offer(.success(try await body())) } catch { first.offer(.failure(error)) }
        }
        Task {
            try? await Task.sleep(for: timeout)
            first.offer(nil)
        }
    }
    guard let outcome else {
        Issue.record("\(what) did not finish within \(timeout)", sourceLocation: sourceLocation)
        return nil
    }
    return try outcome.get()
}
