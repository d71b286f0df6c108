//! `jsbench compare BASE NEW`: two runs' results side by side, each metric
//! judged by [`rule`], and an exit status CI can gate on.
//!
//! The order of concerns is the order of trust: first whether the two
//! inputs can be compared at all (same schema, same profile, same kind of
//! server: otherwise exit 2 and say what differs), then whether NEW kept
//! its delivery guarantees (an invariant failure is never noise: exit 1,
//! listed first), then the numbers.

pub mod render;
pub mod rule;

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use crate::record::metrics::Direction;
use crate::results::metadata::short_commit;
use crate::results::summary::{SCHEMA_VERSION, Summary};
use crate::system::error::{EXIT_FAILED, EXIT_OK, UsageError};
pub use render::Format;
use rule::{Side, Verdict};

/// What fails the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOn {
    /// Regressions and invariant failures in NEW (the default).
    Regressions,
    /// Invariant failures in NEW only; regressions are reported. For
    /// machines too noisy to gate on numbers.
    Invariants,
}

#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub base: PathBuf,
    pub new: PathBuf,
    /// A fraction: 0.1 for 10%.
    pub threshold: f64,
    pub format: Format,
    pub fail_on: FailOn,
    /// `--only`: when not empty, only metrics matching one of these are
    /// judged; the rest are shown as not judged.
    pub only: Vec<String>,
}

/// `jsbench compare`: prints the comparison and returns the exit status
/// (0 no regression, 1 regression or invariant failure in NEW); unusable
/// input is a [`UsageError`] (exit 2).
pub fn command(options: &CompareOptions) -> Result<i32> {
    let base = load("BASE", &options.base)?;
    let new = load("NEW", &options.new)?;
    let judged = Judged {
        threshold: options.threshold,
        only: options.only.clone(),
    };
    let comparison = compare(&base, &new, &judged, options.fail_on)?;
    let text = render::render(&comparison, options.format)?;
    crate::system::stdout::out!("{text}");
    if options.format == Format::Table {
        for note in &comparison.notes {
            eprintln!("note: {note}");
        }
    }
    Ok(comparison.exit_code)
}

/// A summary read for comparison, with the path it came from.
#[derive(Debug, Clone)]
pub struct Input {
    /// BASE or NEW, for messages.
    pub role: &'static str,
    pub path: PathBuf,
    pub summary: Summary,
}

/// Reads a results folder or a summary.json. The schema version is read
/// before the rest, so a summary from a newer jsbench is refused by name
/// rather than as a confusing parse error.
pub fn load(role: &'static str, path: &Path) -> Result<Input> {
    let file = crate::results::summary_file(path);
    let unusable = |what: String| -> anyhow::Error { UsageError(format!("{role}: {what}")).into() };
    if !file.exists() {
        return Err(unusable(if path.is_dir() {
            format!("{} holds no summary.json", path.display())
        } else {
            format!("no results folder or summary.json at {}", path.display())
        }));
    }
    let name = file.display();
    let text = crate::results::read_capped(&file, crate::results::MAX_JSON_BYTES)
        .map_err(|e| unusable(format!("{e:#}")))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| unusable(format!("{name} is not JSON: {e}")))?;
    let Some(version) = value.get("schema_version").and_then(|v| v.as_u64()) else {
        let what = format!("{name} is not a jsbench summary (it has no schema_version)");
        return Err(unusable(what));
    };
    if version > u64::from(SCHEMA_VERSION) {
        return Err(unusable(format!(
            "{name} has summary schema version {version}, written by a newer jsbench; \
             this one reads versions up to {SCHEMA_VERSION}"
        )));
    }
    let summary: Summary = serde_json::from_value(value)
        .map_err(|e| unusable(format!("{name} is not a jsbench summary: {e}")))?;
    Ok(Input {
        role,
        path: path.to_path_buf(),
        summary,
    })
}

