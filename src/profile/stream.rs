//! `[scenario.stream]`: the stream settings operators choose, for any
//! scenario. Storage and discard take lists: each combination is a variant
//! of its own, side by side in one run (a file and a memory stream under
//! the same load); the other keys apply to every variant's stream.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::keys::{OneOrMany, has_repeats, picks};
use super::problems::Problems;
use super::server::{Storage, SyncSetting};
use crate::units::{Bytes, Dur};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StreamSection {
    storage: Option<OneOrMany<Storage>>,
    retention: Option<OneOrMany<Retention>>,
    discard: Option<OneOrMany<Discard>>,
    discard_new_per_subject: Option<bool>,
    max_age: Option<Dur>,
    max_msgs: Option<i64>,
    max_bytes: Option<Bytes>,
    max_msgs_per_subject: Option<i64>,
    max_msg_size: Option<Bytes>,
    duplicate_window: Option<Dur>,
    compression: Option<Compression>,
    allow_direct: Option<bool>,
    placement: Option<Placement>,
    persist: Option<OneOrMany<PersistMode>>,
}

/// What a stream does when a limit is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Discard {
    /// Evict the oldest messages (the server's default).
    Old,
    /// Refuse new publishes.
    New,
}

/// The stream's persist mode (ADR-56, nats-server 2.12+): `async` sends
/// the PubAck before the write is flushed, trading what a crash may take
/// for rate; R1 file streams only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PersistMode {
    /// Flushed before the PubAck (the server's default; left unset).
    Default,
    /// Flushed in the background; the PubAck may come first.
    Async,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    S2,
}

/// Where replicas go: a cluster by name, servers by tag.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    pub cluster: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A scenario's stream settings, lists included.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamPlan {
    /// Empty: the profile's `[server] storage`.
    pub storage: Vec<Storage>,
    /// Empty: limits (messages stay until a limit removes them).
    pub retention: Vec<Retention>,
    /// Empty: the server's default (old).
    pub discard: Vec<Discard>,
    /// Empty: the server's default persist mode, left unset.
    pub persist: Vec<PersistMode>,
    /// `[server] sync` when it lists several settings: server-wide, but
    /// swept here beside the stream's lists because each value is a set of
    /// variants (run on a restarted server).
    pub sync: Vec<SyncSetting>,
    pub limits: StreamLimits,
}

/// The settings one variant's stream gets beyond its name and subjects.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StreamLimits {
    pub discard_new_per_subject: bool,
    pub max_age: Option<Duration>,
    pub max_msgs: Option<i64>,
    pub max_bytes: Option<u64>,
    pub max_msgs_per_subject: Option<i64>,
    pub max_msg_size: Option<u64>,
    pub duplicate_window: Option<Duration>,
    pub compression: Option<Compression>,
    pub allow_direct: Option<bool>,
    pub placement: Option<Placement>,
}

/// One combination of a [`StreamPlan`]'s lists: the stream of one variant.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StreamSettings {
    /// `None`: the profile's `[server] storage`.
    pub storage: Option<Storage>,
    /// `None`: limits.
    pub retention: Option<Retention>,
    pub discard: Option<Discard>,
    /// `None`: unset, the server's default.
    pub persist: Option<PersistMode>,
    /// `None`: the profile's single `[server] sync`, if any.
    pub sync: Option<SyncSetting>,
    pub limits: StreamLimits,
    /// Appended to the names of the variants run on this stream
    /// (`rate-1000.memory.discard-new`); `None` when the lists hold one
    /// combination, so single-stream profiles keep their variant names.
    pub suffix: Option<String>,
}

