//! One time base for the whole process: nanoseconds since the Unix epoch,
//! advanced by the monotonic clock.
//!
//! Publishers stamp intended and actual send times into payloads and
//! consumers subtract them from their receive time, so all tasks must read
//! the same clock. Anchoring a monotonic clock to the wall clock once gives
//! timestamps that never jump backwards within a run and stay comparable with
//! other hosts' wall clocks (workers, server timestamps).
//!
//! The monotonic clock is read through the cycle counter where the CPU and
//! the kernel vouch for it ([`super::tsc`]: 11 ns a read against
//! `clock_gettime`'s 22-38, re-anchored to CLOCK_MONOTONIC four times a
//! second so it stays within a fraction of a microsecond of it), and through
//! `clock_gettime(CLOCK_MONOTONIC)` elsewhere, or when `JSBENCH_CLOCK` is
//! `monotonic`. Both give the same time base: nanoseconds since the epoch
//! as the wall clock read them at the anchor, advanced by CLOCK_MONOTONIC.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::tsc::{TscClock, monotonic_ns};

struct Anchor {
    instant: Instant,
    wall_ns: u64,
    /// `wall_ns` minus the monotonic clock's reading at the anchor: added to
    /// a raw monotonic reading it gives nanoseconds since the epoch.
    mono_to_wall_ns: u64,
}

static ANCHOR: LazyLock<Anchor> = LazyLock::new(|| {
    anchor(|| {
        let before = monotonic_ns();
        let instant = Instant::now();
        let wall_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (before, instant, wall_ns, monotonic_ns())
    })
});

/// The anchor from the try whose two monotonic readings (around the
/// instant and the wall clock) were closest: a process preempted between
/// the reads would anchor its time base off by the preemption, and two
/// processes on one host (a coordinator and its workers) would then
/// disagree by milliseconds on a loaded machine. `read` gives a monotonic
/// reading, the instant, the wall clock and a second monotonic reading.
fn anchor(mut read: impl FnMut() -> (u64, Instant, u64, u64)) -> Anchor {
    let mut best: Option<(u64, Anchor)> = None;
    for _ in 0..ANCHOR_TRIES {
        let (before, instant, wall_ns, after) = read();
        let spread = after.saturating_sub(before);
        if best.as_ref().is_none_or(|(least, _)| spread < *least) {
            let mono_to_wall_ns = wall_ns.wrapping_sub(before + spread / 2);
            let anchor = Anchor {
                instant,
                wall_ns: before.wrapping_add(mono_to_wall_ns),
                mono_to_wall_ns,
            };
            best = Some((spread, anchor));
        }
        if spread <= ANCHOR_SPREAD_NS {
            break;
        }
    }
    best.expect("at least one try").1
}

/// Tries at reading the wall clock between two monotonic readings, and
/// the spread between them that ends the search early (a few
/// `clock_gettime` calls, uninterrupted).
const ANCHOR_TRIES: usize = 1_000;
const ANCHOR_SPREAD_NS: u64 = 2_000;

/// Added to every reading. A worker sets it, before any load, to the
/// opposite of its measured offset from the coordinator, so stamps written
/// on one host and read on another share one time base (to within the
/// estimate's uncertainty) without any per-message correction. Zero in a
/// single process.
static CORRECTION_NS: AtomicI64 = AtomicI64::new(0);

/// The environment variable that chooses the clock: `tsc` (the cycle
/// counter, refused where it is unusable), `monotonic`, or unset (the
/// cycle counter where usable).
pub const CLOCK_ENV: &str = "JSBENCH_CLOCK";

/// Where readings come from, chosen once per process. One static, so its
/// size costs nothing; a box would add a pointer chase to every reading.
#[allow(clippy::large_enum_variant)]
enum Source {
    Tsc(TscClock),
    Monotonic { base: u64 },
}

/// Calibrating the cycle counter spins this long, once per process.
const CALIBRATE_NS: u64 = 1_000_000;

static SOURCE: LazyLock<Source> = LazyLock::new(|| {
    let base = ANCHOR.mono_to_wall_ns;
    match choose(std::env::var(CLOCK_ENV).ok().as_deref()) {
        Ok(true) => match TscClock::new(base, CALIBRATE_NS, true) {
            Some(tsc) => Source::Tsc(tsc),
            None => Source::Monotonic { base },
        },
        Ok(false) => Source::Monotonic { base },
        Err(e) => {
            // Reported by `check_env` before any load; here (a library
            // user that skipped it) the safe choice.
            eprintln!("warning: {e}; using CLOCK_MONOTONIC");
            Source::Monotonic { base }
        }
    }
});

/// Whether to use the cycle counter, given `JSBENCH_CLOCK`'s value.
fn choose(value: Option<&str>) -> anyhow::Result<bool> {
    match value {
        None | Some("") => Ok(super::tsc::unusable().is_none()),
        Some("monotonic") => Ok(false),
        Some("tsc") => match super::tsc::unusable() {
            None => Ok(true),
            Some(why) => anyhow::bail!("{CLOCK_ENV}=tsc, but {why}"),
        },
        Some(other) => {
            anyhow::bail!("{CLOCK_ENV}={other:?} is not a clock: use `tsc` or `monotonic`")
        }
    }
}

