//! What each process of a distributed variant ran and counted, and how it
//! reaches the variant's results.
//!
//! The variant's own numbers are merged in [`crate::drive`] from the task
//! reports of every process, exactly as a single process merges its
//! tasks. This module keeps the per-process view beside them, so a reader
//! can check that the whole is the sum of its parts, and marks a variant
//! whose parts did not all come back.

use serde::{Deserialize, Serialize};

use super::protocol::PartCounts;
use crate::consume::ConsumerReport;
use crate::load::{AckReport, SendReport};
use crate::record::ledger::{Event, LedgerShard};
use crate::record::metrics::Direction;
use crate::record::names;
use crate::variant::VariantResult;

/// One process's counts, from the task reports it merges.
pub fn part_counts(
    sends: &[SendReport],
    acks: &[AckReport],
    consumers: &[ConsumerReport],
) -> PartCounts {
    let mut ledger = LedgerShard::new();
    for a in acks {
        ledger.merge(&a.ledger);
    }
    for c in consumers {
        ledger.merge(&c.ledger);
    }
    let mut counts = PartCounts {
        published: sends.iter().map(|s| s.sent).sum(),
        publish_errors: acks.iter().map(|a| a.errors + a.missing).sum(),
        ..PartCounts::default()
    };
    for seq in 1..=ledger.max_seq() {
        let n = |e| u64::from(ledger.count(seq, e));
        counts.persisted += u64::from(n(Event::Persisted) > 0);
        counts.duplicates += n(Event::Duplicate);
        counts.deliveries += n(Event::Delivered);
        counts.acks += n(Event::Acked);
        counts.naks += n(Event::Naked);
        counts.terms += n(Event::Termed);
    }
    counts
}

/// One process's part of one drive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Participation {
    /// `coordinator`, or the worker's id.
    pub process: String,
    pub host: String,
    /// Publisher and consumer-client indices it ran.
    pub publishers: Vec<usize>,
    pub consumers: Vec<usize>,
    /// `ok`, `lost` (it disappeared; what it measured is gone) or
    /// `failed` (it answered with an error).
    pub status: String,
    /// What it counted; `None` when its results never arrived.
    pub counts: Option<PartCounts>,
    /// Its clock's estimated offset from the coordinator's before
    /// correction, and the bound on what the correction left, ns.
    pub clock_offset_ns: i64,
    pub clock_uncertainty_ns: u64,
    /// Why it is not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One drive of a variant (most variants drive once; a fill and a read are two).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriveRecord {
    pub label: String,
    /// Set when the drive ran on the coordinator alone although workers
    /// were there, with the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator_only: Option<String>,
    pub processes: Vec<Participation>,
}

impl DriveRecord {
    pub fn coordinator_only(label: &str, reason: &str) -> Self {
        DriveRecord {
            label: label.to_string(),
            coordinator_only: Some(reason.to_string()),
            processes: Vec::new(),
        }
    }

    /// Processes that did not bring their part home.
    pub fn missing(&self) -> impl Iterator<Item = &Participation> {
        self.processes.iter().filter(|p| p.status != "ok")
    }

    /// The widest clock error between a publisher's stamp on one process
    /// and a consumer's receive time on another: both of their
    /// uncertainties. `None` without consumers: every other latency
    /// (PubAck, send lag) starts and ends on one process's clock.
    /// A drive that reads what an earlier one published (a fill) does
    /// not know which process stamped it: any process of this drive is
    /// assumed to have.
    pub fn clock_uncertainty_ns(&self) -> Option<u64> {
        let worst = |keep: fn(&Participation) -> bool| {
            self.processes
                .iter()
                .filter(|p| keep(p))
                .map(|p| p.clock_uncertainty_ns)
                .max()
        };
        let consuming = worst(|p| !p.consumers.is_empty())?;
        let publishing = worst(|p| !p.publishers.is_empty())
            .or_else(|| worst(|_| true))
            .unwrap_or(0);
        // Each side's clock may be off by its own uncertainty.
        Some(publishing + consuming)
    }
}

