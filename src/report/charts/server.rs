//! The server's side of each variant over time, from the telemetry its
//! monitoring endpoints gave (`server.mem_mb`, `server.cpu_pct`
//! timelines): what the load cost the server while the latency charts show
//! what the clients saw. Scenarios run without an endpoint have none.

use crate::record::timeline::Timeline;
use crate::report::data::ScenarioData;

use super::{Axis, Chart, ONE, Scale, Series, Unit, per_variant};
use crate::server::telemetry::{SERVER_CPU_PCT, SERVER_MEM_MB};

/// A gauge timeline as points at each sample's time (buckets that got no
/// sample are left out rather than drawn as zero).
fn gauge_points(t: &Timeline) -> Vec<(f64, f64)> {
    let bucket_s = t.bucket_ns as f64 / 1e9;
    t.counts
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0)
        .map(|(i, &v)| (i as f64 * bucket_s, v as f64))
        .collect()
}

pub(super) fn over_time(
    s: &ScenarioData,
    key: &str,
    what: &str,
    unit_label: &str,
    caption: &str,
) -> Option<Chart> {
    let series = per_variant(s, ONE, |v, ()| {
        let points = gauge_points(v.timelines.get(key)?);
        (points.len() > 1).then_some(points)
    });
    let series: Vec<Series> = series.into_iter().map(Series::marked).collect();
    let y = Axis::new(unit_label, Scale::Linear, Unit::Number);
    let stem = key.replace('.', "_");
    Chart::of(
        s,
        &stem,
        &format!("{what} over time"),
        caption,
        (Axis::time(), y),
        series,
    )
}

/// The servers' resident memory (summed over a cluster's nodes), sampled
/// from /varz `mem`.
pub fn memory(s: &ScenarioData) -> Option<Chart> {
    over_time(
        s,
        SERVER_MEM_MB,
        "Server memory",
        "resident memory (MB)",
        "nats-server's resident memory as its /varz reports it, every 500 ms of each variant \
         (summed over the nodes of a cluster): what the load cost the server in memory. \
         summary.json has the peak as server_peak_mem.",
    )
}

/// The servers' CPU (summed over nodes), sampled from /varz `cpu`.
pub fn cpu(s: &ScenarioData) -> Option<Chart> {
    over_time(
        s,
        SERVER_CPU_PCT,
        "Server CPU",
        "CPU (% of one core)",
        "nats-server's CPU as its /varz reports it (100% is one core; summed over the nodes of \
         a cluster), every 500 ms of each variant. server_cpu_per_msg in summary.json divides \
         the server's CPU time over the publishing span by the messages stored.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_skip_unsampled_buckets() {
        let t = Timeline {
            origin_ns: 0,
            bucket_ns: 100_000_000,
            counts: vec![30, 0, 60],
        };
        assert_eq!(gauge_points(&t), [(0.0, 30.0), (0.2, 60.0)]);
    }
}
