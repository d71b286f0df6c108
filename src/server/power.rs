//! Servers whose stores sit on the power-loss filesystem
//! ([`crate::system::powerfs`]): what the power scenario kills, cuts the
//! power of and starts again on what survived.
//!
//! The scenario reaches them only through [`PowerTarget`], so that a local
//! cluster with a mount per node can implement it later (cut one node,
//! then all three) without the scenario changing. A single server,
//! [`PoweredServer`], implements it here.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result, anyhow};

use super::fault::RESTART_TIMEOUT;
use super::telemetry::Monitor;
use super::{EmbeddedServer, ServerOptions};
use crate::profile::SyncSetting;
use crate::system::powerfs::{CutReport, Mounted, PowerFs};

/// Servers jsbench owns, each store on a power-loss mount of its own.
/// Nodes are numbered from 0; a single server is node 0.
pub trait PowerTarget: Send + Sync {
    /// The client URLs, comma-separated.
    fn urls(&self) -> String;
    fn monitors(&self) -> Vec<Monitor>;
    /// The server processes now: a restart gives them new ids.
    fn pids(&self) -> Vec<u32>;
    /// SIGKILL: the process dies, the mount keeps its unsynced writes (as
    /// the page cache outlives a killed process).
    fn kill(&self, node: usize) -> Result<()>;
    /// The power goes under a node already killed: its unsynced writes
    /// are dropped and a fresh mount shows what the backing disk kept.
    fn cut_power(&self, node: usize) -> Result<CutReport>;
    /// Writes every unsynced byte of the node's store to its disk, as the
    /// server's own interval would; returns the bytes written.
    fn sync_all(&self, node: usize) -> Result<u64>;
    /// Starts the node again on its store (what the mount now shows),
    /// its ports unchanged, and waits until it accepts connections.
    fn restart(&self, node: usize) -> Result<()>;
}

/// One nats-server whose JetStream store is a power-loss mount over a
/// temporary backing directory (the "disk").
pub struct PoweredServer {
    /// Declared first so it stops before the mount goes.
    server: EmbeddedServer,
    mount: Mutex<Option<Mounted>>,
    backing: PathBuf,
    mountpoint: PathBuf,
    /// Holds the backing directory and the mountpoint; removed last.
    _dir: tempfile::TempDir,
}

impl PoweredServer {
    /// Why this host cannot run one: no FUSE device, not root.
    pub fn available() -> Result<()> {
        PowerFs::available()
    }

    /// Mounts a fresh power-loss filesystem and starts a server on it
    /// with `sync`. An error from the mount is returned as [`MountRefused`]
    /// (the host cannot, which a scenario reports as not applicable),
    /// any other (no nats-server) as itself.
    pub fn start(sync: SyncSetting) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("jsbench-power-")
            .tempdir()
            .context("creating a folder for the power-loss mount")?;
        let backing = dir.path().join("backing");
        let mountpoint = dir.path().join("mnt");
        for d in [&backing, &mountpoint] {
            std::fs::create_dir(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let mounted =
            PowerFs::mount(&backing, &mountpoint).map_err(|e| anyhow!(MountRefused(e)))?;
        let server = EmbeddedServer::start_with(&ServerOptions {
            store_dir: Some(mountpoint.clone()),
            sync: Some(sync),
            ..Default::default()
        })
        .context("starting nats-server on the power-loss mount")?;
        Ok(PoweredServer {
            server,
            mount: Mutex::new(Some(mounted)),
            backing,
            mountpoint,
            _dir: dir,
        })
    }

    pub fn server(&self) -> &EmbeddedServer {
        &self.server
    }

    fn only(node: usize) -> Result<()> {
        match node {
            0 => Ok(()),
            n => Err(anyhow!("a single powered server has no node {n}")),
        }
    }

    fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }
}

/// The power-loss filesystem could not be mounted on this host: the
/// reason a scenario reports as "not applicable".
#[derive(Debug)]
pub struct MountRefused(pub anyhow::Error);

impl std::fmt::Display for MountRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for MountRefused {}

impl PowerTarget for PoweredServer {
    fn urls(&self) -> String {
        self.server.url().to_string()
    }

    fn monitors(&self) -> Vec<Monitor> {
        self.server
            .monitor_url()
            .map(|url| Monitor {
                node: "powered".into(),
                url: url.to_string(),
            })
            .into_iter()
            .collect()
    }

    fn pids(&self) -> Vec<u32> {
        vec![self.server.pid()]
    }

    fn kill(&self, node: usize) -> Result<()> {
        Self::only(node)?;
        self.server.kill()
    }

    fn cut_power(&self, node: usize) -> Result<CutReport> {
        Self::only(node)?;
        let mut slot = self.mount.lock().unwrap_or_else(|p| p.into_inner());
        let mounted = slot
            .take()
            .ok_or_else(|| anyhow!("the power-loss mount is already gone"))?;
        let report = mounted.cut_power().context("cutting the power")?;
        // The server restarts on the same path: a fresh mount over what
        // the backing directory kept.
        *slot = Some(
            PowerFs::mount(&self.backing, self.mountpoint())
                .context("mounting the power-loss filesystem again after the cut")?,
        );
        Ok(report)
    }

    fn sync_all(&self, node: usize) -> Result<u64> {
        Self::only(node)?;
        let slot = self.mount.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref()
            .ok_or_else(|| anyhow!("the power-loss mount is gone"))?
            .sync_all()
    }

    fn restart(&self, node: usize) -> Result<()> {
        Self::only(node)?;
        self.server.restart(RESTART_TIMEOUT)
    }
}
