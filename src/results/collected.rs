//! A summary built in memory: `jsbench ab-side` answers each turn with
//! one, and leaves nothing on disk, so many turns cost no files.

use std::collections::BTreeMap;

use anyhow::Result;

use super::summary::{HistogramReport, RunMetadata, Summary};
use super::{scenario_entry, variant_report};
use crate::profile::CommonPlan;
use crate::variant::{VariantResult, VariantSink};

/// Variants reported exactly as a results folder reports a single run
/// (`repeat = 1`), with each histogram kept as base64 instead of files: a
/// histogram's `hgrm_file` and `hdr_file` are empty, since there is none.
pub struct Collected {
    summary: Summary,
    /// Histograms by `<scenario>/<variant>/<name>`, V2-deflate base64
    /// (what a results folder's `.hdr` file holds).
    histograms: BTreeMap<String, String>,
}

impl Collected {
    pub fn new(run: RunMetadata) -> Self {
        Collected {
            summary: Summary::new(run),
            histograms: BTreeMap::new(),
        }
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    pub fn summary_mut(&mut self) -> &mut Summary {
        &mut self.summary
    }

    /// The summary and every variant's histograms, by
    /// `<scenario>/<variant>/<histogram name>`.
    pub fn into_parts(self) -> (Summary, BTreeMap<String, String>) {
        (self.summary, self.histograms)
    }
}

impl VariantSink for Collected {
    fn record(&mut self, scenario: &CommonPlan, variant: VariantResult) -> Result<()> {
        let histograms = &mut self.histograms;
        let report = variant_report(scenario, variant, None, &mut |at, recorder| {
            histograms.insert(at.join("/"), recorder.to_base64());
            Ok(HistogramReport {
                name: at[2].to_string(),
                count: recorder.count(),
                hgrm_file: String::new(),
                hdr_file: String::new(),
                hlog_file: None,
            })
        })?;
        scenario_entry(&mut self.summary, scenario)
            .variants
            .push(report);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::histogram::Recorder;
    use crate::record::metrics::Direction;
    use crate::variant::Invariant;

    #[test]
    fn a_collected_variant_reads_as_a_single_run_with_its_histogram_in_memory() {
        let profile = crate::scenario::parse(
            "t",
            "name = \"t\"\n[[scenario]]\nkind = \"latency\"\nduration = \"1s\"\nrates = [100]\n",
        )
        .unwrap();
        let run = serde_json::from_value(serde_json::json!({
            "id": "t", "started_at": "t", "finished_at": null,
            "tool": {"name": "jsbench", "version": "0", "git_commit": null, "git_dirty": false},
            "server": {"mode": "embedded", "version": "2.15.1", "urls": "u", "server_name": "s",
                       "cluster": null, "jetstream_domain": null, "storage": "file", "replicas": 1},
            "host": {"os": "linux", "arch": "x86_64", "cores": 2, "memory_bytes": null,
                     "cpu_model": null, "hostname": null},
            "profile": {"name": "t", "source": "t", "description": "", "text": ""},
        }))
        .unwrap();
        let mut collected = Collected::new(run);
        let mut v = VariantResult::new("rate-100");
        let mut r = Recorder::new();
        for i in 1..=10 {
            r.record(i * 1_000);
        }
        v.latency("e2e_latency", &r);
        v.metric("publish.rate", "msg/s", 100.0, Direction::Higher);
        v.invariants.push(Invariant::equal("lost = 0", 0, 0));
        collected.record(&profile.scenarios[0].common, v).unwrap();

        let (summary, histograms) = collected.into_parts();
        assert_eq!(summary.scenarios.len(), 1);
        let variant = &summary.scenarios[0].variants[0];
        assert!(variant.passed);
        assert!(variant.metric("e2e_latency.p50").is_some());
        assert!(variant.repetitions.is_empty(), "a single run's form");
        assert_eq!(variant.histograms[0].count, 10);
        assert_eq!(variant.histograms[0].hdr_file, "");
        let text = &histograms["latency/rate-100/e2e_latency"];
        assert_eq!(Recorder::from_base64(text).unwrap().count(), 10);
    }
}
