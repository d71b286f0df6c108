//! Reading a history: results folders (summary.json of `jsbench run`,
//! ab.json of `jsbench ab`), folders of such folders, and the append-only
//! JSON-lines file CI keeps. Every run becomes a [`Record`]: what a trend
//! needs of it and nothing more, so a line stays small (a summary.json with
//! its timelines and profile text is 100 KB; a line is a few KB) and older
//! summaries, missing fields added later, read as well as new ones.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::ab::AbReport;
use crate::compare::{Failure, VariantChecks, failures_in};
use crate::record::metrics::{Direction, Metric};
use crate::results::summary::{HostInfo, SCHEMA_VERSION};
use crate::system::error::UsageError;
use crate::variant::Invariant;

/// The first field of every line: whose file this is and which layout.
pub const FORMAT: &str = "jsbench-history/1";

/// One run, as the history keeps it: one line of the JSON-lines file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub format: String,
    /// The run's id (ab: the comparison's id and its profile): a run
    /// appended twice is kept once.
    pub id: String,
    /// RFC 3339, UTC: the order when no repository is at hand.
    pub started_at: String,
    pub commit: Option<String>,
    #[serde(default)]
    pub dirty: bool,
    /// The machine class ([`host_label`]): series never mix two.
    pub host: String,
    pub profile: String,
    #[serde(default)]
    pub server_version: String,
    /// passed, failed, interrupted, ...; an ab comparison's own verdict.
    #[serde(default)]
    pub verdict: String,
    /// `run` or `ab` (NEW's medians of a paired comparison).
    #[serde(default)]
    pub kind: String,
    /// Where the run's report.html was when it was recorded.
    pub report: Option<String>,
    pub metrics: Vec<Measured>,
    /// Broken invariants and variant errors: events on the series.
    #[serde(default)]
    pub failures: Vec<Failure>,
    /// The profile's `[ab] judge` patterns: the metrics whose regression
    /// fails the history, as they fail `compare` and `ab` (empty: the
    /// figures of merit).
    #[serde(default)]
    pub judged: Vec<String>,
}

/// One metric of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub scenario: String,
    pub variant: String,
    pub metric: String,
    pub unit: String,
    pub direction: Direction,
    pub value: f64,
}

/// What was read, and what was left out and why.
#[derive(Debug, Default)]
pub struct Loaded {
    pub records: Vec<Record>,
    pub notes: Vec<String>,
}

/// The machine a run measured, as a series key: architecture, CPU model,
/// cores and memory in GiB. The hostname is left out on purpose: CI runners
/// get a new one every job while their hardware class stays the same, and
/// a host that changes its hardware keeps its name.
pub fn host_label(host: &HostInfo) -> String {
    let memory = host.memory_bytes.map_or("? GiB".to_string(), |b| {
        format!("{} GiB", (b as f64 / (1u64 << 30) as f64).round())
    });
    format!(
        "{} {}, {} cores, {memory}",
        host.arch,
        host.cpu_model.as_deref().unwrap_or("unknown CPU"),
        host.cores
    )
}

/// Reads every path: a results folder, an ab folder, a folder of those, a
/// summary.json or ab.json, or a history file. A run read twice (a folder
/// and the file it was appended to) is kept once.
pub fn read(paths: &[PathBuf]) -> Result<Loaded> {
    let mut loaded = Loaded::default();
    for path in paths {
        read_path(path, &mut loaded)?;
    }
    let mut seen = BTreeSet::new();
    loaded.records.retain(|r| seen.insert(r.id.clone()));
    Ok(loaded)
}

/// A results folder of `jsbench run` or `jsbench ab`.
fn is_results(dir: &Path) -> bool {
    dir.join("summary.json").is_file() || dir.join("ab.json").is_file()
}

