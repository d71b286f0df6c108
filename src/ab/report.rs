//! What `ab.json` holds, and the verdict read from it.
//!
//! Apart from the pairs' running so the report's shape and the rule that
//! turns judgements into a verdict and an exit status can be read in one
//! place: `report` and `history` read these folders back long after the
//! comparison that wrote them, and [`render`](super::render),
//! [`chart`](super::chart) and [`simulate`](super::simulate) take the
//! report without the machinery that filled it.

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::compare::Failure;
use crate::system::about;
use crate::system::error::{EXIT_FAILED, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE};

use super::judge::{CheckJudgement, CheckVerdict, Judgement, Look, PairedVerdict, Rule};
use super::slice::{Side, SliceResult};
use super::{ScenarioRef, warm};

/// Why the pairs stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stopped {
    /// Every judged metric was decided.
    Decided,
    /// A regression (or a broken check, or a metric gone) in NEW decided
    /// the outcome: more pairs could not make it pass.
    Failed,
    /// The next pair would not have fit in the budget.
    Budget,
    /// `--pairs` reached.
    Pairs,
    /// Ctrl-C.
    Interrupted,
    /// A slice refused its input or could not run.
    SliceFailed,
    /// A `--only` or `[ab] judge` pattern matched no metric of the
    /// warm-up pair: bad input, found once the metrics were known.
    BadInput,
}

/// One pair of slices.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairRecord {
    pub index: usize,
    /// `base,new` or `new,base`.
    pub order: String,
    /// With warm sides: the scenario both turns ran, `profile:scenario`
    /// (the warm-up pair ran every scenario).
    pub unit: Option<String>,
    pub base: SliceRecord,
    pub new: SliceRecord,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SliceRecord {
    /// Relative to the ab folder.
    pub dir: String,
    pub exit: i32,
    pub elapsed_s: f64,
}

/// A side as the results describe it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SideInfo {
    pub jsbench: String,
    pub server: Option<String>,
    /// From the side's first slice: its jsbench version and commit, and
    /// the nats-server it measured.
    pub jsbench_version: Option<String>,
    pub git_commit: Option<String>,
    pub server_version: Option<String>,
}

/// Everything `ab.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AbReport {
    pub schema_version: u32,
    pub id: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub tool: about::ToolInfo,
    pub host: about::HostInfo,
    pub profiles: Vec<String>,
    pub sides_kind: String,
    /// `windows` (warm sides taking turns) or `slices` (a process per slice).
    #[serde(default)]
    pub mode: String,
    pub base: SideInfo,
    pub new: SideInfo,
    /// embedded, cluster of N, the given server, or each slice's own.
    pub target: String,
    pub budget_s: f64,
    pub slice_s: Option<f64>,
    pub rule: Rule,
    /// The fewest judged pairs with which a regression can be flagged at
    /// the first look (the signed-rank test's smallest p-value against the
    /// look's rate); "unchanged", held to the miss rate, can need fewer.
    pub pairs_needed: usize,
    /// The pair run first and not judged: the sides' first slices warm
    /// caches, page in binaries and fill the server's free lists.
    pub warmup: Option<PairRecord>,
    pub pairs: Vec<PairRecord>,
    /// The looks taken so far, each with the false-alarm rate it spent.
    #[serde(default)]
    pub looks: Vec<Look>,
    pub stopped: Option<Stopped>,
    pub elapsed_s: f64,
    pub metrics: Vec<Judgement>,
    /// Broken invariants and variant errors in NEW's slices, as they came.
    pub failures: Vec<Failure>,
    /// Every check either side broke, judged in pairs.
    #[serde(default)]
    pub checks: Vec<CheckJudgement>,
    pub notes: Vec<String>,
    /// regression, invariants failed, missing in NEW, inconclusive, bad
    /// input, failed, ok, interrupted.
    pub verdict: String,
    pub exit_code: i32,
}

pub const AB_SCHEMA_VERSION: u32 = 2;

