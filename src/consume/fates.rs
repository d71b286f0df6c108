//! What became of every message under a behaviour plan: its deliveries
//! paired up into measured redelivery delays (against the delay the
//! configuration promises, per cause), and its observed end against its
//! planned fate. Used by every scenario whose consumers nak, term or ignore.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::consume::DeliveryEvent;
use crate::consume::behaviour::{Cause, Fate, Outcome, expected_redelivery};
use crate::profile::{BehaviourPlan, ConsumerPlan};
use crate::record::histogram::Recorder;
use crate::record::ledger::{Event, LedgerShard};
use crate::record::metrics::{Direction, Metric, latency_metrics, signed_latency_metrics};
use crate::record::signed::Signed;

/// Families of figures per redelivery cause, `<family>.<cause>`
/// ([`per_cause`]): redeliveries, their delay (a histogram), how late
/// against the configured delay (signed, early negative; histograms of its
/// late part and of its early part, `redelivery_early_by`), how far off
/// either way (what a comparison judges), how many came early.
pub const REDELIVERIES: &str = "redeliveries";
pub const REDELIVERY_DELAY: &str = "redelivery_delay";
pub const REDELIVERY_LATE: &str = "redelivery_late";
pub const REDELIVERY_OFF_BY: &str = "redelivery_off_by";
pub const REDELIVERY_EARLY: &str = "redelivery_early";
pub const REDELIVERY_EARLY_BEYOND_TOLERANCE: &str = "redelivery_early_beyond_tolerance";
pub const REDELIVERY_EARLY_BY: &str = "redelivery_early_by";

/// A family's figure for one cause: `redelivery_late.nak_delay`.
pub fn per_cause(family: &str, cause: Cause) -> String {
    format!("{family}.{}", cause.name())
}

/// The earliness forgiven beyond what the run measured, whatever the
/// cause: two processes' clocks (a nak and its redelivery read by
/// different workers; the server's store stamp against jsbench's time
/// base, which agree to microseconds on one host) and a redelivery read
/// later than any first delivery (redeliveries are not in the sample),
/// which makes the one after it look early. Small next to what a server
/// that shortens a deadline by mistake does (tens of milliseconds and up).
pub const EARLY_TOLERANCE_FLOOR: Duration = Duration::from_millis(1);

/// The earliness forgiven a redelivery, measured in the run it judges.
///
/// A nak's redelivery is timed from jsbench's answer, stamped before the
/// nak leaves: the server's timer can only start later, so however late
/// jsbench read anything, the redelivery cannot look early, and only the
/// floor is forgiven ([`EARLY_TOLERANCE_FLOOR`]; a delay of a few
/// milliseconds can be caught early in the slowest run). An ack deadline
/// (AckWait, a BackOff step) runs from the server's send, which jsbench
/// sees only when it reads the delivery: a delivery that waited (in the
/// server's outbound buffer, in the client behind a burst, on a busy core)
/// makes the redelivery after it look early by as much. So a deadline is
/// forgiven how late jsbench read the run's first deliveries (from the
/// server's store stamp, which precedes the send, to the read: an upper
/// bound on each one's wait), at its slowest, plus the floor. The slowest,
/// not a percentile: the check fails a variant on one redelivery, and
/// every read beyond a percentile could make its redelivery look early by
/// as much; the slowest bounds every first delivery's own wait. It follows
/// the machine, not a cap raised after each loaded run (10, 25, then
/// 50 ms), so where jsbench reads in a few milliseconds a 30 s AckWait
/// fired 40 ms early fails, and where it read one delivery 80 ms late a
/// 50 ms BackOff step cannot be told early (the harness, not the server,
/// would be judged). Never under the clock's measured resolution (two
/// readings closer than that cannot be ordered).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EarlyTolerance {
    pub resolution: Duration,
    /// The slowest first-delivery read of the run: from the server's store
    /// stamp to jsbench's read.
    pub slowest_read: Duration,
    /// First deliveries measured.
    pub reads: u64,
}

impl EarlyTolerance {
    /// The earliness forgiven an ack deadline: the slowest read plus the
    /// floor.
    pub fn deadline(&self) -> Duration {
        (self.slowest_read + EARLY_TOLERANCE_FLOOR).max(self.resolution)
    }

