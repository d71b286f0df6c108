//! A simulated power loss: a FUSE filesystem (in the manner of LazyFS)
//! that keeps every write in memory until the file is fsynced, so that
//! cutting the power drops exactly what a disk cache would have lost.
//!
//! SIGKILL cannot show what a PubAck survives when the power goes: the
//! page cache outlives the process and every written byte reaches the disk
//! anyway. Put the server's store on this mount, kill the server, then
//! [`Mounted::cut_power`]: the backing directory holds only what was
//! fsynced, and a server restarted on it shows what the promise was worth.
//! Semantics and limits: docs/durability.md.

mod fs;
mod state;

pub use state::CutReport;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow, bail};

use fs::PowerFsOps;
use state::State;

/// Mounts the power-loss filesystem.
pub struct PowerFs;

impl PowerFs {
    /// Why this host cannot mount the layer, or Ok: a scenario that needs
    /// it reports "not applicable" with this reason, never a pass.
    pub fn available() -> Result<()> {
        if !Path::new("/dev/fuse").exists() {
            bail!(
                "no /dev/fuse: this kernel or container has no FUSE device \
                 (load the fuse module, or give the container --device /dev/fuse)"
            );
        }
        // SAFETY: geteuid has no preconditions and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            bail!(
                "not root: the power-loss layer mounts FUSE with mount(2) itself \
                 (no fusermount helper, no libfuse), which needs root"
            );
        }
        Ok(())
    }

    /// Mounts at `mountpoint` a view of `backing` whose writes persist
    /// only on fsync. Both directories must exist.
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<Mounted> {
        Self::available()?;
        let backing = backing
            .canonicalize()
            .with_context(|| format!("the backing directory {}", backing.display()))?;
        let mountpoint = mountpoint
            .canonicalize()
            .with_context(|| format!("the mountpoint {}", mountpoint.display()))?;
        // The kernel would mount a FUSE root over a regular file too; the
        // layer's root is a directory, so a file there is a mistake.
        for (what, dir) in [("backing directory", &backing), ("mountpoint", &mountpoint)] {
            if !dir.is_dir() {
                bail!("the {what} {} is not a directory", dir.display());
            }
        }
        // A backing directory seen through its own mount would have the
        // FUSE thread wait on itself: a hang, not an error.
        if backing.starts_with(&mountpoint) {
            bail!(
                "the backing directory {} lies inside the mountpoint {}",
                backing.display(),
                mountpoint.display()
            );
        }
        let state = Arc::new(Mutex::new(State::new(&backing)));
        let ops = PowerFsOps {
            state: state.clone(),
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("jsbench-powerfs".into()),
            fuser::MountOption::Subtype("powerfs".into()),
        ];
        let session = fuser::spawn_mount(ops, &mountpoint, &config).with_context(|| {
            format!(
                "the kernel refused to mount FUSE at {} (a container without \
                 CAP_SYS_ADMIN refuses mount(2))",
                mountpoint.display()
            )
        })?;
        let mut mounted = Mounted {
            session: Some(session),
            state,
            mountpoint,
            connection: None,
        };
        mounted.connection = connection_of(&mounted.mountpoint);
        live()
            .mounts
            .push((mounted.mountpoint.clone(), mounted.connection));
        Ok(mounted)
    }
}

/// What is mounted and made now, for a way out that runs no destructors.
#[derive(Default)]
struct Live {
    mounts: Vec<(PathBuf, Option<u64>)>,
    folders: Vec<PathBuf>,
}

