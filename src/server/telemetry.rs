//! The server's own view of a variant, sampled from its monitoring
//! endpoints while the variant runs: memory, CPU, messages in and out,
//! slow consumers, JetStream storage and API errors, routes and the meta
//! leader. A latency figure says what a client saw; these say what it cost
//! the server and whether the server was struggling (a slow consumer, an
//! API error, a leader that moved), from counters that owe nothing to
//! jsbench's clocks.
//!
//! Endpoints: the embedded server's and every node of a local cluster
//! always; a server jsbench did not start only with `--monitor` (one URL
//! per node, comma-separated).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::clock;
use crate::record::timeline::Timeline;
use crate::system::http::get_json;

/// The timelines of the servers' memory (MB) and CPU (% of a core),
/// summed over the nodes.
pub const SERVER_MEM_MB: &str = "server.mem_mb";
pub const SERVER_CPU_PCT: &str = "server.cpu_pct";

/// How often each endpoint is asked: fine enough for memory and CPU over
/// a variant of seconds, coarse enough that the asking costs the server
/// (and the shared cores) next to nothing.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// A node's monitoring endpoint, `http://127.0.0.1:8222`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitor {
    /// How the results name the node.
    pub node: String,
    pub url: String,
}

/// What one node said at one tick. Counters are cumulative, as the server
/// reports them; gauges are as of the sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSample {
    /// Tick number, the same for every node sampled together.
    pub tick: u32,
    pub at_ns: u64,
    /// Index into [`Telemetry::nodes`].
    pub node: usize,
    pub cpu_pct: f64,
    pub mem_bytes: u64,
    pub in_msgs: u64,
    pub out_msgs: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    pub slow_consumers: u64,
    /// JetStream memory and file storage in use on the node.
    pub js_memory: u64,
    pub js_storage: u64,
    pub api_total: u64,
    pub api_errors: u64,
    /// Routes to other nodes (clusters only).
    pub routes: Option<u64>,
    pub meta_leader: Option<String>,
}

/// Everything sampled over one variant.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Telemetry {
    pub nodes: Vec<String>,
    pub samples: Vec<NodeSample>,
    /// Requests that failed (a node down, a timeout): their ticks lack
    /// that node.
    pub failed: u64,
    /// On clusters, each stream's leader whenever it changed (the first
    /// entry per stream is who led at the start): `(at_ns, stream, leader)`.
    #[serde(default)]
    pub stream_leaders: Vec<(u64, String, String)>,
}

/// How a stream between leaders shows in [`Telemetry::stream_leaders`].
pub const NO_LEADER: &str = "(no leader)";

/// Every stream's leader, as one node's `/jsz?accounts=true&streams=true`
/// reports them.
fn stream_leaders(url: &str) -> Option<Vec<(String, String)>> {
    let jsz: StreamsJsz = get_json(url, "/jsz?accounts=true&streams=true")?;
    jsz.account_details.as_ref()?;
    let leaders = jsz.streams().filter_map(|s| {
        // A replicated stream between leaders (an election under way)
        // has a cluster and no leader: a state worth seeing.
        let leader = s.cluster?.leader.filter(|l| !l.is_empty());
        Some((s.name, leader.unwrap_or_else(|| NO_LEADER.into())))
    });
    Some(leaders.collect())
}

/// A node's `/jsz?accounts=true&streams=true`: the streams it holds.
#[derive(Deserialize)]
pub(super) struct StreamsJsz {
    account_details: Option<Vec<AccountDetail>>,
}

impl StreamsJsz {
    pub(super) fn streams(self) -> impl Iterator<Item = StreamDetail> {
        self.account_details
            .into_iter()
            .flatten()
            .flat_map(|a| a.stream_detail)
    }
}

#[derive(Deserialize)]
struct AccountDetail {
    #[serde(default)]
    stream_detail: Vec<StreamDetail>,
}

#[derive(Deserialize)]
pub(super) struct StreamDetail {
    pub name: String,
    #[serde(default)]
    pub state: ReplicaState,
    pub cluster: Option<StreamCluster>,
}

#[derive(Deserialize)]
pub(super) struct StreamCluster {
    pub leader: Option<String>,
}