impl StreamPlan {
    /// Every combination of sync, persist mode, storage, retention and
    /// discard, in that order: sync outermost, so a server restarts once
    /// per sync value.
    pub fn settings(&self) -> Vec<StreamSettings> {
        let one = |at: Vec<usize>| {
            let mut settings = StreamSettings {
                sync: self.sync.get(at[0]).copied(),
                persist: self.persist.get(at[1]).copied(),
                storage: self.storage.get(at[2]).copied(),
                retention: self.retention.get(at[3]).copied(),
                discard: self.discard.get(at[4]).copied(),
                limits: self.limits.clone(),
                suffix: None,
            };
            settings.suffix = self.suffix_of(&settings);
            settings
        };
        picks(&self.lens()).into_iter().map(one).collect()
    }

    fn lens(&self) -> [usize; 5] {
        let (sync, persist) = (self.sync.len(), self.persist.len());
        let (storage, retention) = (self.storage.len(), self.retention.len());
        [sync, persist, storage, retention, self.discard.len()]
    }

    /// The names of the swept values in `settings` (`sync-always.persist-
    /// async.memory`), `None` when nothing is swept.
    fn suffix_of(&self, s: &StreamSettings) -> Option<String> {
        let discard = |d| match d {
            Discard::Old => "discard-old",
            Discard::New => "discard-new",
        };
        // In the order of `lens`.
        let names = [
            s.sync.map(|v| format!("sync-{}", v.label())),
            s.persist.map(|p| format!("persist-{}", persist_name(p))),
            s.storage.map(|v| storage_name(v).to_string()),
            s.retention.map(|r| r.label().to_string()),
            s.discard.map(|d| discard(d).to_string()),
        ];
        let swept = self
            .lens()
            .into_iter()
            .zip(names)
            .filter(|(len, _)| *len > 1);
        let parts: Vec<String> = swept.filter_map(|(_, name)| name).collect();
        (!parts.is_empty()).then(|| parts.join("."))
    }

    /// How many streams (and so runs of every variant) the lists ask for.
    pub fn combinations(&self) -> usize {
        self.lens().iter().map(|&n| n.max(1)).product()
    }
}

pub fn persist_name(persist: PersistMode) -> &'static str {
    match persist {
        PersistMode::Default => "default",
        PersistMode::Async => "async",
    }
}

pub fn storage_name(storage: Storage) -> &'static str {
    match storage {
        Storage::File => "file",
        Storage::Memory => "memory",
    }
}

/// Longest max_age, duplicate window: beyond this a benchmark stream is
/// surely a typo.
const MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

