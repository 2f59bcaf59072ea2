//! The one rule for a thread that waits: spin first, or block.
//!
//! A blocking wait wakes its thread well after the awaited thing happened
//! (some 20 µs for a CUDA blocking-sync event, hundreds for some Vulkan
//! drivers' `poll(Wait)`, 5–50 µs for a parked thread); a loop that checks
//! sees it at once, at the cost of a core. So a waiter spins, for at most
//! the budget per wait, while its recent waits ended within the budget (a
//! moving average of the last few), and blocks at once behind long work,
//! where spinning would only burn a core. Blocking waits are timed too, so
//! spinning comes back as soon as waits are short again.
//!
//! Who waits by it:
//! - the CUDA and HIP stream waiters and the wgpu poll thread, for the
//!   device ([`SpinPolicy::spin`]; the budget is the builder's `spin`);
//! - a stream's fence, awaited or waited for, on every backend
//!   ([`SpinPolicy::spin_as_recent`], see
//!   [`crate::Fence`]; the budget is the builder's `spin`, 100 µs at most): it watches the
//!   fence about as long as the stream's recent waits took, so an app that
//!   waits for one small op after another sees each end on its own thread,
//!   not through a wake-up from another; on a CPU backend, behind waits
//!   longer than an awake worker takes, it blocks on the fence for that
//!   span instead ([`SpinPolicy::watch`]): the worker was asleep, and once
//!   woken it wakes the waiter itself;
//! - every thread that idles between jobs, watching for its next one about
//!   as long as the recent gaps between jobs ([`SpinPolicy::spin_as_recent`],
//!   learning the gaps): the GPU issuing thread (up to the builder's `spin`,
//!   50 µs at most), the wake thread after a watched fence (300 µs), and
//!   the CPU pool's workers (50 µs) and the stream a worker runs (20 µs).
//!
//! A stream's fence and the CPU workers, which wait for host threads of
//! Weir's or the app's (a worker, the wake thread's probe of a GPU event),
//! yield their core as they watch ([`SpinPolicy::yielding`]): the thread
//! they wait for may have been woken onto this very core, and would
//! otherwise run only once the watch ran out. A GPU stream's fence spins
//! its first 2 µs all the same ([`SpinPolicy::yielding_after`]): on an
//! H100's host, yielding from the first check made the fences of some
//! processes, awaited one after another, take four times as long. On a
//! CPU backend, spinning first made a Kotlin app's waits slower instead
//! (the figures are at `fence_waits`, in `runtime.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One waiter's spin budget and what its recent waits took.
#[derive(Debug, Clone)]
pub(crate) struct SpinPolicy {
    budget: Duration,
    /// The recent time from a wait's start to its end, in nanoseconds;
    /// shared by clones (a CUDA stream asks its waiter's policy whether a
    /// fence is likely quick).
    recent: Arc<AtomicU64>,
    /// Yield the core between checks once a wait is this old, rather than
    /// spin on it; `None`: never yield.
    yields_after: Option<Duration>,
    /// For a wait that can block on what it awaits ([`SpinPolicy::watch`]):
    /// the longest recent wait worth spinning for. Beyond it the waiter
    /// blocks at once: what it awaits is a host thread being woken (a CPU
    /// worker), which a spinning waiter only keeps from a core, and which
    /// wakes a blocked waiter itself, with no thread between them.
    spin_most: Option<Duration>,
}

impl SpinPolicy {
    /// A policy that spins up to `budget` per wait; `Duration::ZERO` never spins.
    pub fn new(budget: Duration) -> SpinPolicy {
        SpinPolicy { budget, recent: Arc::new(AtomicU64::new(0)), yields_after: None, spin_most: None }
    }

    /// As this policy, where [`SpinPolicy::watch`] blocks at once once
    /// recent waits took longer than `most` (see the field).
    pub fn spinning_at_most(self, most: Duration) -> SpinPolicy {
        SpinPolicy { spin_most: Some(most), ..self }
    }

    /// A policy of the same settings with no history of its own (a clone shares it).
    pub fn renewed(&self) -> SpinPolicy {
        SpinPolicy { recent: Arc::new(AtomicU64::new(0)), ..self.clone() }
    }

    /// As [`SpinPolicy::new`], yielding the core between checks: for a
    /// thread that may wait for threads wanting its core.
    pub fn yielding(budget: Duration) -> SpinPolicy {
        SpinPolicy { yields_after: Some(Duration::ZERO), ..SpinPolicy::new(budget) }
    }

