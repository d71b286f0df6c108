//! A local JetStream cluster: N nodes on 127.0.0.1 with routes between
//! them, each an [`EmbeddedServer`] with its own store, all stopped (and
//! their stores removed) when the cluster is dropped.
//!
//! Replication is part of what a JetStream latency means, so R3 streams
//! must be measurable without a staging cluster. "Ready" means more than
//! open ports: a stream create that arrives before the JetStream meta group
//! has a leader, or before the leader hears from every peer, fails with
//! "insufficient resources" and would look like a jsbench bug.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

use super::{EmbeddedServer, ServerOptions, poll};
use crate::server::relay::{ANY_PEER, Block, Relay};
use crate::system::http;

/// Sizes `--cluster` accepts: odd, so the cluster keeps a quorum when one
/// node is slow.
pub const CLUSTER_SIZES: &[usize] = &[3, 5];

pub struct EmbeddedCluster {
    name: String,
    nodes: Vec<EmbeddedServer>,
    /// With `relay_routes`: node i's routes come in through `relays[i]`.
    relays: Vec<Relay>,
}

#[derive(Deserialize)]
struct Jsz {
    meta_cluster: Option<MetaCluster>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MetaCluster {
    leader: String,
    cluster_size: usize,
    replicas: Vec<MetaPeer>,
}

#[derive(Deserialize)]
struct MetaPeer {
    #[serde(default)]
    current: bool,
}

impl EmbeddedCluster {
    /// Starts `size` nodes and waits until JetStream can place a stream
    /// with `size` replicas.
    pub fn start(size: usize) -> Result<Self> {
        Self::start_with(size, &ServerOptions::default())
    }

    pub fn start_with(size: usize, options: &ServerOptions) -> Result<Self> {
        Self::start_on(size, options, &[])
    }

    /// Starts `size` nodes, node i keeping its JetStream store in
    /// `stores[i]` (a fresh power-loss mount), which the caller owns and
    /// the nodes never remove: a node restarted later must find its own
    /// store again, so each node is given one, never a shared one. The
    /// stores must be empty: a store holds its cluster's meta group, and
    /// nodes of a new cluster on an old cluster's stores never elect a
    /// leader (measured: none within 30 s). An empty `stores` gives each
    /// node a throw-away store.
    pub fn start_on(size: usize, options: &ServerOptions, stores: &[PathBuf]) -> Result<Self> {
        check_layout(size, options, stores)?;
        // The route ports are picked before the servers start (each node
        // must know all of them), so another process may take one in
        // between; that shows as a node failing to start, and a new set
        // of ports is tried. A failed attempt may have written its meta
        // group into the stores, so each retry starts on emptied ones.
        let mut failures = Vec::new();
        for attempt in 1..=3 {
            if attempt > 1 {
                for dir in stores {
                    empty_store(dir)?;
                }
            }
            match Self::try_start(size, options, stores) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => failures.push(e),
            }
        }
        let last = format!("{:#}", failures.last().expect("three attempts"));
        let first = failures.remove(0);
        Err(first.context(format!(
            "the local cluster did not start in 3 attempts, each on new ports{}; the first \
             attempt's error follows; the last ended: {}",
            if stores.is_empty() {
                ""
            } else {
                " and emptied stores"
            },
            last.lines().next().unwrap_or_default()
        )))
    }

