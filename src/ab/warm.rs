//! Two warm sides taking turns: a pair is one scenario run by BASE and by
//! NEW back to back in processes that stay up, connected, for the whole
//! comparison, so a pair costs the scenario's own time, not a process
//! start, a connection and a warm-up of the whole profile.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use tokio_util::sync::CancellationToken;

use super::slice::{Side, SliceResult, SliceTarget};
use super::tails::PairHistograms;
use super::window::{SideProcess, TurnReply};
use crate::results::summary::Summary;

/// Which side runs first in a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    BaseFirst,
    NewFirst,
}

impl Order {
    /// The sides' roles in the order they run.
    pub fn roles(self) -> [&'static str; 2] {
        match self {
            Order::BaseFirst => ["base", "new"],
            Order::NewFirst => ["new", "base"],
        }
    }
}

/// BASE's and NEW's side processes, and the longest turn so far (a turn
/// gets ten times it, at least a minute, before it is called stuck).
pub struct Sides {
    base: SideProcess,
    new: SideProcess,
    longest: Duration,
}

/// What opening the two sides came to: both warm, or one that cannot
/// stay warm (its jsbench, a build that predates it, has no `ab-side`),
/// for which the comparison runs slices instead (not an error: an older
/// build is compared all the same), with why.
pub enum Opened {
    Warm(Box<Sides>),
    Cold(String),
}

/// Why a side cannot stay warm: `BASE` or `NEW`, and its jsbench.
fn no_ab_side(side: &str, jsbench: &Path) -> String {
    format!("{side}'s jsbench ({}) has no `ab-side`", jsbench.display())
}

impl Sides {
    /// Starts both sides, or says which one cannot stay warm.
    pub async fn open(
        (base, new): (&Side, &Side),
        profiles: &[PathBuf],
        logs: &Path,
        cpus: Option<&[usize]>,
        stop: &CancellationToken,
    ) -> Result<Opened> {
        let b = SideProcess::start(base, profiles, &logs.join("base.log"), cpus, stop).await?;
        let Some(b) = b else {
            return Ok(Opened::Cold(no_ab_side("BASE", &base.jsbench)));
        };
        let n = SideProcess::start(new, profiles, &logs.join("new.log"), cpus, stop).await?;
        let Some(n) = n else {
            let _ = b.quit().await;
            return Ok(Opened::Cold(no_ab_side("NEW", &new.jsbench)));
        };
        Ok(Opened::Warm(Box::new(Sides {
            base: b,
            new: n,
            longest: Duration::ZERO,
        })))
    }

    /// One pair: each of `units` (profile, scenario) run by both sides in
    /// `order`, every turn kept as `windows/NNN-<side>-<scenario>.json`.
    pub async fn pair(
        &mut self,
        (base_side, new_side): (&Side, &Side),
        units: &[(String, String)],
        order: Order,
        dir: &Path,
        index: usize,
        stop: &CancellationToken,
    ) -> Result<(SliceResult, SliceResult, Duration)> {
        let started = Instant::now();
        let mut base = Collected::default();
        let mut new = Collected::default();
        for (profile, scenario) in units {
            for role in order.roles() {
                let limit = (self.longest * 10).max(Duration::from_secs(60));
                let (side, process, collected) = if role == "base" {
                    (base_side, &mut self.base, &mut base)
                } else {
                    (new_side, &mut self.new, &mut new)
                };
                settle(side).await;
                let (turn, elapsed) = process
                    .turn(profile, scenario, limit, stop)
                    .await
                    .with_context(|| format!("the {role} side's turn at {profile}:{scenario}"))?;
                self.longest = self.longest.max(elapsed);
                let file = dir
                    .join("windows")
                    .join(format!("{index:03}-{role}-{scenario}.json"));
                collected.add(profile, (turn, elapsed), &file, dir)?;
            }
        }
        let (base, new) = (base.finish(dir), new.finish(dir));
        let names: Vec<&str> = units.iter().map(|(_, s)| s.as_str()).collect();
        let what = format!("{}, {}", names.join(", "), order.roles().join(","));
        super::announce(index, &what, (&base, &new));
        Ok((base, new, started.elapsed()))
    }

    /// Both sides told to end, and waited for.
    pub async fn quit(self) -> Result<()> {
        let (b, n) = tokio::join!(self.base.quit(), self.new.quit());
        b.context("BASE's side")?;
        n.context("NEW's side")
    }
}

/// Turns follow each other at once, so what the server still does for the
/// last one (deleting its streams' files, compacting, flushing) would fall
/// into the next one's measurement: before a turn, the server's processes
/// must spend under a tenth of a core over 50 ms (at most 2 s of waiting).
/// A server ab did not start has no process to read: a fixed 100 ms.
async fn settle(side: &Side) {
    const QUIET: Duration = Duration::from_millis(5);
    const LOOK: Duration = Duration::from_millis(50);
    let SliceTarget::Started { pids, .. } = &side.target else {
        tokio::time::sleep(Duration::from_millis(100)).await;
        return;
    };
    let cpu = || -> Option<Duration> {
        pids.iter()
            .map(|&p| crate::system::cpu::process_cpu_time(p))
            .sum::<Option<Duration>>()
    };
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let Some(before) = cpu() else { return };
        tokio::time::sleep(LOOK).await;
        let Some(after) = cpu() else { return };
        if after.saturating_sub(before) < QUIET {
            return;
        }
    }
}

/// One side's turns of a pair, as a slice would have reported them.
#[derive(Default)]
struct Collected {
    summaries: Vec<Summary>,
    histograms: PairHistograms,
    elapsed: Duration,
    files: Vec<PathBuf>,
    failed: bool,
}

impl Collected {
    /// Keeps a turn: its summary, its histograms under the profile's name,
    /// and the turn on disk (nothing measured is lost).
    fn add(
        &mut self,
        profile: &str,
        turn: (TurnReply, Duration),
        file: &Path,
        dir: &Path,
    ) -> Result<()> {
        let (turn, elapsed) = turn;
        let json = serde_json::json!({
            "summary": &turn.summary,
            "histograms": &turn.histograms,
            "elapsed_s": elapsed.as_secs_f64(),
        });
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(file, serde_json::to_vec(&json)?)
            .with_context(|| format!("writing {}", file.display()))?;
        for (name, text) in turn.histograms {
            let mut parts = name.splitn(3, '/');
            let (Some(scenario), Some(variant), Some(hist)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(anyhow!(
                    "a side named a histogram '{name}', not scenario/variant/name"
                ));
            };
            let key = (profile.into(), scenario.into(), variant.into(), hist.into());
            self.histograms.insert(key, text);
        }
        self.failed |= turn.summary.verdict != "passed";
        self.summaries.push(turn.summary);
        self.elapsed += elapsed;
        self.files
            .push(file.strip_prefix(dir).unwrap_or(file).to_path_buf());
        Ok(())
    }

    fn finish(self, dir: &Path) -> SliceResult {
        SliceResult {
            dir: match self.files.as_slice() {
                [one] => dir.join(one),
                _ => dir.join("windows"),
            },
            exit: i32::from(self.failed),
            elapsed: self.elapsed,
            summaries: self.summaries,
            histograms: self.histograms,
        }
    }
}
