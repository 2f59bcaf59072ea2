// Device groups: several devices of one backend, each a runtime of its own,
// whose buffers meet through peer copies (`WeirStream.copyFromPeer`) ordered
// by the buffers' versions on both devices. The Swift side only converts
// indices; the waits (Task-cancellable) are in Cancellation.swift.
//
// Collectives (`allReduce`, `broadcast`, `allGather`, `reduceScatter`) take
// one stream and one buffer (or a send and a receive) per member, in member
// order; each member's part is an op on its stream, ordered like any, and
// all parts are admitted at once (see the Rust `DeviceGroup` docs).

extension DeviceGroup {
    /// Opens `devices` of `backend` together, in that order: device indices
    /// as `devices()` lists them for the backend (`WeirRuntime.open(device:)`
    /// opens one alone). The CPU backend opens any index, each a CPU device
    /// of its own (its own workers and memory), so `[0, 1]` is a group of two;
    /// a GPU index may repeat, opening the device again as another member.
    /// An empty list or a negative index is `.invalidArgument`, an index
    /// past the listing `.unavailable`.
    public static func open(_ backend: Backend, devices: [Int]) throws -> DeviceGroup {
        let indices = try devices.map { index -> UInt32 in
            guard let converted = UInt32(exactly: index) else {
                let why = index < 0 ? "negative device index \(index)" : "device index \(index) is past every device list"
                throw WeirError.invalidArgument(description: why)
            }
            return converted
        }
        return try open(backend: backend, devices: indices)
    }

    /// Member `index` of the group, in the order opened: a runtime like any,
    /// with its own streams and buffers. An index past the members is
    /// `.invalidArgument`.
    public func device(_ index: Int) throws -> WeirRuntime {
        guard let converted = UInt32(exactly: index) else {
            throw WeirError.invalidArgument(description: "device \(index) of a group of \(devices().count) devices")
        }
        return try device(index: converted)
    }

    /// Enqueues a broadcast of member `root`'s buffer into every member's
    /// (one buffer per member, in member order, one size and type). A
    /// negative `root` is `.invalidArgument`, as one past the members is.
    public func broadcast(streams: [WeirStream], buffers: [Buffer], root: Int) throws {
        try broadcast(streams: streams, buffers: buffers, root: try memberIndex(root))
    }

    /// Joins the group `id` names as `rank` of `ranks`, with `device` of this
    /// process: one rank of a group whose ranks live in several processes
    /// (CPU: processes of one host; CUDA: NCCL, across hosts too). Rank 0's
    /// process makes the id (`GroupId(backend:)`) and hands `id.toBytes()` to
    /// the others, which rebuild it with `GroupId.fromBytes(bytes:)`. Suspends,
    /// on no thread of the caller's, until every rank has joined; every rank
    /// must then admit the group's collectives in one order. A negative
    /// number is `.invalidArgument`, as a rank past `ranks` is.
    public static func join(_ backend: Backend, device: Int, id: GroupId, ranks: Int, rank: Int) async throws -> DeviceGroup {
        func converted(_ value: Int, _ what: String) throws -> UInt32 {
            guard let value = UInt32(exactly: value) else {
                throw WeirError.invalidArgument(description: "\(what) \(value) of a group of \(ranks) ranks")
            }
            return value
        }
        return try await join(
            backend: backend,
            device: try converted(device, "device"),
            id: id,
            ranks: try converted(ranks, "a count of"),
            rank: try converted(rank, "rank"))
    }

    /// `index` as the Rust side takes a member's, refusing what no member has.
    func memberIndex(_ index: Int) throws -> UInt32 {
        guard let converted = UInt32(exactly: index) else {
            throw WeirError.invalidArgument(description: "member \(index) of a group of \(devices().count) members")
        }
        return converted
    }
}
