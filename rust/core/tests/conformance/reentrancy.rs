//! Foreign code may call straight back into Weir: a woken task, an external
//! write's closure, a panicking waker. Nothing hangs, nothing stops working.
//!
//! Every scenario runs on a thread of its own and is given a deadline, so a
//! hang fails the test instead of stalling the suite.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use weir_core::{CompletionWait, ElementType, Error, Fence, QueueLimit, Runtime};

use crate::common::{hold, raw_fill, retried, words, Held};

/// Long enough for a busy machine, short enough that a hang is reported.
const DEADLINE: Duration = Duration::from_secs(20);

/// Runs `scenario` on a thread of its own; fails if it does not finish in time.
fn within_deadline<T: Send + 'static>(scenario: impl FnOnce() -> T + Send + 'static) -> T {
    within(DEADLINE, scenario)
}

fn within<T: Send + 'static>(deadline: Duration, scenario: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = channel();
    std::thread::spawn(move || {
        let _ = done.send(scenario());
    });
    finished.recv_timeout(deadline).expect("the scenario hung: a call back into Weir never returned")
}

/// A waker that runs `on_wake` (once) on whichever thread wakes it.
struct CallBack {
    on_wake: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Wake for CallBack {
    fn wake(self: Arc<Self>) {
        let on_wake = self.on_wake.lock().unwrap().take();
        if let Some(on_wake) = on_wake {
            on_wake();
        }
    }
}

/// Polls `fence`, held by `held` since `held_at`, once with a waker that
/// runs `on_wake` when the fence completes. The waker stays registered while
/// the returned future lives. `None` when the fence was done because the
/// hold ran out meanwhile (see [`Held::ran_out`]): the caller tries again.
#[must_use = "dropping the wait unregisters its waker"]
fn on_completion(
    fence: &Fence,
    held: &Held,
    held_at: Instant,
    on_wake: impl FnOnce() + Send + 'static,
) -> Option<CompletionWait> {
    let waker = Waker::from(Arc::new(CallBack { on_wake: Mutex::new(Some(Box::new(on_wake))) }));
    let mut wait = fence.wait_async();
    let polled = Pin::new(&mut wait).poll(&mut Context::from_waker(&waker));
    if polled.is_ready() && held.ran_out(held_at) {
        return None;
    }
    assert!(
        polled.is_pending(),
        "the fence was held, yet it is done {:?} after the hold: {polled:?}",
        held_at.elapsed()
    );
    Some(wait)
}

/// Everything a woken task might do at once: fence, admit, read, create, on
/// the stream that woke it and on another one.
fn use_everything(runtime: &Runtime, woke: &weir_core::Stream, results: &Sender<Result<(), String>>) {
    let outcome = (|| -> weir_core::Result<()> {
        woke.fence()?.wait()?;
        let here = woke.zeros(ElementType::Bytes, 64)?;
        woke.fill_u32(&here, 11)?;
        assert_eq!(words(&woke.read(&here)?), vec![11; 16]);
        let other = runtime.new_stream()?;
        let there = other.upload(&[5u32; 16])?;
        other.copy(&there, &here)?;
        assert_eq!(words(&woke.read(&here)?), vec![5; 16], "the woken stream reads what the other wrote");
        runtime.fence()?.wait()?;
        Ok(())
    })();
    let _ = results.send(outcome.map_err(|error| error.to_string()));
}

conformance! {
    fn a_woken_task_may_use_the_runtime_at_once(runtime: &Runtime) {
        let runtime = runtime.clone();
        let outcome = within_deadline(move || retried(|| {
            let s = runtime.new_stream().unwrap();
            let held = hold(&s);
            let held_at = std::time::Instant::now();
            let buffer = s.zeros(ElementType::Bytes, 16).unwrap();
            let fence = s.fence().unwrap();
            let (results, received) = channel();
            let (woken_runtime, woken_stream) = (runtime.clone(), s.clone());
            let wait = on_completion(&fence, &held, held_at, move || {
                use_everything(&woken_runtime, &woken_stream, &results)
            })?;
            held.release();
            let outcome = received.recv_timeout(DEADLINE);
            drop((wait, buffer));
            Some(outcome)
        }));
        outcome.expect("the woken task never finished").expect("a call from the woken task failed");
    }

    fn a_woken_task_may_close_another_runtime_and_drop_its_own(runtime: &Runtime) {
        let kind = runtime.info().backend;
        let outcome = within_deadline(move || retried(|| {
            let own = Runtime::open(kind).unwrap();
            let other = Runtime::open(kind).unwrap();
            let s = own.new_stream().unwrap();
            let held = hold(&s);
            let held_at = Instant::now();
            let fence = s.fence().unwrap();
            let (results, received) = channel();
            let (woken_own, woken_other) = (Mutex::new(Some(own)), other.clone());
            let wait = on_completion(&fence, &held, held_at, move || {
                let closed = woken_other.close();
                // The last handle of a runtime may go on the thread that wakes tasks.
                drop(woken_own.lock().unwrap().take());
                let _ = results.send(closed);
            })?;
            drop(s);
            held.release();
            let closed = received.recv_timeout(DEADLINE);
            drop(wait);
            Some((closed, other.new_stream().err()))
        }));
        let (closed, after) = outcome;
        closed.expect("the woken task never finished").expect("close from a woken task");
        assert!(matches!(after, Some(Error::Closed)));
    }

    fn a_woken_task_may_wait_for_a_retired_streams_work(runtime: &Runtime) {
        let kind = runtime.info().backend;
        let outcome = within_deadline(move || retried(|| {
            let own = Runtime::open(kind).unwrap();
            let s = own.new_stream().unwrap();
            let held = hold(&s);
            let held_at = Instant::now();
            let fence = s.fence().unwrap();
            let (results, received) = channel();
            let woken = own.clone();
            let wait = on_completion(&fence, &held, held_at, move || {
                // A stream retired with work still queued: the runtime's fence and
                // its close cover that work, and are waited for here, on the wake thread.
                let retired = woken.new_stream().unwrap();
                retired.delay(Duration::from_millis(200)).unwrap();
                drop(retired);
                let waited = woken.fence().and_then(|fence| fence.wait());
                let retired = woken.new_stream().unwrap();
                retired.delay(Duration::from_millis(200)).unwrap();
                drop(retired);
                let _ = results.send((waited, woken.close()));
            })?;
            held.release();
            let outcome = received.recv_timeout(DEADLINE);
            drop(wait);
            Some(outcome)
        }));
        let (waited, closed) = outcome.expect("the woken task never finished");
        waited.expect("a runtime fence from a woken task");
        closed.expect("a close from a woken task");
    }

    fn an_external_write_may_call_back_into_the_runtime(runtime: &Runtime) {
        let runtime = runtime.clone();
        within_deadline(move || {
            let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
            let target = s.empty(ElementType::Bytes, 64).unwrap();
            let unrelated = t.upload(&[3u32; 16]).unwrap();
            let mut inside = Vec::new();
            s.external_write(&[&target], |raw| {
                // Another stream's work does not need this one: it runs.
                let copy = t.zeros(ElementType::Bytes, 64)?;
                t.copy(&unrelated, &copy)?;
                inside.push(("another stream", t.read(&copy).map(|bytes| words(&bytes) == vec![3; 16])));
                inside.push(("a new stream", runtime.new_stream().map(|_| true)));
                // What needs this write's own stream would wait for this closure.
                inside.push(("own stream fence", s.fence().map(|_| true)));
                inside.push(("own stream op", s.zeros(ElementType::Bytes, 4).map(|_| true)));
                inside.push(("read of the target", t.read(&target).map(|_| true)));
                inside.push(("runtime fence", runtime.fence().map(|_| true)));
                raw_fill(raw, 9)
            })
            .unwrap();
            for (what, outcome) in &inside[..2] {
                assert!(matches!(outcome, Ok(true)), "{what}: {outcome:?}");
            }
            for (what, outcome) in &inside[2..] {
                assert!(matches!(outcome, Err(Error::InvalidArgument(_))), "{what} should be refused: {outcome:?}");
            }
            // Once the closure returned, the write is there for everyone.
            assert_eq!(words(&t.read(&target).unwrap()), vec![0x0909_0909; 16]);
            s.fence().unwrap().wait().unwrap();
        });
    }

    fn an_external_writes_closure_admits_past_a_full_queue(runtime: &Runtime) {
        // The write's op holds its share of the queue until its closure
        // returns: an admission from inside the closure that waited for room
        // would wait for itself. One op fills this queue; two closures at
        // once fill a queue of two.
        for closures in [1, 2] {
            let limit = QueueLimit { ops: closures, host_bytes: 1 << 20 };
            let limited = Runtime::builder(runtime.info().backend).queue_limit(limit).open().expect("open with a limit");
            let meet = Arc::new(std::sync::Barrier::new(closures as usize));
            let outcomes = within_deadline(move || {
                let threads: Vec<_> = (0..closures)
                    .map(|_| {
                        let (limited, meet) = (limited.clone(), meet.clone());
                        std::thread::spawn(move || {
                            let (s, t) = (limited.new_stream().unwrap(), limited.new_stream().unwrap());
                            let (target, other) = (s.empty(ElementType::Bytes, 64).unwrap(), t.empty(ElementType::Bytes, 64).unwrap());
                            let mut inside = Vec::new();
                            s.external_write(&[&target], |raw| {
                                meet.wait();
                                inside.push(t.fill_u32(&other, 7).map(|()| true));
                                inside.push(s.zeros(ElementType::Bytes, 4).map(|_| true));
                                raw_fill(raw, 9)
                            })
                            .unwrap();
                            assert_eq!(words(&t.read(&other).unwrap()), vec![7; 16]);
                            inside
                        })
                    })
                    .collect();
                threads.into_iter().map(|thread| thread.join().unwrap()).collect::<Vec<_>>()
            });
            for inside in outcomes {
                assert!(matches!(inside[0], Ok(true)), "another stream, {closures} closure(s): {:?}", inside[0]);
                assert!(
                    matches!(inside[1], Err(Error::InvalidArgument(_))),
                    "its own stream is refused, not waited for: {:?}",
                    inside[1]
                );
            }
        }
    }

    fn a_panicking_waker_leaves_the_runtime_working(runtime: &Runtime) {
        let runtime = runtime.clone();
        within_deadline(move || {
            let s = runtime.new_stream().unwrap();
            for _ in 0..3 {
                retried(|| {
                    let held = hold(&s);
                    let held_at = Instant::now();
                    let fence = s.fence().unwrap();
                    let wait =
                        on_completion(&fence, &held, held_at, || panic!("a waker that panics (deliberately, in a test)"))?;
                    held.release();
                    fence.wait().unwrap();
                    drop(wait);
                    Some(())
                });
            }
            // Later completions on every path still arrive, woken or waited.
            let out = s.upload(&[1u32; 8]).unwrap();
            s.fill_u32(&out, 4).unwrap();
            assert_eq!(words(&futures::executor::block_on(s.read_async(&out)).unwrap()), vec![4; 8]);
            futures::executor::block_on(runtime.sync()).unwrap();
        });
    }

    fn a_stream_fence_covers_every_read_admitted_before_it(runtime: &Runtime) {
        // Each trial is a read and a fence round trip with two streams busy
        // beside it: thousands, but within what a GPU's wake-ups allow.
        let trials = match runtime.info().backend {
            weir_core::BackendKind::Cpu => 3000,
            _ => 1500,
        };
        let runtime = runtime.clone();
        let violations = within(Duration::from_secs(120), move || {
            let (s, u, v) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
            let source = s.upload(&[7u32; 256]).unwrap();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let submitters: Vec<_> = [u, v]
                .into_iter()
                .map(|other| {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        let scratch = other.zeros(ElementType::Bytes, 1024).unwrap();
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            other.fill_u32(&scratch, 1).unwrap();
                            drop(other.enqueue_read(&scratch).unwrap());
                        }
                    })
                })
                .collect();
            let mut violations = 0;
            for _ in 0..trials {
                let read = s.enqueue_read(&source).unwrap();
                let fence = s.fence().unwrap();
                fence.wait().unwrap();
                if !read.is_complete() {
                    violations += 1;
                }
                assert_eq!(words(&read.wait().unwrap()), vec![7; 256]);
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            for submitter in submitters {
                submitter.join().unwrap();
            }
            violations
        });
        assert_eq!(violations, 0, "a stream fence completed before a read admitted before it");
    }
}

