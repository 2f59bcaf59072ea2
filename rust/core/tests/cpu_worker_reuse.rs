//! CPU pool: a stream fed one op at a time keeps to the worker that ran it
//! last, while the pool's other workers sleep on (and retire in time). Its
//! own test binary: the pool is the process's, and no other test may use it
//! meanwhile.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use weir_core::{BackendKind, Grid, Kernel, Runtime};

#[test]
fn a_sparsely_fed_stream_keeps_to_the_worker_that_ran_it_last() {
    let runtime = Runtime::open(BackendKind::Cpu).unwrap();
    // Every worker of the pool started (it has one per core, at least 2): as
    // many streams, each held in a kernel until all have started.
    let workers = std::thread::available_parallelism().map_or(2, |cores| cores.get()).max(2);
    let started = Arc::new((Mutex::new(0usize), Condvar::new()));
    let hold = {
        let started = started.clone();
        Kernel::custom("hold_until_all_started")
            .cpu(move |_| {
                let (count, all) = &*started;
                let mut count = count.lock().unwrap();
                *count += 1;
                all.notify_all();
                let (count, _) = all.wait_timeout_while(count, Duration::from_secs(10), |n| *n < workers).unwrap();
                assert!(*count >= workers, "every worker ran a held kernel");
                Ok(())
            })
            .build()
    };
    let streams: Vec<_> = (0..workers).map(|_| runtime.new_stream().unwrap()).collect();
    for stream in &streams {
        stream.execute(&hold, Grid::linear(1, 1), &[]).unwrap();
    }
    for stream in &streams {
        stream.fence().unwrap().wait().unwrap();
    }
    // Then one op at a time, well apart: each finds every worker asleep.
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    let note = {
        let ran_on = ran_on.clone();
        Kernel::custom("note_the_worker")
            .cpu(move |_| {
                ran_on.lock().unwrap().push(std::thread::current().id());
                Ok(())
            })
            .build()
    };
    let stream = &streams[0];
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(5));
        stream.execute(&note, Grid::linear(1, 1), &[]).unwrap();
        stream.fence().unwrap().wait().unwrap();
    }
    let ran_on = ran_on.lock().unwrap();
    assert_eq!(ran_on.len(), 20);
    // The most ops any one worker ran: all 20, bar a worker that a busy host
    // kept from falling asleep before the next op came. Woken in turn, the
    // pool's workers would share them (10 each with 2).
    let most = ran_on.iter().map(|worker| ran_on.iter().filter(|other| *other == worker).count()).max();
    assert!(
        most >= Some(17),
        "of 20 sparse ops, one worker ran at most {most:?}: a sleeping worker woke for each instead of the one that ran last ({workers} workers)"
    );
}
