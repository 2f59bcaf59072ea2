// Device groups: peer copies ordered by the buffers' versions on both devices.

import Foundation
import Testing
import Weir

extension TestBackend {
    /// The devices a two-member group opens here: two CPU devices, or one
    /// CUDA (or wgpu) device twice.
    var groupDevices: [Int] {
        switch self {
        case .cpu: [0, 1]
        case .wgpu, .cuda: [0, 0]
        }
    }

    /// A group of `groupDevices`, or nil (reported as a skip, or a failure
    /// when required) where the backend cannot open; shut down after `body`.
    func withGroup(_ body: (DeviceGroup) async throws -> Void) async throws {
        guard let probe = try open() else { return }
        try probe.shutdown()
        let group = try DeviceGroup.open(backend, devices: groupDevices)
        do {
            try await body(group)
        } catch {
            try? group.shutdown()
            throw error
        }
        try group.shutdown()
    }

    /// True where peer copies run (the CPU and CUDA); elsewhere the test is
    /// reported as skipped by name (wgpu's refusal has a test of its own).
    func copiesBetweenDevices() -> Bool {
        if self == .wgpu {
            print("⤼ skipped \(Test.current?.name ?? "test") on wgpu: it has no copies between devices (.unsupported)")
        }
        return self != .wgpu
    }
}

@Suite("Device groups")
struct DeviceGroupTests {
    @Test("a consumer on device 1 reads through a peer copy what device 0 just wrote, after a pre-sync",
          arguments: TestBackend.allCases)
    func consumerOnDeviceOneSeesDeviceZerosLatestWrite(backend: TestBackend) async throws {
        guard backend.copiesBetweenDevices() else { return }
        try await backend.withGroup { group in
            let (s, t) = (try group.device(0).newStream(), try group.device(1).newStream())
            let unrelated = try s.upload([Int32](repeating: 1, count: 16))
            let out = try s.empty(count: 1024, of: Int32.self)
            let pre = try t.zeros(count: 16, of: Int32.self)
            let seen = try t.zeros(count: 1024, of: Int32.self)
            // t has now synchronised with s past out's allocation, not past its write.
            try await t.copyFromPeerAndWait(src: unrelated, dst: pre)
            let gate = try Gate(s)
            defer { gate.release() }
            try s.fill(out, with: Int32(7))
            try t.copyFromPeer(src: out, dst: seen)
            let read = Task { try await t.read(seen, as: Int32.self) }
            if gate.isHeld {
                try await Task.sleep(for: .milliseconds(20))
                #expect(!(try t.fence().isComplete()), "device 1 copied before device 0's held write")
            }
            gate.release()
            #expect(try await read.value == [Int32](repeating: 7, count: 1024), "device 1 read a stale copy")
            #expect(try await t.read(pre, as: Int32.self) == [Int32](repeating: 1, count: 16))
            try await group.sync()
        }
    }

    @Test("a write on device 0 after a copy to device 1 waits for the copy", arguments: TestBackend.allCases)
    func writeAfterReadAcrossDevices(backend: TestBackend) async throws {
        guard backend.copiesBetweenDevices() else { return }
        try await backend.withGroup { group in
            #expect(group.devices().count == 2)
            let (s, t) = (try group.device(0).newStream(), try group.device(1).newStream())
            let src = try s.upload([Int32](repeating: 3, count: 256))
            let dst = try t.zeros(count: 256, of: Int32.self)
            try await group.sync()
            let gate = try Gate(t)
            defer { gate.release() }
            try t.copyFromPeer(src: src, dst: dst)
            try s.fill(src, with: Int32(9))  // must wait for the held copy's read of src
            let overwritten = try s.fence()
            if gate.isHeld {
                try await Task.sleep(for: .milliseconds(20))
                #expect(!overwritten.isComplete(), "device 0 overwrote what device 1 still copies")
            }
            gate.release()
            try await overwritten.await()
            #expect(try await t.read(dst, as: Int32.self) == [Int32](repeating: 3, count: 256))
            #expect(try await s.read(src, as: Int32.self) == [Int32](repeating: 9, count: 256))
            let shorter = try t.zeros(count: 255, of: Int32.self)
            #expect(throws: WeirError.self) { try t.copyFromPeer(src: src, dst: shorter) }
        }
    }

    @Test("cancelling a Task awaiting the group's sync ends the wait, not the work")
    func cancellingTheGroupsSync() async throws {
        try await TestBackend.cpu.withGroup { group in
            let s = try group.device(1).newStream()
            let x = try s.zeros(count: 64, of: Float.self)
            let gate = try Gate(s)
            defer { gate.release() }
            try s.fill(x, with: Float(5))
            let started = ContinuousClock.now
            let waiting = Task { try await group.sync() }
            try await Task.sleep(for: .milliseconds(20))
            waiting.cancel()
            let ended = await outcome { try await waiting.value }
            #expect(seconds(since: started) < 0.5)
            guard case .failure(let error) = ended, error is CancellationError else {
                Issue.record("a cancelled group sync gave \(ended)")
                return
            }
            gate.release()
            try await group.sync()
            #expect(try await s.read(x, as: Float.self) == [Float](repeating: 5, count: 64))
        }
    }

    @Test("bad indices are refused, typed, and copies between wgpu devices are unsupported",
          arguments: TestBackend.allCases)
    func badIndicesAndUnsupportedCopies(backend: TestBackend) async throws {
        try await backend.withGroup { group in
            #expect(throws: WeirError.self) { try group.device(2) }
            #expect(throws: WeirError.self) { try group.device(-1) }
            guard backend == .wgpu else { return }
            let (s, t) = (try group.device(0).defaultStream(), try group.device(1).defaultStream())
            let src = try s.upload([Float(1), 2])
            let dst = try t.zeros(count: 2, of: Float.self)
            let refused = await outcome { try t.copyFromPeer(src: src, dst: dst) }
            guard case .failure(WeirError.unsupported(.wgpu, let message)) = refused else {
                Issue.record("a copy between wgpu devices gave \(refused)")
                return
            }
            #expect(message.contains("copies between devices"), "\(message)")
            #expect(try await t.read(dst, as: Float.self) == [0, 0])
        }
        let refused = await outcome { try DeviceGroup.open(backend.backend, devices: [0, -1]) }
        guard case .failure(WeirError.invalidArgument(let message)) = refused else {
            Issue.record("a negative device index gave \(refused)")
            return
        }
        #expect(message.contains("-1"), "\(message)")
        #expect(throws: WeirError.self) { try DeviceGroup.open(backend.backend, devices: []) }
    }
}
