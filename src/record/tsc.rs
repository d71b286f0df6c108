//! The cycle counter as a clock that follows CLOCK_MONOTONIC.
//!
//! `clock_gettime(CLOCK_MONOTONIC)` through the vDSO costs 22-38 ns a read
//! here (a fenced `rdtsc`, a sequence lock over the kernel's clock data and
//! its arithmetic); every message reads it at least once. An unfenced
//! `rdtsc` scaled by a multiplier of our own costs 11 ns, of which the
//! counter itself is 10 (docs/self-benchmarks.md).
//!
//! A multiplier calibrated once drifts from the monotonic clock by the
//! calibration's error, and further whenever the kernel slews its clock.
//! Measured here over 90 and 120 s (docs/self-benchmarks.md, "The
//! cycle-counter clock"): calibrated for 1 ms, 0.8-1.0 ppm, 90 µs within
//! two minutes and about 0.5 ms over a ten-minute run; for 100 ms, 0.01-0.06
//! ppm, 7-35 µs over ten minutes. Either is more than the few microseconds
//! the comparisons with the server's time stamps, the workers' offsets and
//! the `Instant`s that paced sends sleep until can take. So the clock
//! re-anchors: every quarter of a second (sooner while the process is
//! young), whichever reader first finds the interval over reads both clocks
//! and publishes a new segment whose slope steers the remaining offset to
//! zero by the next re-anchoring, at most 500 ppm away from the measured
//! rate. Measured the same way: 0.000 ppm, p99 of the offset 120 ns, 3 ns
//! after two minutes; the largest offset, 12-14 µs, came in the first 0.2 s
//! of the process (before any load starts: connecting and provisioning
//! take longer).
//!
//! Readings never go backwards, also across threads: the map from ticks to
//! nanoseconds is one continuous increasing function. A new segment starts
//! at a break point 10 ms in the future, where it meets the old one, and a
//! reader accepts a published map only if no newer one appeared while it
//! read the counter; a reader holding the older map therefore read the
//! counter before the break point, where both maps agree. This relies on
//! the counters of all cores being synchronised, which [`unusable`]
//! checks. The read is unfenced, so it may run a few dozen cycles ahead of
//! the instructions before it: two stamps jsbench compares across threads
//! (a send and its delivery) are a network round of microseconds apart.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

/// Multipliers are nanoseconds per tick in 32.32 fixed point.
const SHIFT: u32 = 32;
/// How far ahead of the re-anchoring a new segment starts: far beyond any
/// skew between cores or reordering around the counter read.
const LEAD_NS: u64 = 10_000_000;
/// The first re-anchoring after calibration; each next interval doubles up
/// to [`INTERVAL_NS`].
const FIRST_INTERVAL_NS: u64 = 10_000_000;
/// The steady interval between re-anchorings.
pub const INTERVAL_NS: u64 = 250_000_000;
/// Most a segment's slope may differ from the measured rate, in parts per
/// million (NTP's own slew limit).
const MAX_SLEW_PPM: u64 = 500;
/// An offset larger than this with the clock behind (a suspended VM, a
/// migration) is stepped forward at once rather than slewed.
const STEP_NS: u64 = 1_000_000;

/// Reads the cycle counter, unfenced: ordering it against memory would
/// cost what the clock exists to save, and the break-point lead absorbs
/// the reordering.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc exists on every x86_64 CPU and touches no memory.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
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

/// Why the cycle counter cannot serve as this process's clock, or `None`
/// when it can: an x86_64 CPU that says its counter is invariant (CPUID
/// 0x80000007, EDX bit 8: constant rate, running through sleep states),
/// and on Linux a kernel that chose `tsc` as its clocksource, which it
/// does only after checking the counters of all CPUs are synchronised (and
/// leaves, with a message in its log, when its watchdog sees them drift).
pub fn unusable() -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__cpuid;
        // SAFETY: cpuid exists on every x86_64 CPU.
        #[allow(unused_unsafe)]
        let (max_ext, power) = unsafe { (__cpuid(0x8000_0000).eax, __cpuid(0x8000_0007)) };
        if max_ext < 0x8000_0007 || power.edx & (1 << 8) == 0 {
            return Some("the CPU does not report an invariant TSC".into());
        }
        kernel_clocksource()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Some("no cycle counter clock on this architecture".into())
    }
}

