//! Charts of latency, throughput and rate sweeps. Each chart function keys
//! on histogram, timeline and metric names, not on the scenario kind, so any
//! future scenario that records `e2e_latency` or a `published` timeline gets
//! these charts for free.

use super::axis::NINES_RANGE;
use super::{Axis, Chart, Scale, Series, Stroke, Unit, per_variant, span};
use crate::profile::parse_duration;
use crate::record::histogram::Recorder;
use crate::record::names;
use crate::record::timeline::Timeline;
use crate::report::data::ScenarioData;
use crate::results::summary::VariantReport;
use crate::scenario::table::ChartSpec;

/// Points per percentile curve: smooth at 960 px, cheap to draw.
const CURVE_POINTS: usize = 160;

/// One histogram to draw per variant, and how it is told apart from its
/// siblings on the same chart: (histogram, appended to the variant name in
/// the legend ("intended send"), dashed), as a kind's [`ChartSpec`] names it.
pub type Family<'a> = (&'a str, &'a str, bool);

/// The latency charts of every scenario that records their histograms,
/// drawn as a kind's own ([`of_specs`]): the distributions of end-to-end
/// and PubAck latency (from the intended send solid, from the actual send
/// dashed: the two must stay distinguishable on every chart) and of the
/// send lag, then the end-to-end latency's p50, p99 and max per second.
pub const COMMON: &[ChartSpec] = &[
    ChartSpec::Percentiles {
        stem: names::E2E_LATENCY,
        title: "End-to-end latency by percentile",
        caption: "Publish to receipt, per variant (one colour each). Solid: from the intended send \
         time (corrected for coordinated omission: includes any delay of the load generator); \
         dashed: from the actual send time.",
        families: &[
            (names::E2E_LATENCY, "intended send", false),
            (names::E2E_LATENCY_ACTUAL, "actual send", true),
        ],
    },
    ChartSpec::Percentiles {
        stem: names::PUB_ACK_LATENCY,
        title: "PubAck latency by percentile",
        caption: "Publish to the server's acknowledgement (the message is persisted), per variant. \
         Solid: from the intended send time; dashed: from the actual send time.",
        families: &[
            (names::PUB_ACK_LATENCY, "intended send", false),
            (names::PUB_ACK_LATENCY_ACTUAL, "actual send", true),
        ],
    },
    ChartSpec::Percentiles {
        stem: names::SEND_LAG,
        title: "Load generator send lag by percentile",
        caption: "Actual minus intended send time of each message: how far the open-loop generator \
         ran behind its schedule. Large values mean the intended-send latencies above include \
         the generator's own delay.",
        families: &[(names::SEND_LAG, "", false)],
    },
    ChartSpec::PerSecond {
        histogram: names::E2E_LATENCY,
        title: "End-to-end",
        measured: "end-to-end latencies (from the intended send)",
    },
];

/// p50, p99 or max (`key`) of each second of a latency, per variant
/// (the `<histogram>.*_us` timelines [`crate::variant::VariantResult::add_per_second`]
/// writes from the interval histograms): one chart each. `title` names
/// the latency, `measured` says from which instant to which.
fn per_second(
    s: &ScenarioData,
    (histogram, title, measured): (&str, &str, &str),
    key: &str,
) -> Option<Chart> {
    super::server::over_time(
        s,
        &names::per_second(histogram, key),
        &format!("{title} {key} per second"),
        &format!("{key} of each second (us)"),
        &format!(
            "The {key} of each second's {measured}, per variant: a latency that changes \
             during a run shows here, where the whole-run percentiles average it away. Every \
             second's histogram is in histograms/*.hlog (HdrHistogram interval log)."
        ),
    )
}

/// The charts `specs` declare ([`COMMON`], or a kind's own), drawn by the
/// builders every chart shares.
pub fn of_specs(s: &ScenarioData, specs: &[ChartSpec]) -> Vec<Chart> {
    let mut charts = Vec::new();
    for spec in specs {
        match *spec {
            ChartSpec::Percentiles {
                stem,
                title,
                caption,
                families,
            } => charts.extend(percentile_chart(s, stem, title, caption, families)),
            ChartSpec::PerSecond {
                histogram,
                title,
                measured,
            } => {
                for key in ["p50", "p99", "max"] {
                    charts.extend(per_second(s, (histogram, title, measured), key));
                }
            }
        }
    }
    charts
}

/// A latency distribution on a nines axis, one colour per variant and one
/// line per family. `None` when no variant recorded any of the histograms.
pub fn percentile_chart(
    s: &ScenarioData,
    key: &str,
    title: &str,
    caption: &str,
    families: &[Family],
) -> Option<Chart> {
    let series = per_variant(s, families, |v, h| s.histogram(v, h).map(percentile_curve));
    let x = Axis::new("percentile", Scale::Nines, Unit::Quantile);
    Chart::of(s, key, title, caption, (x, latency_axis()), series)
}

/// Latency up the side, on a log scale.
fn latency_axis() -> Axis {
    Axis::new("latency (log scale)", Scale::Log, Unit::Micros)
}

/// (quantile, µs) from the 50th to the 99.99th percentile, evenly spaced on
/// the nines axis.
pub fn percentile_curve(h: &Recorder) -> Vec<(f64, f64)> {
    let nines = Scale::Nines;
    let (a, b) = (nines.forward(NINES_RANGE.0), nines.forward(NINES_RANGE.1));
    (0..CURVE_POINTS)
        .map(|i| {
            let t = a + (b - a) * i as f64 / (CURVE_POINTS - 1) as f64;
            let q = nines.inverse(t);
            (q, h.quantile(q) as f64 / 1_000.0)
        })
        .collect()
}