/// Which run, in a line: what a reader needs to trust the numbers.
#[derive(Debug, Clone, Serialize)]
pub struct RunRef {
    pub path: String,
    pub id: String,
    pub profile: String,
    pub commit: Option<String>,
    pub dirty: bool,
    pub server_version: String,
    pub repeat: usize,
    pub verdict: String,
}

impl RunRef {
    fn of(input: &Input) -> RunRef {
        let run = &input.summary.run;
        RunRef {
            path: input.path.display().to_string(),
            id: run.id.clone(),
            profile: run.profile.name.clone(),
            commit: run.tool.git_commit.clone(),
            dirty: run.tool.git_dirty,
            server_version: run.server.version.clone(),
            repeat: run.repeat,
            verdict: input.summary.verdict.clone(),
        }
    }

    pub fn short_commit(&self) -> String {
        short_commit(self.commit.as_deref(), self.dirty)
    }
}

/// A broken guarantee (or a variant that could not finish) in NEW.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Failure {
    pub scenario: String,
    pub variant: String,
    /// The invariant's name, or "error" for a variant that did not finish,
    /// or "run" for a run that failed outside any variant.
    pub check: String,
    pub detail: String,
}

impl Failure {
    pub fn new(
        scenario: &str,
        variant: &str,
        check: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Failure {
            scenario: scenario.into(),
            variant: variant.into(),
            check: check.into(),
            detail: detail.into(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricComparison {
    pub scenario: String,
    pub variant: String,
    pub metric: String,
    pub unit: String,
    pub direction: Direction,
    pub base: Option<Side>,
    pub new: Option<Side>,
    /// (new - base) / |base|; `None` when either is missing or BASE is 0.
    pub change: Option<f64>,
    pub verdict: Verdict,
}

/// Which metrics are judged, and how strictly.
#[derive(Debug, Clone, Serialize)]
pub struct Judged {
    /// A fraction: 0.1 for 10%.
    pub threshold: f64,
    /// Patterns (`*` matches any run of characters) on the metric name, or
    /// on `scenario/variant/metric` when the pattern holds a `/`; empty
    /// judges the default set ([`Selection`]).
    pub only: Vec<String>,
}

impl Judged {
    #[cfg(test)]
    pub fn threshold(threshold: f64) -> Judged {
        Judged {
            threshold,
            only: Vec::new(),
        }
    }
}

/// Who chose the metrics a comparison judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgedBy {
    /// `--only`.
    Only,
    /// The profile's `[ab] judge`, as BASE recorded it.
    Profile,
    /// The figures of merit ([`crate::record::metrics::judged_by_default`]).
    Default,
}

/// The metrics a comparison judges: `--only`, else the profile's `[ab]
/// judge`, else the figures of merit, the set `jsbench ab` judges too.
/// Every metric judged at the threshold with no correction, two runs of
/// one build regressed somewhere every time.
#[derive(Debug, Clone, Serialize)]
pub struct Selection {
    pub from: JudgedBy,
    pub patterns: Vec<String>,
}

impl Selection {
    /// `--only`'s patterns if any, else the profile's `[ab] judge` if any,
    /// else the figures of merit.
    pub fn new(only: &[String], profile: Vec<String>) -> Selection {
        let (from, patterns) = if !only.is_empty() {
            (JudgedBy::Only, only.to_vec())
        } else if !profile.is_empty() {
            (JudgedBy::Profile, profile)
        } else {
            (JudgedBy::Default, Vec::new())
        };
        Selection { from, patterns }
    }

    /// Whether the metric (named by its scenario, variant and name, with
    /// the unit and direction NEW reports) is judged.
    pub fn selects(&self, at: (&str, &str, &str), unit: &str, direction: Direction) -> bool {
        let (scenario, variant, metric) = at;
        if self.from == JudgedBy::Default {
            return crate::record::metrics::judged_by_default(metric, unit, direction);
        }
        self.patterns.iter().any(|p| {
            if p.contains('/') {
                glob(p, &format!("{scenario}/{variant}/{metric}"))
            } else {
                glob(p, metric)
            }
        })
    }
}

/// `*` matches any run of characters (none included); everything else
/// matches itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text.ends_with(last) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    /// Metrics held to the threshold: regressed, improved, within noise
    /// or unchanged.
    pub judged: usize,
    pub regressed: usize,
    pub improved: usize,
    pub within_noise: usize,
    pub unchanged: usize,
    pub context: usize,
    pub not_judged: usize,
    pub missing: usize,
    pub added: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub base: RunRef,
    pub new: RunRef,
    pub judged: Judged,
    /// Which metrics were judged, and who chose them.
    pub selection: Selection,
    /// `regression`, `invariants failed` or `ok`.
    pub result: &'static str,
    pub exit_code: i32,
    /// Invariant failures and errors in NEW, always listed first.
    pub failures: Vec<Failure>,
    /// What BASE measured and NEW did not: a judged metric it lacks, a
    /// histogram it left empty. A number that disappears is never noise.
    pub missing: Vec<Failure>,
    /// Two saved runs are never paired: what that means for the verdict.
    pub unpaired: String,
    /// Differences between the runs that do not stop the comparison
    /// (server version, host), and problems of BASE.
    pub notes: Vec<String>,
    pub counts: Counts,
    pub metrics: Vec<MetricComparison>,
}

impl Comparison {
    #[cfg(test)]
    pub fn regressions(&self) -> impl Iterator<Item = &MetricComparison> {
        self.metrics
            .iter()
            .filter(|m| m.verdict == Verdict::Regressed)
    }
}

/// Compares two loaded summaries. Unusable pairs are a [`UsageError`].
pub fn compare(base: &Input, new: &Input, judged: &Judged, fail_on: FailOn) -> Result<Comparison> {
    let mut notes = comparable(base, new)?;
    let failures = failures_of(&new.summary);
    let base_failures = failures_of(&base.summary);
    if !base_failures.is_empty() {
        notes.push(format!(
            "BASE itself failed {} check(s) (first: {}/{}: {}); its numbers describe a broken run",
            base_failures.len(),
            base_failures[0].scenario,
            base_failures[0].variant,
            base_failures[0].check
        ));
    }
    let profile = crate::profile::ab_judge(&base.summary.run.profile.text);
    let selection = Selection::new(&judged.only, profile);
    let metrics = match_metrics(&base.summary, &new.summary, judged, &selection, &mut notes);
    let probes = probe_variants(&base.summary);
    // Only a metric that would be judged can be missing: a count or a
    // figure that exists only when something happened (a redelivery, a
    // reconnect, a rate a search probed) may be absent for good reasons,
    // and with `--fail-on invariants` no figure gates the run.
    let gating = fail_on == FailOn::Regressions;
    let (missing_judged, missing_shown): (Vec<&MetricComparison>, Vec<&MetricComparison>) = metrics
        .iter()
        .filter(|m| m.verdict == Verdict::Missing)
        .partition(|m| {
            gating
                && m.direction != Direction::None
                && selection.selects((&m.scenario, &m.variant, &m.metric), &m.unit, m.direction)
                && !probes.contains(&(m.scenario.clone(), m.variant.clone()))
        });
    if !missing_shown.is_empty() {
        let names: Vec<String> = missing_shown
            .iter()
            .take(8)
            .map(|m| format!("{}/{}/{}", m.scenario, m.variant, m.metric))
            .collect();
        notes.push(format!(
            "{} figure(s) of BASE are absent in NEW and not judged (no direction, not selected, a search's probe, or --fail-on invariants): {}{}",
            missing_shown.len(),
            names.join(", "),
            if missing_shown.len() > names.len() { ", ..." } else { "" }
        ));
    }
    let mut missing = Vec::new();
    for m in missing_judged {
        let check = format!("metric {}", m.metric);
        let absent = "measured in BASE, absent in NEW";
        missing.push(Failure::new(&m.scenario, &m.variant, check, absent));
    }
    if gating {
        missing.extend(emptied_histograms(&base.summary, &new.summary, &probes));
    }
    let mut counts = Counts::default();
    for m in &metrics {
        *match m.verdict {
            Verdict::Regressed => &mut counts.regressed,
            Verdict::Improved => &mut counts.improved,
            Verdict::WithinNoise => &mut counts.within_noise,
            Verdict::Unchanged => &mut counts.unchanged,
            Verdict::Context => &mut counts.context,
            Verdict::Ignored => &mut counts.not_judged,
            Verdict::Missing => &mut counts.missing,
            Verdict::Added => &mut counts.added,
        } += 1;
    }
    counts.judged = counts.regressed + counts.improved + counts.within_noise + counts.unchanged;
    let regressed = counts.regressed > 0 && gating;
    let (result, exit_code) = if !failures.is_empty() {
        ("invariants failed", EXIT_FAILED)
    } else if !missing.is_empty() {
        ("missing in NEW", EXIT_FAILED)
    } else if regressed {
        ("regression", EXIT_FAILED)
    } else {
        ("ok", EXIT_OK)
    };
    Ok(Comparison {
        base: RunRef::of(base),
        new: RunRef::of(new),
        judged: judged.clone(),
        selection,
        result,
        exit_code,
        failures,
        missing,
        unpaired: unpaired(&base.summary, &new.summary),
        notes,
        counts,
        metrics,
    })
}

/// The (scenario, variant) of a rate search's probes: how its answer was
/// found, not figures to hold a build to.
fn probe_variants(summary: &Summary) -> std::collections::BTreeSet<(String, String)> {
    summary
        .variants()
        .filter(|(_, v)| v.params.contains_key(crate::scenario::search::PROBE_PARAM))
        .map(|(s, v)| (s.name.clone(), v.name.clone()))
        .collect()
}

/// Histograms with samples in BASE that NEW has not, or has empty.
fn emptied_histograms(
    base: &Summary,
    new: &Summary,
    probes: &std::collections::BTreeSet<(String, String)>,
) -> Vec<Failure> {
    let mut out = Vec::new();
    for (s, v) in base.variants() {
        if probes.contains(&(s.name.clone(), v.name.clone())) {
            continue;
        }
        let in_new = new
            .variants()
            .find(|(ns, nv)| ns.name == s.name && nv.name == v.name)
            .map(|(_, nv)| nv);
        for h in v.histograms.iter().filter(|h| h.count > 0) {
            let count = in_new.and_then(|nv| nv.histograms.iter().find(|x| x.name == h.name));
            if count.is_none_or(|x| x.count == 0) {
                let new = count.map_or("has no such histogram", |_| "none");
                let detail = format!("BASE recorded {} samples, NEW {new}", h.count);
                let check = format!("histogram {}", h.name);
                out.push(Failure::new(&s.name, &v.name, check, detail));
            }
        }
    }
    out
}

/// What a reader must weigh beside the verdict of two unpaired runs.
fn unpaired(base: &Summary, new: &Summary) -> String {
    let hostname = &base.run.host.hostname;
    let other_host = (*hostname != new.run.host.hostname)
        .then(|| format!(" on {}", hostname.as_deref().unwrap_or("another host")));
    format!(
        "unpaired: BASE ran at {}{}, NEW at {}; two unpaired runs of one build moved 15-31% in p50 latency, \
         -23% in max publish rate and +72% in PubAck p99 on a shared 2-core machine (docs/compare.md), so \
         only changes well beyond that are evidence; `jsbench ab` pairs runs and sees a few percent",
        base.run.started_at,
        other_host.unwrap_or_default(),
        new.run.started_at,
    )
}

/// Refuses pairs whose numbers measure different things; returns notes on
/// differences that only colour them.
fn comparable(base: &Input, new: &Input) -> Result<Vec<String>> {
    let (b, n) = (&base.summary, &new.summary);
    let unusable = |what: String| -> anyhow::Error {
        UsageError(format!(
            "cannot compare {} (BASE) with {} (NEW): {what}",
            base.path.display(),
            new.path.display()
        ))
        .into()
    };
    if b.schema_version != n.schema_version {
        return Err(unusable(format!(
            "their summary schema versions differ (BASE {}, NEW {}); run both with one jsbench version, or record a new baseline",
            b.schema_version, n.schema_version
        )));
    }
    if b.run.profile.name != n.run.profile.name {
        return Err(unusable(format!(
            "they ran different profiles (BASE {:?}, NEW {:?})",
            b.run.profile.name, n.run.profile.name
        )));
    }
    if let Some((line, old, now)) = first_difference(&b.run.profile.text, &n.run.profile.text) {
        return Err(unusable(format!(
            "profile {:?} differs between them, first at line {line} (BASE {old:?}, NEW {now:?}); \
             record a new baseline with the profile as it is now",
            b.run.profile.name
        )));
    }
    for input in [base, new] {
        let verdict = &input.summary.verdict;
        if matches!(verdict.as_str(), "running" | "interrupted" | "incomplete") {
            return Err(UsageError(format!(
                "{}: {} is incomplete (verdict {verdict:?}): the run was interrupted, lost a worker or is still running",
                input.role,
                input.path.display(),
            ))
            .into());
        }
    }
    let (bs, ns) = (&b.run.server, &n.run.server);
    let server_fields = [
        ("server mode", bs.mode.clone(), ns.mode.clone()),
        ("storage", bs.storage.clone(), ns.storage.clone()),
        ("replicas", bs.replicas.to_string(), ns.replicas.to_string()),
        (
            "cluster size",
            format!("{:?}", bs.cluster_size),
            format!("{:?}", ns.cluster_size),
        ),
    ];
    for (what, x, y) in server_fields {
        if x != y {
            return Err(unusable(format!(
                "their {what} differs (BASE {x}, NEW {y}); numbers from different set-ups are not comparable"
            )));
        }
    }
    let mut notes = Vec::new();
    if bs.version != ns.version {
        notes.push(format!(
            "nats-server versions differ (BASE {}, NEW {})",
            bs.version, ns.version
        ));
    }
    let (bh, nh) = (&b.run.host, &n.run.host);
    if bh.cores != nh.cores || bh.cpu_model != nh.cpu_model || bh.hostname != nh.hostname {
        notes.push(format!(
            "the runs come from different hosts (BASE {} cores {}, NEW {} cores {})",
            bh.cores,
            bh.cpu_model.as_deref().unwrap_or("?"),
            nh.cores,
            nh.cpu_model.as_deref().unwrap_or("?"),
        ));
    }
    if b.run.tool.git_dirty || n.run.tool.git_dirty {
        notes.push("a run was built from a checkout with uncommitted changes (+dirty)".into());
    }
    Ok(notes)
}

/// The first line where two texts differ: (1-based line, BASE's, NEW's).
fn first_difference(a: &str, b: &str) -> Option<(usize, String, String)> {
    if a == b {
        return None;
    }
    let show = |s: Option<&str>| s.unwrap_or("(end of file)").to_string();
    let (mut x, mut y) = (a.lines(), b.lines());
    // Both ending together: only line endings or a final newline differ.
    (1..).find_map(|line| {
        let (p, q) = (x.next(), y.next());
        (p.is_none() || p != q).then(|| (line, show(p), show(q)))
    })
}

/// Every failed invariant and variant error of a run, and a failed run
/// whose variants all passed (a scenario aborted before recording).
pub fn failures_of(summary: &Summary) -> Vec<Failure> {
    failures_in(
        summary.variants().map(|(s, v)| VariantChecks {
            scenario: &s.name,
            variant: &v.name,
            error: v.error.as_deref(),
            invariants: &v.invariants,
        }),
        &summary.verdict,
    )
}

/// What [`failures_in`] reads of a variant: `history` reads old summaries
/// through a schema of its own and lists their failures by the same rule.
pub struct VariantChecks<'a> {
    pub scenario: &'a str,
    pub variant: &'a str,
    pub error: Option<&'a str>,
    pub invariants: &'a [crate::variant::Invariant],
}

/// The failures of a run's variants and its verdict.
pub fn failures_in<'a>(
    variants: impl Iterator<Item = VariantChecks<'a>>,
    verdict: &str,
) -> Vec<Failure> {
    let mut out = Vec::new();
    for v in variants {
        let error = v.error.map(|e| ("error", e));
        let failed = v.invariants.iter().filter(|i| !i.passed);
        let failed = failed.map(|i| (i.name.as_str(), i.detail.as_str()));
        for (check, detail) in error.into_iter().chain(failed) {
            out.push(Failure::new(v.scenario, v.variant, check, detail));
        }
    }
    if out.is_empty() && verdict == "failed" {
        out.push(Failure::new(
            "-",
            "-",
            "run",
            "the run failed outside any recorded variant (a scenario aborted or clean-up failed; see the run's output)",
        ));
    }
    out
}