    /// The earliness forgiven a redelivery of `cause`.
    pub fn of(&self, cause: Cause) -> Duration {
        match cause {
            Cause::Nak | Cause::NakDelay => EARLY_TOLERANCE_FLOOR.max(self.resolution),
            Cause::AckWait | Cause::Backoff => self.deadline(),
        }
    }

    /// The rule and its figures in words, for a result's params and its
    /// invariant.
    pub fn describe(&self) -> String {
        format!(
            "{:.2} ms for an ack deadline: the slowest of {} first-delivery reads ({:.2} ms from \
             the server's store stamp to jsbench's read) plus a {:?} floor; the floor for a nak, \
             timed from jsbench's answer; at least the clock's resolution {:?}",
            self.deadline().as_secs_f64() * 1e3,
            self.reads,
            self.slowest_read.as_secs_f64() * 1e3,
            EARLY_TOLERANCE_FLOOR,
            self.resolution
        )
    }
}

/// Measured redelivery delays of one cause.
#[derive(Debug, Clone, Default)]
pub struct DelayStats {
    /// Delay from the nak (or the delivery, for an expired deadline) to the
    /// redelivery.
    pub measured: Recorder,
    /// Measured minus configured: late positive, early negative, so an
    /// early server shows in the same figures as a late one.
    pub lateness: Signed,
    /// Redeliveries earlier than configured by more than the tolerance.
    pub early_beyond_tolerance: u64,
}

/// Messages per outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FateCounts {
    pub acked: u64,
    pub termed: u64,
    pub exhausted: u64,
    /// Delivered but with no end (still pending when the run stopped).
    pub unfinished: u64,
    /// Never delivered.
    pub undelivered: u64,
}

