// Device groups: several devices of one backend, each a runtime of its own,
// whose buffers meet through peer copies (`WeirStream.copyFromPeer`) ordered
// by the buffers' versions on both devices. The Swift side only converts
// indices; the waits (Task-cancellable) are in Cancellation.swift.

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
}
