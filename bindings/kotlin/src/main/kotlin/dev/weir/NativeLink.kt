package dev.weir

import com.sun.jna.Native
import com.sun.jna.NativeLibrary
import java.io.File
import java.io.IOException

/**
 * The library that the generated bindings load through JNA, linked for the
 * JVM's JNI too by loading that same file, so that both use one copy of the
 * library: the JNI entries ([NativeExecute], [NativeCopy]) are in it. Where
 * it cannot be ([linked] false), the bindings make every call the generated way.
 */
internal object NativeLink {
    /** True when the JNI entries are linked. */
    val linked: Boolean = try {
        // Named as the generated bindings name it, so this is the instance JNA loaded.
        val name = System.getProperty("uniffi.component.weir.libraryOverride") ?: LibraryFile.name(LibraryFile.NAME)
        val file = NativeLibrary.getInstance(name, UniffiLib::class.java.classLoader).file
        System.load(file.absolutePath)
        LibraryFile.loadedTwice()
        true
    } catch (failure: Throwable) {
        System.getLogger("dev.weir").log(System.Logger.Level.WARNING, "calls go the generated way: the library's JNI entries did not link", failure)
        false
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

/**
 * The library file that both JNA and the JVM load.
 *
 * Given only the library's name, JNA unpacks the copy the jar carries into a
 * temporary file and deletes it once loaded, so the JVM could not load the
 * same file for the JNI entry (and another copy would be another library,
 * with statics of its own). The build has the generated bindings ask [name]
 * instead (xtask/src/kotlin.rs): the jar's copy, unpacked here to a file that
 * stays until both have loaded it. With no copy on the class path, JNA
 * searches for the library by name as before.
 */
internal object LibraryFile {
    /** The library's name (`libweir_ffi.so` on Linux). */
    const val NAME = "weir_ffi"

    /** The file unpacked from the class path (itself, if a plain file there), or null. */
    private val file: File? by lazy {
        try {
            Native.extractFromResourcePath(NAME, LibraryFile::class.java.classLoader)
        } catch (_: IOException) {
            null // not on the class path, or not to be unpacked (jna.nounpack): JNA searches by name
        } catch (_: SecurityException) {
            null
        }
    }

    /** Unpacked from a jar into a temporary file, which is deleted once loaded twice. */
    private val unpacked: Boolean by lazy {
        val url = LibraryFile::class.java.classLoader.getResource("${com.sun.jna.Platform.RESOURCE_PREFIX}/${System.mapLibraryName(NAME)}")
        file != null && url?.protocol != "file"
    }

    /** What JNA is to load for [default], the name the bindings were generated with: the path of [file], if any. */
    @JvmStatic
    fun name(default: String): String = if (default == NAME) file?.absolutePath ?: default else default

    /** Both JNA and the JVM have the library loaded: a temporary copy is no longer needed. */
    fun loadedTwice() {
        if (unpacked) file?.delete()
    }
}