/// A CPU kernel runs on its stream's worker: a wait there for that stream, or
/// a close of its runtime, would wait for itself and is refused.
#[test]
fn a_cpu_kernel_that_waits_for_its_own_stream_is_refused() {
    within_deadline(|| {
        let runtime = Runtime::open(weir_core::BackendKind::Cpu).unwrap();
        let s = runtime.new_stream().unwrap();
        let (results, received) = channel();
        let (kernel_runtime, kernel_stream) = (Mutex::new(runtime.clone()), Mutex::new(s.clone()));
        let results = Mutex::new(results);
        let kernel = weir_core::Kernel::custom("calls back")
            .cpu(move |_| {
                let own = kernel_stream.lock().unwrap().fence().and_then(|fence| fence.wait());
                let close = kernel_runtime.lock().unwrap().close();
                let _ = results.lock().unwrap().send((own, close));
                Ok(())
            })
            .build();
        let out = s.zeros(ElementType::Bytes, 4).unwrap();
        s.execute(&kernel, weir_core::Grid::linear(1, 1), &[weir_core::Arg::write(&out)]).unwrap();
        let (own, close) = received.recv_timeout(DEADLINE).unwrap();
        assert!(matches!(own, Err(Error::InvalidArgument(_))), "{own:?}");
        assert!(matches!(close, Err(Error::InvalidArgument(_))), "{close:?}");
        s.fence().unwrap().wait().expect("the kernel itself succeeded");
        runtime.close().unwrap();
    });
}

