//! Warm sides: one long-lived `jsbench ab-side` process per side, driven
//! turn by turn over its stdin and stdout.
//!
//! A slice is a whole `jsbench run`: about 13 s of process start, connect,
//! stream creation and warm-up for each second measured. A side process
//! pays the start and the connect once and then runs one scenario per
//! turn, so a pair costs little more than what it measures. A build that
//! predates `ab-side` refuses the subcommand, and [`SideProcess::start`]
//! says so with `Ok(None)`: the caller runs slices for it as before.
//!
//! The protocol, one JSON object per line:
//!
//! - side → ab, once: `{"ready":{"protocol":1,"version":"0.1.0","scenarios":[["profile","scenario"],...]}}`
//! - ab → side: `{"turn":{"profile":"P","scenario":"S"}}`, answered by one
//!   `{"turn":{"summary":{...},"histograms":{"<scenario>/<variant>/<name>":"<base64>",...}}}`
//!   (the summary.json of that profile holding just that scenario), or
//!   `{"error":"..."}` when the turn could not run; the side stays up.
//! - ab → side: `{"quit":{}}` (or the end of its stdin): it deletes what it
//!   created and exits 0.
//!
//! Ctrl-C (SIGINT) stops the turn running: the side answers it with what
//! it measured and exits.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

use super::slice::{self, Side, SliceError};
use crate::profile::format_duration;
use crate::results::summary::Summary;
use crate::system::error::{EXIT_USAGE, UsageError};

/// The version of the protocol above. A side that speaks another is not
/// used: its caller falls back to slices, which every build runs.
pub const PROTOCOL: u32 = 1;

/// How long a side may take to connect, check its account and say ready.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// How long a side may take to clean up and exit once told to.
const EXIT_WITHIN: Duration = Duration::from_secs(30);

/// What ab sends a side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Request {
    /// Run this scenario of this profile once.
    Turn { profile: String, scenario: String },
    /// Clean up and exit.
    Quit {},
}

/// What a side sends ab.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reply {
    Ready(Ready),
    Turn(Box<TurnReply>),
    /// A turn that could not run, with why.
    Error(String),
}

/// A side's first line: it is connected and every profile is checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ready {
    pub protocol: u32,
    /// The side's jsbench version.
    pub version: String,
    /// Every (profile, scenario) a turn may name.
    pub scenarios: Vec<(String, String)>,
}

/// One turn's results, as a results folder would hold them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnReply {
    pub summary: Summary,
    /// Base64 HdrHistograms by `<scenario>/<variant>/<histogram name>`.
    pub histograms: BTreeMap<String, String>,
}

/// A running `jsbench ab-side`; killed when dropped, so a comparison that
/// fails never leaves a side behind.
pub struct SideProcess {
    role: &'static str,
    jsbench: PathBuf,
    log: PathBuf,
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    scenarios: Vec<(String, String)>,
}