/// Attaches the drives of a variant to its result: the per-process table
/// (param `workers`), the clock bound beside the latencies (metric
/// `clock_uncertainty`), a warning for load that stayed on the
/// coordinator, and an error when a process's part was lost, which keeps
/// everything else measured but fails the variant as incomplete.
pub fn annotate(result: &mut VariantResult, drives: Vec<DriveRecord>) {
    if drives.is_empty() {
        // A scenario-level error record, or a variant whose load does not
        // go through the shared drive (a reference loop, a read-back).
        if result.name != "scenario" {
            result.warnings.push(
                "ran on the coordinator only: this variant's load does not go through the shared drive"
                    .into(),
            );
            result.param("workers", "coordinator only");
        }
        return;
    }
    for d in &drives {
        if let Some(reason) = &d.coordinator_only {
            result.warnings.push(format!(
                "{}: ran on the coordinator only: {reason}",
                d.label
            ));
        }
    }
    let distributed = drives.iter().filter(|d| d.coordinator_only.is_none());
    if let Some(bound) = distributed
        .filter_map(DriveRecord::clock_uncertainty_ns)
        .max()
    {
        let us = bound as f64 / 1_000.0;
        result.metric(names::CLOCK_UNCERTAINTY, "us", us, Direction::None);
    }
    let missing: Vec<String> = (drives.iter())
        .flat_map(|d| d.missing().map(move |p| (d, p)))
        .map(|(d, p)| {
            let detail = p.detail.as_deref().unwrap_or("no detail");
            format!(
                "{} ({}) {} during {}: {detail}",
                p.process, p.host, p.status, d.label
            )
        })
        .collect();
    if !missing.is_empty() {
        let text = format!(
            "incomplete: the results of {} never arrived; what the other processes measured is kept, \
             but counts and invariants lack that part",
            missing.join("; ")
        );
        result.error = Some(match result.error.take() {
            Some(e) => format!("{e}; {text}"),
            None => text,
        });
    }
    result.param("workers", &drives);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(process: &str, publishers: Vec<usize>, consumers: Vec<usize>, u: u64) -> Participation {
        Participation {
            process: process.into(),
            host: "h".into(),
            publishers,
            consumers,
            status: "ok".into(),
            counts: Some(PartCounts::default()),
            clock_offset_ns: 0,
            clock_uncertainty_ns: u,
            detail: None,
        }
    }

    #[test]
    fn the_clock_bound_pairs_the_worst_publisher_with_the_worst_consumer() {
        let d = DriveRecord {
            label: "x".into(),
            coordinator_only: None,
            processes: vec![
                part("coordinator", vec![0], vec![0], 0),
                part("w1", vec![1], vec![], 40_000),
                part("w2", vec![], vec![1], 25_000),
            ],
        };
        assert_eq!(d.clock_uncertainty_ns(), Some(65_000));
        // Publishing only: every latency is timed on one clock.
        let publishing = DriveRecord {
            label: "p".into(),
            coordinator_only: None,
            processes: vec![
                part("coordinator", vec![0], vec![], 0),
                part("w1", vec![1], vec![], 40_000),
            ],
        };
        assert_eq!(publishing.clock_uncertainty_ns(), None);
        // Reading a fill: whoever stamped it may have been any process.
        let reading = DriveRecord {
            label: "r".into(),
            coordinator_only: None,
            processes: vec![
                part("coordinator", vec![], vec![0], 0),
                part("w1", vec![], vec![1], 30_000),
                part("w2", vec![], vec![], 50_000),
            ],
        };
        assert_eq!(reading.clock_uncertainty_ns(), Some(80_000));
    }

    #[test]
    fn a_lost_part_fails_the_variant_and_keeps_its_numbers() {
        let mut lost = part("w1", vec![1], vec![1], 10_000);
        lost.status = "lost".into();
        lost.counts = None;
        lost.detail = Some("silent for 5s".into());
        let d = DriveRecord {
            label: "latency rate-100".into(),
            coordinator_only: None,
            processes: vec![part("coordinator", vec![0], vec![0], 0), lost],
        };
        let mut r = VariantResult::new("rate-100");
        r.metric("publish_rate", "msg/s", 100.0, Direction::Higher);
        annotate(&mut r, vec![d]);
        let error = r.error.as_deref().unwrap();
        assert!(error.starts_with("incomplete: "), "{error}");
        assert!(
            error.contains("w1 (h) lost during latency rate-100: silent for 5s"),
            "{error}"
        );
        assert!(r.metrics.iter().any(|m| m.name == "publish_rate"));
        assert!(r.metrics.iter().any(|m| m.name == "clock_uncertainty"));
        assert!(r.params["workers"].is_array());
    }

    #[test]
    fn load_kept_on_the_coordinator_is_said_so() {
        let mut r = VariantResult::new("v");
        annotate(
            &mut r,
            vec![DriveRecord::coordinator_only(
                "restart v",
                "it kills a local server",
            )],
        );
        assert!(r.warnings[0].contains("ran on the coordinator only: it kills a local server"));
        assert!(r.error.is_none());
        let mut r = VariantResult::new("minimal");
        annotate(&mut r, Vec::new());
        assert!(r.warnings[0].contains("does not go through the shared drive"));
    }
}
