//! Load shapes as a variant reports them: the arrival it ran (beside its
//! rate), and for a step load each step's latency, read from the
//! per-second histograms. Shared by every paced scenario.

use crate::profile::{ArrivalPlan, format_duration};
use crate::record::histogram::Recorder;
use crate::record::metrics::{Direction, Metric};
use crate::variant::{Part, VariantResult};

/// Records an arrival other than steady among the variant's parameters.
pub fn describe(arrival: &ArrivalPlan, r: &mut VariantResult) {
    if !arrival.is_steady() {
        r.param("arrival", arrival.to_string());
    }
}

/// With `arrival = { pattern = "steps", ... }`: each step's end-to-end
/// latency, from the interval histograms (each second counted in the step
/// it began in), as a parts row and a `step<i>.e2e_latency.p99` metric.
pub fn per_step(e2e: &Recorder, t0_ns: u64, arrival: &ArrivalPlan, r: &mut VariantResult) {
    let ArrivalPlan::Steps(steps) = arrival else {
        return;
    };
    let mut start = t0_ns;
    for (i, (rate, length)) in steps.iter().enumerate() {
        let end = start + length.as_nanos() as u64;
        let h = e2e.seconds_between(start, end);
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
            r.metrics.push(Metric::new(
                format!("step{}.e2e_latency.p99", i + 1),
                "us",
                us(h.value_at_quantile(0.99)),
                Direction::Lower,
            ));
        }
        r.parts.push(part);
        start = end;
    }
}
