//! The embedded nats-server: a real server that jsbench starts on loopback,
//! on a free port, with a throw-away store, and always stops.
//!
//! Every measurement talks to a real server (no mock), so this module is used
//! by `jsbench run` when no `--server` is given, by `jsbench server`, and by
//! every integration test. [`EmbeddedCluster`] runs several of them as a
//! local JetStream cluster.

mod cluster;
pub mod fault;
pub mod leaf;
pub mod power;
pub mod relay;
pub mod target;
pub mod telemetry;

pub use cluster::{CLUSTER_SIZES, EmbeddedCluster};
pub use leaf::{LeafHandle, LeafServer};

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

use crate::profile::SyncSetting;

/// The server version the project pins (scripts/setup.sh installs it).
pub const PINNED_VERSION: &str = "2.15.1";

/// The command that installs the pinned server; named in every "not found" error.
pub const SETUP_COMMAND: &str = "scripts/setup.sh";

/// Where scripts/setup.sh puts the binary, relative to the checkout.
fn project_install() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".tools")
        .join(format!("nats-server-{PINNED_VERSION}"))
        .join("bin")
        .join("nats-server")
}

/// Finds the nats-server binary: `NATS_SERVER_BIN`, then the project-local
/// install made by scripts/setup.sh, then `PATH`.
pub fn find_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("NATS_SERVER_BIN").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if is_executable(&path) {
            return Ok(path);
        }
        bail!(
            "NATS_SERVER_BIN={} is not an executable file; unset it or run {SETUP_COMMAND} \
             to install nats-server v{PINNED_VERSION} into .tools/",
            path.display()
        );
    }
    let local = project_install();
    if is_executable(&local) {
        return Ok(local);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("nats-server");
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
    }
    bail!(
        "nats-server not found (looked at $NATS_SERVER_BIN, {}, and PATH); run {SETUP_COMMAND} \
         to install the pinned v{PINNED_VERSION}, or point NATS_SERVER_BIN at a binary",
        local.display()
    )
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs `nats-server --version` and returns the bare version ("2.15.1").
pub fn binary_version(binary: &Path) -> Result<String> {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_version_output(&text)
        .ok_or_else(|| anyhow!("{} --version printed {text:?}", binary.display()))
}

fn parse_version_output(text: &str) -> Option<String> {
    let v = text.trim().rsplit(' ').next()?.trim_start_matches('v');
    (!v.is_empty() && v.chars().next()?.is_ascii_digit()).then(|| v.to_string())
}

/// How to start an embedded server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// How long to wait for the server to accept connections.
    pub ready_timeout: Duration,
    /// Enable JetStream (`-js`); off only to test how jsbench reports a
    /// server without it.
    pub jetstream: bool,
    /// Extra command-line arguments, for tests that need them.
    pub extra_args: Vec<String>,
    /// The nats-server (or a wrapper that execs one) to start instead of
    /// the one [`find_binary`] finds: `jsbench ab` compares two.
    pub binary: Option<PathBuf>,
    /// A local cluster's routes through relays jsbench controls, so a
    /// route can be cut or paused (a route fault); off otherwise, sparing
    /// every replicated byte the extra hop.
    pub relay_routes: bool,
    /// The JetStream store in this directory instead of the throw-away one:
    /// a store on a power-loss mount (crate::system::powerfs), or one
    /// restarted on what a power cut left. The caller owns it; the server
    /// never removes it.
    pub store_dir: Option<PathBuf>,
    /// The file store's fsync policy; `None` leaves the server's default
    /// and starts it without a configuration file of jsbench's.
    pub sync: Option<SyncSetting>,
    /// The JetStream domain: a hub and its leafnode each name theirs, so
    /// a stream on one can be reached (and mirrored) from the other.
    pub domain: Option<String>,
    /// A `leafnodes` block: a hub's listen address or a leaf's remote.
    pub leafnodes: Option<Leafnodes>,
}

/// The server's side of a leafnode connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leafnodes {
    /// A hub: accepts leafnodes on this loopback port.
    Listen(u16),
    /// A leaf: connects to the hub at this `nats-leaf://` URL, pinging it
    /// this often when given (the server's default is two minutes).
    Remote {
        url: String,
        ping_interval: Option<Duration>,
    },
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            ready_timeout: Duration::from_secs(20),
            jetstream: true,
            extra_args: Vec::new(),
            binary: None,
            relay_routes: false,
            store_dir: None,
            sync: None,
            domain: None,
            leafnodes: None,
        }
    }
}

