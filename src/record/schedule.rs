//! Open-loop send schedules and the pacer that keeps to them.
//!
//! An open-loop publisher sends message *j* at the intended time
//! `t0 + j / rate`, whatever happened to earlier messages: the schedule is
//! absolute, so a slow send delays the messages behind it (and that delay is
//! charged to the latency measured from the intended time) instead of
//! silently lowering the offered load. This is what corrects for coordinated
//! omission.
//!
//! The times follow the steady `j / rate` unless the schedule carries a table
//! of offsets for an irregular arrival pattern (see
//! [`crate::profile::arrival_offsets`]); either way they are absolute.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use crate::record::clock;

/// The send times of one publisher among `stride` that share a total rate.
///
/// Publisher `offset` of `stride` sends the global message numbers
/// `offset, offset + stride, offset + 2·stride, ...`, so the publishers
/// interleave evenly instead of bursting together.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Start of the schedule, ns on [`crate::record::clock`].
    pub t0_ns: u64,
    /// Total messages per second across all publishers; `None` sends as fast
    /// as the server takes them (closed loop: the intended time is the send time).
    pub total_rate: Option<u64>,
    /// Number of publishers sharing the rate.
    pub stride: u64,
    /// This publisher's position among them.
    pub offset: u64,
    /// Total messages across all publishers (paced schedules).
    pub total_messages: u64,
    /// When an unpaced schedule stops, ns on [`crate::record::clock`].
    pub end_ns: u64,
    /// Offsets from `t0_ns` of every message by global number, for an
    /// irregular arrival pattern (then `total_rate` is its mean rate, which
    /// sizes the pacer's spin); `None` for the steady `j / rate`.
    pub arrivals: Option<Arc<[u64]>>,
}

impl Schedule {
    /// Messages this publisher sends. An unpaced schedule without a total
    /// runs until `end_ns`; with one it sends its share as fast as it can.
    pub fn count(&self) -> u64 {
        if self.total_rate.is_none() && self.total_messages == 0 {
            u64::MAX
        } else if self.offset >= self.total_messages {
            0
        } else {
            (self.total_messages - self.offset).div_ceil(self.stride)
        }
    }

    /// Whether an unpaced schedule is over at `now_ns`.
    #[inline]
    pub fn ended(&self, now_ns: u64) -> bool {
        self.total_rate.is_none() && now_ns >= self.end_ns
    }

    /// Intended send time of this publisher's `k`-th message, or `None` when
    /// the schedule is unpaced.
    #[inline]
    pub fn intended_ns(&self, k: u64) -> Option<u64> {
        let rate = self.total_rate?;
        let j = u128::from(k) * u128::from(self.stride) + u128::from(self.offset);
        if let Some(offset) = self.arrivals.as_ref().and_then(|a| a.get(j as usize)) {
            return Some(self.t0_ns + offset);
        }
        Some(self.t0_ns + (j * 1_000_000_000 / u128::from(rate)) as u64)
    }

    /// Interval between two of this publisher's messages.
    pub fn interval(&self) -> Option<Duration> {
        let rate = self.total_rate?;
        Some(Duration::from_nanos(
            self.stride * 1_000_000_000 / rate.max(1),
        ))
    }
}

/// Waits for intended send times on a dedicated OS thread.
///
/// tokio's timer rounds deadlines up to whole milliseconds, which would add
/// up to 1 ms of the generator's own error to every latency measured from the
/// intended time. A thread-level sleep with a 1 µs timer slack wakes within
/// tens of microseconds; the pacer sleeps until shortly before the deadline
/// and spins the rest, but spins at most a tenth of the interval so that a
/// fast publisher never burns a core the server needs.
///
/// Every wake-up costs the machine being measured: a sleep, a spin, and a
/// wake of the client's connection task that then writes one message per
/// syscall. With batching ([`Pacer::batched`]) the pacer wakes only on a
/// grid of `wake_every` and sends, back to back, every message whose
/// intended time has come; nothing is sent before its intended time, and the
/// times stay absolute, so the wait for the next wake-up is charged to each
/// message's send lag and to every latency measured from the intended time.
///
/// The spin is learnt: it starts at its cap and follows the 90th
/// percentile of the sleeps' own oversleep, so a quiet host, whose sleeps
/// end a few microseconds late, does not pay a busy host's 60 µs spin per
/// message, and nine sends in ten still leave on time.
#[derive(Debug, Clone)]
pub struct Pacer {
    spin: Spin,
    /// Wake-ups fall on `grid_origin_ns + n * wake_every_ns`; 0 wakes for
    /// every message.
    wake_every_ns: u64,
    grid_origin_ns: u64,
}

