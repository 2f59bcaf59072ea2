package dev.weir

import com.sun.jna.JNIEnv
import com.sun.jna.Native
import com.sun.jna.NativeLibrary

/**
 * The JNI entries of the library that the generated bindings load through
 * JNA ([NativeExecute], [NativeCopy]), bound to their declarations here by
 * the library itself (weir-ffi's `jni_link.rs`): the JVM is handed each
 * entry's address, so the one copy JNA loaded serves both, and nothing is
 * loaded twice. Where they cannot be bound ([linked] false), the bindings
 * make every call the generated way.
 */
internal object NativeLink {
    /** True when the JNI entries are bound. */
    val linked: Boolean = try {
        // Named and loaded as the generated bindings load it, so this is the instance JNA holds.
        val name = System.getProperty("uniffi.component.weir.libraryOverride") ?: "weir_ffi"
        Native.register(Registration::class.java, NativeLibrary.getInstance(name, UniffiLib::class.java.classLoader))
        val bound = Registration.weir_ffi_register_natives(JNIEnv.CURRENT) == 1.toByte()
        if (!bound) log.log(System.Logger.Level.WARNING, "calls go the generated way: the JVM refused the library's JNI entries")
        bound
    } catch (failure: Throwable) {
        log.log(System.Logger.Level.WARNING, "calls go the generated way: the library's JNI entries were not bound", failure)
        false
    }

    private val log: System.Logger get() = System.getLogger("dev.weir")

    /**
     * The library's binding call, mapped directly: a method of this class,
     * so the library finds [NativeExecute] and [NativeCopy] with this
     * class's loader.
     */
    private object Registration {
        @JvmStatic
        @Suppress("FunctionName") // the library's symbol
        external fun weir_ffi_register_natives(env: JNIEnv): Byte
    }
}

/**
 * The JNI entry that admits an execute op (weir-ffi's `encoded.rs`), used
 * by [EncodedOps] once [NativeLink.linked].
 */
internal object NativeExecute {
    /**
     * Admits the execute op in the [length] bytes at [encoding] on the stream
     * [stream] with the kernel [kernel] and buffers [buffer0]… ([count] of
     * them), all lent handles: [ADMITTED]; [REFUSED] when Rust refused it (its
     * error waits for `takeExecuteRefusal()`); [NOT_TAKEN] when it admitted nothing.
     */
    @JvmStatic
    external fun execute(
        stream: Long,
        kernel: Long,
        encoding: Long,
        length: Int,
        count: Int,
        buffer0: Long,
        buffer1: Long,
        buffer2: Long,
        buffer3: Long,
    ): Int

    /** [execute]'s answers. */
    const val NOT_TAKEN = 0
    const val ADMITTED = 1
    const val REFUSED = 2
}

/**
 * The JNI entries that copy between the caller's arrays and Rust's host
 * memory with the C library's `memcpy` (weir-ffi's `array_copy.rs`): for
 * large copies on a large server, JNA's and NIO's copies (the JVM's element
 * loop) ran at about half its speed. The `to…` ones copy a read's
 * [HostBytes] (given its lent handle and a byte offset) into an array or a
 * direct buffer and answer false when they copied nothing (a range out of
 * bounds, elements the JVM would not lend, a buffer that is not direct); the
 * `stage…` ones fill new staging memory for an upload. Where one does
 * nothing, the caller copies the JNA way.
 */
internal object NativeCopy {
    @JvmStatic
    external fun toFloats(host: Long, hostOffset: Long, array: FloatArray, at: Int, count: Int): Boolean

    @JvmStatic
    external fun toInts(host: Long, hostOffset: Long, array: IntArray, at: Int, count: Int): Boolean

    @JvmStatic
    external fun toBytes(host: Long, hostOffset: Long, array: ByteArray, at: Int, count: Int): Boolean

    /** Copies [length] bytes into the direct [buffer] from byte [at] of its capacity. */
    @JvmStatic
    external fun toDirect(host: Long, hostOffset: Long, buffer: java.nio.ByteBuffer, at: Int, length: Int): Boolean

    /**
     * New staging memory of the lent [stream]'s runtime holding [count]
     * elements of [array] from [at], as the handle of a `HostBytes` the
     * caller owns; 0 when it made none (the caller stages the JNA way).
     */
    @JvmStatic
    external fun stageFloats(stream: Long, array: FloatArray, at: Int, count: Int): Long

    @JvmStatic
    external fun stageInts(stream: Long, array: IntArray, at: Int, count: Int): Long
}