/// Fails when `JSBENCH_CLOCK` asks for a clock this process cannot have
/// (or names none), so a run never measures with a clock it was not told.
pub fn check_env() -> anyhow::Result<()> {
    choose(std::env::var(CLOCK_ENV).ok().as_deref()).map(|_| ())
}

/// Which clock this process reads: `tsc` or `monotonic`.
pub fn source() -> &'static str {
    match &*SOURCE {
        Source::Tsc(_) => "tsc",
        Source::Monotonic { .. } => "monotonic",
    }
}

/// The reading without the correction.
#[inline(always)]
fn local_ns() -> u64 {
    match &*SOURCE {
        Source::Tsc(tsc) => tsc.now_ns(),
        Source::Monotonic { base } => monotonic_ns().wrapping_add(*base),
    }
}

/// How far this process's clock reads from CLOCK_MONOTONIC on its time
/// base, in nanoseconds (positive: ahead); zero on the monotonic source.
pub fn offset_from_monotonic_ns() -> i64 {
    match &*SOURCE {
        Source::Tsc(tsc) => tsc.offset_from_monotonic(),
        Source::Monotonic { .. } => 0,
    }
}

/// Nanoseconds since the Unix epoch on the process's monotonic time base.
#[inline]
pub fn now_ns() -> u64 {
    local_ns().wrapping_add_signed(CORRECTION_NS.load(Ordering::Relaxed))
}

