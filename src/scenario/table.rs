//! What a scenario's output shows, as data: each kind names its terminal
//! columns and its charts (its registry row carries them, by the metric
//! and histogram names its module writes) and writes its own lines under
//! the table from a recorded variant's figures; the report renders them,
//! so a column and the figure it shows cannot drift apart in silence.

use crate::record::names::{E2E_LATENCY, PUB_ACK_LATENCY, PUBLISH, TARGET_RATE};

/// One column: its header, and what each variant's cell holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Column {
    pub header: &'static str,
    pub cell: Cell,
}

/// What a cell holds. A cell whose figure a variant lacks shows `-`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell {
    /// The variant's name.
    Variant,
    /// Messages the server lost, and those the client dropped.
    Lost,
    /// ok, FAILED or ERROR.
    Verdict,
    /// A metric.
    Metric(&'static str, Show),
    /// One quantile (`p50`, `max`, ...) of a latency histogram.
    Quantile(&'static str, &'static str, Show),
    /// The first of these metrics the variant has.
    FirstOf(&'static [&'static str], Show),
    /// Counts joined by a separator (`3/1/2`, `4+1`), when all are there.
    Counts(&'static [&'static str], &'static str),
    /// A count and, in brackets, a part of it: `12 (3)`.
    CountAndPart(&'static str, &'static str),
    /// A parameter as recorded.
    Param(&'static str),
}

/// How a number reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// Microseconds on a µs-to-seconds scale.
    Us,
    /// Signed microseconds (early is negative).
    SignedUs,
    /// Milliseconds, on the µs-to-seconds scale of the latencies.
    Ms,
    /// A count, without decimals.
    Whole,
    /// msg/s, in thousands from 10k.
    Rate,
    /// A plain number with this many decimals.
    Decimals(usize),
    /// A factor: `x1.23`, this many decimals.
    Times(usize),
    /// A ratio as a percentage.
    Percent,
    /// µs of CPU per message, two decimals.
    MicrosPerMsg,
}

pub const VARIANT: Column = Column::new("variant", Cell::Variant);
pub const TARGET: Column = Column::metric("target/s", TARGET_RATE, Show::Rate);
pub const ACHIEVED: Column = Column::metric("achieved/s", PUBLISH.rate, Show::Rate);
pub const LOST: Column = Column::new("lost", Cell::Lost);
pub const VERDICT: Column = Column::new("verdict", Cell::Verdict);

/// `header` over one quantile of a latency histogram, in µs.
impl Column {
    pub const fn new(header: &'static str, cell: Cell) -> Column {
        Column { header, cell }
    }

    /// A metric's value, shown as `show`.
    pub const fn metric(header: &'static str, metric: &'static str, show: Show) -> Column {
        Column::new(header, Cell::Metric(metric, show))
    }

    /// A variant parameter, as written.
    pub const fn param(header: &'static str, param: &'static str) -> Column {
        Column::new(header, Cell::Param(param))
    }
}

pub const fn quantile(header: &'static str, histogram: &'static str, q: &'static str) -> Column {
    Column::new(header, Cell::Quantile(histogram, q, Show::Us))
}

/// A paced load's table: the rate asked and achieved, end-to-end latency
/// from the intended send, the PubAck's. Also what a results folder of a
/// kind this build does not know is shown with.
pub const PACED: &[Column] = &[
    VARIANT,
    TARGET,
    ACHIEVED,
    quantile("e2e p50", E2E_LATENCY, "p50"),
    quantile("p90", E2E_LATENCY, "p90"),
    quantile("p99", E2E_LATENCY, "p99"),
    quantile("p99.9", E2E_LATENCY, "p99.9"),
    quantile("max", E2E_LATENCY, "max"),
    quantile("pubAck p50", PUB_ACK_LATENCY, "p50"),
    quantile("p99", PUB_ACK_LATENCY, "p99"),
    LOST,
    VERDICT,
];

impl Show {
    /// A number as a column shows it.
    pub fn format(self, x: f64) -> String {
        match self {
            Show::Us => format_us(x),
            Show::SignedUs => {
                let sign = if x < 0.0 { "-" } else { "+" };
                format!("{sign}{}", format_us(x.abs()))
            }
            Show::Ms => format_us(x * 1e3),
            Show::Whole => format!("{x:.0}"),
            Show::Rate => match x >= 10_000.0 {
                true => format!("{:.1}k", x / 1_000.0),
                false => format!("{x:.0}"),
            },
            Show::Decimals(n) => format!("{x:.n$}"),
            Show::Times(n) => format!("x{x:.n$}"),
            Show::Percent => format!("{:.0}%", x * 100.0),
            Show::MicrosPerMsg => format!("{x:.2}us"),
        }
    }
}

/// Formats microseconds with a unit that keeps three significant digits.
pub fn format_us(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.0}us")
    } else if us < 1_000_000.0 {
        format!("{:.2}ms", us / 1_000.0)
    } else {
        format!("{:.2}s", us / 1_000_000.0)
    }
}

/// A recorded variant's figures, as a kind's lines under its table read
/// them (the report layer holds the variant).
pub trait Figures {
    /// The metric `name`'s value, when the variant has it.
    fn value(&self, name: &str) -> Option<f64>;

    /// The metric as a column shows it, `-` when the variant lacks it.
    fn shown(&self, name: &str, show: Show) -> String {
        self.value(name).map_or("-".into(), |x| show.format(x))
    }
}

/// A chart a kind draws of its figures, beside the ones every kind with
/// the data gets: drawn by the report for every variant that has it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ChartSpec {
    /// A latency distribution on a nines axis: each family a line per
    /// variant (histogram, label, dashed).
    Percentiles {
        stem: &'static str,
        title: &'static str,
        caption: &'static str,
        families: &'static [(&'static str, &'static str, bool)],
    },
    /// The p50, p99 and max of each second of a histogram: three charts.
    PerSecond {
        histogram: &'static str,
        title: &'static str,
        /// From which instant to which the latency runs.
        measured: &'static str,
    },
}
