//! Ingest refined into its hops on a sample of messages, from the trace
//! events the servers sent for them ([`crate::drive::trace`],
//! `trace_every`): client to ingress, the route between servers (a
//! cluster), and ingress to stored.
//!
//! The hops are of the sampled messages only and, per message, only
//! server times and the send time are known (not the stored time stamp),
//! so they are set against every message's stamp-based ingest hop
//! ([`super::hops`]) by their means: [`SUM_VS_INGEST`]. On one server the
//! `js` event's time is taken where the stored time stamp is, so the
//! ratio is near 1; on a cluster the leader sends `js` after the raft
//! commit while the stamp is taken at proposal, so the traced sum also
//! holds the replication and the ratio is above 1.

use crate::drive::DriveOutcome;
use crate::drive::trace::TraceOutcome;
use crate::record::histogram::Recorder;
use crate::record::metrics::Direction;
use crate::variant::{Invariant, VariantResult};

/// The traced hops' histograms, each also reported as `<name>.p50` ...
pub const CLIENT_TO_INGRESS: &str = "trace_client_to_ingress";
pub const ROUTE: &str = "trace_route";
pub const INGRESS_TO_STORED: &str = "trace_ingress_to_stored";
/// Messages sent with `Nats-Trace-Dest`.
pub const SAMPLED: &str = "trace_sampled";
/// The traced hops' means added, over `ingest_latency`'s mean.
pub const SUM_VS_INGEST: &str = "trace_sum_vs_ingest";
/// The invariant's name.
pub const EVERY_SAMPLE_TRACED: &str = "every sampled message traced";

/// The hops' metrics and the completeness check; `trace_every` 0 says why
/// the check does not apply.
pub fn measure(o: &DriveOutcome, trace_every: u64, r: &mut VariantResult) {
    let Some(t) = o.trace.as_ref().filter(|_| trace_every > 0) else {
        r.invariants.push(Invariant::not_applicable(
            EVERY_SAMPLE_TRACED,
            "trace_every is 0: no message was sent with Nats-Trace-Dest",
        ));
        return;
    };
    r.invariants.push(completeness(t));
    r.metric(SAMPLED, "msgs", t.traced as f64, Direction::None);
    let mut sum_us = 0.0;
    for (name, recorder) in [
        (CLIENT_TO_INGRESS, &t.client_to_ingress),
        (ROUTE, &t.route),
        (INGRESS_TO_STORED, &t.ingress_to_stored),
    ] {
        if recorder.count() == 0 {
            // No route on one server: nothing to show rather than zeros.
            continue;
        }
        sum_us += recorder.summary().mean_us;
        r.latency(name, recorder);
    }
    let mut ingest = Recorder::new();
    for c in &o.consumers {
        ingest.merge(&c.ingest);
    }
    let ingest_us = ingest.summary().mean_us;
    if ingest.count() > 0 && t.client_to_ingress.count() > 0 && ingest_us > 0.0 {
        r.metric(SUM_VS_INGEST, "ratio", sum_us / ingest_us, Direction::None);
    }
}

/// Every traced send brought an `in` and a `js` event, and none was
/// unreadable.
fn completeness(t: &TraceOutcome) -> Invariant {
    let mut detail = format!(
        "{} traced, {} complete, {} incomplete, {} malformed",
        t.traced, t.complete, t.incomplete, t.malformed
    );
    if let Some(m) = &t.first_malformed {
        detail.push_str(&format!(" (first: {m})"));
    }
    Invariant::check(
        EVERY_SAMPLE_TRACED,
        t.complete == t.traced && t.malformed == 0,
        detail,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(traced: u64, complete: u64) -> DriveOutcome {
        let mut o = DriveOutcome::settled(1);
        let mut t = TraceOutcome {
            traced,
            complete,
            incomplete: traced - complete,
            ..TraceOutcome::default()
        };
        t.client_to_ingress.record_between(0, 20_000);
        t.ingress_to_stored.record_between(20_000, 50_000);
        o.trace = Some(t);
        let mut c = crate::consume::ConsumerReport::empty(
            &crate::consume::ConsumerConfig::acking_all("S", 2, 0),
        );
        c.ingest.record_between(0, 50_000);
        o.consumers.push(c);
        o
    }

    #[test]
    fn a_sampled_message_without_its_events_fails_the_check() {
        let mut r = VariantResult::new("t");
        measure(&outcome(10, 10), 10, &mut r);
        assert!(r.broken().is_empty(), "{:?}", r.invariants);
        let value = |n: &str| r.metrics.iter().find(|m| m.name == n).map(|m| m.value);
        let ratio = value(SUM_VS_INGEST).expect("the ratio");
        assert!((ratio - 1.0).abs() < 0.01, "{ratio}");
        assert_eq!(value(SAMPLED), Some(10.0));
        assert!(value("trace_route.p50").is_none(), "no route on one server");

        let mut r = VariantResult::new("t");
        measure(&outcome(10, 9), 10, &mut r);
        assert_eq!(r.broken(), [EVERY_SAMPLE_TRACED]);

        let mut r = VariantResult::new("t");
        measure(&outcome(10, 10), 0, &mut r);
        assert!(r.broken().is_empty());
        assert!(r.metrics.is_empty());
    }
}
