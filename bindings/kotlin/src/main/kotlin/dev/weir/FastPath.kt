package dev.weir

import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.ensureActive

/**
 * How a suspend call returns when it finished without suspending (the build's
 * fast path for an idle stream's `sync()`, see xtask/src/kotlin.rs): in a
 * cancelled coroutine it throws `CancellationException`, as the generated
 * path does when its Rust future is ready on the first poll.
 */
internal suspend fun returnedAtOnce() = currentCoroutineContext().ensureActive()
