//! `jsbench history`: results over many commits, with change points, for
//! the drift no pull request's pairs can see (twenty merges of 1% each).
//!
//! load.rs reads folders and the append-only JSON-lines file into records;
//! series.rs orders them (git first-parent order, else time) and groups
//! them by machine class, profile, scenario, variant and metric;
//! changepoint.rs is E-Divisive means with a seeded permutation test;
//! analyse.rs turns splits into change points with commit ranges, sizes
//! and the exit rule; chart.rs, page.rs and markdown.rs draw history.html
//! and history.md, table.rs their shared rows. docs/history.md says why this method and what it
//! costs.

pub mod analyse;
pub mod changepoint;
pub mod chart;
pub mod load;
pub mod markdown;
pub mod page;
pub mod series;
pub mod table;

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::system::error::{EXIT_FAILED, EXIT_OK, UsageError};
use analyse::{Analysed, Rule};
use load::Record;
use series::Group;

/// What `jsbench history` was asked.
#[derive(Debug, Clone)]
pub struct HistoryOptions {
    /// Results folders, folders of them, summary.json, ab.json or history
    /// files.
    pub paths: Vec<PathBuf>,
    /// Order by this repository's first-parent line from `rev`.
    pub repo: Option<PathBuf>,
    pub rev: String,
    pub out: PathBuf,
    pub rule: Rule,
    /// Append the runs to this file instead of analysing.
    pub append: Option<PathBuf>,
}

/// Every group analysed, and what the history says as a whole.
#[derive(Debug)]
pub struct Outcome {
    pub groups: Vec<(Group, Vec<Analysed>)>,
    pub notes: Vec<String>,
    pub headline: String,
    pub rule: Rule,
    pub exit_code: i32,
}

pub fn command(options: &HistoryOptions) -> Result<i32> {
    if options.paths.is_empty() {
        return Err(UsageError(
            "no results given: name results folders, a folder of them, or a history file (jsbench history --help)".into(),
        )
        .into());
    }
    let loaded = load::read(&options.paths)?;
    if let Some(file) = &options.append {
        let added = load::append(file, &loaded.records)?;
        for note in &loaded.notes {
            eprintln!("note: {note}");
        }
        crate::system::stdout::outln!(
            "jsbench history: {added} run(s) appended to {} ({} already there)",
            file.display(),
            loaded.records.len() - added
        );
        return Ok(EXIT_OK);
    }
    let outcome = analyse_history(&loaded.records, options, loaded.notes)?;
    fs::create_dir_all(&options.out).map_err(|e| {
        UsageError(format!(
            "--out {}: cannot create it: {e}",
            options.out.display()
        ))
    })?;
    let html = options.out.join("history.html");
    fs::write(&html, page::render(&outcome, &loaded.records, &options.out))
        .with_context(|| format!("writing {}", html.display()))?;
    let text = markdown::render(&outcome, &loaded.records);
    let md = options.out.join("history.md");
    fs::write(&md, &text).with_context(|| format!("writing {}", md.display()))?;
    crate::system::stdout::out!("{text}");
    eprintln!("jsbench history: {} and {}", html.display(), md.display());
    Ok(outcome.exit_code)
}

/// Orders, groups and analyses the records: the whole judgement, without
/// touching the disk (the tests call it on made-up records).
pub fn analyse_history(
    records: &[Record],
    options: &HistoryOptions,
    mut notes: Vec<String>,
) -> Result<Outcome> {
    let commits = options
        .repo
        .as_ref()
        .map(|repo| series::first_parent_order(repo, &options.rev))
        .transpose()?;
    let ordered = series::order(records, commits.as_ref(), &mut notes);
    if ordered.is_empty() {
        let paths: Vec<String> = options
            .paths
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let line = commits.map_or("", |_| " on the repository's first-parent line");
        return Err(UsageError(format!("no runs to analyse in {}{line}", paths.join(", "))).into());
    }
    let grouped = series::group(records, &ordered);
    // Every gating series is a test of the exit: the permutations resolve
    // p-values down to what Benjamini–Hochberg over all of them can need.
    let gating: usize = grouped
        .iter()
        .map(|g| analyse::gating_series(g, records))
        .sum();
    let mut rule = options.rule;
    rule.settings.resolve = rule.settings.alpha / gating.max(1) as f64;
    let mut groups: Vec<(Group, Vec<Analysed>)> = grouped
        .into_iter()
        .map(|g| {
            let analysed = analyse::analyse(&g, records, &rule);
            (g, analysed)
        })
        .collect();
    analyse::control_discoveries(
        groups.iter_mut().flat_map(|(_, a)| a.iter_mut()),
        rule.settings.alpha,
        &mut notes,
    );
    let failed: Vec<String> = groups
        .iter()
        .flat_map(|(_, a)| a.iter().filter(|a| a.failed))
        .map(|a| {
            let c = a.changes.last().map_or(0.0, |c| c.change);
            format!("{} {:+.1}%", a.series.label(), c * 100.0)
        })
        .collect();
    let changes: usize = groups
        .iter()
        .flat_map(|(_, a)| a)
        .map(|a| a.changes.len())
        .sum();
    let threshold = options.rule.threshold * 100.0;
    let (headline, exit_code) = if failed.is_empty() {
        let text = format!(
            "No series' newest change point is a regression beyond {threshold:.1}% ({changes} change point(s) in all)."
        );
        (text, EXIT_OK)
    } else {
        let text = format!(
            "Regression: the newest change point of {} series is a regression beyond {threshold:.1}%: {}.",
            failed.len(),
            failed.join(", ")
        );
        (text, EXIT_FAILED)
    };
    Ok(Outcome {
        groups,
        notes,
        headline,
        rule: options.rule,
        exit_code,
    })
}

#[cfg(test)]
mod tests;