/// A close from inside a kernel is refused even while another thread's
/// close is already under way: that close drains this very kernel, so
/// waiting for it too would wait for itself (and hold both threads).
#[test]
fn a_cpu_kernel_closing_its_runtime_during_another_close_is_refused() {
    within_deadline(|| {
        let runtime = Runtime::open(weir_core::BackendKind::Cpu).unwrap();
        let s = runtime.new_stream().unwrap();
        let (results, received) = channel();
        let (kernel_runtime, results) = (Mutex::new(runtime.clone()), Mutex::new(results));
        let (started, kernel_started) = channel();
        let started = Mutex::new(started);
        let kernel = weir_core::Kernel::custom("closes during a close")
            .cpu(move |_| {
                let runtime = kernel_runtime.lock().unwrap().clone();
                let _ = started.lock().unwrap().send(());
                // A runtime that is closing admits no fence.
                while runtime.fence().is_ok() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = results.lock().unwrap().send(runtime.close());
                Ok(())
            })
            .build();
        let out = s.zeros(ElementType::Bytes, 4).unwrap();
        s.execute(&kernel, weir_core::Grid::linear(1, 1), &[weir_core::Arg::write(&out)]).unwrap();
        kernel_started.recv_timeout(DEADLINE).expect("the kernel never ran");
        let closer = std::thread::spawn({
            let runtime = runtime.clone();
            move || runtime.close()
        });
        let close = received.recv_timeout(DEADLINE).expect("the kernel's close never returned");
        assert!(matches!(close, Err(Error::InvalidArgument(_))), "{close:?}");
        closer.join().unwrap().expect("the first close");
    });
}