    fn try_start(size: usize, options: &ServerOptions, stores: &[PathBuf]) -> Result<Self> {
        let token = format!("{:06x}", (std::process::id() as u64 ^ nanos()) & 0xFF_FFFF);
        let name = format!("jsbench-{token}");
        let ports = free_ports(size)?;
        // Routed through relays, each node advertises its relay's address,
        // so the routes its peers learn by gossip pass through it too.
        let (relays, route_ports) = if options.relay_routes {
            let relays = (ports.iter().map(|&p| Relay::loopback_to(p)))
                .collect::<std::io::Result<Vec<_>>>()
                .context("starting the route relays")?;
            let via: Vec<u16> = relays.iter().filter_map(Relay::port).collect();
            (relays, via)
        } else {
            (Vec::new(), ports.clone())
        };
        let routes = route_ports
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let node_name = format!("{name}-n{}", i + 1);
            let mut node_options = options.clone();
            node_options.jetstream = true;
            node_options.store_dir = stores.get(i).cloned();
            if i > 0 {
                // A hub's leafnode port is node 1's: one port, one node.
                node_options.leafnodes = None;
            }
            node_options.extra_args.extend([
                "--name".to_string(),
                node_name.clone(),
                "--cluster_name".into(),
                name.clone(),
                "--cluster".into(),
                format!("nats://127.0.0.1:{port}"),
                "--routes".into(),
                routes.clone(),
            ]);
            if !relays.is_empty() {
                node_options.extra_args.extend([
                    "--cluster_advertise".to_string(),
                    format!("127.0.0.1:{}", route_ports[i]),
                ]);
            }
            let node = EmbeddedServer::start_with(&node_options)
                .with_context(|| format!("starting cluster node {node_name}"))?;
            nodes.push(node);
        }
        let mut cluster = EmbeddedCluster {
            name,
            nodes,
            relays,
        };
        cluster.wait_ready(options.ready_timeout)?;
        for node in &mut cluster.nodes {
            // Route retries while the others were starting are expected;
            // only what happens from now on belongs in the results.
            node.forget_startup_log();
        }
        Ok(cluster)
    }

    /// Waits until every node agrees on a meta leader and the leader sees
    /// every other node as current: at start-up, and again after nodes were
    /// restarted, since a node's open client port says nothing of that.
    pub fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let size = self.nodes.len();
        let probe = || {
            let states = match self.meta_state() {
                Ok(states) => states,
                Err(e) => return Ok(Err(format!("{e:#}"))),
            };
            let leaders: Vec<&str> = states.iter().map(|m| m.leader.as_str()).collect();
            let agreed = !leaders[0].is_empty() && leaders.iter().all(|l| *l == leaders[0]);
            let leader_view = states.iter().find(|m| {
                m.cluster_size == size
                    && m.replicas.len() == size - 1
                    && m.replicas.iter().all(|p| p.current)
            });
            if agreed && leader_view.is_some() {
                return Ok(Ok(()));
            }
            Ok(Err(format!("meta leaders reported: {leaders:?}")))
        };
        let timed_out = |last| {
            let logs: Vec<String> = (self.nodes.iter())
                .map(|n| n.log_tail(600).trim_end().to_string())
                .collect();
            anyhow!(
                "the local cluster {} did not elect a JetStream meta leader within {timeout:?} \
                 ({last}); node logs end with:\n{}",
                self.name,
                logs.join("\n--\n")
            )
        };
        poll(timeout, Duration::from_millis(50), probe, timed_out)
    }

    fn meta_state(&self) -> Result<Vec<MetaCluster>> {
        self.nodes
            .iter()
            .map(|n| {
                let monitor = n.monitor_url().context("node without a monitoring port")?;
                let jsz: Jsz = http::get_parsed(monitor, "/jsz")?;
                jsz.meta_cluster.context("no meta_cluster in /jsz yet")
            })
            .collect()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Blocks every route to and from node `node` as `how` says (`None`:
    /// lets them through again): at its own relay, every connection; at
    /// the others', the connections it opened.
    pub fn block_routes(&self, node: usize, how: Option<Block>) -> Result<()> {
        if self.relays.is_empty() {
            bail!(
                "the cluster's routes do not run through relays; a route fault starts it with them"
            );
        }
        let names: Vec<String> = self.members().map(|(n, _)| n).collect();
        let name = names
            .get(node)
            .with_context(|| format!("the cluster has no node {node}"))?;
        for (i, relay) in self.relays.iter().enumerate() {
            let peer = if i == node { ANY_PEER } else { name.as_str() };
            match how {
                Some(how) => relay.block(peer, how),
                None => relay.heal(peer),
            }
        }
        Ok(())
    }

    pub fn nodes(&self) -> &[EmbeddedServer] {
        &self.nodes
    }

    /// Each node with its server name (`<cluster>-n1`, ...).
    pub fn members(&self) -> impl Iterator<Item = (String, &EmbeddedServer)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("{}-n{}", self.name, i + 1), n))
    }

    /// Every node's client URL, comma-separated (what `-s` and NATS_URL take).
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.url().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Warning and error lines since the cluster became ready, each
    /// prefixed with its node.
    pub fn log_problems(&self) -> Vec<String> {
        self.nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| {
                n.log_problems()
                    .into_iter()
                    .map(move |l| format!("n{}: {l}", i + 1))
            })
            .collect()
    }
}