/// Typical oversleep of a thread sleep on the machines this was measured on.
const SLEEP_OVERSHOOT_NS: u64 = 60_000;

/// The spin before a deadline, learnt as a running 90th percentile of the
/// oversleeps seen (a stochastic quantile estimate: up nine steps when a
/// sleep ended later than the spin covered, down one otherwise), between
/// [`Spin::FLOOR_NS`] and `cap_ns`.
#[derive(Debug, Clone)]
pub struct Spin {
    ns: Cell<u64>,
    cap_ns: u64,
}

impl Spin {
    /// One step of the estimate: from the 60 µs cap to a quiet host's few
    /// microseconds in about 250 sleeps.
    const STEP_NS: u64 = 250;
    const FLOOR_NS: u64 = 1_000;

    /// Starts at `cap_ns`: precise first, cheaper once the sleeps have
    /// shown how late they end.
    pub fn new(cap_ns: u64) -> Self {
        Spin {
            ns: Cell::new(cap_ns),
            cap_ns,
        }
    }

    /// The spin now.
    pub fn ns(&self) -> u64 {
        self.ns.get()
    }

    /// A sleep meant to end at `target_ns` ended at `woke_ns`.
    pub fn learn(&self, target_ns: u64, woke_ns: u64) {
        let over = woke_ns.saturating_sub(target_ns);
        let spin = self.ns.get();
        let next = if over > spin {
            (spin + 9 * Self::STEP_NS).min(self.cap_ns)
        } else {
            spin.saturating_sub(Self::STEP_NS)
                .max(Self::FLOOR_NS.min(self.cap_ns))
        };
        self.ns.set(next);
    }
}

/// The batching of `wake_every = "auto"` (see [`Pacer::for_schedule`]).
pub const AUTO_WAKE_EVERY: Duration = Duration::from_nanos(SLEEP_OVERSHOOT_NS);

impl Pacer {
    /// A pacer that wakes for every message.
    pub fn new(interval: Option<Duration>) -> Self {
        let interval_ns = interval.map(|d| d.as_nanos() as u64).unwrap_or(0);
        Pacer {
            spin: Spin::new(SLEEP_OVERSHOOT_NS.min(interval_ns / 10)),
            wake_every_ns: 0,
            grid_origin_ns: 0,
        }
    }

    /// A pacer that wakes at most once per `wake_every` (on a grid from
    /// `origin_ns`, the schedule's start) and never spins: the batch already
    /// spends up to `wake_every` of precision, so a spin would buy nothing.
    /// A `wake_every` of zero, or one no longer than the interval between
    /// messages, wakes for every message as [`Pacer::new`] does.
    pub fn batched(interval: Option<Duration>, wake_every: Duration, origin_ns: u64) -> Self {
        let every = wake_every.as_nanos() as u64;
        let interval_ns = interval.map_or(0, |d| d.as_nanos() as u64);
        if every == 0 || every <= interval_ns {
            return Pacer::new(interval);
        }
        Pacer {
            spin: Spin::new(0),
            wake_every_ns: every,
            grid_origin_ns: origin_ns,
        }
    }

    /// The pacer for a schedule with `interval` between this publisher's
    /// messages: `wake_every` as a profile gives it, or by the rate when
    /// `None`. The rule: wake for every message while the interval is at
    /// least [`AUTO_WAKE_EVERY`]; below it a sleep cannot honour the
    /// interval anyway (it oversleeps by about that much), so wake every
    /// [`AUTO_WAKE_EVERY`] and send what is due, without the spin.
    pub fn for_schedule(
        interval: Option<Duration>,
        wake_every: Option<Duration>,
        origin_ns: u64,
    ) -> Self {
        let every = wake_every.unwrap_or(match interval {
            Some(i) if i < AUTO_WAKE_EVERY => AUTO_WAKE_EVERY,
            _ => Duration::ZERO,
        });
        Pacer::batched(interval, every, origin_ns)
    }

    /// Whether the pacer sends messages in batches.
    pub fn batches(&self) -> bool {
        self.wake_every_ns > 0
    }