/// What one node holds of a stream, from its own `/jsz`: a replica's
/// state, not the leader's view of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct ReplicaState {
    pub messages: u64,
    pub first_seq: u64,
    pub last_seq: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Varz {
    cpu: f64,
    mem: u64,
    in_msgs: u64,
    out_msgs: u64,
    in_bytes: u64,
    out_bytes: u64,
    slow_consumers: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Jsz {
    memory: u64,
    storage: u64,
    api: JszApi,
    meta_cluster: Option<JszMeta>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JszApi {
    total: u64,
    errors: u64,
}

#[derive(Deserialize, Default)]
struct JszMeta {
    leader: Option<String>,
}

/// What a server states of its own durability settings and JetStream API
/// level: a PubAck's promise depends on them, so every result names them,
/// read from the server rather than from what jsbench asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Persistence {
    /// The fsync interval (`"2m"`), `None` when unknown.
    pub sync_interval: Option<String>,
    /// Whether every write is fsynced (`sync: always`), `None` when unknown.
    pub sync_always: Option<bool>,
    /// The JetStream API level (ADR-44), `None` when unknown.
    pub api_level: Option<u64>,
    /// Where the figures were read, or why they are unknown.
    pub source: String,
}

impl Persistence {
    /// One line: `sync always`, `sync every 2m`, or `sync unknown`.
    pub fn sync_label(&self) -> String {
        match (self.sync_always, &self.sync_interval) {
            (Some(true), _) => "always".into(),
            (Some(false), Some(i)) => format!("every {i}"),
            _ => "unknown".into(),
        }
    }
}

#[derive(Deserialize, Default)]
struct VarzJetStream {
    jetstream: Option<VarzJs>,
}

#[derive(Deserialize, Default)]
struct VarzJs {
    config: Option<VarzJsConfig>,
    stats: Option<VarzJsStats>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct VarzJsConfig {
    /// Nanoseconds; left out when zero.
    sync_interval: u64,
    sync_always: bool,
}

#[derive(Deserialize, Default)]
struct VarzJsStats {
    api: Option<VarzApi>,
}

#[derive(Deserialize, Default)]
struct VarzApi {
    level: Option<u64>,
}

/// The first answering node's /varz `jetstream.config` sync settings and
/// API level; `None` when no node answers or JetStream is off. Blocking:
/// call off the runtime.
pub fn persistence(monitors: &[Monitor]) -> Option<Persistence> {
    monitors.iter().find_map(|m| {
        let varz: VarzJetStream = get_json(&m.url, "/varz")?;
        let js = varz.jetstream?;
        let config = js.config?;
        Some(Persistence {
            sync_interval: Some(crate::profile::format_duration(Duration::from_nanos(
                config.sync_interval,
            ))),
            sync_always: Some(config.sync_always),
            api_level: js.stats.and_then(|s| s.api).and_then(|a| a.level),
            source: format!("/varz of {}", m.node),
        })
    })
}

/// What the server under test says of its persistence: /varz of the first
/// monitor that answers, else the API level from the JetStream account
/// info and the sync setting stated unknown.
pub async fn read_persistence(
    monitors: &[Monitor],
    js: &async_nats::jetstream::Context,
) -> anyhow::Result<Persistence> {
    let monitors = monitors.to_vec();
    let read = tokio::task::spawn_blocking(move || persistence(&monitors))
        .await
        .map_err(|e| anyhow::anyhow!("joining the /varz read: {e}"))?;
    if let Some(p) = read {
        return Ok(p);
    }
    // Without a monitoring endpoint: the API level from the JetStream
    // account info, the sync setting said to be unknown (the JetStream API
    // does not expose it).
    let api_level = js
        .query_account()
        .await
        .ok()
        .map(|a| a.requests.level as u64);
    Ok(Persistence {
        sync_interval: None,
        sync_always: None,
        api_level,
        source: "unknown sync setting: no monitoring URL (--monitor) to read /varz; \
                 API level from the JetStream account info"
            .into(),
    })
}

#[derive(Deserialize)]
struct Routez {
    #[serde(default)]
    num_routes: u64,
}

/// The servers' resident memory now (/varz `mem`), summed over the nodes
/// that answer; `None` when none does. Blocking: call off the runtime.
pub fn memory_now(monitors: &[Monitor]) -> Option<u64> {
    let mems: Vec<u64> = monitors
        .iter()
        .filter_map(|m| get_json::<Varz>(&m.url, "/varz").map(|v| v.mem))
        .collect();
    (!mems.is_empty()).then(|| mems.iter().sum())
}

/// One node's sample now; `None` when its /varz does not answer.
fn sample(tick: u32, node: usize, m: &Monitor, routes: bool) -> Option<NodeSample> {
    let varz: Varz = get_json(&m.url, "/varz")?;
    let jsz: Jsz = get_json(&m.url, "/jsz").unwrap_or_default();
    Some(NodeSample {
        tick,
        at_ns: clock::now_ns(),
        node,
        cpu_pct: varz.cpu,
        mem_bytes: varz.mem,
        in_msgs: varz.in_msgs,
        out_msgs: varz.out_msgs,
        in_bytes: varz.in_bytes,
        out_bytes: varz.out_bytes,
        slow_consumers: varz.slow_consumers,
        js_memory: jsz.memory,
        js_storage: jsz.storage,
        api_total: jsz.api.total,
        api_errors: jsz.api.errors,
        routes: routes
            .then(|| get_json::<Routez>(&m.url, "/routez").map(|r| r.num_routes))
            .flatten(),
        meta_leader: jsz.meta_cluster.and_then(|m| m.leader),
    })
}

/// Samples every endpoint on a background thread (blocking HTTP, off the
/// runtime that carries the load) until [`TelemetrySampler::finish`].
pub struct TelemetrySampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Telemetry>,
}

impl TelemetrySampler {
    /// `None` without endpoints.
    pub fn start(monitors: &[Monitor], every: Duration) -> Option<TelemetrySampler> {
        if monitors.is_empty() {
            return None;
        }
        let monitors = monitors.to_vec();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut t = Telemetry {
                nodes: monitors.iter().map(|m| m.node.clone()).collect(),
                ..Default::default()
            };
            let clustered = monitors.len() > 1;
            let mut tick = 0u32;
            let mut led: std::collections::BTreeMap<String, String> = Default::default();
            loop {
                for (i, m) in monitors.iter().enumerate() {
                    match sample(tick, i, m, clustered) {
                        Some(s) => t.samples.push(s),
                        None => t.failed += 1,
                    }
                }
                // Stream leaders from the first node that answers.
                if clustered && let Some(now) = monitors.iter().find_map(|m| stream_leaders(&m.url))
                {
                    let at = clock::now_ns();
                    for (stream, leader) in now {
                        if led.get(&stream) != Some(&leader) {
                            led.insert(stream.clone(), leader.clone());
                            t.stream_leaders.push((at, stream, leader));
                        }
                    }
                }
                tick += 1;
                // The last tick is taken after the stop, so the counters
                // cover the whole variant.
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let slept = std::time::Instant::now();
                while slept.elapsed() < every && !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20).min(every));
                }
            }
            t
        });
        Some(TelemetrySampler { stop, thread })
    }

    pub fn finish(self) -> Telemetry {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

impl Telemetry {
    fn ticks(&self) -> impl Iterator<Item = &[NodeSample]> {
        self.samples.chunk_by(|a, b| a.tick == b.tick)
    }

    /// The highest memory the servers used at once (summed over nodes
    /// sampled in the same tick).
    pub fn peak_mem_bytes(&self) -> Option<u64> {
        self.peak(|s| s.mem_bytes)
    }

    /// The highest value of a gauge summed over the nodes of one tick.
    pub fn peak(&self, gauge: fn(&NodeSample) -> u64) -> Option<u64> {
        self.ticks().map(|tick| tick.iter().map(gauge).sum()).max()
    }

    /// How far memory rose above its first sample: what this variant
    /// added, where the peak also carries what earlier variants left in
    /// the same server process (Go returns freed heap to the system
    /// lazily).
    pub fn mem_growth_bytes(&self) -> Option<u64> {
        let first: u64 = self.ticks().next()?.iter().map(|s| s.mem_bytes).sum();
        Some(self.peak_mem_bytes()?.saturating_sub(first))
    }

    /// How much a cumulative counter grew over the variant, summed over
    /// nodes (each node from its first sample to its last).
    pub fn growth(&self, counter: fn(&NodeSample) -> u64) -> u64 {
        (0..self.nodes.len())
            .map(|node| {
                let mine = || self.samples.iter().filter(move |s| s.node == node);
                match (mine().next(), mine().next_back()) {
                    (Some(first), Some(last)) => counter(last).saturating_sub(counter(first)),
                    _ => 0,
                }
            })
            .sum()
    }

    /// Messages a second the server took in (`/varz` in_msgs) between its
    /// first and its last sample inside `from_ns..=to_ns`: the server's
    /// own count of a publish rate. A single server only (a cluster's
    /// nodes count what their routes bring too); `None` with fewer than
    /// two samples inside.
    pub fn in_msgs_rate(&self, from_ns: u64, to_ns: u64) -> Option<f64> {
        if self.nodes.len() != 1 {
            return None;
        }
        let inside = || {
            self.samples
                .iter()
                .filter(|s| (from_ns..=to_ns).contains(&s.at_ns))
        };
        let (first, last) = (inside().next()?, inside().next_back()?);
        let span = last.at_ns.checked_sub(first.at_ns).filter(|&d| d > 0)?;
        Some(last.in_msgs.saturating_sub(first.in_msgs) as f64 * 1e9 / span as f64)
    }

    /// The meta leader each time it changed, with seconds from `origin_ns`:
    /// the first entry is who led at the start.
    pub fn meta_leaders(&self, origin_ns: u64) -> Vec<(f64, String)> {
        let mut changes: Vec<(f64, String)> = Vec::new();
        for s in &self.samples {
            if let Some(leader) = &s.meta_leader
                && changes.last().is_none_or(|(_, l)| l != leader)
            {
                let at = s.at_ns.saturating_sub(origin_ns) as f64 / 1e9;
                changes.push((at, leader.clone()));
            }
        }
        changes
    }

    /// Streams whose leader changed during the variant, as
    /// `stream: a at 0.0 s, then b at 3.1 s`.
    pub fn stream_leader_moves(&self, origin_ns: u64) -> Vec<String> {
        let mut by_stream: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        for (at, stream, leader) in &self.stream_leaders {
            let s = at.saturating_sub(origin_ns) as f64 / 1e9;
            by_stream
                .entry(stream)
                .or_default()
                .push(format!("{leader} at {s:.1} s"));
        }
        by_stream
            .into_iter()
            .filter(|(_, l)| l.len() > 1)
            .map(|(stream, l)| format!("{stream}: {}", l.join(", then ")))
            .collect()
    }

    /// Nodes that had fewer routes at some sample than at their first: a
    /// route went down during the variant.
    pub fn routes_lost(&self, origin_ns: u64) -> Vec<String> {
        let mut lost = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let mine: Vec<&NodeSample> = self.samples.iter().filter(|s| s.node == i).collect();
            let Some(first) = mine.first().and_then(|s| s.routes) else {
                continue;
            };
            if let Some(low) = mine
                .iter()
                .filter(|s| s.routes.is_some_and(|r| r < first))
                .min_by_key(|s| s.routes)
            {
                lost.push(format!(
                    "{node} had {} of its {first} routes at {:.1} s",
                    low.routes.unwrap_or(0),
                    low.at_ns.saturating_sub(origin_ns) as f64 / 1e9
                ));
            }
        }
        lost
    }

    /// Gauges over time as timelines from `origin_ns`: `server.mem_mb` and
    /// `server.cpu_pct` summed over nodes, and per node
    /// (`server.<node>.mem_mb`) when there are several. Buckets are a fifth
    /// of the sampling interval, so a late sample never lands in its
    /// predecessor's bucket; buckets without a sample stay 0.
    pub fn timelines(&self, origin_ns: u64) -> Vec<(String, Timeline)> {
        let bucket_ns = (SAMPLE_EVERY / 5).as_nanos() as u64;
        let series = |name: String, pick: &dyn Fn(&NodeSample) -> Option<f64>| {
            let mut t = Timeline {
                origin_ns,
                bucket_ns,
                counts: Vec::new(),
            };
            for tick in self.ticks() {
                let values: Vec<f64> = tick.iter().filter_map(pick).collect();
                if values.is_empty() {
                    continue;
                }
                let at = tick[0].at_ns.saturating_sub(origin_ns);
                let i = (at / bucket_ns) as usize;
                if t.counts.len() <= i {
                    t.counts.resize(i + 1, 0);
                }
                t.counts[i] = values.iter().sum::<f64>().round() as u64;
            }
            (name, t)
        };
        let mb = |s: &NodeSample| s.mem_bytes as f64 / 1e6;
        let mut all = vec![
            series(SERVER_MEM_MB.into(), &|s| Some(mb(s))),
            series(SERVER_CPU_PCT.into(), &|s| Some(s.cpu_pct)),
        ];
        if self.nodes.len() > 1 {
            for (i, node) in self.nodes.iter().enumerate() {
                all.push(series(format!("server.{node}.mem_mb"), &|s| {
                    (s.node == i).then(|| mb(s))
                }));
            }
        }
        all
    }
}

