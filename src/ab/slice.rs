//! One slice: one side's run of the profiles, as a child process of the
//! side's jsbench, against the side's server.
//!
//! A slice is a plain `jsbench run` of a rewritten profile (each scenario
//! once, `repeat = 1`, and with `--slice` every scenario's `duration`), so
//! a build that predates `ab` can be a side: all it needs is `run`, `-o`,
//! `--progress`, and the connection flags it already had. Each slice makes
//! its own streams and runs its own warm-up, exactly as a run would.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use tokio_util::sync::CancellationToken;

use super::tails::PairHistograms;
use crate::profile::format_duration;
use crate::results::read_summary;
use crate::results::summary::Summary;
use crate::scenario::Profile;
use crate::system::error::UsageError;

/// What one side is: the jsbench that runs its slices, the nats-server
/// binary it brings (`None`: the one both sides share), and where its
/// slices send their load.
#[derive(Debug, Clone)]
pub struct Side {
    /// `base` or `new`.
    pub role: &'static str,
    pub jsbench: PathBuf,
    pub server: Option<PathBuf>,
    pub target: SliceTarget,
}

/// Where slices send their load: one server for both sides, unless each
/// side brings its own.
#[derive(Debug, Clone)]
pub enum SliceTarget {
    /// A server (or cluster) `ab` started: its client URLs and a
    /// monitoring URL for server CPU.
    Started {
        urls: String,
        monitor: Option<String>,
        /// Its processes: a warm side's turn waits for them to go quiet.
        pids: Vec<u32>,
    },
    /// A server the user named: the connection flags go to every slice
    /// (secrets through the environment, never the command line).
    Given {
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
}

/// The profiles without their scenarios that kill, cut or pause the
/// server: both sides' turns share the server ab started (or the user's),
/// and a side refuses to fault a server it did not start, so such a
/// scenario could only end the comparison. Each one left out is named on
/// stderr with how to run it; a profile left with none is refused.
pub fn without_faults(mut profiles: Vec<Profile>) -> Result<Vec<Profile>> {
    let faulting: Vec<(String, String)> = crate::scenario::faults(&profiles)
        .iter()
        .map(|f| (f.profile.to_string(), f.scenario.to_string()))
        .collect();
    for p in &mut profiles {
        let out: Vec<&str> = faulting
            .iter()
            .filter(|(profile, _)| *profile == p.name)
            .map(|(_, scenario)| scenario.as_str())
            .collect();
        if out.is_empty() {
            continue;
        }
        for scenario in &out {
            eprintln!(
                "note: ab leaves out scenario {scenario} of profile {}: it faults the server \
                 both sides share; `jsbench run {}` runs it",
                p.name, p.name
            );
        }
        p.scenarios.retain(|s| !out.contains(&s.name()));
        p.text = slice_profile(&p.text, None, &|s| !out.contains(&s))?.ok_or_else(|| {
            UsageError(format!(
                "profile {}: every scenario faults the server, which ab's sides share, so \
                 there is nothing to compare; `jsbench run {}` runs it",
                p.name, p.name
            ))
        })?;
    }
    Ok(profiles)
}

/// The profiles a slice runs, written into `dir`: each with the scenarios
/// `keep` names (by profile and scenario name); a profile left with none
/// is not written.
pub fn write_profiles(
    profiles: &[Profile],
    slice: Option<Duration>,
    dir: &Path,
    keep: &dyn Fn(&str, &str) -> bool,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut paths = Vec::new();
    for p in profiles {
        let Some(text) = slice_profile(&p.text, slice, &|scenario| keep(&p.name, scenario))
            .with_context(|| format!("rewriting profile {} for slices", p.name))?
        else {
            continue;
        };
        let path = dir.join(format!(
            "{}.toml",
            crate::report::charts::safe_stem(&p.name)
        ));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        paths.push(path);
    }
    Ok(paths)
}

/// A profile's text with `repeat = 1` (pairs are the repetitions), only
/// the scenarios `keep` names, and, when given, `duration` set on every
/// scenario that has one; `None` when no scenario is kept.
pub fn slice_profile(
    text: &str,
    slice: Option<Duration>,
    keep: &dyn Fn(&str) -> bool,
) -> Result<Option<String>> {
    let mut table: toml::Table = text.parse().context("parsing the profile")?;
    table.insert("repeat".into(), toml::Value::Integer(1));
    // `[ab]` is ab's own; a build that predates it would refuse the key.
    table.remove("ab");
    if let Some(toml::Value::Array(scenarios)) = table.get_mut("scenario") {
        // A scenario's name is its `name`, else its kind, as in the results.
        scenarios.retain(|s| {
            let name = s
                .get("name")
                .or_else(|| s.get("kind"))
                .and_then(|v| v.as_str())
                .unwrap_or("");
            keep(name)
        });
        if scenarios.is_empty() {
            return Ok(None);
        }
        for scenario in scenarios.iter_mut() {
            if let (Some(slice), toml::Value::Table(s)) = (slice, scenario)
                && s.contains_key("duration")
            {
                s.insert(
                    "duration".into(),
                    toml::Value::String(format_duration(slice)),
                );
            }
        }
    }
    Ok(Some(format!(
        "# Written by jsbench ab: each slice runs this once.\n{}",
        toml::to_string(&table).context("writing the profile")?
    )))
}

/// What one slice left: the summaries of its results folders and how it
/// ended.
#[derive(Debug, Clone)]
pub struct SliceResult {
    pub dir: PathBuf,
    pub exit: i32,
    pub elapsed: Duration,
    pub summaries: Vec<Summary>,
    /// Every histogram the slice wrote, base64, for tails judged merged.
    pub histograms: PairHistograms,
}

/// How a slice may end besides with results.
#[derive(Debug)]
pub enum SliceError {
    /// The run was interrupted (Ctrl-C): what it wrote is kept.
    Interrupted,
    /// The side failed without results worth pairing (a crash, no
    /// results); a side refusing its input (exit 2) is a usage error.
    Refused(String),
    /// It ran past its time limit and was stopped.
    TimedOut(String),
}

impl std::fmt::Display for SliceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SliceError::Interrupted => f.write_str("interrupted"),
            SliceError::Refused(why) | SliceError::TimedOut(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for SliceError {}

/// Runs one slice of `side` into `dir` (created), its output in
/// `dir/jsbench.log`.
pub async fn run(
    side: &Side,
    profiles: &[PathBuf],
    dir: &Path,
    limit: Duration,
    cpus: Option<&[usize]>,
    stop: &CancellationToken,
) -> Result<SliceResult> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let log_path = dir.join("jsbench.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut run_args: Vec<OsString> = vec!["run".into()];
    run_args.extend(profiles.iter().map(|p| p.as_os_str().to_owned()));
    run_args.extend(["-o".into(), dir.as_os_str().to_owned()]);
    run_args.extend(["--progress".into(), "never".into()]);
    let mut command = command(side, &run_args, cpus);
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let started = Instant::now();
    let mut child = spawn(side, &mut command)?;
    let ended = tokio::select! {
        status = child.wait() => Ok(status.context("waiting for a slice")?),
        _ = stop.cancelled() => Err(SliceError::Interrupted),
        _ = tokio::time::sleep(limit) => Err(SliceError::TimedOut(format!(
            "the {} side's slice ran past {} and was stopped; its output: {}",
            side.role,
            format_duration(limit),
            log_path.display()
        ))),
    };
    // Stopped: it writes what it measured, or is killed after 30 s.
    let status = match ended {
        Ok(status) => status,
        Err(e) => {
            interrupt(&child);
            let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
            let _ = child.kill().await;
            return Err(e.into());
        }
    };
    let elapsed = started.elapsed();
    let exit = status.code().unwrap_or(-1);
    let (summaries, histograms) = read_results(dir)?;
    // 0: every invariant held; 1: one broke (the results say which).
    // Anything else means the slice measured nothing worth pairing.
    if exit == crate::system::error::EXIT_USAGE {
        return Err(UsageError(format!(
            "the {} side's jsbench ({}) refused its slice as bad input (exit 2); the last lines of {}:\n{}",
            side.role,
            side.jsbench.display(),
            log_path.display(),
            tail(&log_path, 12)
        ))
        .into());
    }
    if !matches!(
        exit,
        0 | 1 | crate::system::error::EXIT_INCONCLUSIVE | crate::system::error::EXIT_NOT_APPLICABLE
    ) || summaries.is_empty()
    {
        return Err(SliceError::Refused(format!(
            "the {} side's jsbench ({}) exited with {} and {}; the last lines of {}:\n{}",
            side.role,
            side.jsbench.display(),
            status,
            if summaries.is_empty() {
                "wrote no results"
            } else {
                "its results are incomplete"
            },
            log_path.display(),
            tail(&log_path, 12)
        ))
        .into());
    }
    Ok(SliceResult {
        dir: dir.to_path_buf(),
        exit,
        elapsed,
        summaries,
        histograms,
    })
}

/// `<side's jsbench> <args> <target>`: the side's connection flags after
/// the command's own arguments, secrets in the environment, pinned to
/// `cpus`, and killed if the caller lets go of it.
pub(super) fn command(
    side: &Side,
    args: &[OsString],
    cpus: Option<&[usize]>,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&side.jsbench);
    command.args(args).kill_on_drop(true);
    match &side.target {
        SliceTarget::Started { urls, monitor, .. } => {
            command.args(["--server", urls]);
            if let Some(m) = monitor {
                command.args(["--monitor", m]);
            }
        }
        SliceTarget::Given { args, env } => {
            command.args(args);
            command.envs(env.iter().map(|(k, v)| (k, v)));
        }
    }
    if let Some(cpus) = cpus {
        let cpus = cpus.to_vec();
        // SAFETY: the closure only calls sched_setaffinity on a CPU set
        // built on its stack: async-signal-safe between fork and exec.
        unsafe {
            command.pre_exec(move || crate::system::cpu::pin_this_thread(&cpus));
        }
    }
    command
}

/// Starts the side's jsbench; a binary that cannot start is bad input.
pub(super) fn spawn(
    side: &Side,
    command: &mut tokio::process::Command,
) -> Result<tokio::process::Child> {
    command.spawn().map_err(|e| {
        UsageError(format!(
            "cannot start the {} side's jsbench {}: {e}",
            side.role,
            side.jsbench.display()
        ))
        .into()
    })
}

/// Asks the child to stop as Ctrl-C would: it drains, writes what it
/// measured and stops its server.
pub(super) fn interrupt(child: &tokio::process::Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill has no memory effects; the pid is our own child's.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGINT);
        }
    }
}

