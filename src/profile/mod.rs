//! Profiles: TOML files that say what to run, validated into a typed plan.
//!
//! A profile is read in two steps. Serde turns the text into sections,
//! rejecting unknown keys and malformed values with the key path; validation
//! then checks ranges and combinations and builds the [`Profile`] plan the
//! scenarios run from. Every problem names the file, the field path and what
//! is allowed, and all problems are reported at once.

pub mod arrival;
mod arrival_times;
pub mod behaviour;
mod bundled;
pub mod common;
mod connection;
pub mod keys;
mod kinds;
mod plan;
mod replay;
pub mod search;
pub mod shared;
mod stream;

use std::fmt;
use std::path::Path;

use serde::Deserialize;

/// The units profiles are written in, where most callers have long found them.
pub use crate::units::{Bytes, Dur, format_duration, parse_duration, parse_percent};
pub use arrival_times::{MAX_ARRIVALS, arrival_count, arrival_offsets};
pub use bundled::{BUNDLED, bundled};
pub use keys::Keys;
pub use kinds::{Kinds, Profile, Section};
pub use plan::*;
pub use replay::{REPLAY_MAX_ACK_PENDING, ReplayDeliver, ReplayPace, ReplayReader};
pub use shared::{Offer, Paced, PacedLoad, Shared, take};
pub use stream::{
    Compression, Discard, PersistMode, Placement, StreamLimits, StreamPlan, StreamSettings,
    persist_name, retention_name, storage_name,
};

/// A profile that cannot be run, with every problem found in it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileError {
    /// The file (or bundled profile) the problems are in.
    pub source: String,
    pub problems: Vec<Problem>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// Key path, e.g. `scenario[0].consumer.ack_wait`; empty for the whole file.
    pub path: String,
    /// Line in the file, when known.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "profile {} is invalid:", self.source)?;
        for p in &self.problems {
            write!(f, "\n  - ")?;
            match (p.path.is_empty(), p.line) {
                (false, Some(line)) => write!(f, "{} (line {line}): ", p.path)?,
                (false, None) => write!(f, "{}: ", p.path)?,
                (true, Some(line)) => write!(f, "line {line}: ")?,
                (true, None) => {}
            }
            write!(f, "{}", p.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ProfileError {}

/// Collects problems while validating, so a user fixes them all in one go.
#[derive(Debug, Default)]
pub struct Problems {
    list: Vec<Problem>,
}

impl Problems {
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.list.push(Problem {
            path: path.into(),
            line: None,
            message: message.into(),
        });
    }

    /// Checks `min <= value <= max`, naming the allowed range otherwise.
    pub fn range<T: PartialOrd + fmt::Display + Copy>(
        &mut self,
        path: &str,
        value: T,
        min: T,
        max: T,
        unit: &str,
    ) {
        if value < min || value > max {
            self.push(
                path,
                format!("{value} is out of range; allowed {min}..={max}{unit}"),
            );
        }
    }

    pub fn extend(&mut self, other: Problems) {
        self.list.extend(other.list);
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Loads a profile by bundled name ("quick") or by path ("my.toml"), its
/// scenarios read by the kinds `K` names.
pub fn load<K: Kinds>(spec: &str) -> Result<Profile<K::Scenario>, anyhow::Error> {
    let path = Path::new(spec);
    let looks_like_path = spec.ends_with(".toml") || spec.contains('/') || path.exists();
    if !looks_like_path {
        if let Some(text) = bundled(spec) {
            return Ok(parse::<K>(&format!("{spec} (bundled)"), text)?);
        }
        let names: Vec<&str> = BUNDLED.iter().map(|(n, _)| *n).collect();
        return Err(crate::system::error::UsageError(format!(
            "no bundled profile named {spec:?}; bundled profiles are: {} (or give a path to a .toml file)",
            names.join(", ")
        ))
        .into());
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        crate::system::error::UsageError(format!("cannot read profile {}: {e}", path.display()))
    })?;
    Ok(parse::<K>(&path.display().to_string(), &text)?)
}

/// The top level of a profile file; scenario tables are read per kind.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSection {
    name: String,
    #[serde(default)]
    description: String,
    /// Runs of each scenario; several give `compare` a noise estimate.
    #[serde(default = "one")]
    repeat: i64,
    #[serde(default)]
    server: common::ServerSection,
    connection: Option<connection::ConnectionSection>,
    ab: Option<AbSection>,
    #[serde(default, rename = "scenario")]
    scenarios: Vec<toml::Table>,
}

fn one() -> i64 {
    1
}

/// `[ab]`: what `jsbench ab` judges in this profile, and how strictly.
/// `jsbench run` ignores it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AbSection {
    judge: Option<Vec<String>>,
    threshold: Option<String>,
    latency_threshold: Option<String>,
}

