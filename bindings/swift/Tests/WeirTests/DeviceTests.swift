// Device choice: `devices()` lists what every backend sees, each device as
// opening it then reports it.

import Foundation
import Testing
import Weir

@Suite("Devices")
struct DeviceTests {
    @Test("the CPU is listed once, as device 0, with the host's memory")
    func cpuIsListedOnce() throws {
        let cpus = devices().filter { $0.backend == .cpu }
        #expect(cpus.count == 1, "\(cpus)")
        let cpu = try #require(cpus.first)
        #expect(cpu.index == 0)
        #expect(cpu.software)
        #if os(Linux)
        #expect((cpu.memoryBytes ?? 0) > 1 << 20, "the host's memory on Linux: \(cpu)")
        #endif
        let runtime = try WeirRuntime.open(backend: .cpu)
        #expect(runtime.info() == cpu)
        try runtime.shutdown()
    }

    @Test("every listed device opens and reports what the listing says")
    func everyListedDeviceOpensAsListed() throws {
        for device in devices() {
            let runtime = try WeirRuntime.open(device: device)
            #expect(runtime.info() == device, "opened \(device.backend) \(device.index)")
            print("\(device.backend) \(device.index): \(device.name), \(String(describing: device.memoryBytes)) bytes, \(device.limits)")
            try runtime.shutdown()
        }
    }

    @Test("a backend that opens lists the device it opens first", arguments: TestBackend.allCases)
    func openedBackendIsListedFirst(backend: TestBackend) throws {
        guard let runtime = try backend.open() else { return }
        let info = runtime.info()
        #expect(devices().first { $0.backend == info.backend } == info)
        #expect(info.index == 0)
        #expect(info.limits.maxThreadsPerBlock >= 1 && info.limits.maxBlockX >= 1 && info.limits.maxGroupsX >= 1)
        try runtime.shutdown()
    }

    @Test("an index past the listing is unavailable, and Auto takes no index")
    func indexPastTheListingIsUnavailable() {
        let wgpu = devices().filter { $0.backend == .wgpu }.count
        do {
            _ = try WeirRuntime.openDevice(backend: .wgpu, index: UInt32(wgpu))
            Issue.record("wgpu device \(wgpu), past the listing, opened")
        } catch WeirError.unavailable {
        } catch {
            Issue.record("expected WeirError.unavailable, got \(error)")
        }
        do {
            _ = try WeirRuntime.openDevice(backend: .auto, index: 1)
            Issue.record("Auto with an index opened")
        } catch WeirError.invalidArgument {
        } catch {
            Issue.record("expected WeirError.invalidArgument, got \(error)")
        }
    }
}
