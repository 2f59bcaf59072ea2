// Failing calls cost no more memory than succeeding ones: an error travels
// as a value and is freed with it, from any number of threads.

import Foundation
import Testing
import Weir

/// The process's resident memory in bytes, from Linux's /proc (nil elsewhere).
private func residentBytes() -> Int? {
    guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
    let fields = statm.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// A count several threads add to.
private final class Count: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

@Suite("Memory under failing calls")
struct HeapTests {
    @Test("4 threads x 250 000 failing reads leave resident memory flat")
    func failingCallsLeaveMemoryFlat() throws {
        guard let runtime = try TestBackend.cpu.open() else { return }
        let stream = runtime.defaultStream()
        let buffer = try stream.zeros(count: 64, of: UInt8.self)
        // A first round settles the allocator's pools.
        for _ in 0..<10_000 { _ = try? stream.readBlocking(buffer: buffer, offset: 1000) }
        guard let before = residentBytes() else { return }
        let (threads, calls) = (4, 250_000)
        let wrong = Count()
        let done = DispatchGroup()
        for _ in 0..<threads {
            done.enter()
            Thread {
                for _ in 0..<calls {
                    do {
                        _ = try stream.readBlocking(buffer: buffer, offset: 1000)
                        wrong.add()
                    } catch {}
                }
                done.leave()
            }.start()
        }
        done.wait()
        let grew = (residentBytes() ?? before) - before
        print("HeapTests: \(threads) threads x \(calls) failing reads; resident memory grew \(grew >> 20) MiB")
        #expect(wrong.value == 0, "a read past the end succeeded")
        #expect(grew < 16 << 20, "failing calls grew resident memory by \(grew >> 20) MiB")
        try runtime.shutdown()
    }
}