impl FateCounts {
    fn add(&mut self, outcome: Option<Outcome>) {
        match outcome {
            Some(Outcome::Acked) => self.acked += 1,
            Some(Outcome::Termed) => self.termed += 1,
            Some(Outcome::Exhausted) => self.exhausted += 1,
            None => self.unfinished += 1,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Analysis {
    pub messages: u64,
    /// `delivered_times[n]`: messages delivered exactly n times.
    pub delivered_times: BTreeMap<u32, u64>,
    pub delays: BTreeMap<Cause, DelayStats>,
    pub planned: FateCounts,
    pub observed: FateCounts,
    /// Messages whose observed end differs from the planned one.
    pub mismatches: u64,
    /// A few of them, described.
    pub examples: Vec<String>,
    /// Redeliveries the plan does not explain (a lost ack, processing
    /// longer than the ack deadline, a wait in the client past it).
    pub unplanned_redeliveries: u64,
    /// Unplanned redeliveries consistent with expired ack deadlines: the
    /// server held the message (from storing it to redelivering it) at
    /// least as long as the deadlines of every delivery so far, with no
    /// tolerance. The only unplanned cause a durable pull consumer has, so
    /// the rest are unexplained.
    pub expiries: u64,
    /// From the store time of a message to the answer of the delivery that
    /// expired (how long it was in the system, mostly waiting in the client).
    pub time_to_expired_answer: Recorder,
    /// Messages whose final outcome differs from the planned one (their
    /// delivery count aside).
    pub outcome_mismatches: u64,
    /// Sequences observed exhausted, ascending.
    pub exhausted: Vec<u64>,
    /// Sequences observed termed, ascending.
    pub termed: Vec<u64>,
    /// Receive time of each exhausted message's final delivery, by sequence.
    pub final_delivery_ns: BTreeMap<u64, u64>,
    /// How late jsbench read each first delivery: from the server's store
    /// stamp to the read.
    pub first_reads: Recorder,
    /// Earliness within this is jitter, not an early redelivery.
    pub tolerance: EarlyTolerance,
}

/// The read delays of first deliveries, `first_read_delay.*` (µs): what
/// the early tolerance is measured from.
pub const FIRST_READ_DELAY: &str = "first_read_delay";
/// The earliness the run forgave an ack deadline's redelivery (µs): its
/// slowest first read plus the floor.
pub const EARLY_TOLERANCE: &str = "early_tolerance";

/// Pairs the deliveries (ordered by sequence, then delivery) of every
/// persisted sequence in `ledger` and checks each message's end, forgiving
/// a redelivery the earliness the run's own first-delivery reads explain
/// ([`EarlyTolerance`], never under the clock's `resolution`).
pub fn analyse(
    events: &[DeliveryEvent],
    ledger: &LedgerShard,
    behaviour: &BehaviourPlan,
    consumer: &ConsumerPlan,
    resolution: Duration,
) -> Analysis {
    let mut a = Analysis {
        tolerance: EarlyTolerance {
            resolution,
            ..EarlyTolerance::default()
        },
        ..Analysis::default()
    };
    a.measure_reads(events);
    let mut i = 0;
    for seq in 1..=ledger.max_seq() {
        if ledger.count(seq, Event::Persisted) == 0 {
            continue;
        }
        a.messages += 1;
        let fate = behaviour.fate(seq, consumer.max_deliver);
        a.planned.add(Some(fate.outcome));
        let start = i + events[i..].partition_point(|e| e.seq < seq);
        i = start + events[start..].partition_point(|e| e.seq == seq);
        let mine = &events[start..i];
        if mine.is_empty() {
            a.observed.undelivered += 1;
            a.mismatch(seq, fate, "never delivered".into());
            continue;
        }
        *a.delivered_times.entry(mine.len() as u32).or_default() += 1;
        let mut sent = mine[0].received_ns;
        for pair in mine.windows(2) {
            sent = a.pair(seq, sent, pair[0], pair[1], behaviour, consumer);
        }
        let observed = observe(seq, mine, ledger, behaviour, consumer);
        a.observed.add(observed);
        match observed {
            Some(Outcome::Exhausted) => {
                a.exhausted.push(seq);
                a.final_delivery_ns
                    .insert(seq, mine.last().expect("not empty").received_ns);
            }
            Some(Outcome::Termed) => a.termed.push(seq),
            _ => {}
        }
        if observed != Some(fate.outcome) {
            a.outcome_mismatches += 1;
        }
        let deliveries = mine.len() as u32;
        let numbered = mine
            .iter()
            .enumerate()
            .all(|(k, e)| e.delivery == k as u32 + 1);
        if observed != Some(fate.outcome) || deliveries != fate.deliveries || !numbered {
            let seen: Vec<u32> = mine.iter().map(|e| e.delivery).collect();
            a.mismatch(
                seq,
                fate,
                format!("ended {observed:?} after deliveries {seen:?}"),
            );
        }
    }
    a
}

impl Analysis {
    /// How late the first deliveries were read, from the server's store
    /// stamp (0: not logged) to jsbench's read, compared on one time base
    /// as [`Analysis::pair`]'s expiries are; a stamp ahead of the read (the
    /// server's clock on another host, ahead) counts as no wait.
    fn measure_reads(&mut self, events: &[DeliveryEvent]) {
        for e in events
            .iter()
            .filter(|e| e.delivery == 1 && e.published_ns > 0)
        {
            let waited = e.received_ns.saturating_sub(e.published_ns);
            self.first_reads.record(waited);
            self.tolerance.reads += 1;
            self.tolerance.slowest_read = self
                .tolerance
                .slowest_read
                .max(Duration::from_nanos(waited));
        }
    }

    /// The read delays the tolerance is measured from and the tolerance
    /// itself: shown, not judged (they describe jsbench and the machine,
    /// not the server).
    pub fn tolerance_metrics(&self) -> Vec<Metric> {
        let mut metrics = latency_metrics(FIRST_READ_DELAY, &self.first_reads.summary());
        metrics.push(Metric::new(
            EARLY_TOLERANCE,
            "us",
            self.tolerance.deadline().as_nanos() as f64 / 1e3,
            Direction::None,
        ));
        for m in &mut metrics {
            m.direction = Direction::None;
        }
        metrics
    }

    fn mismatch(&mut self, seq: u64, fate: Fate, what: String) {
        self.mismatches += 1;
        if self.examples.len() < 5 {
            self.examples.push(format!(
                "seq {seq}: planned {:?} after {} deliveries, {what}",
                fate.outcome, fate.deliveries
            ));
        }
    }

    /// Measures the redelivery `next` of `this`, whose server-side send is
    /// estimated at `sent`, and returns the estimate for `next`'s.
    ///
    /// A delivery read late (the client busy, a stalled core) would make the
    /// one after it look early by as much, since an ack deadline runs from
    /// the server's send, not from the client's read. So a redelivery read
    /// later than the configuration promised it by more than the tolerance
    /// is taken as sent at the promise plus the tolerance: a stall does not
    /// carry over, while a redelivery the server sent early is still read
    /// early and judged so. The price: after a step the server itself sent
    /// late by X beyond the tolerance, an early step by up to X goes unseen
    /// (the late one shows in `late`).
    fn pair(
        &mut self,
        seq: u64,
        sent: u64,
        this: DeliveryEvent,
        next: DeliveryEvent,
        behaviour: &BehaviourPlan,
        consumer: &ConsumerPlan,
    ) -> u64 {
        let action = behaviour.action(seq, this.delivery);
        let Some((cause, expected)) = expected_redelivery(action, this.delivery, consumer) else {
            self.unplanned_redeliveries += 1;
            let sent = next.received_ns;
            // Delivery n + 1 after expiries cannot come before every
            // deadline of deliveries 1..=n has run, each from a send that
            // followed the store: the server held the message that long at
            // least. A redelivery sooner than that is no expiry, whatever
            // the client did.
            let deadlines: Duration = (1..=this.delivery).map(|n| consumer.ack_deadline(n)).sum();
            let held = next.received_ns.saturating_sub(this.published_ns);
            if held >= deadlines.as_nanos() as u64 {
                self.expiries += 1;
                self.time_to_expired_answer
                    .record(this.answered_ns.saturating_sub(this.published_ns));
            }
            return sent;
        };
        // A nak starts the server's timer when it arrives; an ack deadline
        // runs from the delivery.
        let from = match cause {
            Cause::Nak | Cause::NakDelay => this.answered_ns,
            Cause::AckWait | Cause::Backoff => sent,
        };
        let measured = next.received_ns.saturating_sub(from);
        let tolerance = self.tolerance.of(cause).as_nanos() as u64;
        let expected = expected.as_nanos() as u64;
        let stats = self.delays.entry(cause).or_default();
        stats.measured.record(measured);
        stats.lateness.record(measured as i64 - expected as i64);
        if expected.saturating_sub(measured) > tolerance {
            stats.early_beyond_tolerance += 1;
        }
        next.received_ns.min(from + expected + tolerance)
    }

    /// Per cause: the count, the measured delay, how much later than
    /// configured (signed: early is negative, shown only, since an early
    /// server must not read as a prompt one) and how far off either way
    /// (lower is better, what `compare` and `ab` judge), as metrics
    /// (`redelivery_late.<cause>.*`, `redelivery_off_by.<cause>.*`,
    /// `redelivery_early.<cause>`, ...) and histograms.
    pub fn delay_metrics(&self) -> (Vec<Metric>, Vec<(String, Recorder)>) {
        let count = |name: String, v: u64| Metric::new(name, "count", v as f64, Direction::None);
        let mut metrics = Vec::new();
        let mut histograms = Vec::new();
        for (cause, stats) in &self.delays {
            let name = |family: &str| per_cause(family, *cause);
            let (late, early) = (stats.lateness.late(), stats.lateness.early());
            let off_by = stats.lateness.magnitude();
            metrics.push(count(name(REDELIVERIES), stats.measured.count()));
            metrics.extend(latency_metrics(
                &name(REDELIVERY_DELAY),
                &stats.measured.summary(),
            ));
            metrics.extend(signed_latency_metrics(
                &name(REDELIVERY_LATE),
                &stats.lateness,
            ));
            metrics.extend(latency_metrics(&name(REDELIVERY_OFF_BY), &off_by.summary()));
            metrics.push(count(name(REDELIVERY_EARLY), early.count()));
            metrics.push(count(
                name(REDELIVERY_EARLY_BEYOND_TOLERANCE),
                stats.early_beyond_tolerance,
            ));
            histograms.push((name(REDELIVERY_DELAY), stats.measured.clone()));
            histograms.push((name(REDELIVERY_LATE), late.clone()));
            histograms.push((name(REDELIVERY_OFF_BY), off_by));
            if early.count() > 0 {
                metrics.extend(latency_metrics(
                    &name(REDELIVERY_EARLY_BY),
                    &early.summary(),
                ));
                histograms.push((name(REDELIVERY_EARLY_BY), early.clone()));
            }
        }
        (metrics, histograms)
    }

    /// Redeliveries the plan explains that came earlier than configured by
    /// more than the tolerance.
    pub fn early(&self) -> u64 {
        self.delays.values().map(|d| d.early_beyond_tolerance).sum()
    }
}

/// How a message observably ended.
fn observe(
    seq: u64,
    deliveries: &[DeliveryEvent],
    ledger: &LedgerShard,
    behaviour: &BehaviourPlan,
    consumer: &ConsumerPlan,
) -> Option<Outcome> {
    if ledger.count(seq, Event::Acked) > 0 {
        return Some(Outcome::Acked);
    }
    if ledger.count(seq, Event::Termed) > 0 {
        return Some(Outcome::Termed);
    }
    let last = deliveries.last()?;
    let failed_last = expected_redelivery(
        behaviour.action(seq, last.delivery),
        last.delivery,
        consumer,
    )
    .is_some();
    (consumer.max_deliver > 0 && i64::from(last.delivery) >= consumer.max_deliver && failed_last)
        .then_some(Outcome::Exhausted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Action, MessageClass, ProcessingPlan};

    fn plan() -> BehaviourPlan {
        BehaviourPlan {
            seed: 9,
            classes: vec![MessageClass {
                name: "poison".into(),
                fraction: 1.0,
                script: vec![Action::NakDelay(Duration::from_millis(50))],
                then: Action::Ignore,
            }],
            processing: ProcessingPlan::Fixed(Duration::ZERO),
            handlers: 1,
        }
    }

    /// A clock of microsecond resolution.
    const RESOLUTION: Duration = Duration::from_micros(1);

    fn consumer() -> ConsumerPlan {
        let mut c = ConsumerPlan::simple();
        c.ack_wait = Duration::from_millis(100);
        c.max_deliver = 3;
        c
    }

    fn event(seq: u64, delivery: u32, received_ms: u64, answered_ms: u64) -> DeliveryEvent {
        DeliveryEvent {
            seq,
            delivery,
            consumer: 0,
            published_ns: 0,
            received_ns: received_ms * 1_000_000,
            answered_ns: answered_ms * 1_000_000,
        }
    }

    #[test]
    fn pairs_deliveries_by_cause_and_confirms_exhaustion() {
        let mut ledger = LedgerShard::new();
        ledger.mark(1, Event::Persisted);
        // Nak with 50 ms delay answered at 2 ms, redelivered at 55 ms (3 ms
        // late); ignored, redelivered 101 ms later: 3 ms late from its send,
        // taken as 53 ms (the promise plus a nak's tolerance, the floor);
        // ignored last.
        let events = [
            event(1, 1, 0, 2),
            event(1, 2, 55, 55),
            event(1, 3, 156, 156),
        ];
        let a = analyse(&events, &ledger, &plan(), &consumer(), RESOLUTION);
        assert_eq!(a.mismatches, 0, "{:?}", a.examples);
        assert_eq!(a.observed.exhausted, 1);
        assert_eq!(a.exhausted, vec![1]);
        assert_eq!(a.final_delivery_ns[&1], 156_000_000);
        let nak = &a.delays[&Cause::NakDelay];
        assert_eq!(nak.measured.count(), 1);
        assert!((nak.lateness.quantile_ns(0.5) - 3_000_000).abs() < 10_000);
        let wait = &a.delays[&Cause::AckWait];
        assert!((wait.lateness.quantile_ns(0.5) - 3_000_000).abs() < 10_000);
        assert_eq!(a.early(), 0);
        assert_eq!(a.delivered_times[&3], 1);
    }

    #[test]
    fn early_missing_and_extra_deliveries_are_reported() {
        let mut ledger = LedgerShard::new();
        ledger.mark(1, Event::Persisted);
        ledger.mark(2, Event::Persisted);
        // Redelivered 55 ms after a 100 ms deadline expired: early; and
        // only two of the three planned deliveries arrived.
        let events = [event(1, 1, 0, 2), event(1, 2, 55, 55)];
        let mut c = consumer();
        c.ack_wait = Duration::from_millis(100);
        let a = analyse(&events, &ledger, &plan(), &c, RESOLUTION);
        assert_eq!(a.observed.undelivered, 1, "seq 2 never delivered");
        assert_eq!(
            a.observed.unfinished, 1,
            "seq 1 stopped after two deliveries"
        );
        assert_eq!(a.mismatches, 2);
        let early = [event(1, 1, 0, 2), event(1, 2, 55, 55), event(1, 3, 95, 95)];
        let a = analyse(&early, &ledger, &plan(), &c, RESOLUTION);
        assert_eq!(a.early(), 1);
    }

    #[test]
    fn a_redelivery_read_late_does_not_make_the_next_one_look_early() {
        let mut ledger = LedgerShard::new();
        ledger.mark(1, Event::Persisted);
        // Nak'ed at 2 ms with a 50 ms delay: sent about 52 ms, but read at
        // 85 ms (the client stalled); its 100 ms deadline runs from the
        // send, so the next delivery comes at 153 ms: 68 ms after the read,
        // on time after the send.
        let stalled = [
            event(1, 1, 0, 2),
            event(1, 2, 85, 85),
            event(1, 3, 153, 153),
        ];
        let a = analyse(&stalled, &ledger, &plan(), &consumer(), RESOLUTION);
        assert_eq!(a.early(), 0);
        // Read at the same instant but sent 40 ms before the deadline.
        let early = [
            event(1, 1, 0, 2),
            event(1, 2, 85, 85),
            event(1, 3, 113, 113),
        ];
        let a = analyse(&early, &ledger, &plan(), &consumer(), RESOLUTION);
        assert_eq!(a.early(), 1);
    }

    fn nak_delay_plan(delay_ms: u64) -> BehaviourPlan {
        let mut p = plan();
        p.classes[0].script = vec![Action::NakDelay(Duration::from_millis(delay_ms))];
        p
    }

    #[test]
    fn a_short_delay_redelivered_early_is_flagged_however_slow_the_run() {
        let mut ledger = LedgerShard::new();
        ledger.mark(1, Event::Persisted);
        ledger.mark(2, Event::Persisted);
        // Nak'ed at 2 ms with a 10 ms delay, redelivered at 4 ms: 8 ms
        // early, most of the delay. A run that read its first deliveries
        // 40 ms after the server stored them must not forgive it either: a
        // nak's delay runs from jsbench's answer, which no read delay moves.
        let mut events = vec![event(1, 1, 50, 52), event(1, 2, 54, 54)];
        events.extend([event(2, 1, 90, 92), event(2, 2, 102, 102)]);
        for e in &mut events {
            e.published_ns = 10_000_000 + (e.seq - 1) * 40_000_000;
        }
        let a = analyse(
            &events,
            &ledger,
            &nak_delay_plan(10),
            &consumer(),
            RESOLUTION,
        );
        assert_eq!(a.tolerance.slowest_read, Duration::from_millis(40));
        assert_eq!(a.tolerance.of(Cause::NakDelay), EARLY_TOLERANCE_FLOOR);
        assert_eq!(a.early(), 1);
    }

    /// Every message's first delivery ignored, so each comes back after a
    /// 30 s AckWait, then acked.
    fn ignored_once() -> (BehaviourPlan, ConsumerPlan) {
        let mut p = plan();
        p.classes[0].script = vec![Action::Ignore];
        p.classes[0].then = Action::Ack;
        let mut c = consumer();
        c.ack_wait = Duration::from_secs(30);
        (p, c)
    }

    /// A run of `messages` stored 5 ms apart, each first delivery read
    /// late by one of the read delays cycled through (with one 6 ms
    /// stall), redelivered by the server 30 s plus its 1 ms timer slack
    /// after it sent the first, less `shortened` for `seq`, and read as
    /// late as the first delivery of the message after it.
    fn expired_once(messages: u64, shortened: Option<(u64, u64)>) -> Vec<DeliveryEvent> {
        const READ_DELAYS_US: [u64; 5] = [150, 300, 600, 1_200, 2_500];
        let read_delay_us = |seq: u64| match seq {
            40 => 6_000,
            _ => READ_DELAYS_US[seq as usize % READ_DELAYS_US.len()],
        };
        let mut events = Vec::new();
        for seq in 1..=messages {
            let stored = 1_000_000_000 + seq * 5_000_000;
            let sent = stored + 20_000;
            let first = sent + read_delay_us(seq) * 1_000;
            let mut resent = sent + 30_001_000_000;
            if let Some((early_seq, by_ms)) = shortened
                && early_seq == seq
            {
                resent -= by_ms * 1_000_000;
            }
            let second = resent + read_delay_us(seq + 1) * 1_000;
            for (delivery, received_ns) in [(1, first), (2, second)] {
                events.push(DeliveryEvent {
                    seq,
                    delivery,
                    consumer: 0,
                    published_ns: stored,
                    received_ns,
                    answered_ns: received_ns,
                });
            }
        }
        events
    }

    #[test]
    fn a_30s_ack_wait_fired_40ms_early_fails_in_a_run_that_read_its_deliveries_promptly() {
        let (behaviour, c) = ignored_once();
        let mut ledger = LedgerShard::new();
        for seq in 1..=200 {
            ledger.mark(seq, Event::Persisted);
            ledger.mark(seq, Event::Acked);
        }
        // Normal jitter: a first delivery read 6 ms late makes its
        // redelivery look nearly 5 ms early; the run read one that late,
        // so that is forgiven.
        let a = analyse(
            &expired_once(200, None),
            &ledger,
            &behaviour,
            &c,
            RESOLUTION,
        );
        assert_eq!(a.mismatches, 0, "{:?}", a.examples);
        assert_eq!(a.delays[&Cause::AckWait].measured.count(), 200);
        assert!(a.delays[&Cause::AckWait].lateness.early().count() > 0);
        assert_eq!(a.early(), 0, "jitter within the run's own read delays");
        // The server fires one deadline 40 ms early: no first delivery
        // was read anywhere near that late, so it is no jitter.
        let shortened = expired_once(200, Some((100, 40)));
        let a = analyse(&shortened, &ledger, &behaviour, &c, RESOLUTION);
        assert_eq!(a.early(), 1, "a 30 s AckWait fired 40 ms early");
        let forgiven = a.tolerance.of(Cause::AckWait);
        assert!(
            forgiven >= Duration::from_millis(6) && forgiven < Duration::from_millis(10),
            "{forgiven:?}: the slowest first-delivery read and a small floor"
        );
    }

    /// Seen on this machine beside other builders: a first delivery read
    /// 87 ms after it was stored, when its 50 ms BackOff step had run out
    /// and the server had redelivered it, so both were read together and
    /// the step looked 49 ms early. The harness, not the server: a tenth of
    /// the delay (5 ms) failed it.
    #[test]
    fn a_deadline_shorter_than_the_runs_slowest_read_is_not_judged_early() {
        let (behaviour, mut c) = ignored_once();
        c.backoff = vec![Duration::from_millis(50)];
        c.ack_wait = Duration::from_millis(50);
        let mut ledger = LedgerShard::new();
        ledger.mark(1, Event::Persisted);
        ledger.mark(1, Event::Acked);
        let mut events = vec![event(1, 1, 97, 97), event(1, 2, 98, 98)];
        for e in &mut events {
            e.published_ns = 10_000_000;
        }
        let a = analyse(&events, &ledger, &behaviour, &c, RESOLUTION);
        assert_eq!(a.tolerance.slowest_read, Duration::from_millis(87));
        assert_eq!(a.delays[&Cause::Backoff].lateness.early().count(), 1);
        assert_eq!(a.early(), 0);
    }

    #[test]
    fn early_redeliveries_count_in_the_lateness_as_negative_and_in_the_miss() {
        let mut ledger = LedgerShard::new();
        let mut events = Vec::new();
        // Four naks with a 50 ms delay answered at 2 ms: three redelivered
        // 1 ms early, one 3 ms late.
        for seq in 1..=4 {
            ledger.mark(seq, Event::Persisted);
            let at = if seq == 4 { 55 } else { 51 };
            events.extend([event(seq, 1, 0, 2), event(seq, 2, at, at)]);
        }
        let a = analyse(
            &events,
            &ledger,
            &nak_delay_plan(50),
            &consumer(),
            RESOLUTION,
        );
        let (metrics, histograms) = a.delay_metrics();
        let value = |name: &str| {
            metrics
                .iter()
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("{name} in {metrics:?}"))
                .value
        };
        // The median is early: an early server does not read as a prompt one.
        assert!((value("redelivery_late.nak_delay.p50") + 1_000.0).abs() < 10.0);
        assert!((value("redelivery_late.nak_delay.max") - 3_000.0).abs() < 10.0);
        // Off by, either way: what a comparison judges.
        assert!((value("redelivery_off_by.nak_delay.p50") - 1_000.0).abs() < 10.0);
        assert!((value("redelivery_off_by.nak_delay.max") - 3_000.0).abs() < 10.0);
        let off_by = metrics
            .iter()
            .find(|m| m.name == "redelivery_off_by.nak_delay.p90")
            .unwrap();
        assert_eq!(off_by.direction, Direction::Lower);
        let late = metrics
            .iter()
            .find(|m| m.name == "redelivery_late.nak_delay.p90")
            .unwrap();
        assert_eq!(late.direction, Direction::None, "early is not better");
        assert!(
            histograms
                .iter()
                .any(|(n, h)| n == "redelivery_off_by.nak_delay" && h.count() == 4)
        );
    }

    #[test]
    fn a_deadline_is_forgiven_the_slowest_read_and_a_nak_only_the_floor() {
        let t = EarlyTolerance {
            resolution: RESOLUTION,
            slowest_read: Duration::from_millis(3),
            reads: 200,
        };
        let deadline = Duration::from_millis(3) + EARLY_TOLERANCE_FLOOR;
        assert_eq!(t.of(Cause::AckWait), deadline);
        assert_eq!(t.of(Cause::Backoff), deadline);
        assert_eq!(t.of(Cause::NakDelay), EARLY_TOLERANCE_FLOOR);
        let coarse = EarlyTolerance {
            resolution: Duration::from_millis(20),
            ..t
        };
        assert_eq!(coarse.of(Cause::NakDelay), coarse.resolution);
        assert_eq!(coarse.of(Cause::AckWait), coarse.resolution);
        let said = t.describe();
        assert!(
            said.starts_with(
                "4.00 ms for an ack deadline: the slowest of 200 first-delivery reads (3.00 ms"
            ),
            "{said}"
        );
    }

    #[test]
    fn an_expiry_is_judged_by_how_long_the_server_held_the_message_without_tolerance() {
        let acking = BehaviourPlan {
            seed: 9,
            classes: Vec::new(),
            processing: ProcessingPlan::Fixed(Duration::ZERO),
            handlers: 1,
        };
        let mut ledger = LedgerShard::new();
        ledger.mark(1, Event::Persisted);
        ledger.mark(2, Event::Persisted);
        // Both answered late (150 ms, AckWait 100 ms). Seq 1 is redelivered
        // 100 ms after it was stored: its deadline ran out. Seq 2 comes back
        // after 60 ms, which no expiry can explain, however late its answer
        // and whatever a tolerance would forgive.
        let events = [
            event(1, 1, 0, 150),
            event(1, 2, 100, 150),
            event(2, 1, 0, 150),
            event(2, 2, 60, 150),
        ];
        let a = analyse(&events, &ledger, &acking, &consumer(), RESOLUTION);
        assert_eq!(a.unplanned_redeliveries, 2);
        assert_eq!(a.expiries, 1, "only seq 1 expired");
    }
}