#[cfg(target_arch = "x86_64")]
fn kernel_clocksource() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let path = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
    match std::fs::read_to_string(path) {
        Ok(s) if s.trim() == "tsc" => None,
        Ok(s) => Some(format!(
            "the kernel's clocksource is {} (not tsc): it does not trust the TSC",
            s.trim()
        )),
        Err(e) => Some(format!("{path} is unreadable: {e}")),
    }
}

/// One map from ticks to nanoseconds, three segments meeting end to end:
/// the one in force when it was made, until the break point; the steering
/// one, until the next re-anchoring is due; then the measured rate, for a
/// process that reads no clock for a while (without it, a steering slope
/// kept past its due time overshoots by up to 500 ppm of the gap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Map {
    from_tsc: u64,
    from_ns: u64,
    from_mult: u64,
    brk_tsc: u64,
    brk_ns: u64,
    mult: u64,
    /// The counter reading from which a reader re-anchors.
    due_tsc: u64,
    due_ns: u64,
    due_mult: u64,
}

impl Map {
    /// One segment throughout, due at `due_tsc`.
    fn line(tsc: u64, ns: u64, mult: u64, due_tsc: u64) -> Map {
        Map {
            from_tsc: tsc,
            from_ns: ns,
            from_mult: mult,
            brk_tsc: tsc,
            brk_ns: ns,
            mult,
            due_tsc,
            due_ns: ns + scale(due_tsc.saturating_sub(tsc), mult),
            due_mult: mult,
        }
    }

    #[inline(always)]
    fn at(&self, tsc: u64) -> u64 {
        if tsc >= self.due_tsc {
            self.due_ns + scale(tsc - self.due_tsc, self.due_mult)
        } else if tsc >= self.brk_tsc {
            self.brk_ns + scale(tsc - self.brk_tsc, self.mult)
        } else {
            self.from_ns + scale(tsc.saturating_sub(self.from_tsc), self.from_mult)
        }
    }
}

#[inline(always)]
fn scale(ticks: u64, mult: u64) -> u64 {
    ((u128::from(ticks) * u128::from(mult)) >> SHIFT) as u64
}

/// A published map under its own sequence count (odd while written), on
/// cache lines of its own.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    seq: AtomicU64,
    fields: [AtomicU64; 9],
}

impl Slot {
    #[inline(always)]
    fn load(&self) -> Map {
        let f = |i: usize| self.fields[i].load(Ordering::Relaxed);
        Map {
            from_tsc: f(0),
            from_ns: f(1),
            from_mult: f(2),
            brk_tsc: f(3),
            brk_ns: f(4),
            mult: f(5),
            due_tsc: f(6),
            due_ns: f(7),
            due_mult: f(8),
        }
    }

    fn store(&self, m: &Map) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let values = [
            m.from_tsc,
            m.from_ns,
            m.from_mult,
            m.brk_tsc,
            m.brk_ns,
            m.mult,
            m.due_tsc,
            m.due_ns,
            m.due_mult,
        ];
        for (field, v) in self.fields.iter().zip(values) {
            field.store(v, Ordering::Relaxed);
        }
        self.seq.store(seq + 2, Ordering::Release);
    }
}

/// A simultaneous reading of both clocks.
#[derive(Debug, Clone, Copy)]
struct Pair {
    tsc: u64,
    mono_ns: u64,
}

/// The re-anchoring's own state, touched only by the reader that holds it.
#[derive(Debug)]
struct Anchoring {
    last: Pair,
    interval_ns: u64,
}

/// The cycle-counter clock: nanoseconds on CLOCK_MONOTONIC's time base
/// plus a fixed offset.
pub struct TscClock {
    current: AtomicUsize,
    slots: [Slot; 2],
    anchoring: Mutex<Anchoring>,
    offset_ns: u64,
}

impl TscClock {
    /// Calibrates against CLOCK_MONOTONIC for `calibrate_ns` (spinning)
    /// and reads `CLOCK_MONOTONIC + offset_ns`. Without `resync` the first
    /// calibration stays in force (only to measure what re-anchoring
    /// saves); `None` when the counter does not advance at a plausible
    /// rate (a hypervisor that traps or freezes it).
    pub fn new(offset_ns: u64, calibrate_ns: u64, resync: bool) -> Option<TscClock> {
        let start = pair();
        let mut end = pair();
        while end.mono_ns < start.mono_ns + calibrate_ns {
            end = pair();
        }
        let mult = rate(start, end)?;
        // A trapped counter costs a microsecond or more a read.
        let t0 = ticks();
        for _ in 0..63 {
            std::hint::black_box(ticks());
        }
        if scale(ticks() - t0, mult) > 64 * 1_000 {
            return None;
        }
        let due_tsc = if resync {
            end.tsc + ticks_for(FIRST_INTERVAL_NS, mult)
        } else {
            u64::MAX
        };
        let map = Map::line(end.tsc, offset_ns + end.mono_ns, mult, due_tsc);
        let clock = TscClock {
            current: AtomicUsize::new(0),
            slots: [Slot::default(), Slot::default()],
            anchoring: Mutex::new(Anchoring {
                last: end,
                interval_ns: FIRST_INTERVAL_NS,
            }),
            offset_ns,
        };
        clock.slots[0].store(&map);
        Some(clock)
    }

