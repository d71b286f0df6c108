//! The results folder: `summary.json`, `metrics.csv`, `histograms/` and
//! `ci/`.
//!
//! The folder is created before anything runs (a bad path fails first) and
//! rewritten after every variant (every repetition of it, with `repeat`),
//! each file replaced atomically, so a later failure, a Ctrl-C or a crash
//! never loses what was already measured.

pub mod ci;
mod collected;
pub mod metadata;
pub mod repetitions;
pub mod summary;

use std::collections::HashMap;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::profile::CommonPlan;
use crate::record::histogram::Recorder;
use crate::system::error::UsageError;
use crate::variant::{Part, VariantResult, VariantSink};
use summary::{HistogramReport, RunMetadata, ScenarioReport, Summary, VariantReport};

pub use collected::Collected;

pub struct ResultsWriter {
    dir: PathBuf,
    summary: Summary,
    /// With `repeat`, every repetition's histograms pooled so far, by file
    /// stem: the files then hold all repetitions' samples, not the last's.
    pooled: HashMap<String, Recorder>,
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
        for sub in ["histograms", ci::DIR] {
            fs::create_dir_all(dir.join(sub))
                .map_err(|e| UsageError(format!("cannot create {}: {e}", dir.display())))?;
        }
        let writer = ResultsWriter {
            dir,
            summary: Summary::new(run),
            pooled: HashMap::new(),
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

    /// A sink that records variants as repetition `index` (1-based) of the
    /// run's `repeat`.
    pub fn repetition(&mut self, index: usize) -> Repetition<'_> {
        Repetition {
            writer: self,
            index,
        }
    }

    /// Stores repetition `index` of a finished variant, folded into the
    /// earlier repetitions when the run repeats, and rewrites the folder.
    pub fn record_repetition(
        &mut self,
        scenario: &CommonPlan,
        variant: VariantResult,
        index: usize,
    ) -> Result<()> {
        let repeat = self.summary.run.repeat;
        let (dir, pooled) = (&self.dir, &mut self.pooled);
        let report = variant_report(scenario, variant, Some(dir), &mut |at, recorder| {
            histogram_files(dir, pooled, repeat, at, recorder)
        })?;
        let scenario_report = scenario_entry(&mut self.summary, scenario);
        let earlier = scenario_report
            .variants
            .iter_mut()
            .find(|v| v.name == report.name);
        match (repeat > 1, earlier) {
            (false, _) => scenario_report.variants.push(report),
            (true, Some(earlier)) => repetitions::fold(earlier, report, index, repeat),
            (true, None) => scenario_report
                .variants
                .push(repetitions::first(report, index, repeat)),
        }
        self.write()
    }

    /// Rewrites summary.json, metrics.csv and the CI files from the
    /// summary as it stands.
    pub fn write(&self) -> Result<()> {
        let json = serde_json::to_vec_pretty(&self.summary).context("serialising the summary")?;
        write_atomic(&self.dir.join("summary.json"), &json)?;
        write_atomic(&self.dir.join("metrics.csv"), &metrics_csv(&self.summary)?)?;
        ci::write(&self.dir, &self.summary)?;
        Ok(())
    }
}

/// Stores one finished variant and rewrites the folder.
impl VariantSink for ResultsWriter {
    fn record(&mut self, scenario: &CommonPlan, variant: VariantResult) -> Result<()> {
        self.record_repetition(scenario, variant, 1)
    }
}

/// The results writer seen by one repetition's scenario run: scenarios
/// record variants as they always do and need not know they repeat.
pub struct Repetition<'a> {
    writer: &'a mut ResultsWriter,
    index: usize,
}

impl VariantSink for Repetition<'_> {
    fn record(&mut self, scenario: &CommonPlan, variant: VariantResult) -> Result<()> {
        self.writer.record_repetition(scenario, variant, self.index)
    }
}

/// Where a finished variant's histograms go, by scenario, variant and
/// name: the files of a results folder, or memory for a process that
/// writes nothing ([`Collected`]); the rest of the conversion is the same
/// for both.
type Store<'a> = dyn FnMut([&str; 3], &Recorder) -> Result<HistogramReport> + 'a;

