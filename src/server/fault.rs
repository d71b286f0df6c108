//! Faults jsbench injects into servers it started itself: a node killed
//! with SIGKILL and started again on its store, or a cluster node's routes
//! cut or paused at the relays they run through. Never offered for a
//! server jsbench did not start.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};

use crate::profile::SyncSetting;
use crate::server::relay::Block;
use crate::server::{EmbeddedCluster, EmbeddedServer};

/// How long a restarted node may take to accept connections again.
pub const RESTART_TIMEOUT: Duration = Duration::from_secs(30);

/// The servers a scenario may kill and restart.
pub trait Faults: Send + Sync {
    /// Server names, by node index (a single server is node 0).
    fn node_names(&self) -> Vec<String>;
    /// Client URLs, by node index: where to connect to reach a node, or
    /// what to avoid to stay off it.
    fn client_urls(&self) -> Vec<String>;
    /// Kills node `node` with SIGKILL.
    fn kill(&self, node: usize) -> Result<()>;
    /// Starts node `node` again on its store and ports.
    fn restart(&self, node: usize) -> Result<()>;
    /// Cuts or pauses every route to and from node `node`.
    fn block_routes(&self, node: usize, how: Block) -> Result<()>;
    /// Lets node `node`'s routes through again.
    fn heal_routes(&self, node: usize) -> Result<()>;
    /// Makes the servers run with `sync`, restarting them if they do not.
    fn set_sync(&self, sync: SyncSetting) -> Result<()>;
    /// The server processes now: a restart gives them new ids.
    fn pids(&self) -> Vec<u32>;
}

impl Faults for EmbeddedServer {
    fn node_names(&self) -> Vec<String> {
        vec!["server".into()]
    }

    fn client_urls(&self) -> Vec<String> {
        vec![self.url().to_string()]
    }

    fn kill(&self, node: usize) -> Result<()> {
        only_node(node)?;
        EmbeddedServer::kill(self)
    }

    fn restart(&self, node: usize) -> Result<()> {
        only_node(node)?;
        EmbeddedServer::restart(self, RESTART_TIMEOUT)
    }

    fn block_routes(&self, _node: usize, _how: Block) -> Result<()> {
        Err(anyhow!(
            "a single server has no routes to cut or pause: run on a local cluster (--cluster 3)"
        ))
    }

    fn heal_routes(&self, node: usize) -> Result<()> {
        self.block_routes(node, Block::Cut)
    }

    fn set_sync(&self, sync: SyncSetting) -> Result<()> {
        self.restart_with_sync(sync, RESTART_TIMEOUT)
    }

    fn pids(&self) -> Vec<u32> {
        vec![self.pid()]
    }
}

fn only_node(node: usize) -> Result<()> {
    ensure!(node == 0, "a single server has no node {node}");
    Ok(())
}

fn cluster_node(cluster: &EmbeddedCluster, node: usize) -> Result<&EmbeddedServer> {
    (cluster.nodes().get(node)).ok_or_else(|| anyhow!("the cluster has no node {node}"))
}

impl Faults for EmbeddedCluster {
    fn node_names(&self) -> Vec<String> {
        self.members().map(|(name, _)| name).collect()
    }

    fn client_urls(&self) -> Vec<String> {
        self.nodes().iter().map(|n| n.url().to_string()).collect()
    }

    fn kill(&self, node: usize) -> Result<()> {
        cluster_node(self, node)?.kill()
    }

    fn restart(&self, node: usize) -> Result<()> {
        cluster_node(self, node)?.restart(RESTART_TIMEOUT)
    }

    fn block_routes(&self, node: usize, how: Block) -> Result<()> {
        EmbeddedCluster::block_routes(self, node, Some(how))
    }

    fn heal_routes(&self, node: usize) -> Result<()> {
        EmbeddedCluster::block_routes(self, node, None)
    }

    /// A cluster keeps the one setting it started with: restarting every
    /// node between variants would measure a fresh election as much as
    /// the setting.
    fn set_sync(&self, sync: SyncSetting) -> Result<()> {
        match self.nodes().iter().find(|n| n.sync() != sync) {
            None => Ok(()),
            Some(node) => Err(anyhow!(
                "the local cluster runs with sync {} and keeps it for the run; sync {} needs \
                 a run of its own ([server] sync lists one value on a cluster)",
                node.sync().label(),
                sync.label()
            )),
        }
    }

    fn pids(&self) -> Vec<u32> {
        self.nodes().iter().map(EmbeddedServer::pid).collect()
    }
}

/// A shared handle, for the run context.
pub type FaultHandle = Arc<dyn Faults>;
