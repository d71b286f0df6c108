//! `[scenario.stream]`: the stream settings operators choose, for any
//! scenario. Storage and discard take lists: each combination is a variant
//! of its own, side by side in one run (a file and a memory stream under
//! the same load); the other keys apply to every variant's stream.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::common::{OneOrMany, has_repeats};
use super::{Dur, Problems, Retention, Storage};

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
    placement: Option<PlacementSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlacementSection {
    cluster: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    S2,
}

/// A byte count: an integer, or a string with a unit (`"512KiB"`,
/// `"64MB"`, `"1GiB"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(n) if n >= 0 => Ok(Bytes(n as u64)),
            toml::Value::String(s) => parse_bytes(&s).map(Bytes).ok_or_else(|| {
                serde::de::Error::custom(format!("{s:?} is not a size; {BYTES_HELP}"))
            }),
            other => Err(serde::de::Error::custom(format!(
                "expected a size, found {other}; {BYTES_HELP}"
            ))),
        }
    }
}

const BYTES_HELP: &str = "a number of bytes, or a string with B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (of 1024), e.g. \"64MiB\"";

fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = number * scale;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// Where replicas go: a cluster by name, servers by tag.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Placement {
    pub cluster: Option<String>,
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
    pub limits: StreamLimits,
    /// Appended to the names of the variants run on this stream
    /// (`rate-1000.memory.discard-new`); `None` when the lists hold one
    /// combination, so single-stream profiles keep their variant names.
    pub suffix: Option<String>,
}

impl StreamPlan {
    /// Every combination of storage, retention and discard, in that
    /// order.
    pub fn settings(&self) -> Vec<StreamSettings> {
        fn options<T: Copy>(list: &[T]) -> Vec<Option<T>> {
            if list.is_empty() {
                vec![None]
            } else {
                list.iter().copied().map(Some).collect()
            }
        }
        let (storages, retentions, discards) = (
            options(&self.storage),
            options(&self.retention),
            options(&self.discard),
        );
        let mut all = Vec::new();
        for storage in &storages {
            for retention in &retentions {
                for discard in &discards {
                    let mut parts = Vec::new();
                    if let (true, Some(s)) = (storages.len() > 1, storage) {
                        parts.push(storage_name(*s).to_string());
                    }
                    if let (true, Some(r)) = (retentions.len() > 1, retention) {
                        parts.push(retention_name(*r).to_string());
                    }
                    if let (true, Some(d)) = (discards.len() > 1, discard) {
                        parts.push(match d {
                            Discard::Old => "discard-old".to_string(),
                            Discard::New => "discard-new".to_string(),
                        });
                    }
                    all.push(StreamSettings {
                        storage: *storage,
                        retention: *retention,
                        discard: *discard,
                        limits: self.limits.clone(),
                        suffix: (!parts.is_empty()).then(|| parts.join(".")),
                    });
                }
            }
        }
        all
    }

    /// How many streams (and so runs of every variant) the lists ask for.
    pub fn combinations(&self) -> usize {
        self.storage.len().max(1) * self.retention.len().max(1) * self.discard.len().max(1)
    }
}

pub fn retention_name(retention: Retention) -> &'static str {
    match retention {
        Retention::Limits => "limits",
        Retention::Workqueue => "workqueue",
        Retention::Interest => "interest",
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
        for (key, repeated) in [
            ("storage", has_repeats(&storage)),
            ("retention", has_repeats(&retention)),
            ("discard", has_repeats(&discard)),
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
        let placement = self.placement.map(|p| Placement {
            cluster: p.cluster,
            tags: p.tags,
        });
        if let Some(p) = &placement
            && p.cluster.is_none()
            && p.tags.is_empty()
        {
            problems.push(
                format!("{prefix}.placement"),
                "names no cluster and no tags; give one or leave placement out",
            );
        }
        StreamPlan {
            storage,
            retention,
            discard,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_either_unit() {
        assert_eq!(parse_bytes("512"), Some(512));
        assert_eq!(parse_bytes("64MiB"), Some(64 << 20));
        assert_eq!(parse_bytes("1.5 KB"), Some(1500));
        assert_eq!(parse_bytes("2GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("12 parsecs"), None);
        assert_eq!(parse_bytes(""), None);
    }

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
