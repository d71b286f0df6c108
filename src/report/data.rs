//! A results folder read back for drawing: `summary.json` and the exact
//! histograms (`.hdr`) it names, nothing else. Charts and the page are
//! rendered from this alone, so a folder written by an older commit can be
//! drawn with today's code, and `jsbench run` draws through the same path
//! that `jsbench report` uses.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use anyhow::Result;

use crate::record::histogram::Recorder;
use crate::results::read_summary;
use crate::results::summary::{ScenarioReport, Summary, VariantReport};
use crate::system::error::UsageError;

/// Histograms keyed by (scenario, variant, histogram name).
type HistogramKey = (String, String, String);

pub struct ResultsData {
    pub dir: PathBuf,
    pub summary: Summary,
    histograms: HashMap<HistogramKey, Recorder>,
}

impl ResultsData {
    /// Reads `dir/summary.json` and every histogram it lists. A missing or
    /// corrupt file is a [`UsageError`] naming it: the folder cannot be
    /// drawn faithfully, and a silent gap in a chart would mislead.
    pub fn load(dir: &Path) -> Result<ResultsData> {
        if !dir.is_dir() {
            return Err(UsageError(format!(
                "{} is not a results folder (expected a folder holding summary.json)",
                dir.display()
            ))
            .into());
        }
        let summary = read_summary(dir)?;
        let mut histograms = HashMap::new();
        for (scenario, variant) in summary.variants() {
            for h in &variant.histograms {
                let path = inside(dir, &h.hdr_file)?;
                let text = crate::results::read_capped(&path, crate::results::MAX_HISTOGRAM_BYTES)?;
                let recorder = Recorder::from_base64(&text).map_err(|e| {
                    UsageError(format!("histogram {} is corrupt: {e:#}", path.display()))
                })?;
                histograms.insert(
                    (scenario.name.clone(), variant.name.clone(), h.name.clone()),
                    recorder,
                );
            }
        }
        Ok(ResultsData {
            dir: dir.to_path_buf(),
            summary,
            histograms,
        })
    }

    /// Builds the view directly, for tests.
    #[cfg(test)]
    pub fn from_parts(
        dir: PathBuf,
        summary: Summary,
        histograms: impl IntoIterator<Item = ((String, String, String), Recorder)>,
    ) -> ResultsData {
        ResultsData {
            dir,
            summary,
            histograms: histograms.into_iter().collect(),
        }
    }

    pub fn scenarios(&self) -> impl Iterator<Item = ScenarioData<'_>> {
        self.summary
            .scenarios
            .iter()
            .map(move |report| ScenarioData { report, data: self })
    }
}

/// One scenario with access to its variants' histograms: what a chart
/// function receives.
#[derive(Clone, Copy)]
pub struct ScenarioData<'a> {
    pub report: &'a ScenarioReport,
    data: &'a ResultsData,
}

impl<'a> ScenarioData<'a> {
    pub fn name(&self) -> &'a str {
        &self.report.name
    }

    pub fn kind(&self) -> &'a str {
        &self.report.kind
    }

    pub fn variants(&self) -> &'a [VariantReport] {
        &self.report.variants
    }

    /// The histogram `name` of `variant`, if it was recorded and is not empty.
    pub fn histogram(&self, variant: &VariantReport, name: &str) -> Option<&'a Recorder> {
        self.data
            .histograms
            .get(&(
                self.report.name.clone(),
                variant.name.clone(),
                name.to_string(),
            ))
            .filter(|r| r.count() > 0)
    }
}

/// Resolves a path listed in summary.json, refusing anything that would
/// leave the results folder (a hand-edited or hostile summary).
fn inside(dir: &Path, relative: &str) -> Result<PathBuf> {
    let path = Path::new(relative);
    let escapes = path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if escapes || relative.is_empty() {
        return Err(UsageError(format!(
            "{}: summary.json lists the file {relative:?}, which is not inside the results folder",
            dir.display()
        ))
        .into());
    }
    Ok(dir.join(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_files_must_stay_inside_the_folder() {
        let dir = Path::new("/r");
        assert_eq!(
            inside(dir, "histograms/a.hdr").unwrap(),
            Path::new("/r/histograms/a.hdr")
        );
        for bad in ["../x.hdr", "/etc/passwd", "histograms/../../x", ""] {
            let e = inside(dir, bad).unwrap_err();
            assert!(e.downcast_ref::<UsageError>().is_some(), "{bad}: {e}");
        }
    }
}
