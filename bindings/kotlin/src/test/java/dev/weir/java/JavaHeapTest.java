package dev.weir.java;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.lang.management.MemoryPoolMXBean;
import java.lang.management.MemoryType;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.junit.jupiter.api.Test;

import dev.weir.*;

/**
 * Failing calls from Java threads leave the heap flat, as succeeding ones do:
 * run in the JVM of the bounded-heap execution, at -Xmx128m (see pom.xml).
 */
class JavaHeapTest {
    private static final int THREADS = 4;
    private static final int CALLS = 250_000;
    private static final long KEPT_LIMIT = 8L << 20;

    /** A closed runtime's stream refusing a fence: a failing call that passes no bytes. */
    @Test
    void failingCallsFromFourThreadsKeepTheHeapFlat() throws Exception {
        assertTrue(Runtime.getRuntime().maxMemory() <= 128L << 20, "needs the bounded-heap execution's -Xmx128m");
        try (WeirRuntime runtime = WeirJava.open(Backend.CPU)) {
            WeirStream stream = runtime.defaultStream();
            runtime.shutdown();
            long baseline = collectedHeap();
            ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
            List<Thread> callers = new ArrayList<>();
            for (int i = 0; i < THREADS; i++) {
                Thread caller = new Thread(() -> {
                    try {
                        for (int call = 0; call < CALLS; call++) {
                            assertThrows(WeirException.Closed.class, stream::fence);
                        }
                    } catch (Throwable failure) {
                        failures.add(failure);
                    }
                }, "java-caller-" + i);
                callers.add(caller);
                caller.start();
            }
            for (Thread caller : callers) {
                caller.join();
            }
            assertTrue(failures.isEmpty(), () -> "a caller failed: " + failures.peek());
            long kept = Long.MAX_VALUE;
            // JNA's cleaner thread frees what it holds after a collection: a few rounds.
            for (int round = 0; round < 50 && kept >= KEPT_LIMIT; round++) {
                kept = collectedHeap() - baseline;
            }
            System.out.printf("JavaHeapTest: %d threads x %d failing calls; %.1f MiB kept after collection%n",
                    THREADS, CALLS, kept / (1024.0 * 1024.0));
            assertTrue(kept < KEPT_LIMIT, "failing calls left " + (kept >> 20) + " MiB on the heap");
        }
    }

    /** The heap's live set after a collection and a moment for the cleaner thread. */
    private static long collectedHeap() throws InterruptedException {
        System.gc();
        Thread.sleep(100);
        long used = 0;
        for (MemoryPoolMXBean pool : ManagementFactory.getMemoryPoolMXBeans()) {
            if (pool.getType() == MemoryType.HEAP && pool.getCollectionUsage() != null) {
                used += pool.getCollectionUsage().getUsed();
            }
        }
        return used;
    }
}
