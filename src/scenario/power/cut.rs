//! The cut as the drive's fault: the drive kills "a server" at a planned
//! instant; here that is the variant's own servers on power-loss mounts:
//! every node (`kill`, `power`) or the stream leader's alone
//! (`power_leader`), killed, its publishers stopped with it, and for a
//! power cut the unsynced writes dropped. The restart is the scenario's,
//! after the drive, so that recovery is timed on its own and nothing is
//! published after the cut.

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow};
use tokio_util::sync::CancellationToken;

use super::plan::Cut;
use crate::profile::{PersistMode, SyncSetting};
use crate::server::fault::Faults;
use crate::server::power::PowerLossServers;
use crate::server::relay::Block;
use crate::system::powerfs::CutReport;

/// The variant's servers as the drive's [`Faults`]: one pseudo-node, the
/// set of nodes the cut strikes.
pub(super) struct CutAtKill {
    pub servers: Arc<PowerLossServers>,
    pub cut: Cut,
    /// The variant's stream: `power_leader` strikes the node leading it.
    pub stream: String,
    /// The variant's stop: cancelled at the kill, so the publishers stop
    /// sending into a dead server and nothing is published after the cut.
    pub stop: CancellationToken,
    /// What the cut did, once it happened.
    pub struck: Mutex<Option<Struck>>,
}

/// The nodes a cut struck and, for a power cut, what their mounts dropped
/// (summed over the nodes).
#[derive(Debug, Clone, Default)]
pub(super) struct Struck {
    pub nodes: Vec<usize>,
    pub dropped: Option<CutReport>,
}

impl CutAtKill {
    /// The nodes this cut strikes, decided at the kill: the stream's
    /// leader is whoever leads it then, as the first node's /jsz says.
    fn targets(&self) -> Result<Vec<usize>> {
        let all = (0..self.servers.nodes().len()).collect();
        if self.cut != Cut::PowerLeader || self.servers.nodes().len() == 1 {
            return Ok(all);
        }
        let leader = self
            .servers
            .leader_seen_by(0, &self.stream)?
            .with_context(|| format!("stream {} has no leader to cut", self.stream))?;
        let node = self
            .servers
            .node_named(&leader)
            .with_context(|| format!("the stream leader {leader} is none of the nodes"))?;
        Ok(vec![node])
    }

    pub fn struck(&self) -> Option<Struck> {
        self.struck
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Faults for CutAtKill {
    fn node_names(&self) -> Vec<String> {
        vec![self.cut.strikes().into()]
    }

    /// One pseudo-node that strikes them all: no single URL reaches it.
    fn client_urls(&self) -> Vec<String> {
        Vec::new()
    }

    /// SIGKILL to every node struck at once, while the publishers still
    /// send; then the publishers are stopped and, for a power cut, the
    /// unsynced writes dropped (every node killed before any mount is
    /// cut, so no node sees another's cut).
    fn kill(&self, _node: usize) -> Result<()> {
        let nodes = self.targets()?;
        let dropped = match self.cut {
            Cut::Kill => {
                for &n in &nodes {
                    self.servers.kill(n)?;
                }
                None
            }
            Cut::Power | Cut::PowerLeader => {
                let reports = self.servers.cut_power_of(&nodes)?;
                let mut sum = CutReport::default();
                for (&n, r) in nodes.iter().zip(reports) {
                    sum.unsynced_bytes += r.unsynced_bytes;
                    let name = self.servers.node_name(n);
                    sum.unsynced_files
                        .extend(r.unsynced_files.into_iter().map(|(f, bytes)| match &name {
                            Some(name) => (std::path::Path::new(name).join(f), bytes),
                            None => (f, bytes),
                        }));
                }
                Some(sum)
            }
        };
        self.stop.cancel();
        *self.struck.lock().unwrap_or_else(|p| p.into_inner()) = Some(Struck { nodes, dropped });
        Ok(())
    }

    /// Deferred: the scenario restarts the servers after the drive.
    fn restart(&self, _node: usize) -> Result<()> {
        Ok(())
    }

    fn block_routes(&self, _node: usize, _how: Block) -> Result<()> {
        Err(anyhow!(
            "the power scenario kills its servers; it cuts no routes"
        ))
    }

    fn heal_routes(&self, node: usize) -> Result<()> {
        self.block_routes(node, Block::Cut)
    }

    fn set_sync(&self, sync: SyncSetting) -> Result<()> {
        Err(anyhow!(
            "the power scenario's servers keep the sync they started with, not {}",
            sync.label()
        ))
    }

    fn pids(&self) -> Vec<u32> {
        self.servers.nodes().iter().map(|n| n.pid()).collect()
    }
}

/// What the setting promises a PubAcked message under `cut` on `nodes`
/// servers: `Ok` with the promise where it covers the cut (the invariant
/// applies), `Err` with what was promised where it does not (the loss is
/// a finding).
pub fn promise(
    cut: Cut,
    sync: SyncSetting,
    persist: Option<PersistMode>,
    nodes: usize,
) -> Result<&'static str, String> {
    if persist == Some(PersistMode::Async) {
        return Err(
            "persist_mode async (ADR-56) sends the PubAck before the write reaches \
                    the store, overriding any sync setting: it promises the message only while \
                    the server process lives"
                .into(),
        );
    }
    match (cut, sync) {
        (Cut::Kill, _) => Ok(
            "a PubAck follows the write to the store's files, which the \
                              operating system keeps when the process dies",
        ),
        // One node of a cluster: the other nodes of the quorum hold it.
        (Cut::PowerLeader, _) if nodes > 1 => Ok(
            "a replicated PubAck follows a quorum's write: the nodes the cut spared \
             hold every acknowledged message",
        ),
        (Cut::Power | Cut::PowerLeader, SyncSetting::Always) => Ok(
            "sync always: every write is fsynced before its PubAck (on a replicated \
                stream, the Raft log's write)",
        ),
        (Cut::Power | Cut::PowerLeader, SyncSetting::Default) => {
            Err("sync default fsyncs every 2 minutes: a \
                                                  PubAck promises the write reached the \
                                                  operating system, not the disk"
                .into())
        }
        (Cut::Power | Cut::PowerLeader, SyncSetting::Interval(_)) => Err(format!(
            "sync {} fsyncs on that interval: a PubAck promises the write reached the \
             operating system, not the disk",
            sync.label()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_without_async_a_power_cut_under_sync_always_and_one_node_of_three_are_promised() {
        use Cut::*;
        let every = SyncSetting::Interval(std::time::Duration::from_secs(1));
        for sync in [SyncSetting::Default, SyncSetting::Always, every] {
            for nodes in [1, 3] {
                assert!(promise(Kill, sync, None, nodes).is_ok());
                assert!(promise(Kill, sync, Some(PersistMode::Default), nodes).is_ok());
                assert!(promise(Kill, sync, Some(PersistMode::Async), nodes).is_err());
                assert!(promise(Power, sync, Some(PersistMode::Async), nodes).is_err());
            }
            // One node of three: the quorum's other two hold it.
            assert!(promise(PowerLeader, sync, None, 3).is_ok());
        }
        assert!(promise(Power, SyncSetting::Always, None, 1).is_ok());
        assert!(promise(Power, SyncSetting::Always, None, 3).is_ok());
        let why = promise(Power, SyncSetting::Default, None, 3).unwrap_err();
        assert!(why.contains("2 minutes"), "{why}");
        assert!(
            promise(Power, every, None, 1)
                .unwrap_err()
                .contains("interval")
        );
    }
}