    /// As this policy, spinning for the first `spin` of a wait before it
    /// yields: a quick wait then makes no system call, and a thread it waits
    /// for that was woken onto its core waits at most that long.
    pub fn yielding_after(self, spin: Duration) -> SpinPolicy {
        SpinPolicy { yields_after: Some(spin), ..self }
    }

    // The GPU engine's stream waiter asks; a build with neither CUDA nor HIP has none.
    #[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// True while recent waits ended within the budget.
    pub fn is_quick(&self) -> bool {
        self.budget > Duration::ZERO && self.recent.load(Ordering::Relaxed) < self.budget.as_nanos() as u64
    }

    /// Runs `check` again and again until it answers, for as long as the
    /// budget allows from `start`, if recent waits were quick; `None` if it
    /// did not spin or `check` did not answer in time (then block).
    // The device waiters' rule: a build with no GPU backend has none.
    #[cfg_attr(not(any(feature = "cuda", feature = "hip", feature = "wgpu")), allow(dead_code))]
    pub fn spin<T>(&self, start: Instant, check: impl FnMut() -> Option<T>) -> Option<T> {
        if !self.is_quick() {
            return None;
        }
        self.spin_until(start, self.budget, check)
    }

    /// Runs `done` again and again, if recent waits were quick, until it is
    /// true or about as long as they took has passed since `start` (twice
    /// their average and 5 µs more, within the budget); its last answer.
    pub fn spin_as_recent(&self, start: Instant, mut done: impl FnMut() -> bool) -> bool {
        match self.recent_span() {
            None => done(),
            Some(bound) => self.spin_until(start, bound, || done().then_some(())).is_some(),
        }
    }

    /// Watches for `done` as [`SpinPolicy::spin_as_recent`] does, for a
    /// waiter that can also block on what it awaits: once recent waits took
    /// longer than the policy spins for ([`SpinPolicy::spinning_at_most`]),
    /// it calls `block` with the span instead, which waits at most that
    /// long and says whether it is done. Its last answer.
    pub fn watch(&self, start: Instant, mut done: impl FnMut() -> bool, block: impl FnOnce(Duration) -> bool) -> bool {
        let Some(span) = self.recent_span() else { return done() };
        let recent = Duration::from_nanos(self.recent.load(Ordering::Relaxed));
        match self.spin_most {
            Some(most) if recent > most => done() || block(span.saturating_sub(start.elapsed())),
            _ => self.spin_until(start, span, || done().then_some(())).is_some(),
        }
    }

    /// How long [`SpinPolicy::spin_as_recent`] watches: `None` if recent
    /// waits were not quick.
    pub fn recent_span(&self) -> Option<Duration> {
        self.is_quick().then(|| {
            let recent = Duration::from_nanos(self.recent.load(Ordering::Relaxed));
            (recent * 2 + Duration::from_micros(5)).min(self.budget)
        })
    }

    /// A wait that began at `start` ended now, spun or blocked.
    pub fn learn(&self, start: Instant) {
        self.learn_took(start.elapsed());
    }

    /// A wait took `took`, spun or blocked.
    pub fn learn_took(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let recent = self.recent.load(Ordering::Relaxed);
        self.recent.store(recent.saturating_mul(3).saturating_add(took) / 4, Ordering::Relaxed);
    }

