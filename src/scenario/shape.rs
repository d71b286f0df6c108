//! Load shapes as a variant reports them: the arrival it ran (beside its
//! rate), and for a step load each step's latency, read from the
//! per-second histograms. Shared by every paced scenario.

use crate::profile::{ArrivalPlan, CommonPlan, format_duration};
use crate::record::histogram::Recorder;
use crate::record::metrics::Direction;
use crate::variant::{Part, VariantResult};

/// Records a paced load's rate and how long it ran, and its arrival
/// beside them when it is not steady.
pub fn describe(rate: u64, arrival: &ArrivalPlan, common: &CommonPlan, r: &mut VariantResult) {
    r.param("rate", rate);
    r.param("duration", format_duration(common.duration));
    describe_arrival(arrival, r);
}

/// Records an arrival other than steady among the variant's parameters.
pub fn describe_arrival(arrival: &ArrivalPlan, r: &mut VariantResult) {
    if !arrival.is_steady() {
        r.param("arrival", arrival.to_string());
    }
}

/// With `arrival = { pattern = "steps", ... }`: each step's end-to-end
/// latency, every latency counted in the step its message was meant to be
/// sent in (by the second of its intended send: a schedule starts on a
/// whole second, so steps of whole seconds split exactly; an overloaded
/// step's backlog, received in later steps or in the drain, stays its
/// own), as a parts row and a `step<i>.e2e_latency.p99` metric. With
/// `one_per_message` (one latency per message sent after `record_from_ns`),
/// a step holding fewer than its rate times its length is warned about:
/// its missing messages (never received, or later than the drain) would
/// have been its slowest.
pub fn per_step(
    e2e: &Recorder,
    (t0_ns, record_from_ns): (u64, u64),
    one_per_message: bool,
    arrival: &ArrivalPlan,
    r: &mut VariantResult,
) {
    let ArrivalPlan::Steps(steps) = arrival else {
        return;
    };
    let mut spans = Vec::new();
    let mut start = t0_ns;
    for (_, length) in steps {
        let end = start + length.as_nanos() as u64;
        spans.push((start, end));
        start = end;
    }
    let split = e2e.split_by_start(&spans);
    for (i, ((rate, length), (h, &(start, end)))) in
        steps.iter().zip(split.iter().zip(&spans)).enumerate()
    {
        let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
        let mut part = Part::new(
            "step",
            &format!("{}: {rate}/s for {}", i + 1, format_duration(*length)),
        );
        part.set("rate", rate);
        part.set("starts_s", (start - t0_ns) as f64 / 1e9);
        part.set("latencies", h.len());
        part.set("e2e_p50_us", us(h.value_at_quantile(0.5)));
        part.set("e2e_p99_us", us(h.value_at_quantile(0.99)));
        part.set("e2e_max_us", us(h.max()));
        if !h.is_empty() {
            r.metric(
                format!("step{}.e2e_latency.p99", i + 1),
                "us",
                us(h.value_at_quantile(0.99)),
                Direction::Lower,
            );
        }
        let recorded_ns = end.saturating_sub(start.max(record_from_ns));
        let due = rate * recorded_ns / 1_000_000_000;
        if one_per_message && h.len() < due {
            r.warnings.push(format!(
                "step {}: {} latencies of the {due} messages its rate and length call for: the \
                 missing ones (never received, or after the drain) would have been its slowest, \
                 so its p99 is understated",
                i + 1,
                h.len()
            ));
        }
        r.parts.push(part);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const S: u64 = 1_000_000_000;

    /// Two steps of 2 s from second 100: 1,000/s, then 10/s.
    fn steps() -> ArrivalPlan {
        ArrivalPlan::Steps(vec![
            (1_000, Duration::from_secs(2)),
            (10, Duration::from_secs(2)),
        ])
    }

    fn p99_us(r: &VariantResult, step: usize) -> Option<f64> {
        let name = format!("step{step}.e2e_latency.p99");
        r.metrics.iter().find(|m| m.name == name).map(|m| m.value)
    }

    #[test]
    fn an_overloaded_steps_backlog_counts_in_that_step() {
        let t0 = 100 * S;
        let mut e2e = Recorder::with_start_intervals();
        // Step 1 overloaded: its 2,000 messages arrive 2.5 s late, during
        // step 2 and after it.
        for k in 0..2_000u64 {
            let intended = t0 + k * S / 1_000;
            e2e.record_between(intended, intended + 2_500_000_000);
        }
        // Step 2's 20 messages arrive within a millisecond.
        for k in 0..20u64 {
            let intended = t0 + 2 * S + k * S / 10;
            e2e.record_between(intended, intended + 1_000_000);
        }
        let mut r = VariantResult::new("steps");
        per_step(&e2e, (t0, t0), true, &steps(), &mut r);
        let first = p99_us(&r, 1).expect("step 1 has its latencies");
        assert!((first - 2_500_000.0).abs() < 50_000.0, "{first}");
        let second = p99_us(&r, 2).unwrap();
        assert!(second < 2_000.0, "{second}");
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }

    #[test]
    fn a_step_short_of_its_messages_is_warned_about() {
        let t0 = 100 * S;
        let mut e2e = Recorder::with_start_intervals();
        // One of step 1's messages never arrived.
        for k in 1..2_000u64 {
            let intended = t0 + k * S / 1_000;
            e2e.record_between(intended, intended + 1_000_000);
        }
        for k in 0..20u64 {
            let intended = t0 + 2 * S + k * S / 10;
            e2e.record_between(intended, intended + 1_000_000);
        }
        let mut r = VariantResult::new("steps");
        per_step(&e2e, (t0, t0), true, &steps(), &mut r);
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(r.warnings[0].contains("step 1"), "{}", r.warnings[0]);
    }
}