impl AbReport {
    pub fn count(&self, verdict: PairedVerdict) -> usize {
        self.metrics.iter().filter(|m| m.verdict == verdict).count()
    }

    pub fn judged(&self) -> impl Iterator<Item = &Judgement> {
        self.metrics
            .iter()
            .filter(|m| m.verdict != PairedVerdict::NotJudged)
    }

    /// Checks NEW breaks where BASE does not, beyond chance.
    /// Checks NEW breaks more often than BASE, not yet decided: each
    /// keeps the comparison inconclusive.
    pub fn open_checks(&self) -> impl Iterator<Item = &CheckJudgement> {
        self.checks.iter().filter(|c| c.verdict.open())
    }

    pub fn failing_checks(&self) -> impl Iterator<Item = &CheckJudgement> {
        self.checks
            .iter()
            .filter(|c| c.verdict == CheckVerdict::FailsInNew)
    }
}

/// A pair as ab.json records it, its slices' folders relative to `dir`.
pub(super) fn pair_record(
    dir: &Path,
    index: usize,
    order: warm::Order,
    unit: Option<&ScenarioRef>,
    (b, n): (&SliceResult, &SliceResult),
) -> PairRecord {
    PairRecord {
        index,
        order: order.roles().join(","),
        unit: unit.map(|(p, s)| format!("{p}:{s}")),
        base: record(dir, b),
        new: record(dir, n),
    }
}

/// A side as it starts: its binaries; versions come with its first slice
/// ([`fill_sides`]).
pub(super) fn side_info(side: &Side) -> SideInfo {
    SideInfo {
        jsbench: side.jsbench.display().to_string(),
        server: side.server.as_ref().map(|s| s.display().to_string()),
        ..SideInfo::default()
    }
}

/// Versions as the sides' first slices recorded them.
pub(super) fn fill_sides(report: &mut AbReport, slices: &[(SliceResult, SliceResult)]) {
    let Some((b, n)) = slices.first() else {
        return;
    };
    for (info, slice) in [(&mut report.base, b), (&mut report.new, n)] {
        if let Some(s) = slice.summaries.first() {
            info.jsbench_version = Some(s.run.tool.version.clone());
            info.git_commit = s.run.tool.git_commit.clone();
            info.server_version = Some(s.run.server.version.clone());
        }
    }
}

fn record(dir: &Path, slice: &SliceResult) -> SliceRecord {
    SliceRecord {
        dir: slice
            .dir
            .strip_prefix(dir)
            .unwrap_or(&slice.dir)
            .display()
            .to_string(),
        exit: slice.exit,
        elapsed_s: slice.elapsed.as_secs_f64(),
    }
}

/// The verdict and exit status from the judgements, and the notes a
/// reader needs to act on them: what stayed undecided and what would
/// decide it, and the checks broken on BASE's side or on both.
pub(super) fn conclude(report: &mut AbReport) {
    let judged = report.judged().count();
    let undecided: Vec<&Judgement> = report.judged().filter(|m| !m.verdict.decided()).collect();
    let (verdict, code) = if report.stopped == Some(Stopped::Interrupted) {
        ("interrupted", EXIT_INTERRUPTED)
    } else if report.stopped == Some(Stopped::BadInput) {
        ("bad input", EXIT_USAGE)
    } else if report.failing_checks().next().is_some() {
        ("invariants failed", EXIT_FAILED)
    } else if report.count(PairedVerdict::MissingInNew) > 0 {
        ("missing in NEW", EXIT_FAILED)
    } else if report.count(PairedVerdict::Regressed) > 0 {
        ("regression", EXIT_FAILED)
    } else if report.stopped == Some(Stopped::SliceFailed) {
        ("failed", EXIT_FAILED)
    } else if judged == 0 || !undecided.is_empty() || report.open_checks().next().is_some() {
        ("inconclusive", EXIT_INCONCLUSIVE)
    } else {
        ("ok", EXIT_OK)
    };
    let mut notes = Vec::new();
    if verdict == "inconclusive" {
        notes.extend(inconclusive_notes(report, judged, &undecided));
    }
    notes.extend(check_notes(report));
    report.notes.extend(notes);
    report.verdict = verdict.into();
    report.exit_code = code;
}