impl StreamSection {
    pub(super) fn validate(self, prefix: &str, problems: &mut Problems) -> StreamPlan {
        let prefix = format!("{prefix}.stream");
        let storage = self.storage.map(|s| s.0).unwrap_or_default();
        let retention = self.retention.map(|r| r.0).unwrap_or_default();
        let discard = self.discard.map(|d| d.0).unwrap_or_default();
        let persist = self.persist.map(|p| p.0).unwrap_or_default();
        for (key, repeated) in [
            ("storage", has_repeats(&storage)),
            ("retention", has_repeats(&retention)),
            ("discard", has_repeats(&discard)),
            ("persist", has_repeats(&persist)),
        ] {
            if repeated {
                problems.push(
                    format!("{prefix}.{key}"),
                    "lists a value twice; each value is one set of variants",
                );
            }
        }
        for (key, value) in [
            ("max_msgs", self.max_msgs),
            ("max_msgs_per_subject", self.max_msgs_per_subject),
        ] {
            if let Some(v) = value {
                problems.range(&format!("{prefix}.{key}"), v, 1, i64::MAX, " messages");
            }
        }
        if let Some(Bytes(b)) = self.max_bytes
            && b == 0
        {
            problems.push(
                format!("{prefix}.max_bytes"),
                "0 bytes would refuse every message; leave it out for no limit",
            );
        }
        if let Some(Bytes(b)) = self.max_msg_size
            && (b == 0 || b > i32::MAX as u64)
        {
            problems.push(
                format!("{prefix}.max_msg_size"),
                format!("{b} is out of range 1..{}", i32::MAX),
            );
        }
        for (key, value) in [
            ("max_age", &self.max_age),
            ("duplicate_window", &self.duplicate_window),
        ] {
            if let Some(Dur(d)) = value
                && (d.is_zero() || *d > MAX_AGE)
            {
                problems.push(
                    format!("{prefix}.{key}"),
                    "must be above 0 and at most 30 days (720h)",
                );
            }
        }
        if let (Some(Dur(window)), Some(Dur(age))) = (&self.duplicate_window, &self.max_age)
            && window > age
        {
            problems.push(
                format!("{prefix}.duplicate_window"),
                "is longer than max_age; nats-server refuses such a stream",
            );
        }
        let discard_new_per_subject = self.discard_new_per_subject.unwrap_or(false);
        if discard_new_per_subject
            && (!discard.contains(&Discard::New) || self.max_msgs_per_subject.is_none())
        {
            problems.push(
                format!("{prefix}.discard_new_per_subject"),
                "needs discard = \"new\" and max_msgs_per_subject (nats-server refuses it otherwise)",
            );
        }
        let placement = self.placement;
        if let Some(p) = &placement
            && p.cluster.is_none()
            && p.tags.is_empty()
        {
            problems.push(
                format!("{prefix}.placement"),
                "names no cluster and no tags; give one or leave placement out",
            );
        }
        if persist.contains(&PersistMode::Async) && storage.contains(&Storage::Memory) {
            problems.push(
                format!("{prefix}.persist"),
                "\"async\" applies to file streams only (nats-server refuses it on memory storage); \
                 sweep storage in a scenario of its own",
            );
        }
        StreamPlan {
            storage,
            retention,
            discard,
            persist,
            sync: Vec::new(),
            limits: StreamLimits {
                discard_new_per_subject,
                max_age: self.max_age.map(|d| d.0),
                max_msgs: self.max_msgs,
                max_bytes: self.max_bytes.map(|b| b.0),
                max_msgs_per_subject: self.max_msgs_per_subject,
                max_msg_size: self.max_msg_size.map(|b| b.0),
                duplicate_window: self.duplicate_window.map(|d| d.0),
                compression: self.compression,
                allow_direct: self.allow_direct,
                placement,
            },
        }
    }
}

/// How a dlq variant's source stream retains messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retention {
    /// Kept until a limit: the original stays after it is dead-lettered.
    Limits,
    /// Removed on ack or term, not on MaxDeliver: the handler deletes the
    /// original once the copy is persisted.
    Workqueue,
    /// Removed once every consumer acked: a second consumer acks everything,
    /// the original stays for the one that dead-letters it.
    Interest,
}

impl Retention {
    pub fn label(&self) -> &'static str {
        match self {
            Retention::Limits => "limits",
            Retention::Workqueue => "workqueue",
            Retention::Interest => "interest",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_make_one_suffixed_stream_per_combination() {
        let plan = StreamPlan {
            storage: vec![Storage::File, Storage::Memory],
            retention: Vec::new(),
            discard: vec![Discard::Old, Discard::New],
            limits: StreamLimits {
                max_msgs: Some(10),
                ..Default::default()
            },
            ..Default::default()
        };
        let suffixes: Vec<_> = plan
            .settings()
            .into_iter()
            .map(|s| s.suffix.unwrap())
            .collect();
        assert_eq!(
            suffixes,
            [
                "file.discard-old",
                "file.discard-new",
                "memory.discard-old",
                "memory.discard-new"
            ]
        );
        assert_eq!(plan.combinations(), 4);
        assert!(
            plan.settings()
                .iter()
                .all(|s| s.limits.max_msgs == Some(10))
        );
        // One value per list: the variants keep their names.
        let single = StreamPlan {
            storage: vec![Storage::Memory],
            ..Default::default()
        };
        let settings = single.settings();
        assert_eq!(settings.len(), 1);
        assert_eq!(settings[0].suffix, None);
        assert_eq!(settings[0].storage, Some(Storage::Memory));
        assert_eq!(
            StreamPlan::default().settings()[0],
            StreamSettings::default()
        );
    }
}