    /// The current reading.
    #[inline(always)]
    pub fn now_ns(&self) -> u64 {
        loop {
            let i = self.current.load(Ordering::Acquire);
            let slot = &self.slots[i & 1];
            let seq = slot.seq.load(Ordering::Acquire);
            let map = slot.load();
            let tsc = ticks();
            fence(Ordering::Acquire);
            if seq & 1 == 0
                && slot.seq.load(Ordering::Relaxed) == seq
                && self.current.load(Ordering::Relaxed) == i
            {
                if tsc >= map.due_tsc {
                    self.reanchor(i);
                }
                return map.at(tsc);
            }
        }
    }

    /// This clock's reading minus CLOCK_MONOTONIC's plus the offset, each
    /// read as close to the other as a few tries get: what the clock has
    /// drifted by.
    pub fn offset_from_monotonic(&self) -> i64 {
        let mut best = (u64::MAX, 0i64);
        for _ in 0..5 {
            let a = self.now_ns();
            let m = monotonic_ns() + self.offset_ns;
            let b = self.now_ns();
            if b - a < best.0 {
                best = (b - a, (a / 2 + b / 2) as i64 - m as i64);
            }
        }
        best.1
    }

    /// Publishes the next map, unless another reader is already at it.
    #[cold]
    #[inline(never)]
    fn reanchor(&self, current: usize) {
        let Ok(mut anchoring) = self.anchoring.try_lock() else {
            return;
        };
        if self.current.load(Ordering::Acquire) != current {
            return; // another reader has just done it
        }
        let old = self.slots[current & 1].load();
        let now = pair();
        let interval_ns = (anchoring.interval_ns * 2).min(INTERVAL_NS);
        // An implausible rate (a counter that stood still): keep the
        // old rate and look again after the interval.
        let next =
            steer(&old, anchoring.last, now, interval_ns, self.offset_ns).unwrap_or_else(|| {
                let due_tsc = now.tsc + ticks_for(interval_ns, old.due_mult);
                Map::line(old.due_tsc, old.due_ns, old.due_mult, due_tsc)
            });
        self.slots[(current + 1) & 1].store(&next);
        self.current.store(current + 1, Ordering::Release);
        anchoring.last = now;
        anchoring.interval_ns = interval_ns;
    }
}

/// The map that follows `old` after the reading `now` (the previous one
/// was `last`): from a break point [`LEAD_NS`] ahead, a slope that meets
/// the monotonic clock `interval_ns` after `now`, when the next
/// re-anchoring is due.
fn steer(old: &Map, last: Pair, now: Pair, interval_ns: u64, offset_ns: u64) -> Option<Map> {
    let rate = rate(last, now)?;
    let on_time = |tsc: u64| offset_ns + now.mono_ns + scale(tsc - now.tsc, rate);
    let brk_tsc = now.tsc + ticks_for(LEAD_NS, rate);
    let target_tsc = now.tsc + ticks_for(interval_ns.max(2 * LEAD_NS), rate);
    let continued = old.at(brk_tsc);
    // Behind by more than a step: jump forward at the break point.
    let brk_ns = if on_time(brk_tsc) > continued + STEP_NS {
        on_time(brk_tsc)
    } else {
        continued
    };
    let wanted = (u128::from(on_time(target_tsc).saturating_sub(brk_ns)) << SHIFT)
        / u128::from(target_tsc - brk_tsc);
    let slew = rate / (1_000_000 / MAX_SLEW_PPM);
    let mult = (wanted as u64).clamp(rate - slew, rate + slew);
    // `now` is past `old`'s due time: its last segment is in force.
    Some(Map {
        from_tsc: old.due_tsc,
        from_ns: old.due_ns,
        from_mult: old.due_mult,
        brk_tsc,
        brk_ns,
        mult,
        due_tsc: target_tsc,
        due_ns: brk_ns + scale(target_tsc - brk_tsc, mult),
        due_mult: rate,
    })
}