/// Every results folder a slice wrote, by name, and the histograms they
/// hold.
fn read_results(dir: &Path) -> Result<(Vec<Summary>, PairHistograms)> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("summary.json").is_file())
        .collect();
    folders.sort();
    let mut summaries = Vec::new();
    let mut histograms = PairHistograms::new();
    for folder in &folders {
        let summary = read_summary(&folder.join("summary.json"))?;
        for (s, v) in summary.variants() {
            for h in v.histograms.iter().filter(|h| !h.hdr_file.is_empty()) {
                let path = folder.join(&h.hdr_file);
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let key = (
                    summary.run.profile.name.clone(),
                    s.name.clone(),
                    v.name.clone(),
                    h.name.clone(),
                );
                histograms.insert(key, text.trim().to_string());
            }
        }
        summaries.push(summary);
    }
    Ok((summaries, histograms))
}

/// The last `lines` lines of a side's log, to quote in an error.
pub(super) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The connection flags a slice needs to reach a server the user named:
/// the flags as given, secrets moved to the environment.
pub fn given_target(flags: &crate::connect::ConnectionFlags) -> SliceTarget {
    let mut args = Vec::new();
    let mut env = Vec::new();
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            args.push(format!("--{name}"));
            args.push(v);
        }
    };
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    flag("server", flags.server.clone());
    flag("context", flags.context.clone());
    flag("user", flags.user.clone());
    flag("creds", path(&flags.creds));
    flag("nkey", path(&flags.nkey));
    flag("tlscert", path(&flags.tlscert));
    flag("tlskey", path(&flags.tlskey));
    flag("tlsca", path(&flags.tlsca));
    flag("timeout", flags.timeout.map(format_duration));
    flag("connection-name", flags.connection_name.clone());
    flag("js-domain", flags.js_domain.clone());
    if flags.tlsfirst {
        args.push("--tlsfirst".into());
    }
    if let Some(p) = &flags.password {
        env.push(("NATS_PASSWORD".into(), p.clone()));
    }
    if let Some(t) = &flags.token {
        env.push(("NATS_TOKEN".into(), t.clone()));
    }
    SliceTarget::Given { args, env }
}

