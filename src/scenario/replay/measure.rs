//! A replay's figures: how many it delivered and how fast (catching up,
//! or reaching the live tail), and at the original pace how faithfully it
//! kept the recorded gaps.

use std::collections::HashMap;
use std::time::Duration;

use super::{
    DRIFT_FINAL, DURATION_RATIO, FIRST_SEQ, GAP_ERROR, GAP_ERROR_BY_GAP, GAP_ERROR_EARLY,
    GAP_ERROR_LATE, Live, MESSAGES, OneReplay, SMALLEST_GAP_WITHIN_1MS, TIME_TO_LIVE_TAIL,
};
use crate::drive::DriveOutcome;
use crate::profile::ReplayPace;
use crate::record::histogram::Recorder;
use crate::record::ledger::LedgerCounts;
use crate::record::metrics::{Direction, Metric, rate_and_throughput};
use crate::record::names;
use crate::replay::pacing::{self, GAP_CLASSES, Pacing, Signed};
use crate::replay::read::{End, ReplayLog};
use crate::variant::VariantResult;

/// Pacing is "within" this of the original for the smallest-gap figure.
const WITHIN: Duration = Duration::from_millis(1);

/// Gaps a class needs before its error counts towards that figure.
const MIN_CLASS_GAPS: u64 = 20;

/// A figure of `ns` nanoseconds, in µs.
fn us(name: impl Into<String>, ns: f64, direction: Direction) -> Metric {
    Metric::new(name, "us", ns / 1e3, direction)
}

/// Signed percentiles (µs; early is negative) and magnitudes of a signed
/// distribution: `<name>.p1` ... `.max`, `.mean`, `.abs_p50`, `.abs_p99`.
pub(super) fn signed_metrics(name: &str, s: &Signed) -> Vec<Metric> {
    if s.count() == 0 {
        return Vec::new();
    }
    let signed = |suffix: &str, ns: f64| us(format!("{name}.{suffix}"), ns, Direction::None);
    let q = |q: f64| s.quantile_ns(q) as f64;
    let magnitude = s.magnitude();
    let abs = |q: f64| magnitude.quantile(q) as f64;
    vec![
        signed("min", s.min_ns() as f64),
        signed("p1", q(0.01)),
        signed("p50", q(0.50)),
        signed("p90", q(0.90)),
        signed("p99", q(0.99)),
        signed("max", s.max_ns() as f64),
        signed("mean", s.mean_ns()),
        us(format!("{name}.abs_p50"), abs(0.50), Direction::Lower),
        us(format!("{name}.abs_p99"), abs(0.99), Direction::Lower),
    ]
}

pub(super) fn measure(
    v: &OneReplay,
    log: &ReplayLog,
    live: Option<&DriveOutcome>,
    r: &mut VariantResult,
) {
    let d = &log.deliveries;
    r.count(MESSAGES, d.len() as u64);
    if let Some(first) = d.first() {
        r.count(FIRST_SEQ, first.seq);
        r.ms(
            "time_to_first",
            first.received_ns.saturating_sub(log.requested_ns),
        );
    }
    if let (Some(first), Some(last)) = (d.first(), d.last())
        && d.len() >= 2
    {
        let span = last.received_ns.saturating_sub(first.received_ns);
        r.metric(
            names::DELIVERY_RATE,
            "msg/s",
            (d.len() - 1) as f64 / (span as f64 / 1e9).max(1e-9),
            Direction::Higher,
        );
    }
    match (v.pace, v.live) {
        (ReplayPace::Instant, Live::No) => {
            if !d.is_empty() {
                caught_up(log, "catch_up_time", d.len(), r);
            }
        }
        (_, Live::Tail) => live_tail(log, live, r),
        (ReplayPace::Original, _) => original(log, r),
        (ReplayPace::Instant, Live::New) => {}
    }
    if let Some(o) = live {
        r.metric(
            "live_publish_rate",
            "msg/s",
            o.publish_rate(),
            Direction::None,
        );
    }
    if v.pace == ReplayPace::Original || v.live != Live::No {
        r.timelines
            .insert(names::DELIVERED.into(), log.timeline.clone());
    }
    r.ledger = replay_ledger(log, live);
    match log.end {
        End::Stalled => r.warnings.push(format!(
            "the replay stopped after {} deliveries: nothing arrived for the drain timeout",
            d.len()
        )),
        End::Interrupted => r
            .warnings
            .push("interrupted: the variant stopped early".into()),
        End::Closed => r
            .warnings
            .push("the consumer's message stream closed before the replay ended".into()),
        End::Reached => {}
    }
    r.warnings
        .extend(log.errors.iter().map(|e| format!("consumer: {e}")));
    if let Some(o) = live {
        r.warnings.extend(o.errors.iter().cloned());
    }
}