/// Why a comparison could not decide, and what would.
fn inconclusive_notes(report: &AbReport, judged: usize, undecided: &[&Judgement]) -> Vec<String> {
    let pairs = report.looks.last().map_or(0, |l| l.pairs);
    let open = report.open_checks().count();
    if open > 0 {
        let level = report.looks.last().map_or(0.0, |l| l.checks_alpha());
        let mut line = format!(
            "inconclusive: NEW breaks {open} check(s) in more pairs than BASE, not yet beyond chance; a broken check never passes"
        );
        if let Some(c) = report.open_checks().next() {
            line += &format!(
                " ({}/{} '{}' would fail at this look's level {level:.2e} after about {} more pair(s) in which NEW alone breaks it)",
                c.scenario,
                c.variant,
                c.check,
                super::judge::pairs_to_fail(c.new_only, c.base_only, level)
            );
        }
        if judged == 0 || undecided.is_empty() {
            return vec![line];
        }
        let mut notes = inconclusive_notes_metrics(report, judged, undecided, pairs);
        notes.insert(0, line);
        return notes;
    }
    if judged == 0 {
        return vec![format!(
            "nothing was judged: no metric with a direction was measured ({} pair(s)); a comparison that judged nothing is inconclusive",
            pairs
        )];
    }
    inconclusive_notes_metrics(report, judged, undecided, pairs)
}

/// The undecided metrics, each with what would decide it.
fn inconclusive_notes_metrics(
    report: &AbReport,
    judged: usize,
    undecided: &[&Judgement],
    pairs: usize,
) -> Vec<String> {
    let with_profile = report.profiles.len() > 1;
    let mut notes = vec![format!(
        "inconclusive: {} of {judged} judged metric(s) undecided after {pairs} pair(s){}",
        undecided.len(),
        if pairs < report.pairs_needed {
            format!(
                " (at least {} pairs are needed to flag a regression at {:.0}% confidence)",
                report.pairs_needed,
                report.rule.confidence * 100.0
            )
        } else {
            String::new()
        }
    )];
    for m in undecided {
        let mut line = format!("  {}: {}", m.key.label(with_profile), m.verdict.label());
        if let Some(r) = m.ratio {
            line += &format!(", NEW/BASE ×{r:.3}");
        }
        if let Some(s) = m.spread {
            line += &format!(", pair spread {:.1}%", s * 100.0);
        }
        if let Some(d) = m.detectable {
            line += &format!(
                "; these pairs would flag a regression of {:.1}% or more in 9 runs of 10",
                d * 100.0
            );
        }
        if let Some(n) = m.pairs_to_decide {
            line += &format!("; about {n} pairs would decide it");
        }
        notes.push(line);
    }
    notes.push(
        "raise --budget, shorten the profile or pass --slice; an inconclusive comparison exits 3, never 0"
            .into(),
    );
    notes
}

/// Checks broken on BASE's side, on both, or by NEW not yet beyond chance.
fn check_notes(report: &AbReport) -> Vec<String> {
    report
        .checks
        .iter()
        .filter(|c| c.verdict != CheckVerdict::FailsInNew)
        .map(|c| {
            format!(
                "{}/{}: '{}' {}: NEW only in {} pair(s), BASE only in {}, both in {} (sign test p = {:.3}); {}",
                c.scenario,
                c.variant,
                c.check,
                c.verdict.label(),
                c.new_only,
                c.base_only,
                c.both,
                c.p,
                c.detail
            )
        })
        .collect()
}

/// Reads an ab.json, refusing one a newer jsbench wrote by name rather than
/// as a confusing parse error (`report` and `history` read them).
pub fn read_report(path: &Path) -> Result<AbReport> {
    let report: AbReport = crate::results::read_json(path, "a jsbench ab report")?;
    crate::results::refuse_newer(path, "ab", report.schema_version, AB_SCHEMA_VERSION)?;
    Ok(report)
}
