//! End-to-end latency split where the server stamped the message: a
//! stream's leader takes the stored time stamp as it accepts a message,
//! before writing it (one server) or proposing it to its peers (a
//! cluster: nats-server's `commitSingleMsg` stamps the proposal), and
//! every delivery carries that stamp in its reply subject. So each first
//! delivery's actual-send-to-receipt latency is two hops, measured for
//! every message at no cost to the server:
//!
//! - ingest: the publisher's send (its stamp in the payload) to the
//!   server's time stamp: the client's write, the network, the server's
//!   read and its checks (limits, dedup);
//! - delivery: the time stamp to the consumer's receipt: the write to the
//!   store, on a cluster the replication to a quorum, the pull, the
//!   network back and the client's read.
//!
//! Per message the two add up to the end-to-end latency exactly, so their
//! means add up to its mean (checked: a gap means intervals below zero
//! were clamped, the clocks disagreeing); their percentiles need not add
//! up, and the ratio of the medians' sum to the total's is shown.
//! The time stamp is the server's wall clock, put on this process's
//! clock by [`crate::record::clock::from_wall`]: exact on one host, off
//! by the hosts' offset against a remote server. That offset is bounded
//! by the run itself, as NTP bounds it: a message's ingest hop is its
//! one-way trip plus the offset, its delivery hop the way back minus it,
//! and neither trip is negative, so the offset lies between minus the
//! smallest delivery hop and the smallest ingest hop
//! ([`CLOCK_OFFSET`]). Each hop is off by the offset, so by no more than
//! that interval's farther end from zero.

use crate::drive::DriveOutcome;
use crate::record::histogram::Recorder;
use crate::record::metrics::Direction;
use crate::variant::VariantResult;

/// The two hops' histograms, each also reported as `<name>.p50` ...
pub const INGEST_LATENCY: &str = "ingest_latency";
pub const DELIVER_LATENCY: &str = "deliver_latency";
/// The hops' means added, over the end-to-end mean (actual send): 1.0
/// within the histograms' precision, since each message's hops add up to
/// its latency. Anything else means the split is not of the same
/// messages, or intervals below zero (the two clocks disagreeing) were
/// recorded as zero.
pub const MEAN_SUM_RATIO: &str = "hops_mean_sum_ratio";
/// The hops' medians added, over the end-to-end median: near 1 when one
/// hop is steady; shown, not checked (medians of parts need not add up).
pub const MEDIAN_SUM_RATIO: &str = "hops_median_sum_ratio";

/// The server's clock minus this one, as the fastest messages bound it:
/// `<name>.low` and `<name>.high`, in µs.
pub const CLOCK_OFFSET: &str = "hops_clock_offset";

/// How far the means may add up from the end-to-end mean: three
/// significant digits per histogram value, so well under this.
const MEAN_SUM_TOLERANCE: f64 = 0.01;

pub fn measure(o: &DriveOutcome, r: &mut VariantResult) {
    let (mut ingest, mut deliver) = (Recorder::new(), Recorder::new());
    for c in &o.consumers {
        ingest.merge(&c.ingest);
        deliver.merge(&c.deliver);
    }
    let (i, d) = (ingest.summary(), deliver.summary());
    let total = o.e2e_sent.summary();
    if i.count == 0 || total.count == 0 {
        r.warnings.push(
            "hops: no first delivery carried the server's stored time stamp, so end-to-end \
             latency was not split"
                .into(),
        );
        return;
    }
    let ratio = |a: f64, b: f64, t: f64| (a + b) / t.max(f64::MIN_POSITIVE);
    let mean_ratio = ratio(i.mean_us, d.mean_us, total.mean_us);
    if let Some(w) = mean_sum_warning(mean_ratio, i.mean_us, d.mean_us, total.mean_us) {
        r.warnings.push(w);
    }
    r.latency_kept(INGEST_LATENCY, &ingest);
    r.latency_kept(DELIVER_LATENCY, &deliver);
    for (name, value) in [
        (MEAN_SUM_RATIO, mean_ratio),
        (MEDIAN_SUM_RATIO, ratio(i.p50_us, d.p50_us, total.p50_us)),
    ] {
        r.metric(name, "ratio", value, Direction::None);
    }
    if let (Some(fastest_in), Some(fastest_out)) = (ingest.least_ns(), deliver.least_ns()) {
        let (low, high) = (-fastest_out as f64 / 1e3, fastest_in as f64 / 1e3);
        r.metric(format!("{CLOCK_OFFSET}.low"), "us", low, Direction::None);
        r.metric(format!("{CLOCK_OFFSET}.high"), "us", high, Direction::None);
        if low > 0.0 || high < 0.0 {
            r.warnings.push(format!(
                "hops: the server's clock is {low:+.0} to {high:+.0} us off this host's (bounded \
                 by the fastest ingest and delivery hops); ingest and delivery hops are each off \
                 by that much, in opposite directions, and end-to-end latency is not"
            ));
        }
    }
}