/// A CPU kernel may hold the last handle of its runtime: dropping it there
/// tears the runtime down in the background, and the kernel still succeeds.
#[test]
fn a_cpu_kernel_may_drop_the_last_handle_of_its_runtime() {
    within_deadline(|| {
        let runtime = Runtime::open(weir_core::BackendKind::Cpu).unwrap();
        let s = runtime.new_stream().unwrap();
        let (results, received) = channel();
        let last = Mutex::new(Some((runtime, s.clone())));
        let results = Mutex::new(results);
        let kernel = weir_core::Kernel::custom("drops the runtime")
            .cpu(move |_| {
                let started = Instant::now();
                drop(last.lock().unwrap().take());
                let _ = results.lock().unwrap().send(started.elapsed());
                Ok(())
            })
            .build();
        let out = s.zeros(ElementType::Bytes, 4).unwrap();
        s.execute(&kernel, weir_core::Grid::linear(1, 1), &[weir_core::Arg::write(&out)]).unwrap();
        drop((s, out, kernel));
        let took = received.recv_timeout(DEADLINE).expect("the kernel never ran");
        assert!(took < Duration::from_secs(5), "dropping the last handle blocked the worker for {took:?}");
        // The process goes on: a new runtime works.
        let fresh = Runtime::open(weir_core::BackendKind::Cpu).unwrap();
        assert_eq!(
            fresh.default_stream().read_as::<u32>(&fresh.default_stream().upload(&[2u32]).unwrap()).unwrap(),
            vec![2]
        );
    });
}

