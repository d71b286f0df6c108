//! Repetitions of a variant folded into one report (`repeat = N`).
//!
//! Each repetition is folded in as soon as it finishes, so the summary on
//! disk is always the merge of the repetitions done so far. The merged
//! report keeps the meaning every existing reader expects of its fields: a
//! metric's `value` is the median of its repetitions, an invariant holds
//! only if it held in every repetition, the ledger counts every message of
//! every repetition. What a merge hides (which repetition failed, each
//! one's own ledger) stays in `repetitions[]`.

use super::first_seen;
use super::summary::{RepetitionReport, VariantReport};
use crate::record::metrics::Metric;
use crate::record::spread::{Spread, median};
use crate::variant::Invariant;

/// The report of a variant's first recorded repetition (`index` of `of`),
/// in the repeated form: every metric with its one value and a spread,
/// warnings and errors labelled with the repetition.
pub fn first(mut report: VariantReport, index: usize, of: usize) -> VariantReport {
    let record = record_of(&report, index);
    report.metrics.iter_mut().for_each(repeated);
    report.warnings = label(index, std::mem::take(&mut report.warnings));
    let (error, inconclusive) = (report.error.take(), report.inconclusive.take());
    append(&mut report.error, error, index);
    append(&mut report.inconclusive, inconclusive, index);
    report.repetitions = vec![record];
    report.invariants = merge_invariants(&report.repetitions, of);
    report.passed = passed(&report);
    report
}

/// Folds repetition `index` of `of` (`next`, alone) into `into`, which holds
/// the earlier repetitions. `next.histograms` must already describe the
/// pooled histograms (the writer pools the recorders).
pub fn fold(into: &mut VariantReport, next: VariantReport, index: usize, of: usize) {
    into.repetitions.push(record_of(&next, index));
    for mut m in next.metrics {
        match into.metrics.iter_mut().find(|x| x.name == m.name) {
            Some(existing) => {
                existing.repetitions.push(m.value);
                if let Some(center) = median(&existing.repetitions) {
                    existing.value = center;
                }
                existing.spread = Spread::of(&existing.repetitions);
            }
            None => {
                // A metric this repetition has and earlier ones lacked
                // (an optional figure): its own values only.
                repeated(&mut m);
                into.metrics.push(m);
            }
        }
    }
    for h in next.histograms {
        match into.histograms.iter_mut().find(|x| x.name == h.name) {
            Some(existing) => *existing = h,
            None => into.histograms.push(h),
        }
    }
    for (key, value) in next.params {
        into.params.entry(key).or_insert(value);
    }
    // The first repetition's time course stands for all: overlaid
    // repetitions would read as one run with doubled counts.
    for (key, timeline) in next.timelines {
        into.timelines.entry(key).or_insert(timeline);
    }
    into.ledger += next.ledger;
    into.warnings.extend(label(index, next.warnings));
    append(&mut into.error, next.error, index);
    append(&mut into.inconclusive, next.inconclusive, index);
    into.elapsed_s += next.elapsed_s;
    into.streams.extend(next.streams);
    into.invariants = merge_invariants(&into.repetitions, of);
    into.passed = passed(into);
}

/// A metric of one repetition in the repeated form: its one value, and
/// the spread of that.
/// A repetition's error (or reason it was inconclusive), labelled, after
/// the earlier ones.
fn append(into: &mut Option<String>, next: Option<String>, index: usize) {
    if let Some(e) = next {
        let earlier = into.take().map(|e| format!("{e}; ")).unwrap_or_default();
        *into = Some(format!("{earlier}repetition {index}: {e}"));
    }
}

fn repeated(m: &mut Metric) {
    m.repetitions = vec![m.value];
    m.spread = Spread::of(&m.repetitions);
}

fn record_of(report: &VariantReport, index: usize) -> RepetitionReport {
    RepetitionReport {
        index,
        passed: report.passed,
        ledger: report.ledger,
        invariants: report.invariants.clone(),
        error: report.error.clone(),
        elapsed_s: report.elapsed_s,
    }
}

fn label(index: usize, lines: Vec<String>) -> Vec<String> {
    lines
        .into_iter()
        .map(|w| format!("repetition {index}: {w}"))
        .collect()
}

fn passed(report: &VariantReport) -> bool {
    report.error.is_none() && report.invariants.iter().all(|i| i.passed)
}