/// Nanoseconds per tick (32.32) between two readings; `None` when the
/// counter did not advance or ran implausibly (outside 10 MHz to 100 GHz).
fn rate(a: Pair, b: Pair) -> Option<u64> {
    let ticks = b.tsc.checked_sub(a.tsc).filter(|&t| t > 0)?;
    let ns = b.mono_ns.checked_sub(a.mono_ns)?;
    let mult = ((u128::from(ns) << SHIFT) / u128::from(ticks)) as u64;
    let plausible = (1u64 << SHIFT) / 100..=(100u64 << SHIFT);
    plausible.contains(&mult).then_some(mult)
}

fn ticks_for(ns: u64, mult: u64) -> u64 {
    ((u128::from(ns) << SHIFT) / u128::from(mult.max(1))) as u64
}

/// Both clocks read as close together as a few tries get: the monotonic
/// reading between two counter reads, the pair from the tightest try.
fn pair() -> Pair {
    let mut best = (u64::MAX, Pair { tsc: 0, mono_ns: 0 });
    for _ in 0..4 {
        let a = ticks();
        let mono_ns = monotonic_ns();
        let b = ticks();
        if b.wrapping_sub(a) < best.0 {
            best = (
                b.wrapping_sub(a),
                Pair {
                    tsc: a / 2 + b / 2,
                    mono_ns,
                },
            );
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(mult: u64) -> Map {
        Map::line(1_000, 5_000, mult, 1_000)
    }

    #[test]
    fn a_steered_map_meets_the_old_one_and_never_falls() {
        // 0.5 ns a tick; the clock reads 3 µs ahead of the monotonic clock.
        let half = 1u64 << (SHIFT - 1);
        let old = map(half);
        let last = Pair {
            tsc: 1_000,
            mono_ns: 5_000,
        };
        let now = Pair {
            tsc: 1_000_001_000,
            mono_ns: 5_000 + 500_000_000 - 3_000,
        };
        let next = steer(&old, last, now, INTERVAL_NS, 0).unwrap();
        assert_eq!(next.from_ns, old.due_ns);
        assert_eq!(next.brk_ns, old.at(next.brk_tsc));
        assert!(next.mult < half, "slows down to shed the lead");
        // At its due time it meets the monotonic clock, and then runs at
        // the measured rate: a process that reads no clock for a minute
        // after it finds it no further off.
        let measured = rate(last, now).unwrap();
        let monotonic = |t: u64| now.mono_ns + scale(t - now.tsc, measured);
        assert!(next.at(next.due_tsc).abs_diff(monotonic(next.due_tsc)) <= 2);
        let later = next.due_tsc + 120_000_000_000;
        assert!(next.at(later).abs_diff(monotonic(later)) <= 4);
        let mut previous = 0;
        for t in (0..next.brk_tsc + 10 * (next.brk_tsc - now.tsc)).step_by(9_973) {
            let v = next.at(t);
            assert!(v >= previous, "{v} < {previous} at {t}");
            previous = v;
        }
    }

    #[test]
    fn a_slew_is_bounded_and_a_large_lag_steps_forward() {
        let half = 1u64 << (SHIFT - 1);
        let old = map(half);
        let last = Pair {
            tsc: 1_000,
            mono_ns: 5_000,
        };
        // Monotonic clock 20 ms ahead of this clock: step, not slew.
        let now = Pair {
            tsc: 1_000_001_000,
            mono_ns: 5_000 + 520_000_000,
        };
        let next = steer(&old, last, now, INTERVAL_NS, 0).unwrap();
        assert!(next.brk_ns > old.at(next.brk_tsc) + 19_000_000);
        let measured = rate(last, now).unwrap();
        assert!(next.mult.abs_diff(measured) <= measured / 2_000 + 1);
    }

    #[test]
    fn an_implausible_rate_is_refused() {
        let a = Pair {
            tsc: 10,
            mono_ns: 0,
        };
        assert_eq!(
            rate(
                a,
                Pair {
                    tsc: 10,
                    mono_ns: 5
                }
            ),
            None
        );
        assert_eq!(
            rate(
                a,
                Pair {
                    tsc: 11,
                    mono_ns: 1_000_000
                }
            ),
            None
        );
    }
}