/// How many workers the CPU pool keeps (as `backend::cpu::worker` sizes it).
fn cpu_workers() -> usize {
    std::thread::available_parallelism().map_or(2, |cores| cores.get()).max(2)
}

/// A call of a CPU kernel on its stream and its buffer (see [`every_worker_waits_for_an_external_write`]).
type KernelCall = Arc<dyn Fn(&weir_core::Stream, &weir_core::Buffer) -> weir_core::Result<()> + Send + Sync>;

/// One CPU kernel per pool worker, on new streams of `runtime`, each making
/// `call` once an external write of `busy` on `a` has begun; the write's
/// closure then fills `other` on `a2` and waits for it. Every worker waits
/// for the write, so that fill needs a stand-in worker, which the pool
/// starts only if each wait tells it it blocks, as fence waits do. Panics
/// if the fill, or any kernel's call, never ends.
fn every_worker_waits_for_an_external_write(
    runtime: &Runtime,
    (a, busy): (&weir_core::Stream, &weir_core::Buffer),
    (a2, other): (&weir_core::Stream, &weir_core::Buffer),
    call: KernelCall,
) {
    let workers = cpu_workers();
    let go = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (started, kernels_started) = channel();
    let (results, returned) = channel();
    let mut kept = Vec::new();
    for _ in 0..workers {
        let stream = runtime.new_stream().unwrap();
        let out = stream.zeros(ElementType::U32, 4).unwrap();
        let (go, call) = (go.clone(), call.clone());
        let (started, results) = (Mutex::new(started.clone()), Mutex::new(results.clone()));
        let (own, target) = (Mutex::new(stream.clone()), Mutex::new(out.clone()));
        let kernel = weir_core::Kernel::custom("waits for a write")
            .cpu(move |_| {
                let _ = started.lock().unwrap().send(());
                while !go.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let (own, target) = (own.lock().unwrap().clone(), target.lock().unwrap().clone());
                let _ = results.lock().unwrap().send(call(&own, &target));
                Ok(())
            })
            .build();
        let scratch = stream.zeros(ElementType::Bytes, 4).unwrap();
        stream.execute(&kernel, weir_core::Grid::linear(1, 1), &[weir_core::Arg::write(&scratch)]).unwrap();
        kept.push((stream, out, scratch));
    }
    for _ in 0..workers {
        kernels_started.recv_timeout(DEADLINE).expect("a kernel never ran");
    }
    a.external_write(&[busy], |_| {
        go.store(true, std::sync::atomic::Ordering::SeqCst);
        // Let every kernel reach its wait for the write.
        std::thread::sleep(Duration::from_millis(50));
        a2.fill_u32(other, 7)?;
        a2.fence()?.wait()
    })
    .expect("the write's own work ran");
    for _ in 0..workers {
        returned.recv_timeout(DEADLINE).expect("a kernel's call never returned").expect("the kernel's call");
    }
    assert_eq!(a2.read_as::<u32>(other).unwrap(), vec![7; 4]);
}