impl AbSection {
    fn validate(&self, problems: &mut Problems) -> AbPlan {
        let percent = |key: &str, text: &Option<String>, problems: &mut Problems| {
            text.as_ref().and_then(|t| match parse_percent(t) {
                Ok(v) => Some(v),
                Err(e) => {
                    problems.push(format!("ab.{key}"), e.to_string());
                    None
                }
            })
        };
        let judge = self.judge.clone().unwrap_or_default();
        if judge.iter().any(|p| p.trim().is_empty()) {
            problems.push(
                "ab.judge",
                "a pattern is empty; give metric names or scenario/variant/metric, `*` a wildcard",
            );
        }
        AbPlan {
            judge,
            threshold: percent("threshold", &self.threshold, problems),
            latency_threshold: percent("latency_threshold", &self.latency_threshold, problems),
        }
    }
}

/// The `[ab] judge` patterns of a profile's text as a summary records it,
/// the rest unread: `jsbench compare` judges by them too. Empty when the
/// profile has none (or the text no longer reads).
pub fn ab_judge(text: &str) -> Vec<String> {
    #[derive(Deserialize)]
    struct WithAb {
        ab: Option<AbSection>,
    }
    toml::from_str::<WithAb>(text)
        .ok()
        .and_then(|p| p.ab?.judge)
        .unwrap_or_default()
}

/// The most repetitions a profile may ask for: enough for a tight noise
/// estimate, few enough that a typo (`repeat = 1000`) is caught.
pub const MAX_REPEAT: i64 = 100;

/// Parses and validates profile text, its scenarios read by the kinds `K`
/// names; `source` names it in errors.
pub fn parse<K: Kinds>(source: &str, text: &str) -> Result<Profile<K::Scenario>, ProfileError> {
    let fail = |problems: Vec<Problem>| ProfileError {
        source: source.to_string(),
        problems,
    };
    let file = read_file(text).map_err(|p| fail(vec![p]))?;
    let mut problems = Problems::default();
    if !is_safe_name(&file.name) {
        problems.push("name", format!("{:?} {NAME_RULE}", file.name));
    }
    problems.range(
        "repeat",
        file.repeat,
        1,
        MAX_REPEAT,
        " runs of each scenario",
    );
    let server = file.server.validate(&mut problems);
    let syncs = file.server.syncs(&mut problems);
    let connection = file.connection.as_ref().map(|c| c.validate(&mut problems));
    let ab = file.ab.as_ref().map(|a| a.validate(&mut problems));
    if file.scenarios.is_empty() {
        problems.push(
            "scenario",
            format!(
                "a profile needs at least one [[scenario]] table; kinds: {}",
                K::NAMES.join(", ")
            ),
        );
    }
    let mut scenarios = Vec::new();
    for (i, table) in file.scenarios.into_iter().enumerate() {
        let read = read_scenario::<K>(i, table, &server, &mut problems);
        scenarios.extend(read.map(|mut plan| {
            sweep_syncs::<K>(&mut plan, &syncs, &server, i, &mut problems);
            plan
        }));
    }
    name_scenarios::<K>(&mut scenarios, &mut problems);
    if !problems.is_empty() {
        let mut list = problems.list;
        for p in &mut list {
            p.line = locate(text, &p.path);
        }
        return Err(fail(list));
    }
    Ok(Profile {
        name: file.name,
        description: file.description,
        source: source.to_string(),
        text: text.to_string(),
        repeat: file.repeat as usize,
        server,
        syncs,
        connection,
        ab,
        scenarios,
    })
}