impl SideProcess {
    /// Starts `<side.jsbench> ab-side <profiles> <target args>` (the
    /// arguments, environment and CPU pinning a slice gets), its stderr
    /// into `log`, and waits for its ready line. `Ok(None)`: the binary
    /// does not know `ab-side` (or speaks another protocol), and the
    /// caller runs slices for it instead.
    pub async fn start(
        side: &Side,
        profiles: &[PathBuf],
        log: &Path,
        cpus: Option<&[usize]>,
        stop: &CancellationToken,
    ) -> Result<Option<SideProcess>> {
        let log_file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut args: Vec<OsString> = vec!["ab-side".into()];
        args.extend(profiles.iter().map(|p| p.as_os_str().to_owned()));
        // A server ab started: its CPU read from /proc, exact per variant,
        // instead of /varz, whose figure lags (only ab-side knows the flag:
        // a slice's older build would refuse it).
        if let super::slice::SliceTarget::Started { pids, .. } = &side.target {
            for pid in pids {
                args.push("--server-pid".into());
                args.push(pid.to_string().into());
            }
        }
        let mut command = slice::command(side, &args, cpus);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            // A group of its own: a Ctrl-C at the terminal reaches ab
            // alone, which interrupts the side once (a second SIGINT would
            // make it give up its clean-up).
            .process_group(0);
        let mut child = slice::spawn(side, &mut command)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(anyhow!("the {} side's pipes were not opened", side.role));
        };
        let mut process = SideProcess {
            role: side.role,
            jsbench: side.jsbench.clone(),
            log: log.to_path_buf(),
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            scenarios: Vec::new(),
        };
        let line = tokio::select! {
            line = process.stdout.next_line() => line,
            _ = stop.cancelled() => {
                process.wind_down().await;
                return Err(SliceError::Interrupted.into());
            }
            _ = tokio::time::sleep(READY_WITHIN) => {
                let _ = process.child.kill().await;
                return Err(anyhow!(
                    "{} was not ready within {}; {}",
                    process.who(),
                    format_duration(READY_WITHIN),
                    process.log_tail()
                ));
            }
        };
        match line {
            Ok(Some(line)) => process.ready(&line).await,
            Ok(None) | Err(_) => process.exited_before_ready().await,
        }
    }

    /// Every (profile, scenario) the side can run.
    pub fn scenarios(&self) -> &[(String, String)] {
        &self.scenarios
    }

    /// Runs one scenario on the side. Fails when the side dies, answers an
    /// error, or runs past `limit` (it is then interrupted); `stop`
    /// interrupts it and fails with [`SliceError::Interrupted`]. What the
    /// turn measured comes back with how long it took from ab's side.
    pub async fn turn(
        &mut self,
        profile: &str,
        scenario: &str,
        limit: Duration,
        stop: &CancellationToken,
    ) -> Result<(TurnReply, Duration)> {
        let what = format!("{profile}/{scenario}");
        let started = Instant::now();
        let request = Request::Turn {
            profile: profile.to_string(),
            scenario: scenario.to_string(),
        };
        if self.send(&request).await.is_err() {
            return Err(self.died(&what).await);
        }
        let line = tokio::select! {
            line = self.stdout.next_line() => line,
            _ = stop.cancelled() => {
                self.wind_down().await;
                return Err(SliceError::Interrupted.into());
            }
            _ = tokio::time::sleep(limit) => {
                self.wind_down().await;
                return Err(SliceError::TimedOut(format!(
                    "{}'s turn {what} ran past {} and was interrupted; its output: {}",
                    self.who(),
                    format_duration(limit),
                    self.log.display()
                ))
                .into());
            }
        };
        let elapsed = started.elapsed();
        let Ok(Some(line)) = line else {
            return Err(self.died(&what).await);
        };
        let reply: Reply = serde_json::from_str(&line)
            .with_context(|| format!("{} answered turn {what} with {line:?}", self.who()))?;
        match reply {
            Reply::Turn(reply) => Ok((*reply, elapsed)),
            Reply::Error(why) => Err(anyhow!("{} could not run {what}: {why}", self.who())),
            Reply::Ready(_) => Err(anyhow!(
                "{} answered turn {what} with a second ready line",
                self.who()
            )),
        }
    }

    /// Tells the side to clean up and exit, and waits for it; one that
    /// does not exit in time is killed, and its streams may be left.
    pub async fn quit(mut self) -> Result<()> {
        // A side already gone has nothing left to tell; its exit says why.
        let _ = self.send(&Request::Quit {}).await;
        let who = self.who();
        let SideProcess {
            mut child,
            stdin,
            log,
            ..
        } = self;
        drop(stdin);
        match tokio::time::timeout(EXIT_WITHIN, child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(anyhow!(
                "{who} exited with {status} when told to quit (a failed clean-up is one cause); \
                 the last lines of {}:\n{}",
                log.display(),
                slice::tail(&log, 12)
            )),
            Ok(Err(e)) => Err(e).with_context(|| format!("waiting for {who} to quit")),
            Err(_) => {
                let _ = child.kill().await;
                Err(anyhow!(
                    "{who} did not quit within {} and was killed: the streams it made may be \
                     left behind; its output: {}",
                    format_duration(EXIT_WITHIN),
                    log.display()
                ))
            }
        }
    }

    /// The first line: ready in this protocol, another protocol (not used),
    /// or anything else (an error).
    async fn ready(mut self, line: &str) -> Result<Option<SideProcess>> {
        let value: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        let protocol = value["ready"]["protocol"].as_u64();
        if protocol.is_some_and(|p| p != u64::from(PROTOCOL)) {
            eprintln!(
                "jsbench ab: {} speaks ab-side protocol {}, this build {PROTOCOL}: it runs slices",
                self.who(),
                value["ready"]["protocol"]
            );
            let _ = self.quit().await;
            return Ok(None);
        }
        match serde_json::from_value::<Reply>(value) {
            Ok(Reply::Ready(ready)) => {
                self.scenarios = ready.scenarios;
                Ok(Some(self))
            }
            _ => {
                let _ = self.child.kill().await;
                Err(anyhow!(
                    "{} said {line:?} where its ready line was due; {}",
                    self.who(),
                    self.log_tail()
                ))
            }
        }
    }

    /// The side ended before its ready line: an older build refusing the
    /// subcommand (`Ok(None)`), bad input, or a failure.
    async fn exited_before_ready(mut self) -> Result<Option<SideProcess>> {
        let status = self.exit_status().await;
        let log = slice::tail(&self.log, 12);
        let code = status.as_ref().and_then(ExitStatus::code);
        if code == Some(EXIT_USAGE) && knows_no_side(&log) {
            return Ok(None);
        }
        let status = status.map_or("no exit yet".to_string(), |s| s.to_string());
        let message = format!(
            "{} ended ({status}) before it was ready; {}",
            self.who(),
            self.log_tail()
        );
        if code == Some(EXIT_USAGE) {
            return Err(UsageError(message).into());
        }
        Err(anyhow!(message))
    }

    /// The error for a side that stopped answering during `what`.
    async fn died(&mut self, what: &str) -> anyhow::Error {
        let status = match self.exit_status().await {
            Some(s) => s.to_string(),
            None => "killed: it closed its output but did not exit".to_string(),
        };
        anyhow!(
            "{} died during turn {what} ({status}); {}",
            self.who(),
            self.log_tail()
        )
    }

    /// The side's exit status, waiting a little for it; `None` when it
    /// does not exit (it is then killed).
    async fn exit_status(&mut self) -> Option<ExitStatus> {
        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => {
                let _ = self.child.kill().await;
                None
            }
        }
    }

    /// Interrupts the side as Ctrl-C would and lets it finish: its answer
    /// is read and dropped (a full pipe would hold it up), then it exits
    /// or, after a while, is killed.
    async fn wind_down(&mut self) {
        slice::interrupt(&self.child);
        let drained = tokio::time::timeout(EXIT_WITHIN, async {
            while let Ok(Some(_)) = self.stdout.next_line().await {}
            self.child.wait().await
        })
        .await;
        if drained.is_err() {
            let _ = self.child.kill().await;
        }
    }

    async fn send(&mut self, request: &Request) -> Result<()> {
        let mut line = serde_json::to_vec(request).context("serialising a request")?;
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    fn who(&self) -> String {
        format!(
            "the {} side's jsbench ({})",
            self.role,
            self.jsbench.display()
        )
    }

    fn log_tail(&self) -> String {
        format!(
            "the last lines of {}:\n{}",
            self.log.display(),
            slice::tail(&self.log, 12)
        )
    }
}

