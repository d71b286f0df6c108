//! Turning results into things people read: the terminal table, and the
//! charts and report.html of a results folder.
//!
//! Pictures are always drawn from the folder's files (summary.json and the
//! `.hdr` histograms), never from a run's memory, so `jsbench run` and
//! `jsbench report` produce the same page, and results of an older commit
//! can be drawn with today's code.

pub mod charts;
pub mod data;
pub mod fonts;
pub mod html;
pub mod page;
pub mod terminal;

#[cfg(test)]
mod tests;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::results::write_atomic;
use crate::system::error::{EXIT_FAILED, EXIT_OK, UsageError};
use data::ResultsData;
use page::PageChart;

/// What rendering a results folder produced.
#[derive(Debug, Default)]
pub struct RenderOutcome {
    pub report: PathBuf,
    /// Every chart file written (SVG and PNG).
    pub charts: Vec<PathBuf>,
    /// Charts that could not be drawn, one line each; the page says so too.
    pub warnings: Vec<String>,
}

/// Draws every chart into `dir/charts/` and writes `dir/report.html`.
///
/// A chart that fails to draw becomes a warning (and a notice on the page),
/// never an error: the data files are what matter. Errors are reserved for
/// a folder that cannot be read or written.
pub fn render_folder(dir: &Path) -> Result<RenderOutcome> {
    let data = ResultsData::load(dir)?;
    render(&data)
}

/// [`render_folder`] on data already loaded.
pub fn render(data: &ResultsData) -> Result<RenderOutcome> {
    let chart_dir = data.dir.join("charts");
    // Charts are deleted and written here: through a symlink that would
    // be some other folder's files.
    if fs::symlink_metadata(&chart_dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(UsageError(format!(
            "{} is a symbolic link; jsbench deletes and writes charts only in a folder of the results",
            chart_dir.display()
        ))
        .into());
    }
    fs::create_dir_all(&chart_dir).with_context(|| format!("creating {}", chart_dir.display()))?;
    remove_stale_charts(&chart_dir)?;

    let mut outcome = RenderOutcome {
        report: data.dir.join("report.html"),
        ..RenderOutcome::default()
    };
    let mut by_scenario = Vec::new();
    for scenario in data.scenarios() {
        let mut shown = Vec::new();
        for chart in charts::charts_for(&scenario) {
            let svg = match charts::render(&chart, &chart_dir) {
                Ok((svg, files)) => {
                    outcome.charts.extend(files);
                    Ok(svg)
                }
                Err(e) => {
                    let title = &chart.title;
                    outcome
                        .warnings
                        .push(format!("chart \"{title}\" not drawn: {e:#}"));
                    Err(format!("{e:#}"))
                }
            };
            shown.push(PageChart {
                title: chart.title,
                caption: chart.caption,
                svg,
            });
        }
        by_scenario.push((scenario.name().to_string(), shown));
    }

    let generated_by = format!("jsbench {}", env!("CARGO_PKG_VERSION"));
    let html = page::render(&data.summary, &by_scenario, &generated_by);
    write_atomic(&outcome.report, html.as_bytes())?;
    Ok(outcome)
}

/// Charts from an earlier rendering would outlive a chart that is no
/// longer drawn; only jsbench's own file types are removed.
fn remove_stale_charts(chart_dir: &Path) -> Result<()> {
    let entries =
        fs::read_dir(chart_dir).with_context(|| format!("reading {}", chart_dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("svg" | "png")
        );
        // The entry's own type: a symlink is never followed to a file.
        if ours && entry.file_type().is_ok_and(|t| t.is_file()) {
            fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

/// `jsbench report RESULTS_DIR`: the terminal table, then the `ci/` files,
/// charts and page written again. Exit status 0 when everything was drawn, 1 when a chart
/// failed, 2 (through [`UsageError`]) when the folder is unusable.
pub fn command(dir: &Path) -> Result<i32> {
    // Accept the summary.json path too: it is what people tab-complete to.
    let dir = if dir.file_name().is_some_and(|n| n == "summary.json") && dir.is_file() {
        dir.parent().unwrap_or(Path::new("."))
    } else {
        dir
    };
    if !dir.exists() {
        return Err(UsageError(format!("no results folder at {}", dir.display())).into());
    }
    let data = ResultsData::load(dir)?;
    crate::system::stdout::outln!("{}", terminal::render(&data.summary));
    // The CI files are data, derived from summary.json alone: a folder
    // written before they existed gets them, one written by an older
    // version gets today's mapping.
    crate::results::ci::write(dir, &data.summary)?;
    let outcome = render(&data)?;
    for w in &outcome.warnings {
        eprintln!("warning: {w}");
    }
    crate::system::stdout::outln!(
        "charts: {} files in {}",
        outcome.charts.len(),
        dir.join("charts").display()
    );
    crate::system::stdout::outln!("report: {}", outcome.report.display());
    Ok(if outcome.warnings.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}
