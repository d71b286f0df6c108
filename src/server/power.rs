//! Embedded servers whose stores sit on power-loss mounts
//! (crate::system::powerfs), one mount per node: one server or a local
//! cluster, each node's power cut alone or all at once, and restarted on
//! what its cut left.
//!
//! A SIGKILL keeps every written byte (the page cache outlives the
//! process), so only a cut shows what a PubAck is worth; on a cluster the
//! question is also whose copy survives, which needs each node's store on
//! a mount of its own, cut on its own. The owner holds mounts and servers
//! together because their order matters: a node is killed before its
//! mount is cut (as the power would), and remounted on the same path
//! before it restarts, so its command line (store, ports, routes) stays
//! valid and it rejoins as the same peer. Semantics: docs/durability.md.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use super::fault::{Faults, RESTART_TIMEOUT};
use super::relay::Block;
pub use super::telemetry::ReplicaState;
use super::telemetry::{Monitor, StreamDetail, StreamsJsz};
use super::{CLUSTER_SIZES, EmbeddedCluster, EmbeddedServer, ServerOptions, poll};
use crate::profile::SyncSetting;
use crate::system::http;
use crate::system::powerfs::{CutReport, Mounted, PowerFs};

/// One node's store: the backing directory (the disk) and the mount the
/// server writes through (the disk's volatile cache), absent after a cut
/// until the node is restarted.
struct Store {
    backing: PathBuf,
    mountpoint: PathBuf,
    mounted: Option<Mounted>,
}

impl Store {
    fn remount(&mut self) -> Result<()> {
        if self.mounted.is_none() {
            self.mounted = Some(PowerFs::mount(&self.backing, &self.mountpoint)?);
        }
        Ok(())
    }
}

enum Servers {
    One(EmbeddedServer),
    Cluster(EmbeddedCluster),
}

/// One server or a local cluster, every node's store on its own
/// power-loss mount. Dropping it stops the servers (cleanly: their stores
/// synced), then unmounts, then removes the directories.
pub struct PowerLossServers {
    // Field order is drop order: servers stop before their mounts go.
    servers: Servers,
    /// One lock per node: a cut or a restart of one node waits for no other.
    stores: Vec<Mutex<Store>>,
    _dir: tempfile::TempDir,
}

impl Drop for PowerLossServers {
    fn drop(&mut self) {
        // Removed with the struct's own fields, in order, from here on.
        crate::system::powerfs::forget_folder(self._dir.path());
    }
}

impl PowerLossServers {
    /// Starts `nodes` servers (1, or a cluster size `--cluster` accepts)
    /// with `options` (its sync setting for every node), each on a fresh
    /// power-loss mount. Fails, naming why, where FUSE cannot be mounted:
    /// a scenario reports that as "not applicable", never as a pass.
    pub fn start(nodes: usize, options: &ServerOptions) -> Result<Self> {
        if let Some(dir) = &options.store_dir {
            bail!(
                "store_dir {} is refused: the stores are chosen here, one power-loss mount per node",
                dir.display()
            );
        }
        if nodes != 1 && !CLUSTER_SIZES.contains(&nodes) {
            bail!("power-loss mounts under one server or a cluster of 3 or 5 nodes, not {nodes}");
        }
        PowerFs::available()
            .context("the power-loss mounts cannot be made on this host")
            .map_err(|e| anyhow!(MountRefused(e)))?;
        let dir = tempfile::Builder::new()
            .prefix("jsbench-power-")
            .tempdir()
            .context("creating the directory for the power-loss mounts")?;
        crate::system::powerfs::remove_on_abandon(dir.path());
        let mut stores = Vec::with_capacity(nodes);
        for i in 1..=nodes {
            stores.push(new_store(dir.path(), i)?);
        }
        let paths: Vec<PathBuf> = stores.iter().map(|s| s.mountpoint.clone()).collect();
        let stores = stores.into_iter().map(Mutex::new).collect();
        let servers = if nodes == 1 {
            Servers::One(EmbeddedServer::start_with(&ServerOptions {
                store_dir: Some(paths[0].clone()),
                ..options.clone()
            })?)
        } else {
            Servers::Cluster(EmbeddedCluster::start_on(nodes, options, &paths)?)
        };
        Ok(PowerLossServers {
            servers,
            stores,
            _dir: dir,
        })
    }

    pub fn nodes(&self) -> &[EmbeddedServer] {
        match &self.servers {
            Servers::One(server) => std::slice::from_ref(server),
            Servers::Cluster(cluster) => cluster.nodes(),
        }
    }

    /// The cluster, when there is one (its names, its route faults).
    pub fn cluster(&self) -> Option<&EmbeddedCluster> {
        match &self.servers {
            Servers::One(_) => None,
            Servers::Cluster(cluster) => Some(cluster),
        }
    }

    fn faults(&self) -> &dyn Faults {
        match &self.servers {
            Servers::One(server) => server,
            Servers::Cluster(cluster) => cluster,
        }
    }

