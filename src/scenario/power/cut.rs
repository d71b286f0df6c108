//! The cut as the drive's fault: the drive kills "a server" at a planned
//! instant; here that is the variant's own powered server, killed, its
//! publishers stopped with it, and (for a power cut) its mount's unsynced
//! writes dropped. The restart is the scenario's, after the drive, so that
//! recovery is timed on its own and nothing is published after the cut.

use std::sync::{Arc, Mutex};

use anyhow::{Result, anyhow};
use tokio_util::sync::CancellationToken;

use super::plan::Cut;
use crate::profile::{PersistMode, SyncSetting};
use crate::server::fault::Faults;
use crate::server::power::PowerTarget;
use crate::server::relay::Block;
use crate::system::powerfs::CutReport;

/// The variant's powered server as the drive's [`Faults`].
pub(super) struct CutAtKill {
    pub target: Arc<dyn PowerTarget>,
    pub cut: Cut,
    /// The variant's stop: cancelled at the kill, so the publishers stop
    /// sending into a dead server and nothing is published after the cut.
    pub stop: CancellationToken,
    /// What the power cut dropped, once it happened.
    pub report: Mutex<Option<CutReport>>,
}

impl Faults for CutAtKill {
    fn node_names(&self) -> Vec<String> {
        vec!["server".into()]
    }

    /// SIGKILL while the publishers still send; then the publishers are
    /// stopped and, for a power cut, the unsynced writes dropped.
    fn kill(&self, node: usize) -> Result<()> {
        self.target.kill(node)?;
        self.stop.cancel();
        if self.cut == Cut::Power {
            let report = self.target.cut_power(node)?;
            *self.report.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
        }
        Ok(())
    }

    /// Deferred: the scenario restarts the server after the drive.
    fn restart(&self, _node: usize) -> Result<()> {
        Ok(())
    }

    fn block_routes(&self, _node: usize, _how: Block) -> Result<()> {
        Err(anyhow!(
            "the power scenario kills its server; it cuts no routes"
        ))
    }

    fn heal_routes(&self, node: usize) -> Result<()> {
        self.block_routes(node, Block::Cut)
    }

    fn set_sync(&self, sync: SyncSetting) -> Result<()> {
        Err(anyhow!(
            "the power scenario's server keeps the sync it started with, not {}",
            sync.label()
        ))
    }

    fn pids(&self) -> Vec<u32> {
        self.target.pids()
    }
}

/// What the setting promises a PubAcked message under `cut`: `Ok` with
/// the promise where it covers the cut (the invariant applies), `Err`
/// with what was promised where it does not (the loss is a finding).
pub fn promise(
    cut: Cut,
    sync: SyncSetting,
    persist: Option<PersistMode>,
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
        (Cut::Power, SyncSetting::Always) => {
            Ok("sync always: every write is fsynced before its PubAck")
        }
        (Cut::Power, SyncSetting::Default) => Err("sync default fsyncs every 2 minutes: a \
                                                  PubAck promises the write reached the \
                                                  operating system, not the disk"
            .into()),
        (Cut::Power, SyncSetting::Interval(_)) => Err(format!(
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
    fn only_a_kill_without_async_and_a_power_cut_under_sync_always_are_promised() {
        use Cut::*;
        let every = SyncSetting::Interval(std::time::Duration::from_secs(1));
        for sync in [SyncSetting::Default, SyncSetting::Always, every] {
            assert!(promise(Kill, sync, None).is_ok());
            assert!(promise(Kill, sync, Some(PersistMode::Default)).is_ok());
            assert!(promise(Kill, sync, Some(PersistMode::Async)).is_err());
            assert!(promise(Power, sync, Some(PersistMode::Async)).is_err());
        }
        assert!(promise(Power, SyncSetting::Always, None).is_ok());
        let why = promise(Power, SyncSetting::Default, None).unwrap_err();
        assert!(why.contains("2 minutes"), "{why}");
        assert!(
            promise(Power, every, None)
                .unwrap_err()
                .contains("interval")
        );
    }
}