/// Why a side's binary cannot serve, if it cannot: checked before anything runs.
pub fn check_executable(role: &str, what: &str, path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .map_err(|e| UsageError(format!("--{role}-{what} {}: {e}", path.display())))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(anyhow!(UsageError(format!(
            "--{role}-{what} {}: not an executable file",
            path.display()
        ))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = r#"name = "p"
repeat = 3

[ab]
judge = ["*_rate"]

[[scenario]]
kind = "publish"
duration = "10s"
rates = ["max"]

[[scenario]]
kind = "ack"
name = "acks"
messages = 1000
"#;

    #[test]
    fn a_slice_runs_each_scenario_once_without_ab_and_with_its_duration() {
        let text = slice_profile(PROFILE, Some(Duration::from_millis(1500)), &|_| true)
            .unwrap()
            .unwrap();
        let parsed = crate::scenario::parse("slice", &text).expect("a valid profile");
        assert_eq!(parsed.repeat, 1);
        assert!(parsed.ab.is_none(), "[ab] is ab's own: {text}");
        assert_eq!(parsed.scenarios.len(), 2);
        assert!(text.contains("duration = \"1500ms\""), "{text}");
        // A scenario without a duration key gets none.
        assert_eq!(text.matches("duration").count(), 1, "{text}");
    }

    #[test]
    fn decided_scenarios_leave_the_slice_and_an_empty_profile_is_none() {
        let text = slice_profile(PROFILE, None, &|s| s == "acks")
            .unwrap()
            .unwrap();
        let parsed = crate::scenario::parse("slice", &text).unwrap();
        assert_eq!(parsed.scenarios.len(), 1);
        assert_eq!(parsed.scenarios[0].name(), "acks");
        assert!(!text.contains("duration"), "{text}");
        assert!(slice_profile(PROFILE, None, &|_| false).unwrap().is_none());
    }

    #[test]
    fn secrets_for_a_given_server_travel_in_the_environment() {
        let flags = crate::connect::ConnectionFlags {
            server: Some("nats://staging:4222".into()),
            user: Some("u".into()),
            password: Some("hunter2".into()),
            tlsfirst: true,
            ..Default::default()
        };
        let SliceTarget::Given { args, env } = given_target(&flags) else {
            panic!("a given target");
        };
        assert!(args.iter().all(|a| !a.contains("hunter2")), "{args:?}");
        assert!(
            args.windows(2)
                .any(|w| w[0] == "--server" && w[1] == "nats://staging:4222")
        );
        assert!(args.contains(&"--tlsfirst".to_string()));
        assert_eq!(
            env,
            vec![("NATS_PASSWORD".to_string(), "hunter2".to_string())]
        );
    }

    #[test]
    fn scenarios_that_fault_the_shared_server_are_left_out_and_a_profile_of_only_those_refused() {
        let scheduled = crate::scenario::load("scheduled").unwrap();
        let names = |p: &Profile| {
            p.scenarios
                .iter()
                .map(|s| s.name().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&scheduled), ["firing", "catch-up"]);
        let kept = without_faults(vec![scheduled]).unwrap();
        assert_eq!(names(&kept[0]), ["firing"]);
        assert!(kept[0].text.contains("firing") && !kept[0].text.contains("catch-up"));
        let routes = crate::scenario::load("routes").unwrap();
        let err = without_faults(vec![routes]).unwrap_err();
        assert!(
            err.to_string()
                .contains("profile routes: every scenario faults"),
            "{err}"
        );
        let untouched = crate::scenario::load("quick").unwrap();
        let text = untouched.text.clone();
        assert_eq!(without_faults(vec![untouched]).unwrap()[0].text, text);
    }
}