/// One invariant per name, in first-seen order: held only if it held in
/// every repetition that checked it. A failure names the repetitions it
/// failed in, with their evidence; a pass keeps the evidence once when
/// every repetition gave the same, else each repetition's.
pub fn merge_invariants(repetitions: &[RepetitionReport], of: usize) -> Vec<Invariant> {
    let checked = repetitions.iter().flat_map(|r| &r.invariants);
    let names = first_seen(checked.map(|i| i.name.as_str()));
    names
        .into_iter()
        .map(|name| {
            let checks: Vec<(usize, &Invariant)> = repetitions
                .iter()
                .filter_map(|r| {
                    r.invariants
                        .iter()
                        .find(|i| i.name == name)
                        .map(|i| (r.index, i))
                })
                .collect();
            let failed: Vec<&(usize, &Invariant)> =
                checks.iter().filter(|(_, i)| !i.passed).collect();
            let detail = if let [(n, only)] = failed.as_slice() {
                format!("failed in repetition {n} of {of}: {}", only.detail)
            } else if !failed.is_empty() {
                let which: Vec<String> = failed.iter().map(|(n, _)| n.to_string()).collect();
                let evidence: Vec<String> = failed
                    .iter()
                    .map(|(n, i)| format!("repetition {n}: {}", i.detail))
                    .collect();
                format!(
                    "failed in repetitions {} of {of}: {}",
                    which.join(", "),
                    evidence.join("; ")
                )
            } else if checks.iter().all(|(_, i)| i.detail == checks[0].1.detail) {
                checks[0].1.detail.clone()
            } else {
                checks
                    .iter()
                    .map(|(n, i)| format!("repetition {n}: {}", i.detail))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            Invariant {
                name: name.to_string(),
                passed: failed.is_empty(),
                detail,
                // Applicable if it applied in any repetition; client-side
                // if it was in any.
                applicable: checks.iter().any(|(_, i)| i.applicable),
                client_side: checks.iter().any(|(_, i)| i.client_side),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use crate::record::ledger::LedgerCounts;

    use super::*;
    use crate::record::metrics::{Direction, Metric};

    fn report(p50: f64, rate: f64, invariant_passed: bool, lost: u64) -> VariantReport {
        VariantReport {
            name: "rate-1000".into(),
            passed: invariant_passed,
            params: BTreeMap::from([("rate".to_string(), Value::from(1000))]),
            metrics: vec![
                Metric::new("e2e_latency.p50", "us", p50, Direction::Lower),
                Metric::new("publish_rate", "msg/s", rate, Direction::Higher),
            ],
            histograms: Vec::new(),
            ledger: LedgerCounts {
                published: 100,
                acked: 100 - lost,
                lost,
                ..Default::default()
            },
            invariants: vec![Invariant::equal("lost = 0", lost, 0)],
            warnings: vec!["generator fell behind".into()],
            timelines: BTreeMap::new(),
            error: None,
            inconclusive: None,
            elapsed_s: 2.0,
            streams: Vec::new(),
            parts_file: None,
            repetitions: Vec::new(),
        }
    }

    #[test]
    fn values_become_medians_with_every_repetition_kept() {
        let mut r = first(report(200.0, 1000.0, true, 0), 1, 3);
        fold(&mut r, report(900.0, 990.0, true, 0), 2, 3);
        fold(&mut r, report(210.0, 1001.0, true, 0), 3, 3);
        let p50 = r.metric("e2e_latency.p50").unwrap();
        assert_eq!(p50.repetitions, vec![200.0, 900.0, 210.0]);
        assert_eq!(p50.value, 210.0);
        let s = p50.spread.unwrap();
        assert_eq!((s.min, s.max, s.mad), (200.0, 900.0, 10.0));
        assert_eq!(r.metric("publish_rate").unwrap().value, 1000.0);
        assert_eq!(r.repetitions.len(), 3);
        assert_eq!(
            r.ledger.published, 300,
            "the ledger counts every repetition"
        );
        assert_eq!(r.elapsed_s, 6.0);
        assert!(r.passed);
        assert_eq!(r.invariants.len(), 1);
        assert_eq!(r.invariants[0].detail, "0 (expected 0)");
        assert_eq!(r.warnings[1], "repetition 2: generator fell behind");
    }

    #[test]
    fn a_failure_in_any_repetition_fails_the_variant_and_names_it() {
        let mut r = first(report(200.0, 1000.0, true, 0), 1, 3);
        fold(&mut r, report(200.0, 1000.0, false, 2), 2, 3);
        fold(&mut r, report(200.0, 1000.0, true, 0), 3, 3);
        assert!(!r.passed);
        let lost = &r.invariants[0];
        assert!(!lost.passed);
        assert_eq!(lost.detail, "failed in repetition 2 of 3: 2 (expected 0)");
        assert!(!r.repetitions[1].passed);
        assert_eq!(r.repetitions[1].ledger.lost, 2);
        assert!(r.repetitions[0].passed && r.repetitions[2].passed);
    }

    #[test]
    fn failures_in_several_repetitions_are_each_named_with_their_evidence() {
        let mut r = first(report(200.0, 1000.0, false, 1), 1, 3);
        fold(&mut r, report(200.0, 1000.0, true, 0), 2, 3);
        fold(&mut r, report(200.0, 1000.0, false, 4), 3, 3);
        assert_eq!(
            r.invariants[0].detail,
            "failed in repetitions 1, 3 of 3: repetition 1: 1 (expected 0); repetition 3: 4 (expected 0)"
        );
        assert_eq!(r.ledger.lost, 5);
    }

    #[test]
    fn errors_are_labelled_and_kept_from_every_repetition() {
        let mut bad = report(200.0, 1000.0, true, 0);
        bad.error = Some("server went away".into());
        let mut r = first(bad.clone(), 1, 2);
        assert_eq!(r.error.as_deref(), Some("repetition 1: server went away"));
        fold(&mut r, bad, 2, 2);
        assert_eq!(
            r.error.as_deref(),
            Some("repetition 1: server went away; repetition 2: server went away")
        );
        assert!(!r.passed);
    }

    #[test]
    fn differing_evidence_of_a_held_invariant_is_kept_per_repetition() {
        let mut a = report(1.0, 1.0, true, 0);
        a.invariants = vec![Invariant::equal("stream holds all", 10, 10)];
        let mut b = a.clone();
        b.invariants = vec![Invariant::equal("stream holds all", 12, 12)];
        let mut r = first(a, 1, 2);
        fold(&mut r, b, 2, 2);
        assert!(r.invariants[0].passed);
        assert_eq!(
            r.invariants[0].detail,
            "repetition 1: 10 (expected 10); repetition 2: 12 (expected 12)"
        );
    }

    #[test]
    fn ledgers_add_up_field_by_field() {
        let a = LedgerCounts {
            published: 3,
            termed: 1,
            ..Default::default()
        };
        let b = LedgerCounts {
            published: 4,
            naks: 2,
            ..Default::default()
        };
        let sum = a + b;
        assert_eq!((sum.published, sum.termed, sum.naks), (7, 1, 2));
    }
}