    /// Runs `check` until it answers or `bound` has passed since `start`.
    fn spin_until<T>(&self, start: Instant, bound: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
        loop {
            if let Some(answer) = check() {
                return Some(answer);
            }
            let elapsed = start.elapsed();
            if elapsed >= bound {
                return None;
            }
            match self.yields_after.is_some_and(|after| elapsed >= after) {
                true => std::thread::yield_now(),
                false => std::hint::spin_loop(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait that took `took`, as `learn` sees it.
    fn waited(policy: &SpinPolicy, took: Duration) {
        policy.learn(Instant::now() - took);
    }

    #[test]
    fn spinning_stops_behind_long_waits_and_comes_back_once_they_are_short() {
        let policy = SpinPolicy::new(Duration::from_micros(200));
        assert!(policy.is_quick(), "a fresh waiter spins");
        for _ in 0..4 {
            waited(&policy, Duration::from_millis(5));
        }
        assert!(!policy.is_quick(), "behind long work it blocks at once");
        let start = Instant::now();
        assert_eq!(policy.spin(start, || Some(())), None, "no check runs while it blocks");
        for _ in 0..16 {
            waited(&policy, Duration::from_micros(10));
        }
        assert!(policy.is_quick(), "short blocking waits bring the spinning back");
        assert_eq!(policy.spin(Instant::now(), || Some(7)), Some(7));
    }

    #[test]
    fn a_spin_ends_at_the_budget_and_a_zero_budget_never_spins() {
        let policy = SpinPolicy::new(Duration::from_millis(2));
        let start = Instant::now();
        let mut checks = 0;
        assert_eq!(
            policy.spin(start, || {
                checks += 1;
                None::<()>
            }),
            None
        );
        assert!(start.elapsed() >= Duration::from_millis(2) && checks > 1, "spun {checks} checks");
        let never = SpinPolicy::new(Duration::ZERO);
        assert!(!never.is_quick());
        assert_eq!(never.spin(Instant::now(), || Some(())), None);
    }

    #[test]
    fn a_spin_as_recent_lasts_about_as_long_as_recent_waits() {
        let policy = SpinPolicy::new(Duration::from_millis(50));
        for _ in 0..16 {
            waited(&policy, Duration::from_millis(1));
        }
        let start = Instant::now();
        assert!(!policy.spin_as_recent(start, || false));
        let spun = start.elapsed();
        assert!(spun >= Duration::from_micros(1500), "spun {spun:?}: about twice the recent waits");
        assert!(spun < Duration::from_millis(40), "spun {spun:?}: not the whole budget");
        assert!(policy.spin_as_recent(Instant::now(), || true));
        for _ in 0..4 {
            waited(&policy, Duration::from_millis(500));
        }
        let start = Instant::now();
        assert!(!policy.spin_as_recent(start, || false));
        assert!(start.elapsed() < Duration::from_millis(1), "behind long waits it does not spin");
    }

    #[test]
    fn an_idle_thread_watches_about_as_long_as_its_recent_gaps_and_not_at_all_behind_long_ones() {
        let idle = SpinPolicy::yielding(Duration::from_micros(50));
        assert_eq!(idle.recent_span(), Some(Duration::from_micros(5)), "fresh: a short look");
        for _ in 0..16 {
            idle.learn_took(Duration::from_micros(10));
        }
        let span = idle.recent_span().expect("short gaps: it watches");
        assert!(span >= Duration::from_micros(24) && span <= Duration::from_micros(25), "{span:?}");
        for _ in 0..16 {
            idle.learn_took(Duration::from_micros(30));
        }
        assert_eq!(idle.recent_span(), Some(Duration::from_micros(50)), "never past the budget");
        idle.learn_took(Duration::from_millis(5));
        assert_eq!(idle.recent_span(), None, "a long gap: it sleeps at once");
        let start = Instant::now();
        let mut checks = 0;
        assert!(!idle.spin_as_recent(start, || {
            checks += 1;
            false
        }));
        assert_eq!(checks, 1, "behind long gaps it only looks once");
    }

    #[test]
    fn a_watch_blocks_instead_of_spinning_once_recent_waits_are_longer_than_it_spins_for() {
        let policy = SpinPolicy::new(Duration::from_millis(2)).spinning_at_most(Duration::from_micros(200));
        // One watch that is never done by looking, its blocking answering
        // `blocked_done`: how many looks it took, and the span it blocked for.
        let watched = |blocked_done: bool| {
            let (mut checks, mut blocked) = (0, None);
            let done = policy.watch(
                Instant::now(),
                || {
                    checks += 1;
                    false
                },
                |span| {
                    blocked = Some(span);
                    blocked_done
                },
            );
            assert_eq!(done, blocked_done && blocked.is_some());
            (checks, blocked)
        };
        for _ in 0..16 {
            waited(&policy, Duration::from_micros(100));
        }
        let (checks, blocked) = watched(false);
        assert!(checks > 1 && blocked.is_none(), "short waits: it spins ({checks} checks), never blocks");
        for _ in 0..16 {
            waited(&policy, Duration::from_micros(300));
        }
        let (checks, blocked) = watched(true);
        assert_eq!(checks, 1, "longer waits: one look, no spin");
        let span = blocked.expect("it blocked");
        assert!(span > Duration::from_micros(300) && span <= Duration::from_micros(700), "blocked for {span:?}");
        let renewed = policy.renewed();
        assert_eq!(renewed.recent_span(), Some(Duration::from_micros(5)), "a renewed policy has no history");
        assert!(policy.recent_span() > renewed.recent_span());
    }

    #[test]
    fn clones_share_what_they_learn() {
        let policy = SpinPolicy::new(Duration::from_micros(200));
        let seen_by_stream = policy.clone();
        for _ in 0..4 {
            waited(&policy, Duration::from_millis(5));
        }
        assert!(!seen_by_stream.is_quick());
    }
}
