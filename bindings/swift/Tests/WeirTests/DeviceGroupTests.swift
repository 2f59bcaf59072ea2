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
            #expect(seconds(since: started) < 1.5)
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

    @Test("collectives over two CPU devices compute what the host does")
    func collectivesMatchTheHost() async throws {
        try await TestBackend.cpu.withGroup { group in
            let streams = try group.devices().map { try $0.newStream() }
            let a = try streams[0].upload((0..<256).map(Float.init))
            let b = try streams[1].upload((0..<256).map { 1000 - Float($0) })
            try await group.allReduceAndWait(streams: streams, buffers: [a, b], op: .sum)
            #expect(try await streams[1].read(b, as: Float.self) == [Float](repeating: 1000, count: 256))
            #expect(try await streams[0].read(a, as: Float.self) == [Float](repeating: 1000, count: 256))
            let x = try streams[0].upload([Int32](repeating: 7, count: 64))
            let y = try streams[1].upload([Int32](repeating: -3, count: 64))
            try group.allReduce(streams: streams, buffers: [x, y], op: .max)
            #expect(try await streams[1].read(y, as: Int32.self) == [Int32](repeating: 7, count: 64))
            try await group.broadcastAndWait(streams: streams, buffers: [x, y], root: 1)
            let sends = [try streams[0].upload([Int32](repeating: 1, count: 4)),
                         try streams[1].upload([Int32](repeating: 2, count: 4))]
            let gathered = [try streams[0].zeros(count: 8, of: Int32.self), try streams[1].zeros(count: 8, of: Int32.self)]
            try await group.allGatherAndWait(streams: streams, sends: sends, receives: gathered)
            #expect(try await streams[1].read(gathered[1], as: Int32.self) == [1, 1, 1, 1, 2, 2, 2, 2])
            let parts = [try streams[0].zeros(count: 4, of: Int32.self), try streams[1].zeros(count: 4, of: Int32.self)]
            try await group.reduceScatterAndWait(streams: streams, sends: gathered, receives: parts, op: .sum)
            #expect(try await streams[0].read(parts[0], as: Int32.self) == [2, 2, 2, 2])
            #expect(try await streams[1].read(parts[1], as: Int32.self) == [4, 4, 4, 4])
            #expect(throws: WeirError.self) { try group.allReduce(streams: streams.reversed(), buffers: [x, y], op: .sum) }
            #expect(throws: WeirError.self) { try group.broadcast(streams: streams, buffers: [x, y], root: -1) }
        }
    }

    @Test("two ranks joined through a group id meet in their collectives, each with its own runtime")
    func joinedRanksMeet() async throws {
        let id = try GroupId(backend: .cpu)
        // Rank 1 as another process would be: from the id's bytes.
        let theirs = try GroupId.fromBytes(bytes: id.toBytes())
        async let first = DeviceGroup.join(.cpu, device: 0, id: id, ranks: 2, rank: 0)
        async let second = DeviceGroup.join(.cpu, device: 0, id: theirs, ranks: 2, rank: 1)
        let groups = try await [first, second]
        defer { groups.forEach { try? $0.shutdown() } }
        #expect(groups.map { $0.rank() } == [0, 1])
        #expect(groups.map { $0.ranks() } == [2, 2])
        let streams = try groups.map { try $0.device(0).newStream() }
        let sends = try (0..<2).map { rank in try streams[rank].upload([Float](repeating: Float(rank + 1), count: 256)) }
        let gathered = try streams.map { try $0.zeros(count: 512, of: Float.self) }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for rank in 0..<2 {
                tasks.addTask {
                    try await groups[rank].allReduceAndWait(streams: [streams[rank]], buffers: [sends[rank]], op: .sum)
                    try await groups[rank].allGatherAndWait(streams: [streams[rank]], sends: [sends[rank]], receives: [gathered[rank]])
                }
            }
            try await tasks.waitForAll()
        }
        for rank in 0..<2 {
            #expect(try await streams[rank].read(sends[rank], as: Float.self) == [Float](repeating: 3, count: 256))
            #expect(try await streams[rank].read(gathered[rank], as: Float.self) == [Float](repeating: 3, count: 512))
        }
        // Sizes count both ranks: a gather into room for one send is refused at once.
        #expect(throws: WeirError.self) {
            try groups[0].allGather(streams: [streams[0]], sends: [sends[0]], receives: [try streams[0].zeros(count: 256, of: Float.self)])
        }
        let refused = await outcome { try await DeviceGroup.join(.cpu, device: 0, id: try GroupId(backend: .cpu), ranks: 2, rank: 2) }
        guard case .failure(WeirError.invalidArgument) = refused else {
            Issue.record("rank 2 of 2 gave \(refused)")
            return
        }
    }

    @Test("a consumer on device 1 reads an all-reduce only after device 0's held input")
    func allReduceWaitsForAHeldInput() async throws {
        try await TestBackend.cpu.withGroup { group in
            let streams = try group.devices().map { try $0.newStream() }
            let writer = try group.device(0).newStream()
            let consumer = try group.device(1).newStream()
            let x0 = try streams[0].zeros(count: 1024, of: Int32.self)
            let x1 = try streams[1].upload([Int32](repeating: 1, count: 1024))
            try await group.sync()
            let gate = try Gate(writer)
            defer { gate.release() }
            try writer.fill(x0, with: Int32(5))
            try group.allReduce(streams: streams, buffers: [x0, x1], op: .sum)
            let read = Task { try await consumer.read(x1, as: Int32.self) }
            try await Task.sleep(for: .milliseconds(20))
            #expect(!(try consumer.fence().isComplete()), "device 1 read the all-reduce before device 0's held input")
            gate.release()
            #expect(try await read.value == [Int32](repeating: 6, count: 1024), "device 1 read a stale all-reduce")
        }
    }

    @Test("cancelling a Task awaiting a collective ends the wait, not the collective")
    func cancellingACollectivesWait() async throws {
        try await TestBackend.cpu.withGroup { group in
            let streams = try group.devices().map { try $0.newStream() }
            let buffers = [try streams[0].upload([Int32](repeating: 1, count: 16)),
                           try streams[1].upload([Int32](repeating: 2, count: 16))]
            try await group.sync()
            let gate = try Gate(streams[1])
            defer { gate.release() }
            let started = ContinuousClock.now
            let waiting = Task { try await group.allReduceAndWait(streams: streams, buffers: buffers, op: .sum) }
            try await Task.sleep(for: .milliseconds(20))
            waiting.cancel()
            let ended = await outcome { try await waiting.value }
            #expect(seconds(since: started) < 1.5)
            guard case .failure(let error) = ended, error is CancellationError else {
                Issue.record("a cancelled collective wait gave \(ended)")
                return
            }
            gate.release()
            try await group.sync()
            #expect(try await streams[0].read(buffers[0], as: Int32.self) == [Int32](repeating: 3, count: 16))
        }
    }
}
