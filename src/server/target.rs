//! The server under test: one jsbench starts on loopback, a local cluster
//! it starts, or the user's. Decided once per run from the resolved
//! connection and `--cluster`; what the results say about the topology
//! comes from here.

use anyhow::Result;

use crate::connect::Resolution;
use std::sync::Arc;

use crate::connect::NodeInfo;
use crate::profile::{FaultKind, Profile, SyncSetting};
use crate::server::fault::FaultHandle;
use crate::server::leaf::{self, LeafHandle, LeafServer};
use crate::server::telemetry::{Monitor, monitors_from_list};
use crate::server::{EmbeddedCluster, EmbeddedServer};
use crate::system::cpu::ServerCpu;
use crate::system::error::UsageError;

/// The server under test: ours on loopback (one node or a cluster), or
/// the user's.
pub enum Target {
    Embedded(Arc<EmbeddedServer>),
    Cluster(Arc<EmbeddedCluster>),
    External,
}

impl Target {
    /// Starts what has to be started: nothing for a named server. A
    /// cluster whose routes a scenario faults (`faults`) runs them through
    /// relays.
    /// It starts with `sync` (the first profile's first `[server] sync`).
    /// With `leafnode`, a leaf server too, connected to it (node 1 of a
    /// cluster) through a relay.
    pub fn start(
        resolution: &Resolution,
        cluster: Option<usize>,
        faults: &[Fault<'_>],
        sync: Option<SyncSetting>,
        leafnode: bool,
    ) -> Result<(Self, Option<LeafHandle>)> {
        let mut options = crate::server::ServerOptions {
            relay_routes: faults.iter().any(|f| f.kind.is_route()),
            sync,
            ..Default::default()
        };
        let hub_port = match (leafnode, &resolution.remote) {
            (false, _) => None,
            (true, Some(_)) => {
                return Err(UsageError(
                    "--leafnode starts a leaf server connected to a server jsbench starts;                      drop -s/--server (and NATS_URL, the context) or --leafnode"
                        .into(),
                )
                .into());
            }
            (true, None) => {
                let (hub, port) = leaf::hub_options(&options)?;
                options = hub;
                Some(port)
            }
        };
        let target = match (&resolution.remote, cluster) {
            (Some(_), _) => Target::External,
            (None, Some(n)) => Target::Cluster(Arc::new(EmbeddedCluster::start_with(n, &options)?)),
            (None, None) => Target::Embedded(Arc::new(EmbeddedServer::start_with(&options)?)),
        };
        let leaf = hub_port
            .map(|port| {
                LeafServer::start(port, None, &crate::server::ServerOptions::default())
                    .map(Arc::new)
            })
            .transpose()?;
        Ok((target, leaf))
    }

    pub fn is_external(&self) -> bool {
        matches!(self, Target::External)
    }

    /// Nodes in the cluster: the ones started, or for an external cluster
    /// the client URLs its servers advertise (all of them, unless
    /// advertising is off).
    pub fn cluster_size(&self, info: &async_nats::ServerInfo) -> Option<usize> {
        match self {
            Target::Cluster(c) => Some(c.nodes().len()),
            _ if info.cluster.is_some() => Some(info.connect_urls.len().max(1)),
            _ => None,
        }
    }

    pub fn urls(&self) -> String {
        match self {
            Target::Embedded(s) => s.url().to_string(),
            Target::Cluster(c) => c.urls(),
            Target::External => String::new(),
        }
    }

    pub fn mode(&self) -> &'static str {
        match self {
            Target::Embedded(_) => "embedded",
            Target::Cluster(_) => "embedded-cluster",
            Target::External => "external",
        }
    }

    /// The servers jsbench started, each with the name the results give
    /// it (`embedded`, or its server name in a cluster), and the cluster's
    /// name; none for an external server.
    fn started(&self) -> (Vec<(String, &EmbeddedServer)>, Option<&str>) {
        match self {
            Target::Embedded(s) => (vec![("embedded".into(), &**s)], None),
            Target::Cluster(c) => (c.members().collect(), Some(c.name())),
            Target::External => (Vec::new(), None),
        }
    }

    /// The nodes jsbench started; an external cluster's are learnt from
    /// the connections instead.
    pub fn nodes(&self, info: &async_nats::ServerInfo) -> Vec<NodeInfo> {
        let (started, cluster) = self.started();
        let started = started.into_iter().map(|(name, s)| NodeInfo {
            // A single server goes by the name it gives itself.
            name: cluster.map_or_else(|| info.server_name.clone(), |_| name),
            version: s.version().to_string(),
            cluster: cluster.map(str::to_string),
            url: Some(s.url().to_string()),
        });
        started.collect()
    }