/// Refuses, before any server starts, stores that cannot make a cluster.
fn check_layout(size: usize, options: &ServerOptions, stores: &[PathBuf]) -> Result<()> {
    if !CLUSTER_SIZES.contains(&size) {
        bail!("a local cluster has 3 or 5 nodes, not {size}");
    }
    if let Some(dir) = &options.store_dir {
        // One directory for every node would be one store fought over.
        bail!(
            "store_dir {} names one server's store; a cluster's nodes each keep their own \
             (give one per node to EmbeddedCluster::start_on)",
            dir.display()
        );
    }
    if !stores.is_empty() && stores.len() != size {
        bail!(
            "{} store directories for a cluster of {size} nodes: one per node",
            stores.len()
        );
    }
    if let Some(dir) = stores
        .iter()
        .enumerate()
        .find_map(|(i, d)| stores[..i].contains(d).then_some(d))
    {
        bail!(
            "the store directory {} is given to two nodes; each keeps its own",
            dir.display()
        );
    }
    if let Some(dir) = stores.iter().find(|d| !store_is_empty(d)) {
        bail!(
            "the store directory {} is not empty; a new cluster starts on empty stores (an old \
             cluster's meta group in them keeps the new nodes from electing a leader)",
            dir.display()
        );
    }
    Ok(())
}

/// A directory that does not exist yet is empty: the server makes it.
fn store_is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_none())
}

/// Removes what a failed attempt wrote into `dir`, keeping `dir` itself
/// (a mount point is not ours to remove).
fn empty_store(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading the store {}", dir.display())),
    };
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading the store {}", dir.display()))?
            .path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed
            .with_context(|| format!("emptying the store {} for a new attempt", path.display()))?;
    }
    Ok(())
}

/// `n` distinct free loopback ports, held open together so they differ.
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free loopback ports for the cluster routes")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

fn nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refused before any server starts: no nats-server is needed.
    #[test]
    fn per_node_stores_are_refused_when_miscounted_or_shared() {
        let (a, b) = (PathBuf::from("/srv/a"), PathBuf::from("/srv/b"));
        let options = ServerOptions::default();
        let e = EmbeddedCluster::start_on(3, &options, &[a.clone(), b.clone()])
            .err()
            .unwrap();
        assert!(
            format!("{e:#}").contains("2 store directories for a cluster of 3 nodes"),
            "{e:#}"
        );
        let e = EmbeddedCluster::start_on(3, &options, &[a.clone(), b, a])
            .err()
            .unwrap();
        assert!(
            format!("{e:#}").contains("/srv/a is given to two nodes"),
            "{e:#}"
        );
    }

    /// Measured: three nodes started under a new cluster name on stores an
    /// earlier cluster left elected no meta leader within 30 s, and a
    /// retry after a failed attempt used to start on exactly such stores.
    #[test]
    fn stores_an_earlier_cluster_wrote_are_refused_and_a_retry_empties_them() {
        let root = tempfile::tempdir().unwrap();
        let used = root.path().join("n1");
        std::fs::create_dir_all(used.join("jetstream/$SYS/_js_/_meta_")).unwrap();
        std::fs::write(used.join("jetstream/$SYS/_js_/_meta_/peers.idx"), b"x").unwrap();
        let fresh = [root.path().join("n2"), root.path().join("n3")];
        let stores = [used.clone(), fresh[0].clone(), fresh[1].clone()];
        let e = EmbeddedCluster::start_on(3, &ServerOptions::default(), &stores)
            .err()
            .unwrap();
        let message = format!("{e:#}");
        assert!(
            message.contains(&format!("{} is not empty", used.display())),
            "{message}"
        );

        empty_store(&used).unwrap();
        assert!(used.is_dir(), "the store itself (a mount point) stays");
        assert!(store_is_empty(&used));
        assert!(store_is_empty(&fresh[0]), "not made yet counts as empty");
        empty_store(&fresh[0]).unwrap();
    }
}
