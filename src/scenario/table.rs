//! What a scenario's row of the terminal table shows, as data: each kind
//! names its columns (its registry row carries them, by the metric names
//! its module writes) and the terminal renders them, so a column and the
//! figure it shows cannot drift apart in silence.

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

pub const VARIANT: Column = Column {
    header: "variant",
    cell: Cell::Variant,
};
pub const TARGET: Column = Column {
    header: "target/s",
    cell: Cell::Metric(TARGET_RATE, Show::Rate),
};
pub const ACHIEVED: Column = Column {
    header: "achieved/s",
    cell: Cell::Metric(PUBLISH.rate, Show::Rate),
};
pub const LOST: Column = Column {
    header: "lost",
    cell: Cell::Lost,
};
pub const VERDICT: Column = Column {
    header: "verdict",
    cell: Cell::Verdict,
};

/// `header` over one quantile of a latency histogram, in µs.
impl Column {
    pub const fn new(header: &'static str, cell: Cell) -> Column {
        Column { header, cell }
    }

    /// A metric's value, shown as `show`.
    pub const fn metric(header: &'static str, metric: &'static str, show: Show) -> Column {
        Column {
            header,
            cell: Cell::Metric(metric, show),
        }
    }

    /// A variant parameter, as written.
    pub const fn param(header: &'static str, param: &'static str) -> Column {
        Column {
            header,
            cell: Cell::Param(param),
        }
    }
}

pub const fn quantile(header: &'static str, histogram: &'static str, q: &'static str) -> Column {
    Column {
        header,
        cell: Cell::Quantile(histogram, q, Show::Us),
    }
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