    /// Where the server's CPU time is read: the processes jsbench started,
    /// or an external server's monitoring endpoint when one is given.
    pub fn server_cpu(&self, monitor: Option<&str>, pids: &[u32]) -> ServerCpu {
        match (self, monitor) {
            (Target::Embedded(_) | Target::Cluster(_), _) => {
                ServerCpu::Processes(self.started().0.iter().map(|(_, s)| s.pid()).collect())
            }
            // An external server whose processes are on this host (ab's).
            (Target::External, _) if !pids.is_empty() => ServerCpu::Processes(pids.to_vec()),
            (Target::External, Some(list)) => ServerCpu::Varz(
                monitors_from_list(list)
                    .into_iter()
                    .map(|m| m.url)
                    .collect(),
            ),
            (Target::External, None) => ServerCpu::Unavailable,
        }
    }

    /// The monitoring endpoints whose telemetry every variant samples: the
    /// embedded server's, every node of a local cluster, or the
    /// comma-separated `--monitor` list for a server jsbench did not start.
    pub fn monitors(&self, monitor: Option<&str>) -> Vec<Monitor> {
        if let (Target::External, Some(list)) = (self, monitor) {
            return monitors_from_list(list);
        }
        let started = self.started().0.into_iter();
        let monitors = started.filter_map(|(node, s)| {
            let url = s.monitor_url()?.to_string();
            Some(Monitor { node, url })
        });
        monitors.collect()
    }

    /// What scenarios may kill and restart: only servers jsbench started.
    pub fn faults(&self) -> Option<FaultHandle> {
        match self {
            Target::Embedded(s) => Some(s.clone()),
            Target::Cluster(c) => Some(c.clone()),
            Target::External => None,
        }
    }

    pub fn log_problems(&self) -> Vec<String> {
        match self {
            Target::Embedded(s) => s.log_problems(),
            Target::Cluster(c) => c.log_problems(),
            Target::External => Vec::new(),
        }
    }
}

/// A scenario of a profile that injects a fault into the servers.
#[derive(Debug, Clone, Copy)]
pub struct Fault<'a> {
    pub profile: &'a str,
    pub scenario: &'a str,
    pub kind: FaultKind,
}

/// Killing a server is only ever done to one jsbench started: refuse a
/// scenario that kills aimed at a given server, and a route fault without
/// a local cluster, before anything runs.
pub fn check_faults(
    faults: &[Fault<'_>],
    resolution: &Resolution,
    cluster: Option<usize>,
) -> Result<(), UsageError> {
    if resolution.remote.is_none() {
        if let (Some(f), None) = (faults.iter().find(|f| f.kind.is_route()), cluster) {
            return Err(UsageError(format!(
                "profile {}, scenario {}: a route fault cuts a node off from its \
                 peers, so it needs a local cluster: add --cluster 3",
                f.profile, f.scenario
            )));
        }
        return Ok(());
    }
    if let Some(f) = faults.first() {
        return Err(UsageError(format!(
            "profile {}, scenario {}: the restart scenario kills servers, so it runs \
             only on servers jsbench starts itself (the embedded default or --cluster N), \
             never on one given with -s/--server, a context or NATS_URL",
            f.profile, f.scenario
        )));
    }
    Ok(())
}

/// `[server] sync` is applied by starting the server with it, so only
/// to servers jsbench starts; a local cluster keeps one setting for the
/// run (see [`crate::server::fault::Faults::set_sync`]).
pub fn check_sync<S>(
    profiles: &[Profile<S>],
    resolution: &Resolution,
    cluster: Option<usize>,
) -> Result<(), UsageError> {
    let asked = |p: &Profile<S>| p.server.sync.is_some();
    if resolution.remote.is_some() {
        if let Some(p) = profiles.iter().find(|p| asked(p)) {
            return Err(UsageError(format!(
                "profile {}: server.sync sets how a server jsbench starts syncs its store; \
                 a server given with -s/--server, a context or NATS_URL keeps its operator's \
                 setting: remove server.sync (the server's own setting is read from /varz with \
                 --monitor and stated in the results)",
                p.name
            )));
        }
        return Ok(());
    }
    if cluster.is_some()
        && let Some(p) = profiles
            .iter()
            .find(|p| p.syncs.len() > 1 || p.server.sync != profiles[0].server.sync)
    {
        return Err(UsageError(format!(
            "profile {}: a local cluster runs with one server.sync for the whole run \
             (restarting every node between variants would measure elections too): list \
             one value, the same in every profile, or run without --cluster",
            p.name
        )));
    }
    Ok(())
}

/// Replicated streams need as many servers: refuse before starting
/// anything rather than fail at the first stream.
pub fn check_replicas<S>(
    profiles: &[Profile<S>],
    replicas_override: Option<usize>,
    resolution: &Resolution,
    cluster: Option<usize>,
) -> Result<(), UsageError> {
    if resolution.remote.is_some() {
        return Ok(());
    }
    let nodes = cluster.unwrap_or(1);
    for p in profiles {
        let replicas = replicas_override.unwrap_or(p.server.replicas);
        if replicas > nodes {
            return Err(UsageError(format!(
                "profile {} asks for {replicas} replicas, but the embedded server has {nodes} \
                 node(s): add --cluster {replicas} (a local cluster), use --replicas {nodes}, or \
                 point -s/--server at a cluster",
                p.name
            )));
        }
    }
    Ok(())
}