/// A running nats-server child process. Dropping it stops the server and
/// removes its store.
pub struct EmbeddedServer {
    /// The running process; replaced by `restart`.
    child: Mutex<Child>,
    /// The command line that started it, ports pinned to the ones it got,
    /// so a restart comes back where clients look for it.
    restart_args: Mutex<Vec<String>>,
    /// Holds the store, the log and the ports file; removed on drop.
    dir: tempfile::TempDir,
    url: String,
    monitor_url: Option<String>,
    version: String,
    binary: PathBuf,
    /// Log offset where the lines worth reporting start.
    log_start: u64,
    /// The sync setting it was last started with.
    sync: Mutex<SyncSetting>,
    /// The rest of its configuration file, written again on a restart
    /// with another sync setting. Boxed: rarely read, and a server is
    /// held by value in enums beside smaller things.
    config: Box<ConfigFile>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PortsFile {
    nats: Vec<String>,
    monitoring: Vec<String>,
}

impl EmbeddedServer {
    /// Starts nats-server with JetStream on 127.0.0.1, a random client and
    /// monitoring port and a temporary store, and waits until it accepts
    /// connections.
    pub fn start() -> Result<Self> {
        Self::start_with(&ServerOptions::default())
    }

    pub fn start_with(options: &ServerOptions) -> Result<Self> {
        let binary = match &options.binary {
            Some(b) => b.clone(),
            None => find_binary()?,
        };
        let version = binary_version(&binary)?;
        let dir = tempfile::Builder::new()
            .prefix("jsbench-server-")
            .tempdir()
            .context("creating a temporary directory for the embedded server")?;
        let store = options
            .store_dir
            .clone()
            .unwrap_or_else(|| dir.path().join("store"));
        let log_path = dir.path().join("server.log");
        let log = fs::File::create(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;

        let mut args: Vec<String> = ["-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-sd"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        args.push(store.display().to_string());
        args.push("--ports_file_dir".into());
        args.push(dir.path().display().to_string());
        if options.jetstream {
            args.push("-js".into());
        }
        let config = ConfigFile {
            sync: None,
            domain: options.domain.clone(),
            leafnodes: options.leafnodes.clone(),
        };
        if options.sync.is_some() || !config.is_empty() {
            args.extend(
                ConfigFile {
                    sync: options.sync,
                    ..config.clone()
                }
                .write(dir.path())?,
            );
        }
        args.extend(options.extra_args.iter().cloned());
        let child = spawn(&binary, &args, log)?;

        let mut server = EmbeddedServer {
            child: Mutex::new(child),
            restart_args: Mutex::new(args),
            dir,
            url: String::new(),
            monitor_url: None,
            version,
            binary,
            log_start: 0,
            sync: Mutex::new(options.sync.unwrap_or(SyncSetting::Default)),
            config: Box::new(config),
        };
        server
            .wait_ready(options.ready_timeout)
            .with_context(|| server.log_context("the embedded nats-server did not become ready"))?;
        Ok(server)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let ports_path = self
            .dir
            .path()
            .join(format!("nats-server_{}.ports", self.pid()));
        let probe = || {
            if let Some(status) = self.child.lock().expect("not poisoned").try_wait()? {
                bail!("nats-server exited during start-up with {status}");
            }
            let text = fs::read_to_string(&ports_path).unwrap_or_default();
            let ports = serde_json::from_str::<PortsFile>(&text).unwrap_or_default();
            let url = ports.nats.first().filter(|url| accepts(url));
            Ok(url
                .map(|u| (u.clone(), ports.monitoring.first().cloned()))
                .ok_or(()))
        };
        let timed_out = |()| anyhow!("no client port after {timeout:?}");
        let (url, monitor_url) = poll(timeout, Duration::from_millis(10), probe, timed_out)?;
        self.url = url;
        self.monitor_url = monitor_url;
        self.pin_ports();
        Ok(())
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The monitoring endpoint (`/varz`, `/jsz`), `http://127.0.0.1:<port>`.
    pub fn monitor_url(&self) -> Option<&str> {
        self.monitor_url.as_deref()
    }

    /// The version `nats-server --version` reported.
    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn pid(&self) -> u32 {
        self.child.lock().expect("not poisoned").id()
    }

    /// Replaces the random-port flags of the command line with the ports
    /// this server got, for `restart`.
    fn pin_ports(&self) {
        let port = |a: &str| a.rsplit(':').next().unwrap_or("-1").to_string();
        let client = port(&self.url);
        let monitor = self
            .monitor_url
            .as_deref()
            .map(|m| port(m.trim_end_matches('/')));
        let mut args = self.restart_args.lock().expect("not poisoned");
        for i in 0..args.len().saturating_sub(1) {
            match args[i].as_str() {
                "-p" => args[i + 1] = client.clone(),
                "-m" => args[i + 1] = monitor.clone().unwrap_or_else(|| "-1".into()),
                _ => {}
            }
        }
    }

    /// Kills the server with SIGKILL, as a crash would: no shutdown, no
    /// flush. Its store stays for `restart`.
    pub fn kill(&self) -> Result<()> {
        let mut child = self.child.lock().expect("not poisoned");
        child.kill().context("killing nats-server")?;
        child.wait().context("reaping nats-server")?;
        Ok(())
    }

    /// Starts the server again on the same store, ports and options, and
    /// waits until it accepts connections.
    pub fn restart(&self, timeout: Duration) -> Result<()> {
        let args = self.restart_args.lock().expect("not poisoned").clone();
        let log_path = self.dir.path().join("server.log");
        let log = fs::OpenOptions::new()
            .append(true)
            .open(&log_path)
            .with_context(|| format!("reopening {}", log_path.display()))?;
        let child = spawn(&self.binary, &args, log)?;
        *self.child.lock().expect("not poisoned") = child;
        let probe = || match self.child.lock().expect("not poisoned").try_wait()? {
            Some(status) => bail!(
                "{}",
                self.log_context(&format!("nats-server exited during restart with {status}"))
            ),
            None => Ok(accepts(&self.url).then_some(()).ok_or(())),
        };
        let timed_out = |()| {
            let what = format!("nats-server did not come back within {timeout:?}");
            anyhow!("{}", self.log_context(&what))
        };
        poll(timeout, Duration::from_millis(5), probe, timed_out)
    }

    /// The sync setting the server was last started with.
    pub fn sync(&self) -> SyncSetting {
        *self.sync.lock().expect("not poisoned")
    }

    /// Stops the server cleanly (SIGTERM, so its store is flushed and
    /// synced: no variant inherits the last one's unsynced writes) and
    /// starts it again on the same store and ports with `sync`: the
    /// setting is read only at start-up, and a server-wide one cannot vary
    /// per stream. Nothing happens when it already runs with `sync`.
    pub fn restart_with_sync(&self, sync: SyncSetting, timeout: Duration) -> Result<()> {
        if self.sync() == sync {
            return Ok(());
        }
        let config = ConfigFile {
            sync: Some(sync),
            ..(*self.config).clone()
        }
        .write(self.dir.path())?;
        {
            let mut args = self.restart_args.lock().expect("not poisoned");
            if !args.windows(2).any(|w| w == config.as_slice()) {
                args.extend(config);
            }
        }
        self.terminate();
        self.restart(timeout)
            .with_context(|| format!("restarting nats-server with sync {}", sync.label()))?;
        *self.sync.lock().expect("not poisoned") = sync;
        Ok(())
    }

    /// SIGTERM, then SIGKILL if the server has not exited within ten
    /// seconds (a clean shutdown syncs the whole store).
    fn terminate(&self) {
        terminate(
            &mut self.child.lock().expect("not poisoned"),
            Duration::from_secs(10),
        );
    }

    /// The server's log so far (the last `max` bytes).
    pub fn log_tail(&self, max: u64) -> String {
        self.log_since(0, max)
    }

    fn log_since(&self, start: u64, max: u64) -> String {
        let path = self.dir.path().join("server.log");
        let Ok(mut file) = fs::File::open(path) else {
            return String::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(max).max(start)));
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        text
    }

    /// Warning and error lines of the server log: drops the server reports
    /// only there (for example "IPQ len limit reached") belong in the results.
    pub fn log_problems(&self) -> Vec<String> {
        self.log_since(self.log_start, 4 << 20)
            .lines()
            .filter(|line| line.contains("[WRN]") || line.contains("[ERR]"))
            .map(str::to_string)
            .collect()
    }

    /// Leaves what the log holds so far out of [`Self::log_problems`]:
    /// a cluster node's start-up retries while its peers come up are not
    /// problems of the run.
    pub fn forget_startup_log(&mut self) {
        let path = self.dir.path().join("server.log");
        self.log_start = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    }

    fn log_context(&self, what: &str) -> String {
        let tail = self.log_tail(2048);
        if tail.trim().is_empty() {
            what.to_string()
        } else {
            format!("{what}; its log ends with:\n{}", tail.trim_end())
        }
    }

    /// Stops the server: SIGTERM, then SIGKILL if it has not exited within
    /// two seconds. Called by `Drop`; calling it twice is harmless.
    pub fn stop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        terminate(child, Duration::from_secs(2));
    }
}

/// Whether the server at a client URL (`nats://` or `tls://`) accepts
/// connections.
fn accepts(url: &str) -> bool {
    TcpStream::connect(url.split_once("://").map_or(url, |(_, a)| a)).is_ok()
}

/// Calls `probe` every `every` until it gives a value (`Ok(Ok)`) or gives
/// up (`Err`); once `timeout` has passed, fails with `timed_out` of what
/// its last call said instead (`Ok(Err)`).
fn poll<T, W>(
    timeout: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<Result<T, W>>,
    timed_out: impl FnOnce(W) -> anyhow::Error,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        let not_yet = match probe()? {
            Ok(value) => return Ok(value),
            Err(not_yet) => not_yet,
        };
        if Instant::now() > deadline {
            return Err(timed_out(not_yet));
        }
        std::thread::sleep(every);
    }
}

/// SIGTERM to `child`, then SIGKILL if it has not exited within `grace`;
/// nothing for a child already gone.
fn terminate(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    // SAFETY: kill(2) on our own child's pid; no memory is touched.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// What jsbench puts in a server's configuration file: what nats-server
/// has no flag for (a sync interval, a JetStream domain, leafnodes).
#[derive(Debug, Clone, Default)]
struct ConfigFile {
    sync: Option<SyncSetting>,
    domain: Option<String>,
    leafnodes: Option<Leafnodes>,
}

impl ConfigFile {
    fn is_empty(&self) -> bool {
        self.sync.is_none() && self.domain.is_none() && self.leafnodes.is_none()
    }

    /// Writes the file into `dir` and returns the arguments that load it.
    /// The command-line flags jsbench passes beside it (store, ports) win
    /// over it.
    fn write(&self, dir: &Path) -> Result<Vec<String>> {
        let path = dir.join("jsbench.conf");
        fs::write(&path, self.text()).with_context(|| format!("writing {}", path.display()))?;
        Ok(vec!["-c".into(), path.display().to_string()])
    }

    fn text(&self) -> String {
        let mut text = String::from("# jsbench\n");
        let mut jetstream = Vec::new();
        if let Some(value) = self.sync.as_ref().and_then(SyncSetting::config_value) {
            jetstream.push(format!("  sync_interval: {value}"));
        }
        if let Some(domain) = &self.domain {
            jetstream.push(format!("  domain: {domain:?}"));
        }
        if !jetstream.is_empty() {
            text += &format!("jetstream {{\n{}\n}}\n", jetstream.join("\n"));
        }
        match &self.leafnodes {
            Some(Leafnodes::Listen(port)) => {
                // Not advertised: a leaf told the hub's own leafnode
                // address would reconnect there, around the relay its
                // link is slowed or paused in.
                text += &format!(
                    "leafnodes {{\n  listen: \"127.0.0.1:{port}\"\n  no_advertise: true\n}}\n"
                );
            }
            Some(Leafnodes::Remote { url, ping_interval }) => {
                if let Some(every) = ping_interval {
                    // Leafnode connections ping at the server-wide interval.
                    text += &format!("ping_interval: \"{}ms\"\n", every.as_millis());
                }
                text += &format!("leafnodes {{\n  remotes: [ {{ url: {url:?} }} ]\n}}\n");
            }
            None => {}
        }
        text
    }
}

/// Starts nats-server with `args`, its log going to `log`.
fn spawn(binary: &Path, args: &[String], log: fs::File) -> Result<Child> {
    let mut command = Command::new(binary);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
    detach_from_terminal_signals(&mut command);
    command
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

impl Drop for EmbeddedServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Puts the server in its own process group, so a Ctrl-C in the terminal
/// reaches jsbench alone (which then writes its results and stops the server
/// in order), and asks the kernel to kill the server if jsbench dies without
/// running its destructors (SIGKILL, a panic that aborts).
///
/// The parent-death signal fires when the *thread* that spawned the child
/// exits; servers are started from the main thread or a test's thread, which
/// outlive them, and restarted there too (`block_in_place`, never
/// `spawn_blocking`, whose threads exit once idle).
fn detach_from_terminal_signals(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    command.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_version_output() {
        assert_eq!(
            parse_version_output("nats-server: v2.15.1\n").as_deref(),
            Some("2.15.1")
        );
        assert_eq!(parse_version_output("garbage"), None);
    }
}