    /// Node `node`'s server name as streams report their leader and peers.
    pub fn node_name(&self, node: usize) -> Option<String> {
        match &self.servers {
            Servers::One(_) => None,
            Servers::Cluster(cluster) => cluster.members().nth(node).map(|(name, _)| name),
        }
    }

    /// The index of the node whose server name is `name`.
    pub fn node_named(&self, name: &str) -> Option<usize> {
        (0..self.nodes().len()).find(|&i| self.node_name(i).as_deref() == Some(name))
    }

    /// Every node's monitoring endpoint, named as the results name nodes.
    pub fn monitors(&self) -> Vec<Monitor> {
        self.nodes()
            .iter()
            .enumerate()
            .filter_map(|(i, server)| {
                server.monitor_url().map(|url| Monitor {
                    node: self.node_name(i).unwrap_or_else(|| "server".into()),
                    url: url.to_string(),
                })
            })
            .collect()
    }

    /// Every node's client URL, comma-separated.
    pub fn urls(&self) -> String {
        let urls: Vec<&str> = self.nodes().iter().map(EmbeddedServer::url).collect();
        urls.join(",")
    }

    fn node(&self, node: usize) -> Result<&EmbeddedServer> {
        self.nodes()
            .get(node)
            .with_context(|| format!("there is no node {node} of {}", self.nodes().len()))
    }

    /// SIGKILL alone: the node's unsynced writes stay in its mount, as a
    /// page cache outlives a killed process.
    pub fn kill(&self, node: usize) -> Result<()> {
        self.node(node)?.kill()
    }

    /// Node `node` loses its power: SIGKILL, then its mount drops every
    /// unsynced write and goes. The report says what was dropped.
    pub fn cut_power(&self, node: usize) -> Result<CutReport> {
        self.kill(node)?;
        self.cut_mount(node)
    }

    /// Syncs every mounted store, as the server's periodic sync would
    /// have done for a stream older than its interval; returns the bytes
    /// that reached the backing directories.
    pub fn sync_all(&self) -> Result<u64> {
        let mut synced = 0;
        for store in &self.stores {
            if let Some(mounted) = &lock(store).mounted {
                synced += mounted.sync_all()?;
            }
        }
        Ok(synced)
    }

    /// `nodes` lose their power at the same moment, the others keep it:
    /// all are killed before any mount is cut, so no node sees another's
    /// cut. The reports in the order of `nodes`.
    pub fn cut_power_of(&self, nodes: &[usize]) -> Result<Vec<CutReport>> {
        for &node in nodes {
            self.kill(node)?;
        }
        nodes.iter().map(|&n| self.cut_mount(n)).collect()
    }

    fn cut_mount(&self, node: usize) -> Result<CutReport> {
        let Some(mounted) = lock(&self.stores[node]).mounted.take() else {
            return Ok(CutReport::default());
        };
        mounted
            .cut_power()
            .with_context(|| format!("cutting the power of node {}", node + 1))
    }

    /// Starts node `node` again on what its store kept (remounted first
    /// if it was cut) on the same ports and routes, and waits until the
    /// cluster is ready again (a meta leader every node agrees on and
    /// which sees every peer current).
    pub fn restart(&self, node: usize, timeout: Duration) -> Result<()> {
        self.start_node(node, timeout)?;
        self.wait_ready(timeout)
    }

    /// Starts every node again (each remounted if it was cut) and waits
    /// until the cluster is ready. Nodes start one after another without
    /// waiting for the cluster in between: none can be ready alone.
    pub fn restart_all(&self, timeout: Duration) -> Result<()> {
        for node in 0..self.stores.len() {
            self.start_node(node, timeout)?;
        }
        self.wait_ready(timeout)
    }

    fn start_node(&self, node: usize, timeout: Duration) -> Result<()> {
        let store = self
            .stores
            .get(node)
            .with_context(|| format!("there is no node {node}"))?;
        lock(store)
            .remount()
            .with_context(|| format!("remounting node {}'s store", node + 1))?;
        self.node(node)?
            .restart(timeout)
            .with_context(|| format!("restarting node {} on what its store kept", node + 1))
    }

    fn wait_ready(&self, timeout: Duration) -> Result<()> {
        match &self.servers {
            Servers::One(_) => Ok(()),
            Servers::Cluster(cluster) => cluster.wait_ready(timeout),
        }
    }

    /// What node `node` holds of `stream`, by its own `/jsz`; `None` when
    /// it holds no such stream.
    pub fn replica(&self, node: usize, stream: &str) -> Result<Option<ReplicaState>> {
        Ok(self.stream_on(node, stream)?.map(|s| s.state))
    }

    /// The leader of `stream` as node `node` knows it (`None` during an
    /// election), from its `/jsz`: asking a running node's monitoring port
    /// answers at once, where a JetStream API request waits out the
    /// client's timeout while no leader can answer it.
    pub fn leader_seen_by(&self, node: usize, stream: &str) -> Result<Option<String>> {
        Ok(self
            .stream_on(node, stream)?
            .and_then(|s| s.cluster)
            .and_then(|c| c.leader)
            .filter(|l| !l.is_empty()))
    }