/// Catching up with a stream that keeps growing: the first delivery after
/// which the server had nothing more pending is the live tail.
fn live_tail(log: &ReplayLog, live: Option<&DriveOutcome>, r: &mut VariantResult) {
    let d = &log.deliveries;
    let Some(at) = d.iter().position(|x| x.pending == 0) else {
        r.warnings
            .push("the consumer never reached the live tail".into());
        return;
    };
    let tail = d[at].received_ns;
    r.count("caught_up_messages", at as u64 + 1);
    caught_up(log, TIME_TO_LIVE_TAIL, at + 1, r);
    // Once at the tail, a delivery's lag behind its storing is the live
    // end-to-end latency (server clock to jsbench's clock, one host).
    let mut lag = Recorder::new();
    for x in &d[at + 1..] {
        lag.record_between(x.published_ns, x.received_ns);
    }
    r.latency("live_lag", &lag);
    let publishing_ended = live
        .and_then(|o| o.sends.iter().map(|s| s.last_sent_ns).max())
        .unwrap_or(0);
    if tail > publishing_ended {
        r.warnings.push(format!(
            "the consumer reached the tail only after publishing ended ({:.0} ms later): a longer \
             live_duration or a lower live_rate measures catching up with a live stream",
            (tail - publishing_ended) as f64 / 1e6
        ));
    }
}

/// Catching up with the first `n` deliveries: how long from the request
/// (as `name`), with the catch-up rate and throughput, their bytes at the
/// log's mean size.
fn caught_up(log: &ReplayLog, name: &str, n: usize, r: &mut VariantResult) {
    let took = log.deliveries[n - 1]
        .received_ns
        .saturating_sub(log.requested_ns);
    r.ms(name, took);
    let seconds = (took as f64 / 1e9).max(1e-9);
    let bytes = log.bytes as f64 * (n as f64 / log.deliveries.len() as f64);
    r.metrics.extend(rate_and_throughput(
        names::CATCH_UP,
        n as f64 / seconds,
        bytes / seconds,
    ));
}

/// Pacing fidelity of a replay at the original pace.
fn original(log: &ReplayLog, r: &mut VariantResult) {
    let pairs: Vec<(u64, u64)> = log
        .deliveries
        .iter()
        .map(|x| (x.published_ns, x.received_ns))
        .collect();
    let p = pacing::analyse(&pairs);
    if p.messages < 2 {
        return;
    }
    pacing_metrics(&p, r);
    for (late, early, s) in [
        (GAP_ERROR_LATE, GAP_ERROR_EARLY, &p.gap_error),
        ("drift.late", "drift.early", &p.drift),
    ] {
        r.histograms.push((late.into(), s.late().clone()));
        r.histograms.push((early.into(), s.early().clone()));
    }
    r.histograms
        .push(("original_gap".into(), p.original_gaps.clone()));
    let origin = log.deliveries[0].published_ns;
    r.timelines.extend(p.series_timelines(origin));
}

fn pacing_metrics(p: &Pacing, r: &mut VariantResult) {
    if let Some(ratio) = p.duration_ratio() {
        r.metric(DURATION_RATIO, "ratio", ratio, Direction::None);
    }
    for (name, ns) in [
        ("original_span", p.original_span_ns),
        ("replayed_span", p.replayed_span_ns),
    ] {
        r.metric(name, "s", ns as f64 / 1e9, Direction::None);
    }
    r.metrics.extend(signed_metrics(GAP_ERROR, &p.gap_error));
    r.metrics.extend(signed_metrics("drift", &p.drift));
    let drift = p.final_drift_ns as f64;
    r.metrics.push(us(DRIFT_FINAL, drift, Direction::None));
    for (class, errors) in GAP_CLASSES.iter().zip(&p.by_gap) {
        if errors.count() == 0 {
            continue;
        }
        let prefix = format!("{GAP_ERROR_BY_GAP}.{}", class.name);
        r.count(format!("{prefix}.count"), errors.count());
        // Of the signed figures, the median and the magnitudes.
        let kept = [".p50", ".abs_p50", ".abs_p99"];
        let figures = signed_metrics(&prefix, errors).into_iter();
        r.metrics
            .extend(figures.filter(|m| kept.iter().any(|k| m.name.ends_with(k))));
    }
    // The smallest gap reproduced within 1 ms, by the median and by the
    // 99th percentile of each gap class's error.
    for (suffix, q) in [("p50", 0.5), ("p99", 0.99)] {
        if let Some(gap) = p.smallest_gap_within(WITHIN.as_nanos() as u64, q, MIN_CLASS_GAPS) {
            let name = format!("{SMALLEST_GAP_WITHIN_1MS}.{suffix}");
            r.metrics.push(us(name, gap as f64, Direction::Lower));
        }
    }
}

/// The ledger of a replay: what the live publisher stored, what was
/// delivered, how often.
fn replay_ledger(log: &ReplayLog, live: Option<&DriveOutcome>) -> LedgerCounts {
    let mut c = live.map(|o| o.counts).unwrap_or_default();
    let mut times: HashMap<u64, u64> = HashMap::with_capacity(log.deliveries.len());
    for x in &log.deliveries {
        *times.entry(x.seq).or_default() += 1;
    }
    c.deliveries = log.deliveries.len() as u64;
    c.delivered = times.len() as u64;
    c.redelivered = times.values().filter(|&&n| n > 1).count() as u64;
    c.redeliveries = times.values().map(|n| n - 1).sum();
    // A live publisher's ledger has no deliveries: its "lost" is for the
    // replay's invariants to say.
    c.lost = 0;
    c
}