/// A finished variant as the summary reports it: counted in the live
/// metrics, its clamped histograms warned about, its latencies over time
/// added, its histograms handed to `store` and its parts table written
/// into the results folder `dir` (in memory there is none, and the
/// variant's own figures stay in its report).
fn variant_report(
    scenario: &CommonPlan,
    mut variant: VariantResult,
    dir: Option<&Path>,
    store: &mut Store,
) -> Result<VariantReport> {
    crate::system::live::variant_done(
        variant.passed(),
        variant.broken().len() as u64,
        &variant.ledger,
    );
    variant.warn_clamped_histograms();
    variant.add_interval_timelines();
    let mut histograms = Vec::new();
    for (name, recorder) in &variant.histograms {
        histograms.push(store([scenario.name(), &variant.name, name], recorder)?);
    }
    let parts_file = match dir {
        Some(dir) if !variant.parts.is_empty() => {
            let file = format!("parts/{}.{}.csv", scenario.name(), variant.name);
            fs::create_dir_all(dir.join("parts"))
                .with_context(|| format!("creating {}", dir.join("parts").display()))?;
            write_atomic(&dir.join(&file), &parts_csv(&variant.parts)?)?;
            Some(file)
        }
        _ => None,
    };
    Ok(VariantReport {
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
        inconclusive: variant.inconclusive,
        elapsed_s: variant.elapsed.as_secs_f64(),
        streams: variant.streams,
        parts_file,
        repetitions: Vec::new(),
    })
}

/// The summary's report of `scenario`, added at the end the first time
/// one of its variants arrives.
fn scenario_entry<'s>(summary: &'s mut Summary, scenario: &CommonPlan) -> &'s mut ScenarioReport {
    let name = scenario.name();
    match summary.scenarios.iter().position(|s| s.name == name) {
        Some(i) => &mut summary.scenarios[i],
        None => {
            summary.scenarios.push(ScenarioReport {
                name: name.to_string(),
                kind: scenario.kind.to_string(),
                variants: Vec::new(),
            });
            summary.scenarios.last_mut().expect("just pushed")
        }
    }
}

/// A histogram's files in a results folder's histograms/: with `repeat`,
/// they hold every repetition so far, pooled in `pooled`.
fn histogram_files(
    dir: &Path,
    pooled: &mut HashMap<String, Recorder>,
    repeat: usize,
    [scenario, variant, name]: [&str; 3],
    recorder: &Recorder,
) -> Result<HistogramReport> {
    let stem = format!("{scenario}.{variant}.{name}");
    let recorder = if repeat > 1 {
        let pooled = pooled.entry(stem.clone()).or_default();
        pooled.merge(recorder);
        &*pooled
    } else {
        recorder
    };
    let hgrm_file = format!("histograms/{stem}.hgrm");
    let hdr_file = format!("histograms/{stem}.hdr");
    write_atomic(&dir.join(&hgrm_file), recorder.to_hgrm().as_bytes())?;
    write_atomic(
        &dir.join(&hdr_file),
        (recorder.to_base64() + "\n").as_bytes(),
    )?;
    let mut hlog_file = None;
    if let Some(log) = recorder.to_interval_log() {
        let file = format!("histograms/{stem}.hlog");
        write_atomic(&dir.join(&file), &log)?;
        hlog_file = Some(file);
    }
    Ok(HistogramReport {
        name: name.to_string(),
        count: recorder.count(),
        hgrm_file,
        hdr_file,
        hlog_file,
    })
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

/// A variant's parts as a table: kind, name, then every column any part
/// has, in the order first seen; a part without a column leaves it empty.
pub fn parts_csv(parts: &[Part]) -> Result<Vec<u8>> {
    let values = parts.iter().flat_map(|p| &p.values);
    let columns = first_seen(values.map(|(name, _)| name.as_str()));
    let mut out = csv::Writer::from_writer(Vec::new());
    out.write_record(["kind", "name"].iter().chain(&columns))?;
    for part in parts {
        let mut row = vec![part.kind.clone(), part.name.clone()];
        for column in &columns {
            let cell = part.values.iter().find(|(n, _)| n == column);
            row.push(cell.map_or(String::new(), |(_, v)| plain(v)));
        }
        out.write_record(&row)?;
    }
    out.into_inner().context("finishing a parts table")
}

/// A JSON value as a table cell shows it: a string without its quotes.
pub fn plain(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Each distinct item once, in the order first seen: the rows or columns
/// a table of many variants (or repetitions, or parts) shows.
pub fn first_seen<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// Writes `path` through a temporary file and a rename, so readers never
/// see a half-written file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    // Created afresh, never opened through what is there: a symlink left
    // at the temporary name would have the write land on its target.
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", tmp.display())),
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.sync_data().ok();
    fs::rename(&tmp, path).with_context(|| format!("renaming {} into place", tmp.display()))
}

/// Reads a summary from a results folder or a summary.json path.
pub fn read_summary(path: &Path) -> Result<Summary> {
    read_json(&summary_file(path), "a jsbench summary")
}

/// The summary.json of a results folder, or the path itself.
pub fn summary_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("summary.json")
    } else {
        path.to_path_buf()
    }
}

