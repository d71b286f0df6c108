//! One time base for the whole process: nanoseconds since the Unix epoch,
//! advanced by the monotonic clock.
//!
//! Publishers stamp intended and actual send times into payloads and
//! consumers subtract them from their receive time, so all tasks must read
//! the same clock. Anchoring a monotonic clock to the wall clock once gives
//! timestamps that never jump backwards within a run and stay comparable with
//! other hosts' wall clocks (workers, server timestamps).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

struct Anchor {
    instant: Instant,
    wall_ns: u64,
    /// `wall_ns` minus the monotonic clock's reading at the anchor: added to
    /// a raw monotonic reading it gives nanoseconds since the epoch.
    mono_to_wall_ns: u64,
}

static ANCHOR: LazyLock<Anchor> = LazyLock::new(|| {
    let instant = Instant::now();
    let mono = monotonic_ns();
    let wall_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    Anchor {
        instant,
        wall_ns,
        mono_to_wall_ns: wall_ns.wrapping_sub(mono),
    }
});

/// Added to every reading. A worker sets it, before any load, to the
/// opposite of its measured offset from the coordinator, so stamps written
/// on one host and read on another share one time base (to within the
/// estimate's uncertainty) without any per-message correction. Zero in a
/// single process.
static CORRECTION_NS: AtomicI64 = AtomicI64::new(0);

/// The monotonic clock (the one `Instant` reads on Linux) in nanoseconds,
/// read directly: `Instant::elapsed` adds a checked subtraction and a
/// `Duration` round trip that every message paid for twice.
#[inline]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC
    // exists on every Unix jsbench builds for, so it cannot fail.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds since the Unix epoch on the process's monotonic time base.
#[inline]
pub fn now_ns() -> u64 {
    let base = ANCHOR.mono_to_wall_ns;
    monotonic_ns()
        .wrapping_add(base)
        .wrapping_add_signed(CORRECTION_NS.load(Ordering::Relaxed))
}

/// The smallest step this clock was seen to take: the least positive
/// difference between successive readings, over a thousand of them (once
/// per process). Two instants closer than this cannot be told apart, so a
/// judgement of "earlier than" never tolerates less.
pub fn resolution_ns() -> u64 {
    static RESOLUTION: LazyLock<u64> = LazyLock::new(|| {
        let mut least = u64::MAX;
        let mut last = monotonic_ns();
        for _ in 0..1_000 {
            let now = monotonic_ns();
            if now > last {
                least = least.min(now - last);
            }
            last = now;
        }
        least.max(1)
    });
    *RESOLUTION
}

/// The `Instant` that corresponds to a timestamp of this clock, for sleeping
/// until an intended send time.
pub fn instant_at(ns: u64) -> Instant {
    let anchor = &*ANCHOR;
    let local = ns.wrapping_add_signed(-CORRECTION_NS.load(Ordering::Relaxed));
    let offset = local.saturating_sub(anchor.wall_ns);
    anchor.instant + std::time::Duration::from_nanos(offset)
}

/// Moves this process's time base by `ns` (on top of earlier moves). Only
/// between variants: a jump while load runs would tear its latencies.
pub fn adjust(ns: i64) {
    CORRECTION_NS.fetch_add(ns, Ordering::Relaxed);
}

/// The total correction applied so far.
pub fn correction_ns() -> i64 {
    CORRECTION_NS.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_monotonic_and_near_the_wall_clock() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        // Within a second of the wall clock: same epoch, same unit.
        assert!(wall.abs_diff(b) < 1_000_000_000, "wall {wall} clock {b}");
    }

    #[test]
    fn agrees_with_instant_from_the_anchor() {
        // `instant_at` maps readings onto `Instant`s: both must be one clock.
        let before = ANCHOR.instant.elapsed().as_nanos() as u64 + ANCHOR.wall_ns;
        let t = now_ns();
        let after = ANCHOR.instant.elapsed().as_nanos() as u64 + ANCHOR.wall_ns;
        // The anchor's two readings were taken a moment apart: allow for it.
        let slack = 1_000_000;
        assert!(
            t + slack >= before && t <= after + slack,
            "{before} {t} {after}"
        );
    }

    #[test]
    fn the_resolution_is_a_step_the_clock_takes() {
        // Positive and below a millisecond on any host jsbench runs on: a
        // coarser clock could not time the sub-millisecond latencies it
        // reports.
        let r = resolution_ns();
        assert!((1..1_000_000).contains(&r), "{r} ns");
    }

    #[test]
    fn instant_at_round_trips() {
        let t = now_ns() + 5_000_000;
        let back = instant_at(t);
        let delta = back.duration_since(ANCHOR.instant).as_nanos() as u64 + ANCHOR.wall_ns;
        assert_eq!(delta, t);
    }
}