/// Whether a log is clap's refusal of `ab-side` as a subcommand it does
/// not have (clap 4 says "unrecognized subcommand", older ones "wasn't
/// recognized" or "wasn't expected").
fn knows_no_side(log: &str) -> bool {
    log.lines().any(|line| {
        line.starts_with("error:")
            && line.contains("'ab-side'")
            && [
                "unrecognized",
                "wasn't recognized",
                "wasn't expected",
                "unexpected",
            ]
            .iter()
            .any(|phrase| line.contains(phrase))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_are_the_documented_json() {
        let turn = Request::Turn {
            profile: "p".into(),
            scenario: "s".into(),
        };
        assert_eq!(
            serde_json::to_string(&turn).unwrap(),
            r#"{"turn":{"profile":"p","scenario":"s"}}"#
        );
        assert_eq!(
            serde_json::to_string(&Request::Quit {}).unwrap(),
            r#"{"quit":{}}"#
        );
        let ready = Reply::Ready(Ready {
            protocol: PROTOCOL,
            version: "0.1.0".into(),
            scenarios: vec![("p".into(), "s".into())],
        });
        assert_eq!(
            serde_json::to_string(&ready).unwrap(),
            r#"{"ready":{"protocol":1,"version":"0.1.0","scenarios":[["p","s"]]}}"#
        );
        assert_eq!(
            serde_json::to_string(&Reply::Error("no".into())).unwrap(),
            r#"{"error":"no"}"#
        );
    }

    #[test]
    fn only_clap_refusing_the_subcommand_means_an_older_build() {
        assert!(knows_no_side(
            "error: unrecognized subcommand 'ab-side'\n\nUsage: jsbench <COMMAND>"
        ));
        assert!(knows_no_side(
            "error: The subcommand 'ab-side' wasn't recognized"
        ));
        assert!(!knows_no_side(
            "error: profile p.toml: scenario[0]: unknown key 'rat'"
        ));
    }
}
