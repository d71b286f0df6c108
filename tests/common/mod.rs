//! Shared test helpers: every test that needs a server starts its own, on a
//! free loopback port, and fails (never skips) when nats-server is missing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use jsbench::results::summary::Summary;
use jsbench::server::{EmbeddedServer, ServerOptions};

/// Starts an embedded server or fails the test with the install command.
pub fn server() -> EmbeddedServer {
    EmbeddedServer::start().unwrap_or_else(|e| panic!("cannot start nats-server: {e:#}"))
}

pub fn server_with(options: &ServerOptions) -> EmbeddedServer {
    EmbeddedServer::start_with(options)
        .unwrap_or_else(|e| panic!("cannot start nats-server: {e:#}"))
}

pub fn jsbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_jsbench"))
}

pub fn run(command: &mut Command) -> Output {
    command.output().expect("jsbench runs")
}

pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Writes a profile file into `dir`.
pub fn profile(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, format!("name = \"{name}\"\n{body}")).unwrap();
    path
}

/// The one results folder under `out`.
pub fn results_dir(out: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap_or_else(|e| panic!("no results under {}: {e}", out.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "expected one results folder: {dirs:?}");
    dirs.into_iter().next().unwrap()
}

pub fn summary(dir: &Path) -> Summary {
    jsbench::results::read_summary(dir).unwrap_or_else(|e| panic!("{e:#}"))
}

/// A small latency profile: `rate` msg/s for `duration` after `warmup`.
pub fn latency_body(rates: &str, duration: &str, warmup: &str, extra: &str) -> String {
    format!(
        "[[scenario]]\nkind = \"latency\"\nduration = \"{duration}\"\nwarmup = \"{warmup}\"\nrates = {rates}\n{extra}"
    )
}

/// Run options against an existing server, results under `out`.
pub fn options(server: &str, profile: &Path, out: &Path) -> jsbench::run::RunOptions {
    jsbench::run::RunOptions {
        profiles: vec![profile.display().to_string()],
        connection: jsbench::connect::ConnectionRequest {
            flags: jsbench::connect::ConnectionFlags {
                server: Some(server.to_string()),
                ..Default::default()
            },
            env: jsbench::connect::Environment::empty(),
        },
        cluster: None,
        leafnode: false,
        replicas: None,
        out: out.to_path_buf(),
        keep: false,
        monitor: None,
        server_pids: Vec::new(),
        metrics_listen: None,
        fail_fast: false,
        progress: jsbench::system::progress::ProgressMode::Never,
        workers: None,
    }
}

/// Runs one profile body against `server` and returns the summary.
pub async fn run_profile(server: &EmbeddedServer, name: &str, body: &str) -> Summary {
    let dir = tempfile::tempdir().unwrap();
    let profile = profile(dir.path(), name, body);
    let outcome = jsbench::run::run(
        options(server.url(), &profile, dir.path()),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap_or_else(|e| panic!("run failed: {e:#}"));
    summary(&outcome.results[0])
}

/// The metric's value, or a panic naming what is missing.
pub fn metric(v: &jsbench::results::summary::VariantReport, name: &str) -> f64 {
    v.metric(name)
        .unwrap_or_else(|| panic!("{} has no metric {name}", v.name))
        .value
}

/// Panics with every failed invariant of every variant.
pub fn assert_all_passed(summary: &Summary) {
    let failed: Vec<String> = summary
        .variants()
        .flat_map(|(_, v)| {
            v.invariants
                .iter()
                .filter(|i| !i.passed)
                .map(move |i| format!("{}: {}: {}", v.name, i.name, i.detail))
                .chain(
                    v.error
                        .iter()
                        .map(move |e| format!("{}: error: {e}", v.name)),
                )
        })
        .collect();
    assert!(failed.is_empty(), "failed: {failed:#?}");
}

pub mod browser;
pub mod nats_auth;
pub mod pki;

/// Starts a server with a configuration file written into `dir` (TLS,
/// authorization), still on loopback, a free port and a temporary store.
pub fn server_with_config(dir: &Path, config: &str) -> EmbeddedServer {
    let path = dir.join("server.conf");
    std::fs::write(&path, config).unwrap();
    server_with(&ServerOptions {
        extra_args: vec!["-c".into(), path.display().to_string()],
        ..Default::default()
    })
}

/// The connection settings `flags` resolve to, with no environment: what
/// a test hands to a direct connection (jsbench::wire) for its server.
pub fn connect_settings(
    flags: jsbench::connect::ConnectionFlags,
) -> jsbench::connect::ConnectSettings {
    let request = jsbench::connect::ConnectionRequest {
        flags,
        env: jsbench::connect::Environment::empty(),
    };
    jsbench::connect::options::resolve(&request, "t", None, false)
        .expect("settings resolve")
        .remote
        .expect("a server was named")
}