/// A warning when the hops' means add up to more than
/// [`MEAN_SUM_TOLERANCE`] away from the end-to-end mean.
fn mean_sum_warning(ratio: f64, ingest: f64, deliver: f64, total: f64) -> Option<String> {
    ((ratio - 1.0).abs() > MEAN_SUM_TOLERANCE).then(|| {
        format!(
            "hops: ingest mean {ingest:.1} us + delivery mean {deliver:.1} us = {:.1} us against \
             {total:.1} us end to end ({:+.1}%): the split is not of the same messages, or \
             intervals below zero were recorded as zero (the server's and this host's clocks \
             disagree: a remote server)",
            ingest + deliver,
            (ratio - 1.0) * 100.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn means_that_add_up_pass_and_a_gap_is_named() {
        assert_eq!(mean_sum_warning(1.005, 60.0, 40.5, 100.0), None);
        let w = mean_sum_warning(0.9, 50.0, 40.0, 100.0).expect("a 10% gap is named");
        assert!(w.contains("-10.0%") && w.contains("clocks"), "{w}");
    }

    /// One message sent at 0, stamped by the server at `stamped_ns` and
    /// received at 100 µs, split and measured.
    fn split(stamped_ns: Option<u64>) -> VariantResult {
        let mut o = DriveOutcome::settled(2);
        let mut c = crate::consume::ConsumerReport::empty(
            &crate::consume::ConsumerConfig::acking_all("S", 2, 0),
        );
        if let Some(stamped) = stamped_ns {
            c.ingest.record_between(0, stamped);
            c.deliver.record_between(stamped, 100_000);
        }
        o.e2e_sent.record_between(0, 100_000);
        o.consumers.push(c);
        let mut r = VariantResult::new("t");
        measure(&o, &mut r);
        r
    }

    /// A server whose clock runs 3 ms ahead of this host's: every ingest
    /// hop reads 3 ms too long and every delivery hop below zero. The
    /// fastest of each bound the offset, and the run says so.
    #[test]
    fn the_clocks_offset_is_bounded_by_the_fastest_hops_and_named() {
        let ahead = 3_000_000u64;
        let mut o = DriveOutcome::settled(2);
        let mut c = crate::consume::ConsumerReport::empty(
            &crate::consume::ConsumerConfig::acking_all("S", 2, 0),
        );
        for (sent, one_way_in, one_way_out) in [(0, 20_000, 80_000), (1_000_000, 35_000, 60_000)] {
            let stamped = sent + one_way_in + ahead;
            let received = sent + one_way_in + one_way_out;
            c.ingest.record_between(sent, stamped);
            c.deliver.record_between(stamped, received);
            o.e2e_sent.record_between(sent, received);
        }
        o.consumers.push(c);
        let mut r = VariantResult::new("t");
        measure(&o, &mut r);
        let value = |n: &str| r.metrics.iter().find(|m| m.name == n).map(|m| m.value);
        let (low, high) = (
            value("hops_clock_offset.low").expect("a lower bound"),
            value("hops_clock_offset.high").expect("an upper bound"),
        );
        // The truth, 3,000 us, between 3,000 − 60 and 3,000 + 20.
        assert_eq!((low.round(), high.round()), (2_940.0, 3_020.0));
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("+2940 to +3020 us off")),
            "{:?}",
            r.warnings
        );
        // One host: the bound holds zero and nothing is said.
        let r = split(Some(30_000));
        let value = |n: &str| r.metrics.iter().find(|m| m.name == n).map(|m| m.value);
        assert_eq!(value("hops_clock_offset.low"), Some(-70.0));
        assert_eq!(value("hops_clock_offset.high"), Some(30.0));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }

    #[test]
    fn each_first_delivery_splits_into_hops_that_add_up_to_it() {
        let r = split(Some(30_000));
        let value = |n: &str| r.metrics.iter().find(|m| m.name == n).map(|m| m.value);
        assert_eq!(value("ingest_latency.p50").map(|v| v.round()), Some(30.0));
        assert_eq!(value("deliver_latency.p50").map(|v| v.round()), Some(70.0));
        for name in [MEAN_SUM_RATIO, MEDIAN_SUM_RATIO] {
            let ratio = value(name).expect("the ratio");
            assert!((ratio - 1.0).abs() < 0.01, "{name} {ratio}");
        }
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        // A delivery hop clamped at zero (stamped after its receipt, as a
        // server clock ahead of this one would show) breaks the means' sum.
        let r = split(Some(130_000));
        assert!(
            r.warnings.iter().any(|w| w.contains("+30.0%")),
            "{:?}",
            r.warnings
        );
        // Without a time stamp there is nothing to split, and it says so.
        let r = split(None);
        assert!(r.warnings[0].contains("not split"), "{:?}", r.warnings);
    }
}