/// The smallest step this clock was seen to take: the least positive
/// difference between successive readings, over a thousand of them (once
/// per process). Two instants closer than this cannot be told apart, so a
/// judgement of "earlier than" never tolerates less.
pub fn resolution_ns() -> u64 {
    static RESOLUTION: LazyLock<u64> = LazyLock::new(|| {
        let mut least = u64::MAX;
        let mut last = local_ns();
        for _ in 0..1_000 {
            let now = local_ns();
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

/// This clock's reading minus the wall clock's, refreshed at most every
/// [`WALL_REFRESH_NS`]: the two drift apart by the NTP slew (0.2 ppm here,
/// up to 500 ppm by the kernel's limit), which over a long run would grow
/// to tens of microseconds if read once.
static WALL_OFFSET_NS: AtomicI64 = AtomicI64::new(0);
static WALL_READ_AT: AtomicU64 = AtomicU64::new(0);
const WALL_REFRESH_NS: u64 = 100_000_000;

/// Half the widest (reading, wall, reading) bracket an offset in
/// [`WALL_OFFSET_NS`] was taken from: how far that offset may be from the
/// true one at the instant it was read.
static WALL_HALF_SPREAD_NS: AtomicU64 = AtomicU64::new(0);

/// The fastest the kernel lets NTP slew the wall clock against the
/// monotonic one (adjtimex's limit, 500 ppm), in parts per million.
const MAX_SLEW_PPM: u64 = 500;

/// A server's wall-clock time stamp (nanoseconds since the epoch, as
/// nats-server stamps a stored message) on this clock's time base, given
/// a reading `now_ns` of this clock (it says when the offset is due for a
/// refresh). Only as good as the agreement of the two hosts' wall clocks:
/// exact on one host (the embedded server and the local cluster), NTP's
/// error across hosts.
#[inline]
pub fn from_wall(wall_ns: u64, now_ns: u64) -> u64 {
    if now_ns.wrapping_sub(WALL_READ_AT.load(Ordering::Relaxed)) > WALL_REFRESH_NS {
        WALL_OFFSET_NS.store(wall_offset_ns(), Ordering::Relaxed);
        WALL_READ_AT.store(now_ns, Ordering::Relaxed);
    }
    wall_ns.wrapping_add_signed(WALL_OFFSET_NS.load(Ordering::Relaxed))
}

/// How far [`from_wall`] may put an instant from where this clock read
/// it, on one host, when the conversion is done within `apart_ns` of that
/// instant: half the widest bracket an offset was read from, plus what
/// the wall clock can slew (at the kernel's limit) over `apart_ns` and
/// the offset's refresh interval. A deadline the server keeps on its wall
/// clock, put on this clock by [`from_wall`], is within this of where
/// this clock meets it. Not covered: a step of the wall clock (an NTP
/// step, `date -s`) between the conversion and the instant, and, against
/// a server on another host, the two hosts' wall clocks' disagreement
/// (NTP's error), which no reading here can see.
pub fn from_wall_uncertainty_ns(apart_ns: u64) -> u64 {
    let drift = (apart_ns + WALL_REFRESH_NS) as u128 * u128::from(MAX_SLEW_PPM) / 1_000_000;
    WALL_HALF_SPREAD_NS.load(Ordering::Relaxed) + drift as u64
}

/// A server's time stamp as nats-server writes it (Go's `time.Time` in
/// RFC 3339, in advisories, trace events, schedules and the
/// `Nats-Time-Stamp` header): nanoseconds since the epoch on its wall
/// clock, for [`from_wall`] where it meets this clock. `None` when
/// unreadable.
pub fn parse_server_time(ts: &str) -> Option<i128> {
    time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp_nanos())
}

/// This clock minus the wall clock, from the tightest of five
/// (reading, wall, reading) triples: a thread preempted between two reads
/// would otherwise put its pause into every conversion until the next
/// refresh (seen here: 1% of a run's ingest hops below zero).
#[cold]
fn wall_offset_ns() -> i64 {
    let wall = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    let mut best = (u64::MAX, 0i64);
    for _ in 0..5 {
        let before = now_ns();
        let w = wall();
        let after = now_ns();
        let spread = after.saturating_sub(before);
        if spread < best.0 {
            best = (spread, (before + spread / 2).wrapping_sub(w) as i64);
        }
    }
    WALL_HALF_SPREAD_NS.fetch_max(best.0.div_ceil(2), Ordering::Relaxed);
    best.1
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
    fn a_wall_time_stamp_lands_where_this_clock_read_it() {
        let wall = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        };
        for _ in 0..3 {
            let before = now_ns();
            let stamp = wall();
            let after = now_ns();
            let local = from_wall(stamp, after);
            // Between the two readings, give or take the wall clock's
            // drift since the offset was read (under 100 ms ago) and two
            // clock reads on a busy machine.
            assert!(
                local + 50_000 >= before && local <= after + 50_000,
                "{before} <= {local} <= {after}"
            );
        }
        // A stamp a millisecond old reads a millisecond before now.
        let now = now_ns();
        let old = from_wall(wall() - 1_000_000, now);
        assert!(now.abs_diff(old + 1_000_000) < 100_000, "{now} vs {old}");
    }

    #[test]
    fn from_walls_uncertainty_covers_the_slew_over_the_span_and_the_refresh() {
        // At 500 ppm, 100 ms between offset reads drift 50 µs, and every
        // second between conversion and instant another 500 µs; the
        // bracket an offset was read from adds half its width.
        // (Other tests' conversions may only widen the bracket meanwhile.)
        let _ = from_wall(0, now_ns());
        let (now, second) = (
            from_wall_uncertainty_ns(0),
            from_wall_uncertainty_ns(1_000_000_000),
        );
        let bracket = WALL_HALF_SPREAD_NS.load(Ordering::Relaxed);
        assert!((50_000..=bracket + 50_000).contains(&now), "{now}");
        assert!((550_000..=bracket + 550_000).contains(&second), "{second}");
    }

    #[test]
    fn the_anchor_is_taken_from_the_read_that_was_not_preempted() {
        // Monotonic 1,000,000 ns is wall 5,000,000,000 ns here. A first
        // try preempted for 3 ms before it read the wall clock, then a
        // quiet one: the quiet one anchors the time base.
        let now = Instant::now();
        let mut tries = [
            (1_000_000, now, 5_003_000_000, 4_000_100),
            (10_000_000, now, 5_009_000_100, 10_000_200),
        ]
        .into_iter();
        let a = anchor(|| tries.next().expect("two tries suffice"));
        assert_eq!(a.mono_to_wall_ns, 5_009_000_100 - 10_000_100);
        assert_eq!(a.wall_ns, 10_000_000 + a.mono_to_wall_ns);
        // One read of each clock, as before, would have put it 3 ms off.
        assert_eq!(a.mono_to_wall_ns, 4_999_000_000);
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

    #[test]
    fn is_monotonic_across_threads_and_follows_clock_monotonic() {
        // Threads hand readings to each other through a shared maximum:
        // a reading taken after another thread's published reading may
        // never be smaller. Meanwhile the clock must keep to
        // CLOCK_MONOTONIC. 200 µs is generous: the re-anchored counter stays
        // within a fraction of a microsecond (docs/self-benchmarks.md), and
        // a pair of readings preempted between them cannot look further
        // apart because the tightest of five tries is kept.
        use std::sync::atomic::AtomicU64;
        let latest = AtomicU64::new(0);
        let deadline = monotonic_ns() + 300_000_000;
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while monotonic_ns() < deadline {
                        for _ in 0..1_000 {
                            let seen = latest.load(Ordering::Acquire);
                            let now = now_ns();
                            assert!(now >= seen, "{now} after another thread's {seen}");
                            latest.fetch_max(now, Ordering::AcqRel);
                        }
                        let off = offset_from_monotonic_ns();
                        assert!(off.abs() < 200_000, "{off} ns from CLOCK_MONOTONIC");
                    }
                });
            }
        });
    }

    #[test]
    fn the_clock_env_is_checked() {
        assert!(!choose(Some("monotonic")).unwrap());
        let err = choose(Some("rdtsc")).unwrap_err().to_string();
        assert!(
            err.contains("JSBENCH_CLOCK") && err.contains("rdtsc"),
            "{err}"
        );
        // Unset: the counter exactly where it is usable.
        assert_eq!(
            choose(None).unwrap(),
            super::super::tsc::unusable().is_none()
        );
    }
}
