// Task cancellation for every async call of Weir.
//
// UniFFI 0.32 does not forward `Task.cancel()` to Rust futures: a cancelled
// Task would keep awaiting until the device finishes. Every async export of
// weir-ffi therefore takes an optional `CancelToken` as its last argument;
// cancelling the token ends that wait with `WeirError.cancelled` and drops the
// Rust wait at once (its waker leaves the completion: nothing stays behind).
//
// The overloads below are what a plain call resolves to (Swift prefers the
// overload that needs no defaulted `cancel:` argument). Each one gives the
// call a fresh token, cancels it from the Task's cancellation handler, and
// reports the outcome as `CancellationError`, as Swift code expects. Pass
// `cancel:` yourself to manage a token by hand instead.
//
// Cancelling ends the *wait*, never the work: an op already admitted still runs.

import Foundation

/// Runs one Rust wait so that cancelling the current Task ends it promptly.
///
/// `wait` receives a token that fires when the Task is cancelled (at once, if
/// it already is). A wait ended that way throws `CancellationError`; every
/// other outcome is returned or rethrown unchanged.
func cancellable<T: Sendable>(_ wait: (CancelToken) async throws -> T) async throws -> T {
    let token = CancelToken()
    do {
        return try await withTaskCancellationHandler {
            try await wait(token)
        } onCancel: {
            token.cancel()
        }
    } catch WeirError.cancelled(let description) {
        // The token is ours and fires only on Task cancellation, but stay
        // precise: report CancellationError only if the Task is cancelled.
        if Task.isCancelled { throw CancellationError() }
        throw WeirError.cancelled(description: description)
    }
}

extension Timestamp {
    /// Suspends until both this timestamp and `earlier` (of the same stream,
    /// taken first) are taken, then gives the device time from `earlier` to
    /// this one, in seconds. Cancelling the Task ends the wait with `CancellationError`.
    public func elapsedSince(earlier: Timestamp) async throws -> TimeInterval {
        try await cancellable { try await self.elapsedSince(earlier: earlier, cancel: $0) }
    }
}

extension WeirRuntime {
    /// Suspends until all work admitted on every stream so far is done.
    /// Cancelling the Task ends the wait with `CancellationError`.
    public func sync() async throws {
        try await cancellable { try await self.sync(cancel: $0) }
    }
}

extension DeviceGroup {
    /// Suspends until all work admitted so far on every member's streams is done.
    /// Cancelling the Task ends the wait with `CancellationError`.
    public func sync() async throws {
        try await cancellable { try await self.sync(cancel: $0) }
    }

    /// Enqueues `allReduce(streams:buffers:op:)`, then suspends until every
    /// stream given has done it. Cancelling the Task ends the wait (not the
    /// collective) with `CancellationError`.
    public func allReduceAndWait(streams: [WeirStream], buffers: [Buffer], op: ReduceOp) async throws {
        try await cancellable { try await self.allReduceAndWait(streams: streams, buffers: buffers, op: op, cancel: $0) }
    }

    /// Enqueues `broadcast(streams:buffers:root:)`, then suspends until every
    /// stream given has done it. Cancelling the Task ends the wait (not the
    /// collective) with `CancellationError`.
    public func broadcastAndWait(streams: [WeirStream], buffers: [Buffer], root: Int) async throws {
        let root = try memberIndex(root)
        try await cancellable {
            try await self.broadcastAndWait(streams: streams, buffers: buffers, root: root, cancel: $0)
        }
    }

    /// Enqueues `allGather(streams:sends:receives:)`, then suspends until every
    /// stream given has done it. Cancelling the Task ends the wait (not the
    /// collective) with `CancellationError`.
    public func allGatherAndWait(streams: [WeirStream], sends: [Buffer], receives: [Buffer]) async throws {
        try await cancellable {
            try await self.allGatherAndWait(streams: streams, sends: sends, receives: receives, cancel: $0)
        }
    }

    /// Enqueues `reduceScatter(streams:sends:receives:op:)`, then suspends
    /// until every stream given has done it. Cancelling the Task ends the
    /// wait (not the collective) with `CancellationError`.
    public func reduceScatterAndWait(streams: [WeirStream], sends: [Buffer], receives: [Buffer], op: ReduceOp)
        async throws
    {
        try await cancellable {
            try await self.reduceScatterAndWait(streams: streams, sends: sends, receives: receives, op: op, cancel: $0)
        }
    }
}

