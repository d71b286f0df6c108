//! The results folder: `summary.json`, `metrics.csv` and `histograms/`.
//!
//! The folder is created before anything runs (a bad path fails first) and
//! rewritten after every variant, each file replaced atomically, so a later
//! failure, a Ctrl-C or a crash never loses what was already measured.

pub mod metadata;
pub mod summary;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::error::UsageError;
use crate::profile::ScenarioPlan;
use crate::scenario::{VariantResult, VariantSink};
use summary::{
    HistogramReport, RunMetadata, SCHEMA_VERSION, ScenarioReport, Summary, VariantReport,
};

pub struct ResultsWriter {
    dir: PathBuf,
    summary: Summary,
}

impl ResultsWriter {
    /// Creates `<parent>/<run id>/` and writes a first summary.
    pub fn create(parent: &Path, run: RunMetadata) -> Result<Self> {
        fs::create_dir_all(parent).map_err(|e| {
            UsageError(format!(
                "cannot create the results folder {}: {e}",
                parent.display()
            ))
        })?;
        let mut dir = parent.join(&run.id);
        let mut n = 2;
        while dir.exists() {
            dir = parent.join(format!("{}-{n}", run.id));
            n += 1;
        }
        fs::create_dir_all(dir.join("histograms"))
            .map_err(|e| UsageError(format!("cannot create {}: {e}", dir.display())))?;
        let writer = ResultsWriter {
            dir,
            summary: Summary {
                schema_version: SCHEMA_VERSION,
                run,
                scenarios: Vec::new(),
                verdict: "running".into(),
            },
        };
        writer.write()?;
        Ok(writer)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    pub fn summary_mut(&mut self) -> &mut Summary {
        &mut self.summary
    }

    /// Stores one finished variant and rewrites the folder.
    pub fn record_variant(
        &mut self,
        scenario: &ScenarioPlan,
        variant: VariantResult,
    ) -> Result<()> {
        let mut histograms = Vec::new();
        for (name, recorder) in &variant.histograms {
            let stem = format!("{}.{}.{}", scenario.name(), variant.name, name);
            let hgrm_file = format!("histograms/{stem}.hgrm");
            let hdr_file = format!("histograms/{stem}.hdr");
            write_atomic(&self.dir.join(&hgrm_file), recorder.to_hgrm().as_bytes())?;
            write_atomic(
                &self.dir.join(&hdr_file),
                (recorder.to_base64() + "\n").as_bytes(),
            )?;
            histograms.push(HistogramReport {
                name: name.clone(),
                count: recorder.count(),
                hgrm_file,
                hdr_file,
            });
        }
        let report = VariantReport {
            passed: variant.passed(),
            name: variant.name,
            params: variant.params,
            metrics: variant.metrics,
            histograms,
            ledger: variant.ledger,
            invariants: variant.invariants,
            warnings: variant.warnings,
            timelines: variant.timelines,
            error: variant.error,
            elapsed_s: variant.elapsed.as_secs_f64(),
            streams: variant.streams,
        };
        let name = scenario.name();
        match self.summary.scenarios.iter_mut().find(|s| s.name == name) {
            Some(s) => s.variants.push(report),
            None => self.summary.scenarios.push(ScenarioReport {
                name: name.to_string(),
                kind: scenario.kind().to_string(),
                variants: vec![report],
            }),
        }
        self.write()
    }

    /// Rewrites summary.json and metrics.csv from the summary as it stands.
    pub fn write(&self) -> Result<()> {
        let json = serde_json::to_vec_pretty(&self.summary).context("serialising the summary")?;
        write_atomic(&self.dir.join("summary.json"), &json)?;
        write_atomic(&self.dir.join("metrics.csv"), &metrics_csv(&self.summary)?)?;
        Ok(())
    }
}

impl VariantSink for ResultsWriter {
    fn record(&mut self, scenario: &ScenarioPlan, variant: VariantResult) -> Result<()> {
        self.record_variant(scenario, variant)
    }
}

/// One row per scenario, variant and metric (long format), for spreadsheets
/// and plotting tools.
pub fn metrics_csv(summary: &Summary) -> Result<Vec<u8>> {
    let mut out = csv::Writer::from_writer(Vec::new());
    out.write_record([
        "scenario",
        "variant",
        "metric",
        "unit",
        "value",
        "direction",
    ])?;
    for (scenario, variant) in summary.variants() {
        for m in &variant.metrics {
            let direction = serde_json::to_value(m.direction)?;
            out.write_record([
                scenario.name.as_str(),
                variant.name.as_str(),
                m.name.as_str(),
                m.unit.as_str(),
                &m.value.to_string(),
                direction.as_str().unwrap_or(""),
            ])?;
        }
    }
    out.into_inner().context("finishing metrics.csv")
}

/// Writes `path` through a temporary file and a rename, so readers never
/// see a half-written file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.sync_data().ok();
    fs::rename(&tmp, path).with_context(|| format!("renaming {} into place", tmp.display()))
}

/// Reads a summary from a results folder or a summary.json path.
pub fn read_summary(path: &Path) -> Result<Summary> {
    let file = if path.is_dir() {
        path.join("summary.json")
    } else {
        path.to_path_buf()
    };
    let text = fs::read_to_string(&file)
        .map_err(|e| UsageError(format!("cannot read {}: {e}", file.display())))?;
    let summary: Summary = serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("{} is not a jsbench summary: {e}", file.display())))?;
    Ok(summary)
}