    /// When the pacer wakes to send a message intended at `intended_ns`:
    /// the message's own time without batching, else the first grid point
    /// at or after it. Never before the intended time.
    #[inline]
    pub fn wake_for(&self, intended_ns: u64) -> u64 {
        if self.wake_every_ns == 0 || intended_ns <= self.grid_origin_ns {
            return intended_ns;
        }
        let since = intended_ns - self.grid_origin_ns;
        self.grid_origin_ns + since.div_ceil(self.wake_every_ns) * self.wake_every_ns
    }

    /// Sets a 1 µs timer slack for the calling thread (Linux), so sleeps end
    /// close to their deadline instead of up to 50 µs late.
    pub fn tighten_timer_slack() {
        #[cfg(target_os = "linux")]
        // SAFETY: PR_SET_TIMERSLACK only changes the calling thread's timer slack.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0);
        }
    }

    /// Blocks the calling thread until `deadline_ns` (on [`crate::record::clock`]);
    /// returns at once when the deadline has passed. Returns the clock
    /// reading that found the deadline reached, which is the send time: a
    /// second read right after would only add its own cost.
    #[inline]
    pub fn wait_until(&self, deadline_ns: u64) -> u64 {
        let now = clock::now_ns();
        if now >= deadline_ns {
            return now;
        }
        let remaining = deadline_ns - now;
        let spin = self.spin.ns();
        if remaining > spin {
            let target = deadline_ns - spin;
            std::thread::sleep(Duration::from_nanos(remaining - spin));
            let woke = clock::now_ns();
            self.spin.learn(target, woke);
            if woke >= deadline_ns {
                return woke;
            }
        }
        loop {
            let now = clock::now_ns();
            if now >= deadline_ns {
                return now;
            }
            std::hint::spin_loop();
        }
    }

    /// What a batching pacer does at `now_ns` for a message intended at
    /// `intended_ns`: `None` sends it now (it is due, and goes with the
    /// current wake-up), `Some(t)` sleeps until the wake-up at `t` first.
    #[inline]
    pub fn wake_needed(&self, intended_ns: u64, now_ns: u64) -> Option<u64> {
        (now_ns < intended_ns).then(|| self.wake_for(intended_ns))
    }

    /// Waits for a message's intended time, if it has one, and returns
    /// `(intended, sent)`. Unpaced (`None`), the loop is closed: the
    /// intended time is the send time, so one clock read gives both.
    /// Batched, a message already due goes at once (it belongs to the
    /// current wake-up); one not yet due waits for its grid point.
    #[inline]
    pub fn send_at(&self, intended_ns: Option<u64>) -> (u64, u64) {
        match intended_ns {
            Some(t) if self.wake_every_ns == 0 => (t, self.wait_until(t)),
            Some(t) => {
                let mut now = clock::now_ns();
                while let Some(wake) = self.wake_needed(t, now) {
                    now = self.wait_until(wake);
                }
                (t, now)
            }
            None => {
                let now = clock::now_ns();
                (now, now)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Oversleeps spread evenly over 0..`top` µs, in a scrambled order.
    fn oversleeps(top_us: u64) -> impl Iterator<Item = u64> {
        (0..20_000u64).map(move |k| (k * 7_919 % 1_000) * top_us)
    }

    #[test]
    fn the_spin_follows_the_ninetieth_percentile_of_the_oversleeps() {
        let spin = Spin::new(60_000);
        for over in oversleeps(20) {
            spin.learn(1_000_000, 1_000_000 + over);
        }
        // p90 of 0..20 µs is 18 µs; the estimate wanders a few steps.
        let ns = spin.ns();
        assert!((16_000..=20_000).contains(&ns), "{ns} ns");
        // A quiet host: the spin falls to its floor.
        for _ in 0..1_000 {
            spin.learn(1_000_000, 1_000_100);
        }
        assert_eq!(spin.ns(), Spin::FLOOR_NS);
    }

    #[test]
    fn the_spin_never_passes_its_cap_and_a_batched_pacer_never_spins() {
        let spin = Spin::new(30_000);
        for _ in 0..100 {
            spin.learn(0, 1_000_000);
        }
        assert_eq!(spin.ns(), 30_000);
        let batched = Pacer::batched(
            Some(Duration::from_micros(10)),
            Duration::from_micros(60),
            0,
        );
        batched.spin.learn(0, 1_000_000);
        assert_eq!(batched.spin.ns(), 0);
        // Per message at 1k msg/s the spin starts at the 60 µs cap; at
        // 100k, at a tenth of the 10 µs interval.
        assert_eq!(Pacer::new(Some(Duration::from_millis(1))).spin.ns(), 60_000);
        assert_eq!(Pacer::new(Some(Duration::from_micros(10))).spin.ns(), 1_000);
    }

    fn schedule(rate: u64, stride: u64, offset: u64, total: u64) -> Schedule {
        Schedule {
            t0_ns: 1_000,
            total_rate: Some(rate),
            stride,
            offset,
            total_messages: total,
            end_ns: u64::MAX,
            arrivals: None,
        }
    }

    #[test]
    fn single_publisher_is_evenly_spaced_from_t0() {
        let s = schedule(1_000, 1, 0, 10);
        assert_eq!(s.count(), 10);
        assert_eq!(s.intended_ns(0), Some(1_000));
        assert_eq!(s.intended_ns(1), Some(1_000 + 1_000_000));
        assert_eq!(s.intended_ns(9), Some(1_000 + 9_000_000));
    }

    #[test]
    fn publishers_interleave_and_cover_every_message_once() {
        let total = 10;
        let mut times: Vec<u64> = (0..3)
            .flat_map(|p| {
                let s = schedule(1_000, 3, p, total);
                (0..s.count()).map(move |k| s.intended_ns(k).unwrap())
            })
            .collect();
        assert_eq!(times.len() as u64, total);
        times.sort();
        let expected: Vec<u64> = (0..total).map(|j| 1_000 + j * 1_000_000).collect();
        assert_eq!(times, expected);
    }

    #[test]
    fn the_schedule_is_absolute_without_rounding_drift() {
        // 3 msg/s: 333_333_333.3 ns apart; the millionth message must not
        // accumulate the rounding of every interval before it.
        let s = schedule(3, 1, 0, 2_000_000);
        assert_eq!(s.intended_ns(1_000_000), Some(1_000 + 333_333_333_333_333));
    }

    #[test]
    fn unpaced_schedule_runs_until_its_end() {
        let mut counted = schedule(1, 2, 1, 5);
        counted.total_rate = None;
        assert_eq!(counted.count(), 2, "a fill sends its share of the total");
        let mut s = schedule(1, 2, 1, 0);
        s.total_rate = None;
        s.end_ns = 10_000;
        assert_eq!(s.count(), u64::MAX);
        assert_eq!(s.intended_ns(0), None);
        assert!(!s.ended(9_999));
        assert!(s.ended(10_000));
        assert_eq!(schedule(1, 4, 5, 5).count(), 0);
        assert!(
            !schedule(1, 1, 0, 5).ended(u64::MAX),
            "a paced schedule ends by count"
        );
    }

    #[test]
    fn a_pattern_table_sets_the_times_and_publishers_still_interleave() {
        let table: Arc<[u64]> = vec![0, 10, 15, 500, 501].into();
        let times = |p: u64| {
            let mut s = schedule(2, 2, p, 5);
            s.arrivals = Some(table.clone());
            (0..s.count())
                .map(|k| s.intended_ns(k).unwrap() - 1_000)
                .collect::<Vec<_>>()
        };
        assert_eq!(times(0), [0, 15, 501], "messages 0, 2, 4");
        assert_eq!(times(1), [10, 500], "messages 1, 3");
    }

    /// Drives `pacer` over `intended` on a simulated clock: a sleep ends
    /// `oversleep` after its deadline and a send takes `send_cost`. Returns
    /// each message's wake-up (0 before the first sleep) and send time.
    fn simulate(
        pacer: &Pacer,
        intended: &[u64],
        oversleep: u64,
        send_cost: u64,
    ) -> Vec<(u32, u64)> {
        let (mut now, mut wake) = (0u64, 0u32);
        intended
            .iter()
            .map(|&t| {
                while let Some(deadline) = pacer.wake_needed(t, now) {
                    assert!(deadline > now, "a wake-up is always ahead");
                    now = deadline + oversleep;
                    wake += 1;
                }
                let sent = (wake, now);
                now += send_cost;
                sent
            })
            .collect()
    }

    fn wakes(sends: &[(u32, u64)]) -> Vec<Vec<usize>> {
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (i, &(wake, _)) in sends.iter().enumerate() {
            match groups.last_mut() {
                Some(g) if sends[g[0]].0 == wake => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        groups
    }

    #[test]
    fn a_wake_up_sends_every_message_due_and_nothing_early() {
        // 20k msg/s (50 us apart), a wake-up every 200 us from t = 0.
        let interval = Duration::from_micros(50);
        let pacer = Pacer::batched(Some(interval), Duration::from_micros(200), 0);
        assert!(pacer.batches());
        let intended: Vec<u64> = (0..13).map(|j| j * 50_000).collect();
        let sends = simulate(&pacer, &intended, 0, 0);
        assert_eq!(
            wakes(&sends),
            [
                vec![0],
                vec![1, 2, 3, 4],
                vec![5, 6, 7, 8],
                vec![9, 10, 11, 12]
            ],
            "each wake-up sends the messages due since the last"
        );
        for (&(_, sent), &t) in sends.iter().zip(&intended) {
            assert!(sent >= t, "sent at {sent}, intended {t}");
            assert!(sent - t < 200_000, "no message waits a whole period");
        }
        // A late wake-up (an oversleep of 60 us) also sends what came due
        // while it slept; the intended times stay where they were.
        let sends = simulate(&pacer, &intended, 60_000, 1_000);
        assert_eq!(
            wakes(&sends)[1],
            [1, 2, 3, 4, 5],
            "250 us was due by 260 us"
        );
        for (&(_, sent), &t) in sends.iter().zip(&intended) {
            assert!(sent >= t, "sent at {sent}, intended {t}");
        }
    }

    #[test]
    fn a_sender_behind_its_schedule_sends_without_sleeping() {
        let pacer = Pacer::batched(
            Some(Duration::from_micros(50)),
            Duration::from_micros(200),
            0,
        );
        // Each send takes 80 us: every message is already due when its turn comes.
        let intended: Vec<u64> = (0..10).map(|j| j * 50_000).collect();
        let sends = simulate(&pacer, &intended, 0, 80_000);
        assert!(sends.iter().all(|&(wake, _)| wake == 0), "{sends:?}");
    }

    #[test]
    fn wake_ups_fall_on_the_grid_and_never_before_the_intended_time() {
        let pacer = Pacer::batched(
            Some(Duration::from_micros(50)),
            Duration::from_micros(200),
            1_000,
        );
        assert_eq!(pacer.wake_for(1_000), 1_000, "the origin is a grid point");
        assert_eq!(pacer.wake_for(1_001), 201_000);
        assert_eq!(pacer.wake_for(201_000), 201_000);
        assert_eq!(pacer.wake_for(500), 500, "before the grid: its own time");
        assert_eq!(pacer.wake_needed(201_000, 201_000), None, "due: send now");
        assert_eq!(pacer.wake_needed(150_000, 100_000), Some(201_000));
    }

    #[test]
    fn without_batching_the_pacer_wakes_for_every_message() {
        for pacer in [
            Pacer::batched(Some(Duration::from_micros(500)), Duration::ZERO, 0),
            // A period no longer than the interval would batch nothing.
            Pacer::batched(
                Some(Duration::from_micros(500)),
                Duration::from_micros(500),
                0,
            ),
        ] {
            assert!(!pacer.batches());
            let intended: Vec<u64> = (0..5).map(|j| j * 500_000).collect();
            let sends = simulate(&pacer, &intended, 0, 0);
            assert_eq!(wakes(&sends).len(), 5);
            assert!(sends.iter().zip(&intended).all(|(&(_, s), &t)| s == t));
        }
    }

    #[test]
    fn auto_batches_only_intervals_a_sleep_cannot_honour() {
        let at = |interval: Duration| Pacer::for_schedule(Some(interval), None, 0).batches();
        assert!(
            !at(AUTO_WAKE_EVERY),
            "an interval a sleep can keep: per message"
        );
        assert!(!at(AUTO_WAKE_EVERY * 10));
        assert!(at(AUTO_WAKE_EVERY / 2));
        assert!(!Pacer::for_schedule(None, None, 0).batches(), "unpaced");
        let explicit =
            Pacer::for_schedule(Some(AUTO_WAKE_EVERY * 10), Some(AUTO_WAKE_EVERY * 40), 0);
        assert!(
            explicit.batches(),
            "a profile's wake_every wins over the rule"
        );
        let off = Pacer::for_schedule(Some(AUTO_WAKE_EVERY / 2), Some(Duration::ZERO), 0);
        assert!(
            !off.batches(),
            "wake_every = \"0s\" wakes for every message"
        );
    }

    #[test]
    fn pacer_never_returns_early() {
        Pacer::tighten_timer_slack();
        let pacer = Pacer::new(Some(Duration::from_micros(500)));
        for _ in 0..20 {
            let deadline = clock::now_ns() + 300_000;
            let woke = pacer.wait_until(deadline);
            assert!(woke >= deadline);
            assert!(clock::now_ns() >= woke);
        }
    }
}