extension WeirStream {
    /// Suspends until the runtime's queue has room for more work (returns at
    /// once while it has). Cancelling the Task ends the wait with `CancellationError`.
    public func room() async throws {
        try await cancellable { try await self.room(cancel: $0) }
    }

    /// Admits what `admission` admits without blocking the calling thread,
    /// and returns what it returns. `admission` gets a handle of this stream
    /// that never waits for room (`withoutWaiting()`): while the runtime's
    /// queue is full (`RuntimeOptions.queueLimitOps`, `queueLimitHostBytes`)
    /// its admission throws `WeirError.queueFull`, and this suspends until
    /// the queue has room, then calls `admission` again. So `admission`
    /// should admit one op (or one batch): what it admitted before the
    /// refusal would be admitted twice. A plain admission blocks its thread
    /// while the queue is full.
    public func admit<T>(_ admission: (WeirStream) throws -> T) async throws -> T {
        let eager = withoutWaiting()
        while true {
            do {
                return try admission(eager)
            } catch WeirError.queueFull {
                try await room()
            }
        }
    }

    /// Suspends until all work admitted on this stream so far is done; an idle
    /// stream answers at once. Cancelling the Task ends the wait with
    /// `CancellationError`.
    public func sync() async throws {
        // An idle stream, or one whose work ends within moments (its fence
        // watched for a bounded time where its recent waits were that quick),
        // answers without a token or a Rust future: UniFFI's async round trip
        // costs several times Rust's answer. Cancellation is checked first, as
        // the Rust wait checks its token before the stream.
        if Task.isCancelled { throw CancellationError() }
        if try syncQuickly() { return }
        try await cancellable { try await self.sync(cancel: $0) }
    }

    /// Enqueues `kernel` over `args`, then suspends until this stream has run it.
    /// Cancelling the Task ends the wait (not the kernel) with `CancellationError`.
    public func executeAndWait(kernel: Kernel, grid: Grid, args: [Arg]) async throws {
        try execute(kernel: kernel, grid: grid, args: args)
        try await sync()
    }

    /// Enqueues zeroing every byte of `buffer` on the device, ordered after its
    /// readers and writers on every stream, then suspends until this stream has done it.
    /// Cancelling the Task ends the wait (not the memset) with `CancellationError`.
    public func memsetZeroAndWait(buffer: Buffer) async throws {
        try await cancellable { try await self.memsetZeroAndWait(buffer: buffer, cancel: $0) }
    }

    /// Reads the bytes of `length` elements of `buffer` from element `offset`
    /// (by default the whole buffer) once its latest write (on any stream) is
    /// done. Cancelling the Task ends the wait with `CancellationError`.
    public func read(buffer: Buffer, offset: UInt64 = 0, length: UInt64? = nil) async throws -> Data {
        try await cancellable { try await self.read(buffer: buffer, offset: offset, length: length, cancel: $0) }
    }

    /// Enqueues a copy of all of `src`, a buffer of another member of this
    /// stream's device group, into `dst`, a buffer of this stream's runtime of
    /// the same size (as `copyFromPeer(src:dst:)` does), then suspends until
    /// this stream has done it. Cancelling the Task ends the wait (not the
    /// copy) with `CancellationError`.
    public func copyFromPeerAndWait(src: Buffer, dst: Buffer) async throws {
        try await cancellable { try await self.copyFromPeerAndWait(src: src, dst: dst, cancel: $0) }
    }

    /// Enqueues a copy of `data` (`element`s: the buffer's type, or `.bytes`
    /// for any) into `buffer` at element `offset`, then suspends until this
    /// stream has done it.
    /// Cancelling the Task ends the wait (not the copy) with `CancellationError`.
    public func writeAndWait(buffer: Buffer, data: Data, element: ElementType, offset: UInt64 = 0) async throws {
        try await cancellable {
            try await self.writeAndWait(buffer: buffer, data: data, element: element, offset: offset, cancel: $0)
        }
    }
}

extension Fence {
    /// Suspends until the fenced work is done; fails with its first error.
    /// Await it as often as you like, from any number of Tasks. Cancelling the
    /// Task ends this wait with `CancellationError`.
    public func `await`() async throws {
        try await cancellable { try await self.await(cancel: $0) }
    }
}