/// Published and delivered messages per second over each variant's run,
/// warm-up included (marked).
pub fn throughput_over_time(s: &ScenarioData) -> Option<Chart> {
    let families = [
        (names::PUBLISHED, names::PUBLISHED, false),
        (names::DELIVERED, names::DELIVERED, true),
    ];
    let series = per_variant(s, &families, |v, name| {
        v.timelines
            .get(name)
            .filter(|t| t.total() > 0)
            .map(rate_points)
    });
    let top = span(&series, |p| p.1).1;
    let warmup = common_warmup(s.variants())
        .map(|w| Series::reference("end of warm-up", vec![(w, 0.0), (w, top)]));
    let y = Axis::new("messages per second", Scale::Linear, Unit::Number);
    let chart = Chart::of(
        s,
        "throughput",
        "Throughput over time",
        "Messages published (solid) and delivered to consumers (dashed) in each second of each \
         variant, from its first scheduled send; the last second of a run may be partial, and \
         deliveries after the last publish are the drain.",
        (Axis::time(), y),
        series,
    );
    chart.map(|c| c.with(warmup))
}

/// Events per second as steps: each bucket a flat segment over its own
/// time span, since a count covers the whole bucket (a line through
/// midpoints would invent a slope inside it).
pub fn rate_points(t: &Timeline) -> Vec<(f64, f64)> {
    let bucket_s = t.bucket_ns as f64 / 1e9;
    if bucket_s <= 0.0 {
        return Vec::new();
    }
    t.counts
        .iter()
        .enumerate()
        .flat_map(|(i, &c)| {
            let rate = c as f64 / bucket_s;
            [
                (i as f64 * bucket_s, rate),
                ((i + 1) as f64 * bucket_s, rate),
            ]
        })
        .collect()
}

/// The warm-up all variants share, in seconds, if they have one.
fn common_warmup(variants: &[VariantReport]) -> Option<f64> {
    let mut warmups = variants.iter().map(|v| {
        v.params
            .get("warmup")
            .and_then(|w| w.as_str())
            .and_then(|w| parse_duration(w).ok())
            .map(|d| d.as_secs_f64())
    });
    let first = warmups.next()??;
    (first > 0.0 && warmups.all(|w| w == Some(first))).then_some(first)
}

/// Latency percentiles against achieved rate, one point per variant: where
/// the latency knee of a rate sweep is.
pub fn latency_vs_throughput(s: &ScenarioData) -> Option<Chart> {
    sweep_chart(
        s,
        "latency_vs_throughput",
        "Latency vs throughput",
        "End-to-end latency from the intended send time at each variant's achieved publish \
         rate; one point per variant. Dashed, marked core: the same schedule over core NATS \
         with no stream (core_baseline), what the transport alone takes.",
        (names::PUBLISH.rate, "achieved publish rate", "msg/s"),
        &[
            ("p50", Stroke::Solid),
            ("p99", Stroke::Solid),
            ("p99.9", Stroke::Solid),
            ("max", Stroke::Dashed),
        ]
        .map(|(q, stroke)| (names::quantile(names::E2E_LATENCY, q), q, stroke)),
    )
}

/// Metrics (µs) against another metric (name, axis label, unit) across
/// variants; `None` unless at
/// least two variants carry both, since one point is not a curve.
pub fn sweep_chart(
    s: &ScenarioData,
    key: &str,
    title: &str,
    caption: &str,
    x: (&str, &str, &str),
    lines: &[(String, &str, Stroke)],
) -> Option<Chart> {
    // A core baseline's variants make curves of their own, dashed.
    let (core, jetstream): (Vec<VariantReport>, Vec<VariantReport>) = s
        .variants()
        .iter()
        .cloned()
        .partition(|v| v.params.contains_key("transport"));
    let series: Vec<Series> = [(&jetstream, ""), (&core, "core ")]
        .into_iter()
        .flat_map(|(variants, prefix)| {
            lines
                .iter()
                .enumerate()
                .filter_map(move |(i, (metric, label, stroke))| {
                    let points = sweep_points(variants, x.0, metric);
                    let stroke = if prefix.is_empty() {
                        *stroke
                    } else {
                        Stroke::Dashed
                    };
                    let line = Series::line(format!("{prefix}{label}"), points, i, stroke);
                    (line.points.len() >= 2).then(|| line.marked())
                })
        })
        .collect();
    let (lo, hi) = span(&series, |p| p.0);
    // Sweeps that span decades read best on a log axis.
    let x = if lo > 0.0 && hi / lo >= 10.0 {
        Axis::new(
            format!("{} ({}, log scale)", x.1, x.2),
            Scale::Log,
            Unit::Number,
        )
    } else {
        Axis::new(format!("{} ({})", x.1, x.2), Scale::Linear, Unit::Number)
    };
    Chart::of(s, key, title, caption, (x, latency_axis()), series)
}

/// (x metric, y metric) of every variant that has both, sorted by x.
pub fn sweep_points(variants: &[VariantReport], x: &str, y: &str) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = variants
        .iter()
        .filter(|v| v.error.is_none())
        .filter_map(|v| Some((v.metric(x)?.value, v.metric(y)?.value)))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}