    fn stream_on(&self, node: usize, stream: &str) -> Result<Option<StreamDetail>> {
        let monitor = self
            .node(node)?
            .monitor_url()
            .context("a node without a monitoring port")?;
        let body = http::get(&format!("{monitor}/jsz?accounts=true&streams=true"))?;
        stream_in(body, stream).with_context(|| format!("reading node {}'s /jsz", node + 1))
    }

    /// Waits until every node holds `stream` with `last_seq` as its last
    /// sequence: the cut node has caught up from its peers.
    pub fn wait_replicas_at(&self, stream: &str, last_seq: u64, timeout: Duration) -> Result<()> {
        let probe = || {
            let states: Vec<Option<ReplicaState>> = (0..self.nodes().len())
                .map(|n| self.replica(n, stream).ok().flatten())
                .collect();
            let reached = (states.iter()).all(|s| s.is_some_and(|s| s.last_seq == last_seq));
            Ok(if reached { Ok(()) } else { Err(states) })
        };
        let timed_out = |states| {
            anyhow!(
                "the replicas of {stream} did not all reach sequence {last_seq} within \
                 {timeout:?}; each node holds: {states:?}"
            )
        };
        poll(timeout, Duration::from_millis(20), probe, timed_out)
    }
}

/// The faults the other scenarios inject, on mounts: a kill keeps the
/// unsynced writes (a page cache outlives a killed process), and a restart
/// also waits for the cluster, so a run can hand these servers to any
/// scenario that kills and restarts nodes.
impl Faults for PowerLossServers {
    fn node_names(&self) -> Vec<String> {
        self.faults().node_names()
    }

    fn client_urls(&self) -> Vec<String> {
        self.faults().client_urls()
    }

    fn kill(&self, node: usize) -> Result<()> {
        PowerLossServers::kill(self, node)
    }

    fn restart(&self, node: usize) -> Result<()> {
        PowerLossServers::restart(self, node, RESTART_TIMEOUT)
    }

    fn block_routes(&self, node: usize, how: Block) -> Result<()> {
        self.faults().block_routes(node, how)
    }

    fn heal_routes(&self, node: usize) -> Result<()> {
        self.faults().heal_routes(node)
    }

    fn set_sync(&self, sync: SyncSetting) -> Result<()> {
        self.faults().set_sync(sync)
    }

    fn pids(&self) -> Vec<u32> {
        self.faults().pids()
    }
}

fn lock(store: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}

fn new_store(dir: &Path, node: usize) -> Result<Store> {
    let backing = dir.join(format!("n{node}-disk"));
    let mountpoint = dir.join(format!("n{node}-store"));
    for d in [&backing, &mountpoint] {
        std::fs::create_dir(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let mounted = PowerFs::mount(&backing, &mountpoint).map_err(|e| anyhow!(MountRefused(e)))?;
    Ok(Store {
        backing,
        mountpoint,
        mounted: Some(mounted),
    })
}

/// The power-loss filesystem could not be mounted on this host: the
/// reason a scenario reports as "not applicable", told apart from a
/// server that would not start.
#[derive(Debug)]
pub struct MountRefused(pub anyhow::Error);

impl std::fmt::Display for MountRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for MountRefused {}

fn stream_in(body: String, stream: &str) -> Result<Option<StreamDetail>> {
    let jsz: StreamsJsz = serde_json::from_str(&body).context("parsing /jsz")?;
    Ok(jsz.streams().find(|s| s.name == stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSZ: &str = r#"{"account_details":[{"name":"$G","stream_detail":[
        {"name":"OTHER","state":{"messages":1,"first_seq":1,"last_seq":1}},
        {"name":"POWER","cluster":{"name":"c","leader":"c-n2"},
         "state":{"messages":499,"bytes":83000,"first_seq":2,"last_seq":500}}]}]}"#;

    #[test]
    fn a_nodes_replica_and_its_leader_are_read_from_its_jsz() {
        let power = stream_in(JSZ.into(), "POWER").unwrap().unwrap();
        let want = ReplicaState {
            messages: 499,
            first_seq: 2,
            last_seq: 500,
        };
        assert_eq!(power.state, want);
        assert_eq!(
            power.cluster.and_then(|c| c.leader).as_deref(),
            Some("c-n2")
        );
        assert!(stream_in(JSZ.into(), "GONE").unwrap().is_none());
        // A server between elections lists no stream_detail at all.
        assert!(stream_in("{}".into(), "POWER").unwrap().is_none());
        assert!(stream_in("not json".into(), "POWER").is_err());
    }

    #[test]
    fn a_store_directory_of_the_callers_and_an_even_cluster_are_refused_by_name() {
        let options = ServerOptions {
            store_dir: Some("/srv/store".into()),
            ..Default::default()
        };
        let e = PowerLossServers::start(3, &options).err().unwrap();
        assert!(
            format!("{e:#}").contains("store_dir /srv/store is refused"),
            "{e:#}"
        );
    }
}