fn read_path(path: &Path, loaded: &mut Loaded) -> Result<()> {
    if path.is_dir() {
        if is_results(path) {
            return read_folder(path, loaded);
        }
        let mut children: Vec<PathBuf> = fs::read_dir(path)
            .map_err(|e| UsageError(format!("cannot read the folder {}: {e}", path.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_results(p))
            .collect();
        if children.is_empty() {
            return Err(UsageError(format!(
                "{} holds no summary.json, no ab.json and no results folders",
                path.display()
            ))
            .into());
        }
        children.sort();
        for child in children {
            read_folder(&child, loaded)?;
        }
        return Ok(());
    }
    match path.file_name().and_then(|n| n.to_str()) {
        _ if !path.exists() => Err(UsageError(format!(
            "no results folder or history file at {}",
            path.display()
        ))
        .into()),
        Some("summary.json" | "ab.json") => {
            read_folder(path.parent().unwrap_or(Path::new(".")), loaded)
        }
        _ => {
            loaded.records.extend(read_lines(path)?);
            Ok(())
        }
    }
}

fn read_folder(dir: &Path, loaded: &mut Loaded) -> Result<()> {
    let report = dir.join("report.html");
    let report = report.is_file().then(|| report.display().to_string());
    if dir.join("ab.json").is_file() {
        let ab = crate::ab::read_report(&dir.join("ab.json"))?;
        loaded.records.extend(from_ab(&ab, report));
        return Ok(());
    }
    let summary = read_summary(&dir.join("summary.json"))?;
    match summary.verdict.as_str() {
        "running" | "interrupted" => loaded.notes.push(format!(
            "{} left out: its run is {} (its numbers are partial)",
            dir.display(),
            summary.verdict
        )),
        _ => loaded.records.push(from_summary(&summary, report)),
    }
    Ok(())
}

/// The part of summary.json a history needs, every field that a version of
/// jsbench may not have written defaulted: a history reaches back to old
/// commits, whose summaries lack what was added since (a ledger count, the
/// repeat, the connection), and must read them all.
#[derive(Debug, Deserialize)]
pub struct Lean {
    pub schema_version: u32,
    pub run: LeanRun,
    #[serde(default)]
    pub scenarios: Vec<LeanScenario>,
    #[serde(default)]
    pub verdict: String,
}

#[derive(Debug, Deserialize)]
pub struct LeanRun {
    pub id: String,
    pub started_at: String,
    pub tool: LeanTool,
    pub host: HostInfo,
    #[serde(default)]
    pub server: LeanServer,
    pub profile: LeanProfile,
}

#[derive(Debug, Deserialize)]
pub struct LeanTool {
    pub git_commit: Option<String>,
    #[serde(default)]
    pub git_dirty: bool,
}

#[derive(Debug, Default, Deserialize)]
pub struct LeanServer {
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Deserialize)]
pub struct LeanProfile {
    pub name: String,
    #[serde(default)]
    pub text: String,
}

#[derive(Debug, Deserialize)]
pub struct LeanScenario {
    pub name: String,
    #[serde(default)]
    pub variants: Vec<LeanVariant>,
}

#[derive(Debug, Deserialize)]
pub struct LeanVariant {
    pub name: String,
    #[serde(default)]
    pub metrics: Vec<Metric>,
    #[serde(default)]
    pub invariants: Vec<Invariant>,
    pub error: Option<String>,
}

/// Reads a summary.json, naming the file and the field that is wrong; a
/// summary from a newer schema is refused by name.
pub fn read_summary(file: &Path) -> Result<Lean> {
    let summary: Lean = crate::results::read_json(file, "a jsbench summary")?;
    crate::results::refuse_newer(file, "summary", summary.schema_version, SCHEMA_VERSION)?;
    Ok(summary)
}

/// A run's record from its summary.
pub fn from_summary(summary: &Lean, report: Option<String>) -> Record {
    let run = &summary.run;
    let variants = || {
        summary
            .scenarios
            .iter()
            .flat_map(|s| s.variants.iter().map(move |v| (s, v)))
    };
    let metrics = variants()
        .flat_map(|(s, v)| {
            v.metrics
                .iter()
                .filter(|m| m.value.is_finite())
                .map(|m| Measured {
                    scenario: s.name.clone(),
                    variant: v.name.clone(),
                    metric: m.name.clone(),
                    unit: m.unit.clone(),
                    direction: m.direction,
                    value: m.value,
                })
        })
        .collect();
    let checks = variants().map(|(s, v)| VariantChecks {
        scenario: &s.name,
        variant: &v.name,
        error: v.error.as_deref(),
        invariants: &v.invariants,
    });
    Record {
        format: FORMAT.into(),
        id: run.id.clone(),
        started_at: run.started_at.clone(),
        commit: run.tool.git_commit.clone(),
        dirty: run.tool.git_dirty,
        host: host_label(&run.host),
        profile: run.profile.name.clone(),
        server_version: run.server.version.clone(),
        verdict: summary.verdict.clone(),
        kind: "run".into(),
        report,
        metrics,
        failures: failures_in(checks, &summary.verdict),
        judged: crate::profile::ab_judge(&run.profile.text),
    }
}

/// A paired comparison's records, one per profile: NEW's median of each
/// metric, at NEW's commit. BASE is a different commit measured at another
/// time; the history holds each commit's own runs.
pub fn from_ab(ab: &AbReport, report: Option<String>) -> Vec<Record> {
    let profiles: BTreeSet<&str> = ab.metrics.iter().map(|m| m.key.profile.as_str()).collect();
    profiles
        .into_iter()
        .map(|profile| Record {
            format: FORMAT.into(),
            id: format!("{}:{profile}", ab.id),
            started_at: ab.started_at.clone(),
            commit: ab.new.git_commit.clone(),
            dirty: false,
            host: host_label(&ab.host),
            profile: profile.to_string(),
            server_version: ab.new.server_version.clone().unwrap_or_default(),
            verdict: ab.verdict.clone(),
            kind: "ab".into(),
            report: report.clone(),
            metrics: ab
                .metrics
                .iter()
                .filter(|m| m.key.profile == profile)
                .filter_map(|m| {
                    Some(Measured {
                        scenario: m.key.scenario.clone(),
                        variant: m.key.variant.clone(),
                        metric: m.key.metric.clone(),
                        unit: m.unit.clone(),
                        direction: m.direction,
                        value: m.new_median.filter(|v| v.is_finite())?,
                    })
                })
                .collect(),
            failures: ab.failures.clone(),
            judged: ab.rule.only.clone(),
        })
        .collect()
}

/// The records of a history file, each line checked: a bad line is named
/// by file and line number.
pub fn read_lines(path: &Path) -> Result<Vec<Record>> {
    let text = crate::results::read_capped(path, crate::results::MAX_JSON_BYTES)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(line).map_err(|e| {
            UsageError(format!(
                "{} line {}: not a jsbench history line ({e}); a history file holds one JSON object per line, written by `jsbench history --append`",
                path.display(),
                i + 1
            ))
        })?;
        if !record.format.starts_with("jsbench-history/") {
            return Err(UsageError(format!(
                "{} line {}: format is {:?}, not {FORMAT}",
                path.display(),
                i + 1,
                record.format
            ))
            .into());
        }
        out.push(record);
    }
    Ok(out)
}

/// Appends the records not yet in `file` (by id), one line each; returns
/// how many were new. The file is created when missing and only ever
/// grows, so CI can commit it on a branch without merge conflicts.
pub fn append(file: &Path, records: &[Record]) -> Result<usize> {
    let existing: BTreeSet<String> = if file.exists() {
        read_lines(file)?.into_iter().map(|r| r.id).collect()
    } else {
        BTreeSet::new()
    };
    let mut text = String::new();
    let mut added = 0;
    for record in records.iter().filter(|r| !existing.contains(&r.id)) {
        text.push_str(&serde_json::to_string(record).context("serialising a history line")?);
        text.push('\n');
        added += 1;
    }
    if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)
            .map_err(|e| UsageError(format!("cannot create {}: {e}", parent.display())))?;
    }
    let mut out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|e| UsageError(format!("cannot open {} to append: {e}", file.display())))?;
    out.write_all(text.as_bytes())
        .with_context(|| format!("appending to {}", file.display()))?;
    Ok(added)
}
