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
