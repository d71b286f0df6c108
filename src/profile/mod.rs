//! Profiles: TOML files that say what to run, validated into a typed plan.
//!
//! A profile is read in two steps. Serde turns the text into sections,
//! rejecting unknown keys and malformed values with the key path; validation
//! then checks ranges and combinations and builds the [`Profile`] plan the
//! scenarios run from. Every problem names the file, the field path and what
//! is allowed, and all problems are reported at once.
//!
//! The plan is split by what it is about, each file holding its types and
//! how a profile writes them: [`server`], [`connection`] and [`ab`] the
//! top-level tables; [`stream`], [`publish`], [`arrival`], [`consumer`],
//! [`behaviour`] and [`search`] a scenario's parts, [`client`] the
//! client publishers and consumers run on; [`faults`], [`dlq`]
//! and [`replay`] the words of the kinds that inject faults, dead-letter
//! and replay and of the engines that carry them out. [`kinds`] is the
//! seam with the scenario layer, [`shared`] and [`keys`] how a kind reads
//! its table, [`problems`] what is wrong with one.

pub mod ab;
pub mod arrival;
mod arrival_times;
pub mod behaviour;
mod bundled;
pub mod client;
pub mod connection;
pub mod consumer;
pub mod dlq;
pub mod faults;
pub mod keys;
mod kinds;
pub mod problems;
pub mod publish;
pub mod replay;
pub mod search;
pub mod server;
pub mod shared;
pub mod stream;

use std::path::Path;

use serde::Deserialize;

/// The units profiles are written in, where most callers have long found them.
pub use crate::units::{Bytes, Dur, format_duration, parse_duration, parse_percent};
pub use ab::{AbPlan, ab_judge};
pub use arrival::ArrivalPlan;
pub use arrival_times::{MAX_ARRIVALS, arrival_count, arrival_offsets};
pub use behaviour::{Action, BehaviourPlan, MessageClass, ProcessingPlan};
pub use bundled::{BUNDLED, bundled};
pub use connection::ConnectionPlan;
pub use consumer::{
    AckPolicy, ConsumerClient, ConsumerKind, ConsumerPlan, DEFAULT_PULLS_AHEAD,
    MAX_CONSUMER_CLIENTS, PullSweep, PullTuning, PushPlan, kind_name,
};
pub use dlq::{Capture, DlqHandlerPlan, OriginHeaders, OriginalGet, is_publish_control};
pub use faults::{CrashPoint, FaultKind, FaultNode};
pub use keys::{Keys, NAME_RULE, is_safe_name};
pub use kinds::{CommonPlan, Kinds, Profile, Section};
pub use problems::{Problem, Problems, ProfileError};
pub use publish::{
    MAX_SUBJECTS, MsgId, PublishClient, PublishMode, PublishPlan, Rate, RatePer, Reference,
    SizePlan, late_retry_margin,
};
pub use replay::{REPLAY_MAX_ACK_PENDING, ReplayDeliver, ReplayPace, ReplayReader};
pub use search::{MAX_RATE, SearchPlan, Slo, SloOn};
pub use server::{SYNC_HELP, ServerPlan, Storage, SyncSetting};
pub use shared::{
    DRAIN_SECONDS, DURATION_SECONDS, Offer, Paced, PacedLoad, Shared, WARMUP_SECONDS, take,
};
pub use stream::{
    Compression, Discard, PersistMode, Placement, Retention, StreamLimits, StreamPlan,
    StreamSettings, persist_name, storage_name,
};

use problems::{line_of, locate, path_text};

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
    server: server::ServerSection,
    connection: Option<connection::ConnectionSection>,
    ab: Option<ab::AbSection>,
    #[serde(default, rename = "scenario")]
    scenarios: Vec<toml::Table>,
}

fn one() -> i64 {
    1
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
    let repeat = file.repeat;
    problems.range("repeat", repeat, 1, MAX_REPEAT, " runs of each scenario");
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
    let problem = |path: String, e: &toml::de::Error| Problem {
        path,
        line: e.span().map(|s| line_of(text, s.start)),
        message: e.message().trim().to_string(),
    };
    let deserializer = toml::Deserializer::parse(text).map_err(|e| problem(String::new(), &e))?;
    serde_path_to_error::deserialize(deserializer)
        .map_err(|e| problem(path_text(e.path()), e.inner()))
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
        other => {
            let why = match other {
                Some(v) => format!("must be a string, found {}", v.type_str()),
                None => format!("missing; one of: {}", K::NAMES.join(", ")),
            };
            problems.push(format!("{prefix}.kind"), why);
            return None;
        }
    };
    let stream = match table.remove("stream") {
        None => Some(stream::StreamPlan::default()),
        Some(toml::Value::Table(t)) => {
            let path = format!("{prefix}.stream");
            problems::read_at::<stream::StreamSection>(t, &path, problems)
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

#[cfg(test)]
mod tests;