/// CPU kernels that wait for a stream busy with an external write, to take
/// a fence of it, to copy from its runtime or to make a collective with a
/// part on it, hold their workers as a fence wait does: with every worker so waiting and none started, the write
/// waited for its own work forever, and the kernels for the write. (One
/// test: two at once would starve each other's workers.)
#[test]
fn kernels_waiting_for_an_external_write_leave_a_worker_for_its_work() {
    within_deadline(|| {
        let runtime = Runtime::open(weir_core::BackendKind::Cpu).unwrap();
        let (a, a2) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let (busy, other) = (a.zeros(ElementType::U32, 4).unwrap(), a2.zeros(ElementType::U32, 4).unwrap());
        runtime.fence().unwrap().wait().unwrap();
        let fenced = Mutex::new(a.clone());
        every_worker_waits_for_an_external_write(
            &runtime,
            (&a, &busy),
            (&a2, &other),
            Arc::new(move |_, _| fenced.lock().unwrap().fence().map(drop)),
        );
        // Peer copies from a runtime with a write in flight wait for it too.
        let peer = Runtime::open_device(weir_core::BackendKind::Cpu, 1).unwrap();
        let src = Mutex::new(a.upload(&[5u32; 4]).unwrap());
        every_worker_waits_for_an_external_write(
            &peer,
            (&a, &busy),
            (&a2, &other),
            Arc::new(move |own, target| own.copy_from_peer(&src.lock().unwrap(), target)),
        );
        peer.close().unwrap();
        runtime.close().unwrap();
        // And collectives with a part on the busy stream: each kernel's
        // all-reduce takes a's part (a buffer of its own there) and its own.
        let group = weir_core::DeviceGroup::open(weir_core::BackendKind::Cpu, &[0, 1]).unwrap();
        let (first, second) = (group.device(0).unwrap().clone(), group.device(1).unwrap().clone());
        let (a, a2) = (first.new_stream().unwrap(), first.new_stream().unwrap());
        let (busy, other) = (a.zeros(ElementType::U32, 4).unwrap(), a2.zeros(ElementType::U32, 4).unwrap());
        let parts_on_a: Vec<_> = (0..cpu_workers()).map(|_| a.zeros(ElementType::U32, 4).unwrap()).collect();
        first.fence().unwrap().wait().unwrap();
        let group = Arc::new(Mutex::new(group));
        let (on_a, parts_on_a, reduced) = (Mutex::new(a.clone()), Mutex::new(parts_on_a), group.clone());
        every_worker_waits_for_an_external_write(
            &second,
            (&a, &busy),
            (&a2, &other),
            Arc::new(move |own, target| {
                let part = parts_on_a.lock().unwrap().pop().expect("a part on a per kernel");
                let on_a = on_a.lock().unwrap().clone();
                let group = reduced.lock().unwrap();
                group.all_reduce(&[on_a, own.clone()], &[part, target.clone()], weir_core::ReduceOp::Sum)
            }),
        );
        group.lock().unwrap().close().unwrap();
    });
}

#[test]
fn a_call_from_a_nested_external_write_that_needs_an_outer_ones_stream_is_refused() {
    use weir_core::BackendKind;
    // An external write on `a` whose closure makes one on `c`: from inside
    // the inner closure, a call that needs a's busy stream would wait for
    // the outer closure, on this very thread.
    let outcomes = within_deadline(|| {
        let [a, b, c] = [0, 1, 2].map(|device| Runtime::open_device(BackendKind::Cpu, device).expect("cpu"));
        let (sa, sb, sc) = (a.default_stream(), b.default_stream(), c.default_stream());
        let [xa, xb, xc] = [&sa, &sb, &sc].map(|stream| stream.zeros(ElementType::U32, 4).expect("buffer"));
        let mut inner = Vec::new();
        sa.external_write(&[&xa], |_| {
            sc.external_write(&[&xc], |_| {
                inner.push(sa.fill_u32(&xa, 1));
                inner.push(sb.copy_from_peer(&xa, &xb));
                Ok(())
            })
        })
        .expect("the writes themselves");
        inner
    });
    for outcome in outcomes {
        assert!(matches!(outcome, Err(Error::InvalidArgument(_))), "{outcome:?}");
    }
}