/// Reads a JSON file jsbench wrote, every error a [`UsageError`] naming
/// the file: one it cannot read, one that is not `what` ("a jsbench
/// summary").
pub fn read_json<T: serde::de::DeserializeOwned>(file: &Path, what: &str) -> Result<T> {
    let text = read_capped(file, MAX_JSON_BYTES)?;
    let read = serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("{} is not {what}: {e}", file.display())))?;
    Ok(read)
}

/// The largest results JSON read (summary.json, ab.json, a history): a
/// soak's summary is well under a megabyte; a file beyond this is not one.
pub const MAX_JSON_BYTES: u64 = 256 << 20;
/// The largest histogram file read: a whole-range histogram at its
/// precision compresses to kilobytes.
pub const MAX_HISTOGRAM_BYTES: u64 = 16 << 20;

/// A results file's text, from a regular file of at most `cap` bytes:
/// results travel as CI artifacts, and a file named in them may be a
/// device (`/dev/zero` reads forever) or far larger than any jsbench wrote.
pub fn read_capped(file: &Path, cap: u64) -> Result<String> {
    use std::io::Read;
    let cannot =
        |e: &dyn std::fmt::Display| UsageError(format!("cannot read {}: {e}", file.display()));
    let meta = fs::metadata(file).map_err(|e| cannot(&e))?;
    if !meta.is_file() {
        return Err(cannot(&"not a regular file").into());
    }
    if meta.len() > cap {
        return Err(cannot(&format!(
            "{} bytes, more than the {cap} a results file may hold",
            meta.len()
        ))
        .into());
    }
    let mut text = String::new();
    fs::File::open(file)
        .and_then(|f| f.take(cap + 1).read_to_string(&mut text))
        .map_err(|e| cannot(&e))?;
    if text.len() as u64 > cap {
        return Err(cannot(&format!(
            "it grew past the {cap} bytes a results file may hold"
        ))
        .into());
    }
    Ok(text)
}

