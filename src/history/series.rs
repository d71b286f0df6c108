//! Records into series: runs ordered by commit (the repository's
//! first-parent line when one is given, else the time each run started),
//! grouped by machine class and profile, then one series per scenario,
//! variant and metric. Runs from different machines never share a series:
//! their difference would read as a change point.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use anyhow::Result;

use super::load::Record;
use crate::compare::Failure;
use crate::record::metrics::Direction;
use crate::system::error::UsageError;

/// The runs of one machine class and profile, in order.
#[derive(Debug, Clone)]
pub struct Group {
    pub host: String,
    pub profile: String,
    /// Indexes into the records, oldest first.
    pub runs: Vec<usize>,
    pub series: Vec<Series>,
    /// Broken invariants and errors, by position in `runs`.
    pub events: Vec<Event>,
}

/// One metric over the group's runs.
#[derive(Debug, Clone)]
pub struct Series {
    pub scenario: String,
    pub variant: String,
    pub metric: String,
    pub unit: String,
    pub direction: Direction,
    /// (position in the group's runs, value), in order.
    pub points: Vec<(usize, f64)>,
}

impl Series {
    /// `scenario/variant/metric`.
    pub fn label(&self) -> String {
        format!("{}/{}/{}", self.scenario, self.variant, self.metric)
    }

    pub fn values(&self) -> Vec<f64> {
        self.points.iter().map(|p| p.1).collect()
    }
}

/// A run that broke a check: shown on every series of its scenario and
/// variant (a run-level failure on all of them).
#[derive(Debug, Clone)]
pub struct Event {
    pub position: usize,
    pub failure: Failure,
}

impl Event {
    pub fn touches(&self, series: &Series) -> bool {
        self.failure.scenario == "-"
            || (self.failure.scenario == series.scenario && self.failure.variant == series.variant)
    }
}

/// The repository's first-parent line from `rev`, oldest first: the
/// order commits landed in.
pub fn first_parent_order(repo: &Path, rev: &str) -> Result<HashMap<String, usize>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-list", "--first-parent", rev])
        .output()
        .map_err(|e| UsageError(format!("--repo {}: cannot run git: {e}", repo.display())))?;
    if !out.status.success() {
        return Err(UsageError(format!(
            "--repo {}: git rev-list --first-parent {rev} failed: {}",
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let oldest_first = text.lines().rev().enumerate();
    Ok(oldest_first.map(|(i, sha)| (sha.to_string(), i)).collect())
}

/// The records' order: by commit position when `commits` is given (runs
/// of a commit not on that line are left out, with a note), by start time
/// otherwise; runs of one commit by start time.
pub fn order(
    records: &[Record],
    commits: Option<&HashMap<String, usize>>,
    notes: &mut Vec<String>,
) -> Vec<usize> {
    let mut keyed: Vec<(usize, &str, usize)> = Vec::new();
    let mut off_line = 0;
    for (i, r) in records.iter().enumerate() {
        let position = match commits {
            None => 0,
            Some(map) => match r.commit.as_deref().and_then(|c| map.get(c)) {
                Some(&p) => p,
                None => {
                    off_line += 1;
                    continue;
                }
            },
        };
        keyed.push((position, r.started_at.as_str(), i));
    }
    if off_line > 0 {
        notes.push(format!(
            "{off_line} run(s) left out: their commit is not on the repository's first-parent line (or unknown)"
        ));
    }
    keyed.sort();
    keyed.into_iter().map(|k| k.2).collect()
}

/// Groups the ordered runs by machine class and profile, and each group's
/// metrics into series. A metric whose unit or direction changed keeps
/// the latest run's and drops the points that disagree (they measure
/// something else).
pub fn group(records: &[Record], ordered: &[usize]) -> Vec<Group> {
    let mut groups: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for &i in ordered {
        let r = &records[i];
        groups
            .entry((r.host.clone(), r.profile.clone()))
            .or_default()
            .push(i);
    }
    groups
        .into_iter()
        .map(|((host, profile), runs)| {
            let series = series_of(records, &runs);
            let events = runs
                .iter()
                .enumerate()
                .flat_map(|(position, &i)| {
                    records[i].failures.iter().map(move |f| Event {
                        position,
                        failure: f.clone(),
                    })
                })
                .collect();
            Group {
                host,
                profile,
                runs,
                series,
                events,
            }
        })
        .collect()
}

fn series_of(records: &[Record], runs: &[usize]) -> Vec<Series> {
    let mut by_key: BTreeMap<(String, String, String), Series> = BTreeMap::new();
    // Newest first, so the latest run sets the unit and direction.
    for (position, &i) in runs.iter().enumerate().rev() {
        for m in &records[i].metrics {
            let key = (m.scenario.clone(), m.variant.clone(), m.metric.clone());
            let series = by_key.entry(key).or_insert_with(|| Series {
                scenario: m.scenario.clone(),
                variant: m.variant.clone(),
                metric: m.metric.clone(),
                unit: m.unit.clone(),
                direction: m.direction,
                points: Vec::new(),
            });
            if series.unit == m.unit && series.direction == m.direction {
                series.points.push((position, m.value));
            }
        }
    }
    let mut out: Vec<Series> = by_key.into_values().collect();
    for s in &mut out {
        s.points.reverse();
    }
    out
}