/// Pairs metrics by scenario, variant and name: BASE's order first, then
/// what only NEW has.
fn match_metrics(
    base: &Summary,
    new: &Summary,
    judged: &Judged,
    selection: &Selection,
    notes: &mut Vec<String>,
) -> Vec<MetricComparison> {
    let find = |summary: &Summary, scenario: &str, variant: &str, metric: &str| {
        summary
            .variants()
            .find(|(s, v)| s.name == scenario && v.name == variant)
            .and_then(|(_, v)| v.metric(metric).cloned())
    };
    let mut out = Vec::new();
    for (s, v) in base.variants() {
        for b in &v.metrics {
            let n = find(new, &s.name, &v.name, &b.name);
            let base_side = Side::of(b);
            let (direction, new_side, verdict) = match &n {
                None => (b.direction, None, Verdict::Missing),
                Some(n) => {
                    let new_side = Side::of(n);
                    let verdict = if n.direction == Direction::None {
                        Verdict::Context
                    } else if !selection.selects((&s.name, &v.name, &b.name), &n.unit, n.direction)
                    {
                        Verdict::Ignored
                    } else if n.unit != b.unit {
                        notes.push(format!(
                            "{}/{}/{} changed its unit ({} -> {}); not judged",
                            s.name, v.name, b.name, b.unit, n.unit
                        ));
                        Verdict::Context
                    } else {
                        rule::judge(n.direction, &base_side, &new_side, judged.threshold)
                    };
                    (n.direction, Some(new_side), verdict)
                }
            };
            out.push(MetricComparison {
                scenario: s.name.clone(),
                variant: v.name.clone(),
                metric: b.name.clone(),
                unit: n.as_ref().map_or(b.unit.clone(), |n| n.unit.clone()),
                direction,
                base: Some(base_side),
                change: new_side.and_then(|n| rule::change(base_side.value, n.value)),
                new: new_side,
                verdict,
            });
        }
    }
    for (s, v) in new.variants() {
        for n in &v.metrics {
            if find(base, &s.name, &v.name, &n.name).is_none() {
                out.push(MetricComparison {
                    scenario: s.name.clone(),
                    variant: v.name.clone(),
                    metric: n.name.clone(),
                    unit: n.unit.clone(),
                    direction: n.direction,
                    base: None,
                    new: Some(Side::of(n)),
                    change: None,
                    verdict: Verdict::Added,
                });
            }
        }
    }
    out
}

/// `--threshold`: `10%`, `2.5%` or a bare `10` (percent), 0..=1000%.
pub fn parse_threshold(text: &str) -> Result<f64, UsageError> {
    crate::profile::parse_percent(text)
}

#[cfg(test)]
mod tests;
