//! The two sides and the servers they run against.
//!
//! Apart from the pairs because it is set-up, done once before the first
//! slice: which binaries each side runs, which CPUs its slices may use,
//! and the servers ab starts itself, one both sides share or one per side,
//! kept alive (and stopped) for the whole comparison.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::server::{EmbeddedCluster, EmbeddedServer, ServerOptions};
use crate::system::error::UsageError;

use super::slice::{self, Side, SliceTarget};
use super::{AbOptions, Sides};

/// The CPUs the slices run on: the flags checked against this machine
/// and the server (`given`: one ab did not start).
pub(super) fn slice_cpus(options: &AbOptions, given: bool) -> Result<Option<Vec<usize>>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if options.pin && (cores < 2 || given) {
        return Err(UsageError(format!(
            "--pin keeps the servers jsbench ab starts on CPU 0 and the slices on the others: it \
             needs 2 cores or more (this machine has {cores}) and servers ab starts itself (not a given server)"
        ))
        .into());
    }
    if let Some(cpu) = options.slice_cpus.iter().flatten().find(|c| **c >= cores) {
        return Err(UsageError(format!(
            "--slice-cpus names CPU {cpu}; this machine has CPUs 0 to {}",
            cores - 1
        ))
        .into());
    }
    Ok(match options.pin {
        true => Some((1..cores).collect()),
        false => options.slice_cpus.clone(),
    })
}

/// The two sides, and what they run against: each side's own server, or
/// one both share (the given one, or one ab starts in `servers`).
pub(super) fn sides(
    options: &AbOptions,
    given: bool,
    servers: &mut Servers,
) -> Result<(Side, Side, String)> {
    let this = std::env::current_exe().context("finding this jsbench's own binary")?;
    let side = |role, jsbench, server: Option<&PathBuf>, target| Side {
        role,
        jsbench,
        server: server.cloned(),
        target,
    };
    if let Sides::Server { base, new } = &options.sides {
        slice::check_executable("base", "server", base)?;
        slice::check_executable("new", "server", new)?;
        let b = servers.start(Some(base), options.cluster, options.pin)?;
        let n = servers.start(Some(new), options.cluster, options.pin)?;
        let name = match options.cluster {
            Some(n) => format!("a cluster of {n} per side, each of its side's nats-server"),
            None => "an embedded nats-server per side, each its side's binary".into(),
        };
        let base = side("base", this.clone(), Some(base), b);
        return Ok((base, side("new", this, Some(new), n), name));
    }
    let (target, name) = if given {
        (
            slice::given_target(&options.connection.flags),
            "the given server".to_string(),
        )
    } else {
        let t = servers.start(None, options.cluster, options.pin)?;
        (t, servers.describe())
    };
    let (b, n) = match &options.sides {
        Sides::Jsbench { base, new } => {
            slice::check_executable("base", "jsbench", base)?;
            slice::check_executable("new", "jsbench", new)?;
            (base.clone(), new.clone())
        }
        _ => (this.clone(), this),
    };
    let base = side("base", b, None, target.clone());
    Ok((base, side("new", n, None, target), name))
}

/// The servers and clusters ab started, stopped when it ends.
#[derive(Default)]
pub(super) struct Servers {
    servers: Vec<EmbeddedServer>,
    clusters: Vec<EmbeddedCluster>,
}

impl Servers {
    /// Starts a server (or a cluster) from `binary` (`None`: the one
    /// jsbench finds), pinned to CPU 0 with `pin`; returns where slices
    /// reach it.
    fn start(
        &mut self,
        binary: Option<&PathBuf>,
        cluster: Option<usize>,
        pin: bool,
    ) -> Result<SliceTarget> {
        let options = ServerOptions {
            binary: binary.cloned(),
            ..Default::default()
        };
        let pinned = |pid: u32| -> Result<()> {
            if pin {
                crate::system::cpu::pin_process(pid, &[0]).context("pinning a server to CPU 0")?;
            }
            Ok(())
        };
        let target = match cluster {
            Some(n) => {
                let c = EmbeddedCluster::start_with(n, &options)?;
                for node in c.nodes() {
                    pinned(node.pid())?;
                }
                let t = SliceTarget::Started {
                    urls: c.urls(),
                    monitor: c.nodes()[0].monitor_url().map(str::to_string),
                    pids: c.nodes().iter().map(|n| n.pid()).collect(),
                };
                self.clusters.push(c);
                t
            }
            None => {
                let s = EmbeddedServer::start_with(&options)?;
                pinned(s.pid())?;
                let t = SliceTarget::Started {
                    urls: s.url().to_string(),
                    monitor: s.monitor_url().map(str::to_string),
                    pids: vec![s.pid()],
                };
                self.servers.push(s);
                t
            }
        };
        Ok(target)
    }

    fn describe(&self) -> String {
        match (self.servers.first(), self.clusters.first()) {
            (Some(s), _) => format!("an embedded nats-server {} at {}", s.version(), s.url()),
            (None, Some(c)) => format!("an embedded cluster of {}", c.nodes().len()),
            _ => "no server".into(),
        }
    }
}

/// A side by the binary that differs: its server, else its jsbench.
pub(super) fn describe(side: &Side) -> String {
    match &side.server {
        Some(s) => format!("nats-server {}", s.display()),
        None => format!("jsbench {}", side.jsbench.display()),
    }
}