fn live() -> std::sync::MutexGuard<'static, Live> {
    static LIVE: Mutex<Live> = Mutex::new(Live {
        mounts: Vec::new(),
        folders: Vec::new(),
    });
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Has [`abandon_all`] remove `folder` (the mounts' temporary folder)
/// after the mounts in it are detached; [`forget_folder`] when it is
/// removed the usual way.
pub fn remove_on_abandon(folder: &Path) {
    live().folders.push(folder.to_path_buf());
}

pub fn forget_folder(folder: &Path) {
    live().folders.retain(|f| f != folder);
}

/// For an exit that skips every destructor (a second Ctrl-C): each mount
/// still up is aborted and detached, and the folders that held them are
/// removed, so no dead mount ("transport endpoint is not connected") and
/// no temporary folder stays behind. What was unsynced is lost, as a cut
/// would lose it.
pub fn abandon_all() {
    let mut live = live();
    for (mountpoint, connection) in live.mounts.drain(..) {
        abort_connection(connection);
        if let Ok(path) = std::ffi::CString::new(mountpoint.as_os_str().as_encoded_bytes()) {
            // SAFETY: umount2 on a valid C string; no memory is handed over.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
    }
    for folder in live.folders.drain(..) {
        let _ = std::fs::remove_dir_all(folder);
    }
}

/// The FUSE connection number of the filesystem at `path`, its entry
/// under /sys/fs/fuse/connections.
fn connection_of(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    (libc::major(dev) == 0).then(|| u64::from(libc::minor(dev)))
}

/// A mounted power-loss filesystem. Dropping it cuts the power (nothing
/// unsynced is kept) and always unmounts.
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    state: Arc<Mutex<State>>,
    mountpoint: PathBuf,
    connection: Option<u64>,
}

impl Mounted {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes written but not yet synced, across all files.
    pub fn unsynced_bytes(&self) -> u64 {
        self.lock().pending()
    }

    /// Syncs every file, as an orderly shutdown would; returns the bytes
    /// that reached the backing directory.
    pub fn sync_all(&self) -> Result<u64> {
        self.lock().sync_all().with_context(|| {
            format!(
                "syncing the power-loss mount at {}",
                self.mountpoint.display()
            )
        })
    }

    /// The power goes: unsynced writes are dropped, every request fails
    /// from now on, and the mount is torn down. Stop the processes using
    /// the mount first (SIGKILL, as the power would): a file still open
    /// makes the unmount lazy and its holder sees EIO.
    pub fn cut_power(mut self) -> Result<CutReport> {
        let report = self.lock().cut();
        self.teardown()?;
        Ok(report)
    }

    /// Unmounts and waits for the FUSE thread. A busy mount (a file still
    /// open) is detached instead, so no mount stays behind: its thread
    /// then ends when the last holder closes, answering EIO until then.
    fn teardown(&mut self) -> Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        live().mounts.retain(|(m, _)| *m != self.mountpoint);
        let path = std::ffi::CString::new(self.mountpoint.as_os_str().as_encoded_bytes())
            .context("the mountpoint's path holds a NUL byte")?;
        // SAFETY: umount2 on a valid C string; no memory is handed over.
        if unsafe { libc::umount2(path.as_ptr(), 0) } == 0 {
            // The connection ends with the mount, so the thread returns;
            // the rest of the session, dropped here, finds nothing to unmount.
            let guard = session.guard;
            return guard
                .join()
                .map_err(|_| anyhow!("the FUSE thread of {} panicked", self.mountpoint.display()))?
                .with_context(|| format!("the FUSE session of {}", self.mountpoint.display()));
        }
        let busy = std::io::Error::last_os_error();
        abort_connection(self.connection);
        // SAFETY: as above.
        let detached = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0;
        drop(session);
        if !detached {
            let why = std::io::Error::last_os_error();
            bail!(
                "unmounting {}: {busy}, and detaching it: {why}",
                self.mountpoint.display()
            );
        }
        Ok(())
    }
}

/// Aborts a FUSE connection through fusectl where it is mounted, so a
/// detached mount's thread ends at once instead of at the last close.
fn abort_connection(connection: Option<u64>) {
    if let Some(n) = connection {
        let _ = std::fs::write(format!("/sys/fs/fuse/connections/{n}/abort"), "1");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.session.is_some() {
            self.lock().cut();
            if let Err(e) = self.teardown() {
                eprintln!("powerfs: {e:#}");
            }
        }
    }
}
