//! The schema of `summary.json`: self-describing, diffable, and readable by
//! later versions of jsbench (`report`, `compare`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::server::telemetry::Persistence;

// Parts of the schema that lower layers fill in are defined where they are
// made, and named here so the whole schema reads from this file.
pub use crate::connect::{ConnectionInfo, NodeInfo};
use crate::record::ledger::LedgerCounts;
use crate::record::metrics::Metric;
use crate::record::timeline::Timeline;
pub use crate::streams::provision::{PeerInfo, SizedMaxBytes, StreamPlacement};
pub use crate::system::about::{HostInfo, SCHEMA_VERSION, ToolInfo};
use crate::variant::Invariant;
pub use crate::worker::WorkerInfo;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    pub run: RunMetadata,
    pub scenarios: Vec<ScenarioReport>,
    /// passed, failed (an invariant or a variant failed), not applicable
    /// (nothing failed, but every variant's every check was "not
    /// applicable": nothing was proved), interrupted, incomplete (a worker disappeared: its part of the results is
    /// missing), or running (the run has not finished writing).
    pub verdict: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMetadata {
    pub id: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub tool: ToolInfo,
    pub server: ServerInfo,
    pub host: HostInfo,
    pub profile: ProfileInfo,
    /// Streams the run left behind (`--keep`, or a failed clean-up).
    #[serde(default)]
    pub kept_streams: Vec<String>,
    /// How often each scenario runs (the profile's `repeat`); 1 in
    /// summaries written before repetitions existed.
    #[serde(default = "one")]
    pub repeat: usize,
    /// Worker processes that ran shares of the load (`run --workers N`),
    /// with their clocks; empty for a single-process run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerInfo>,
    /// jsbench's own peak resident memory when the run finished (bytes,
    /// the process's high-water mark: earlier profiles of the same
    /// invocation included).
    pub peak_rss: Option<u64>,
    /// The largest ledger cost of any variant, bytes per message (each
    /// variant's own is its `ledger_bytes_per_msg` metric).
    pub ledger_bytes_per_msg: Option<f64>,
    /// Worker threads of the publish and consume runtimes
    /// (`--publisher-threads`, `--consumer-threads`).
    pub client_threads: Option<(usize, usize)>,
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// "embedded" (started by jsbench on loopback) or "external".
    pub mode: String,
    /// Server version from the connection handshake.
    pub version: String,
    /// Client URLs, credentials removed.
    pub urls: String,
    pub server_name: String,
    pub cluster: Option<String>,
    pub jetstream_domain: Option<String>,
    pub storage: String,
    pub replicas: usize,
    /// Warning and error lines from the embedded server's log.
    #[serde(default)]
    pub log_problems: Vec<String>,
    /// Servers in the cluster, counted from the client URLs the servers
    /// advertise (or the nodes jsbench started); `None` when not clustered.
    pub cluster_size: Option<usize>,
    /// Every server jsbench's connections landed on (all nodes of an
    /// embedded cluster), with its version.
    #[serde(default)]
    pub nodes: Vec<NodeInfo>,
    /// How jsbench connected: never a secret, only its kind and origin.
    pub connection: Option<ConnectionInfo>,
    /// The max_bytes jsbench set on its streams because the account
    /// requires one, and how it was sized; `None`: streams unlimited.
    pub stream_max_bytes: Option<SizedMaxBytes>,
    /// The server's sync setting and JetStream API level as it reported
    /// them when the profile started (a `[server] sync` list changes the
    /// setting per variant: each variant's `server.*` params say which).
    pub persistence: Option<Persistence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileInfo {
    pub name: String,
    pub source: String,
    pub description: String,
    /// The profile as read, so the run can be reproduced.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioReport {
    pub name: String,
    pub kind: String,
    pub variants: Vec<VariantReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantReport {
    pub name: String,
    pub passed: bool,
    pub params: BTreeMap<String, serde_json::Value>,
    pub metrics: Vec<Metric>,
    pub histograms: Vec<HistogramReport>,
    pub ledger: LedgerCounts,
    pub invariants: Vec<Invariant>,
    pub warnings: Vec<String>,
    pub timelines: BTreeMap<String, Timeline>,
    pub error: Option<String>,
    /// Why the variant could not answer its question, when it could not
    /// (a search where nothing held down to its floor): the run's verdict
    /// is then "inconclusive" (exit 3) unless something failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inconclusive: Option<String>,
    pub elapsed_s: f64,
    /// Placement of the streams the variant used (leader and replicas).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamPlacement>,
    /// `parts/<scenario>.<variant>.csv`: one row per stream and durable of
    /// a variant with many (fanout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts_file: Option<String>,
    /// One entry per repetition when the profile repeats its scenarios
    /// (empty for a single run). The fields above then describe all
    /// repetitions together: metric values are medians, the ledger and
    /// elapsed time are sums, an invariant holds only if it held in every
    /// repetition, histograms pool every repetition's samples, timelines
    /// are the first repetition's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repetitions: Vec<RepetitionReport>,
}

/// What one repetition of a variant left behind that the merged report
/// cannot show: which repetition failed, and its own accounting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepetitionReport {
    /// 1-based, in run order.
    pub index: usize,
    pub passed: bool,
    pub ledger: LedgerCounts,
    pub invariants: Vec<Invariant>,
    pub error: Option<String>,
    pub elapsed_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistogramReport {
    pub name: String,
    pub count: u64,
    /// Percentile-distribution text, values in microseconds; relative to
    /// the results folder.
    pub hgrm_file: String,
    /// The histogram itself, V2-deflate base64 (exact, mergeable); relative
    /// to the results folder.
    pub hdr_file: String,
    /// The same values per second, as an HdrHistogram interval log;
    /// relative to the results folder. Absent for histograms kept whole
    /// only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hlog_file: Option<String>,
}

impl Summary {
    /// A summary before any variant has finished: its verdict says so.
    pub fn new(run: RunMetadata) -> Summary {
        Summary {
            schema_version: SCHEMA_VERSION,
            run,
            scenarios: Vec::new(),
            verdict: "running".into(),
        }
    }

    pub fn variants(&self) -> impl Iterator<Item = (&ScenarioReport, &VariantReport)> {
        self.scenarios
            .iter()
            .flat_map(|s| s.variants.iter().map(move |v| (s, v)))
    }

    pub fn passed(&self) -> bool {
        self.variants().all(|(_, v)| v.passed)
    }

    /// Some variant finished and checked nothing that could apply: the
    /// run proved less than it claims, so it does not pass ("not
    /// applicable", exit 4, unless something failed).
    pub fn checked_nothing(&self) -> bool {
        self.variants().any(|(_, v)| v.checked_nothing())
    }

    /// Some variant broke nothing but could not answer its question (a
    /// search where nothing held down to its floor): the run does not
    /// pass ("inconclusive", exit 3, unless something failed).
    pub fn inconclusive(&self) -> bool {
        self.variants().any(|(_, v)| v.inconclusive.is_some())
    }
}

impl VariantReport {
    /// Finished without an error, and no check it made could apply (or
    /// it made none).
    pub fn checked_nothing(&self) -> bool {
        self.error.is_none()
            && self.inconclusive.is_none()
            && self.invariants.iter().all(|i| !i.applicable)
    }

    pub fn metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }
}