/// A `[server] sync` list becomes every scenario's outermost sweep; an
/// async persist mode is checked against the server's storage and
/// replicas, which nats-server would refuse.
fn sweep_syncs<K: Kinds>(
    plan: &mut K::Scenario,
    syncs: &[SyncSetting],
    server: &ServerPlan,
    i: usize,
    problems: &mut Problems,
) {
    let stream = &mut K::common_mut(plan).stream;
    if syncs.len() > 1 {
        stream.sync = syncs.to_vec();
    }
    if !stream.persist.contains(&PersistMode::Async) {
        return;
    }
    let key = format!("scenario[{i}].stream.persist");
    if server.replicas > 1 {
        problems.push(
            &key,
            format!(
                "\"async\" is for R1 streams only; nats-server refuses it on replicated streams \
                 ([server] replicas = {})",
                server.replicas
            ),
        );
    }
    if stream.storage.is_empty() && server.storage == Storage::Memory {
        problems.push(
            key,
            "\"async\" applies to file streams only, and [server] storage = \"memory\"",
        );
    }
}

/// The file's top level as serde reads it: a TOML or shape error stops
/// here, with its line.
fn read_file(text: &str) -> Result<FileSection, Problem> {
    let deserializer = toml::Deserializer::parse(text).map_err(|e| Problem {
        path: String::new(),
        line: e.span().map(|s| line_of(text, s.start)),
        message: e.message().trim().to_string(),
    })?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| Problem {
        path: path_text(e.path()),
        line: e.inner().span().map(|s| line_of(text, s.start)),
        message: e.inner().message().trim().to_string(),
    })
}

/// One `[[scenario]]` table: its `kind`, its `[scenario.stream]`, and the
/// rest read by that kind. `None` when it cannot be read; its problems
/// join the profile's.
fn read_scenario<K: Kinds>(
    i: usize,
    mut table: toml::Table,
    server: &ServerPlan,
    problems: &mut Problems,
) -> Option<K::Scenario> {
    let prefix = format!("scenario[{i}]");
    let kind = match table.remove("kind") {
        Some(toml::Value::String(kind)) => kind,
        Some(other) => {
            problems.push(
                format!("{prefix}.kind"),
                format!("must be a string, found {}", other.type_str()),
            );
            return None;
        }
        None => {
            problems.push(
                format!("{prefix}.kind"),
                format!("missing; one of: {}", K::NAMES.join(", ")),
            );
            return None;
        }
    };
    let stream = match table.remove("stream") {
        None => Some(stream::StreamPlan::default()),
        Some(toml::Value::Table(t)) => {
            let path = format!("{prefix}.stream");
            read_section::<stream::StreamSection>(t, &path, problems)
                .map(|s| s.validate(&prefix, problems))
        }
        Some(other) => {
            problems.push(
                format!("{prefix}.stream"),
                format!(
                    "must be a table ([scenario.stream]), found {}",
                    other.type_str()
                ),
            );
            None
        }
    };
    if !K::NAMES.contains(&kind.as_str()) {
        problems.push(
            format!("{prefix}.kind"),
            format!(
                "unknown scenario kind {kind:?}; one of: {} (one page each in docs/scenarios/)",
                K::NAMES.join(", ")
            ),
        );
        return None;
    }
    if let Some(s) = &stream
        && !s.retention.is_empty()
        && !K::accepts_retention(&kind)
    {
        let accepting: Vec<&str> = K::NAMES
            .iter()
            .copied()
            .filter(|k| K::accepts_retention(k))
            .collect();
        problems.push(
            format!("{prefix}.stream.retention"),
            format!(
                "applies to {} scenarios; a {kind} scenario reads its stream back or sets retention itself (dlq: retentions)",
                accepting.join(", ")
            ),
        );
    }
    let section = Section {
        table,
        prefix: &prefix,
        server,
        stream: stream.as_ref(),
    };
    let mut plan = K::read(&kind, section, problems)?;
    K::common_mut(&mut plan).stream = stream?;
    Some(plan)
}

pub const NAME_RULE: &str =
    "must be 1-32 characters of letters, digits, '-' and '_' (it names streams and files)";

pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Gives unnamed scenarios their kind as name ("latency", "latency-2") and
/// rejects explicit duplicates: names key the results.
fn name_scenarios<K: Kinds>(scenarios: &mut [K::Scenario], problems: &mut Problems) {
    let mut seen: Vec<String> = Vec::new();
    for (i, s) in scenarios.iter_mut().enumerate() {
        let common = K::common_mut(s);
        match &common.name {
            Some(name) => {
                if seen.contains(name) {
                    problems.push(
                        format!("scenario[{i}].name"),
                        format!(
                            "{name:?} is already used by another scenario; names must be unique"
                        ),
                    );
                }
                seen.push(name.clone());
            }
            None => {
                let kind = common.kind;
                let mut name = kind.to_string();
                let mut n = 2;
                while seen.contains(&name) {
                    name = format!("{kind}-{n}");
                    n += 1;
                }
                seen.push(name.clone());
                common.name = Some(name);
            }
        }
    }
}

pub fn read_section<T: serde::de::DeserializeOwned>(
    table: toml::Table,
    prefix: &str,
    problems: &mut Problems,
) -> Option<T> {
    match serde_path_to_error::deserialize(toml::Value::Table(table)) {
        Ok(section) => Some(section),
        Err(e) => {
            let path = path_text(e.path());
            let full = if path.is_empty() || path == "." {
                prefix.to_string()
            } else {
                format!("{prefix}.{path}")
            };
            problems.push(full, e.inner().message().trim().to_string());
            None
        }
    }
}

fn path_text(path: &serde_path_to_error::Path) -> String {
    let text = path.to_string();
    if text == "." { String::new() } else { text }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The line a key path like `scenario[1].consumer.ack_wait` is written on:
/// the key's own line when it can be found, else its table's header line.
/// Serde reports values without positions once a table has been read, so
/// the line is recovered from the text.
fn locate(text: &str, path: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let is_header = |n: usize| lines[n].trim_start().starts_with('[');
    let next_header = |from: usize, to: usize| (from..to).find(|&n| is_header(n)).unwrap_or(to);
    let key_line = |from: usize, to: usize, key: &str| {
        (from..to).find(|&n| {
            !is_header(n)
                && lines[n]
                    .split_once('=')
                    .is_some_and(|(k, _)| k.trim().trim_matches('"') == key)
        })
    };
    let segments: Vec<(&str, Option<usize>)> = path
        .split('.')
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once('[') {
            Some((name, rest)) => (name, rest.trim_end_matches(']').parse().ok()),
            None => (s, None),
        })
        .collect();

    // The table being searched: its header line (none at the top level),
    // the lines of its own keys, and the lines its sub-tables may be in.
    let (mut header, mut body, region_end, mut table, keys) = match segments.first() {
        Some(("scenario", Some(i))) => {
            let starts: Vec<usize> = (0..lines.len())
                .filter(|&n| lines[n].trim() == "[[scenario]]")
                .collect();
            let h = *starts.get(*i)?;
            let region_end = starts.get(i + 1).copied().unwrap_or(lines.len());
            let body = (h + 1, next_header(h + 1, region_end));
            (
                Some(h),
                body,
                region_end,
                "scenario".to_string(),
                &segments[1..],
            )
        }
        _ => (
            None,
            (0, next_header(0, lines.len())),
            lines.len(),
            String::new(),
            &segments[..],
        ),
    };
    for (depth, (name, _)) in keys.iter().enumerate() {
        if let Some(n) = key_line(body.0, body.1, name) {
            return Some(n + 1);
        }
        if depth + 1 == keys.len() {
            break;
        }
        let wanted = if table.is_empty() {
            format!("[{name}]")
        } else {
            format!("[{table}.{name}]")
        };
        let from = header.map_or(0, |h| h + 1);
        let Some(h) = (from..region_end).find(|&n| lines[n].trim() == wanted) else {
            break;
        };
        header = Some(h);
        body = (h + 1, next_header(h + 1, region_end));
        table = wanted.trim_matches(|c| c == '[' || c == ']').to_string();
    }
    header.map(|h| h + 1)
}

#[cfg(test)]
mod tests;
