package dev.weir

import com.sun.jna.Native
import com.sun.jna.NativeLibrary
import java.io.File
import java.io.IOException

/**
 * The JNI entry of the library that the generated bindings load through JNA
 * (weir-ffi's `encoded.rs`), linked by loading that same file for the JVM
 * too, so that both use one copy of the library. Where it cannot be
 * ([linked] false), [EncodedOps] leaves every call to the generated path.
 */
internal object NativeExecute {
    /** True when [execute] is linked. */
    val linked: Boolean = try {
        // Named as the generated bindings name it, so this is the instance JNA loaded.
        val name = System.getProperty("uniffi.component.weir.libraryOverride") ?: LibraryFile.name(LibraryFile.NAME)
        val file = NativeLibrary.getInstance(name, UniffiLib::class.java.classLoader).file
        System.load(file.absolutePath)
        LibraryFile.loadedTwice()
        true
    } catch (failure: Throwable) {
        System.getLogger("dev.weir").log(System.Logger.Level.WARNING, "execute goes the generated way: its JNI entry did not link", failure)
        false
    }

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