/// Monitors from `--monitor`: comma-separated URLs, named by position.
pub fn monitors_from_list(list: &str) -> Vec<Monitor> {
    list.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .enumerate()
        .map(|(i, url)| Monitor {
            node: format!("monitor-{}", i + 1),
            url: url.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(tick: u32, node: usize, mem: u64, in_msgs: u64, leader: &str) -> NodeSample {
        NodeSample {
            tick,
            at_ns: 1_000_000_000 + u64::from(tick) * 500_000_000,
            node,
            mem_bytes: mem,
            in_msgs,
            cpu_pct: 50.0,
            meta_leader: Some(leader.into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_servers_inbound_rate_is_read_between_the_samples_inside_a_window() {
        let one = |samples: &[(u32, u64)]| Telemetry {
            nodes: vec!["n1".into()],
            samples: samples
                .iter()
                .map(|&(tick, n)| at(tick, 0, 0, n, "n1"))
                .collect(),
            ..Default::default()
        };
        // Samples at 1.0, 1.5, 2.0, 2.5 and 3.0 s; the window from 1.2 s
        // to 2.6 s holds 1.5 (100) to 2.5 (1,100): 1,000 in a second.
        let t = one(&[(0, 0), (1, 100), (2, 600), (3, 1100), (4, 1200)]);
        let rate = t.in_msgs_rate(1_200_000_000, 2_600_000_000).unwrap();
        assert!((rate - 1000.0).abs() < 1e-9, "{rate}");
        assert_eq!(t.in_msgs_rate(1_200_000_000, 1_900_000_000), None);
        let mut two = t.clone();
        two.nodes.push("n2".into());
        assert_eq!(two.in_msgs_rate(0, u64::MAX), None, "routes count too");
    }

    #[test]
    fn peaks_sum_nodes_per_tick_and_counters_grow_per_node() {
        let t = Telemetry {
            nodes: vec!["n1".into(), "n2".into()],
            samples: vec![
                at(0, 0, 10_000_000, 100, "n1"),
                at(0, 1, 20_000_000, 1000, "n1"),
                at(1, 0, 40_000_000, 600, "n1"),
                at(1, 1, 20_000_000, 1300, "n2"),
                at(2, 0, 5_000_000, 700, "n2"),
            ],
            failed: 1,
            stream_leaders: vec![
                (1_000_000_000, "S".into(), "n1".into()),
                (2_500_000_000, "S".into(), "n3".into()),
                (1_000_000_000, "T".into(), "n2".into()),
            ],
        };
        assert_eq!(
            t.stream_leader_moves(1_000_000_000),
            ["S: n1 at 0.0 s, then n3 at 1.5 s"]
        );
        assert_eq!(t.peak_mem_bytes(), Some(60_000_000));
        assert_eq!(t.mem_growth_bytes(), Some(30_000_000));
        assert_eq!(t.growth(|s| s.in_msgs), 600 + 300);
        let leaders = t.meta_leaders(1_000_000_000);
        assert_eq!(leaders, [(0.0, "n1".to_string()), (0.5, "n2".to_string())]);
        let timelines = t.timelines(1_000_000_000);
        let mem = &timelines
            .iter()
            .find(|(n, _)| n == "server.mem_mb")
            .unwrap()
            .1;
        assert_eq!(mem.counts, [30, 0, 0, 0, 0, 60, 0, 0, 0, 0, 5]);
        let n2 = &timelines
            .iter()
            .find(|(n, _)| n == "server.n2.mem_mb")
            .unwrap()
            .1;
        assert_eq!(n2.counts, [20, 0, 0, 0, 0, 20]);
        assert_eq!(Telemetry::default().peak_mem_bytes(), None);
        let mut routed = t.clone();
        for s in &mut routed.samples {
            s.routes = Some(if s.tick == 1 && s.node == 1 { 1 } else { 2 });
        }
        assert_eq!(
            routed.routes_lost(1_000_000_000),
            ["n2 had 1 of its 2 routes at 0.5 s"]
        );
    }

    #[test]
    fn monitor_lists_are_split_and_named() {
        let m = monitors_from_list("http://a:8222, http://b:8222,");
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].node, "monitor-2");
        assert_eq!(m[1].url, "http://b:8222");
    }
}