/// Refuses a file whose `schema` version is newer than this build reads
/// (`newest`) by name, rather than as a confusing parse error.
pub fn refuse_newer(file: &Path, schema: &str, version: u32, newest: u32) -> Result<()> {
    if version > newest {
        return Err(UsageError(format!(
            "{} has {schema} schema version {version}, written by a newer jsbench; this one reads up to {newest}",
            file.display(),
        ))
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::metrics::Direction;
    use crate::variant::Invariant;

    fn run_metadata(repeat: usize) -> RunMetadata {
        serde_json::from_value(serde_json::json!({
            "id": "t", "started_at": "t", "finished_at": null,
            "tool": {"name": "jsbench", "version": "0", "git_commit": null, "git_dirty": false},
            "server": {"mode": "embedded", "version": "2.15.1", "urls": "u", "server_name": "s",
                       "cluster": null, "jetstream_domain": null, "storage": "file", "replicas": 1},
            "host": {"os": "linux", "arch": "x86_64", "cores": 2, "memory_bytes": null,
                     "cpu_model": null, "hostname": null},
            "profile": {"name": "t", "source": "t", "description": "", "text": ""},
            "repeat": repeat,
        }))
        .unwrap()
    }

    fn variant(p50_us: u64, lost: u64) -> VariantResult {
        let mut v = VariantResult::new("rate-100");
        let mut r = Recorder::new();
        for _ in 0..10 {
            r.record(p50_us * 1_000);
        }
        v.histograms.push(("e2e_latency".into(), r));
        v.metric("e2e_latency.p50", "us", p50_us as f64, Direction::Lower);
        v.invariants.push(Invariant::equal("lost = 0", lost, 0));
        v
    }

    #[test]
    fn every_repetition_is_on_disk_as_soon_as_it_is_recorded() {
        let parent = tempfile::tempdir().unwrap();
        let profile = crate::scenario::parse(
            "t",
            "name = \"t\"\nrepeat = 2\n[[scenario]]\nkind = \"latency\"\nduration = \"1s\"\nrates = [100]\n",
        )
        .unwrap();
        let plan = &profile.scenarios[0].common;
        let mut writer = ResultsWriter::create(parent.path(), run_metadata(2)).unwrap();
        let dir = writer.dir().to_path_buf();

        writer.repetition(1).record(plan, variant(200, 0)).unwrap();
        let on_disk = read_summary(&dir).unwrap();
        let v = &on_disk.scenarios[0].variants[0];
        assert_eq!(
            v.metric("e2e_latency.p50").unwrap().repetitions,
            vec![200.0]
        );
        assert_eq!(v.repetitions.len(), 1);
        assert!(dir.join(ci::DIR).join(ci::SMALLER_IS_BETTER).is_file());

        writer.repetition(2).record(plan, variant(300, 1)).unwrap();
        let on_disk = read_summary(&dir).unwrap();
        assert_eq!(
            on_disk.scenarios[0].variants.len(),
            1,
            "one variant, two repetitions"
        );
        let v = &on_disk.scenarios[0].variants[0];
        let p50 = v.metric("e2e_latency.p50").unwrap();
        assert_eq!(p50.repetitions, vec![200.0, 300.0]);
        assert_eq!(p50.value, 250.0);
        assert!(!v.passed, "repetition 2 lost a message");
        assert!(
            v.invariants[0]
                .detail
                .starts_with("failed in repetition 2 of 2")
        );
        // The histogram files pool both repetitions.
        assert_eq!(v.histograms[0].count, 20);
        let pooled = Recorder::from_base64(
            &fs::read_to_string(dir.join(&v.histograms[0].hdr_file)).unwrap(),
        )
        .unwrap();
        assert_eq!(pooled.count(), 20);
        // A variant that broke an invariant goes to the CI files marked,
        // with its count of broken invariants beside its figures.
        let smaller = fs::read_to_string(dir.join(ci::DIR).join(ci::SMALLER_IS_BETTER)).unwrap();
        assert!(
            smaller.contains("latency/rate-100/invariants_failed")
                && smaller.contains("INVARIANTS BROKEN (lost = 0)"),
            "{smaller}"
        );
    }

    #[test]
    fn single_runs_keep_the_plain_form() {
        let parent = tempfile::tempdir().unwrap();
        let profile = crate::scenario::parse(
            "t",
            "name = \"t\"\n[[scenario]]\nkind = \"latency\"\nduration = \"1s\"\nrates = [100]\n",
        )
        .unwrap();
        let mut writer = ResultsWriter::create(parent.path(), run_metadata(1)).unwrap();
        writer
            .record(&profile.scenarios[0].common, variant(200, 0))
            .unwrap();
        let json = fs::read_to_string(writer.dir().join("summary.json")).unwrap();
        assert!(!json.contains("\"repetitions\""), "{json}");
        assert!(!json.contains("\"spread\""), "{json}");
    }
}
