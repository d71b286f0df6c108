//! `[server]`: how jsbench provisions its streams and when the server
//! fsyncs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::keys::{OneOrMany, has_repeats, indexed, items};
use super::problems::Problems;
use crate::system::error::UsageError;

/// How jsbench provisions its streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ServerPlan {
    pub storage: Storage,
    pub replicas: usize,
    /// `[server] sync`, its first value: what a server jsbench starts runs
    /// with; `None` leaves the server's own default (a 2 min interval).
    pub sync: Option<SyncSetting>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    File,
    Memory,
}

/// When the server fsyncs its file store (`jetstream { sync_interval }`):
/// a PubAck promises the write was flushed to the OS, not that it reached
/// the disk, so this decides what a power loss may take after an ack, and
/// what a rate costs. Server-wide: a server jsbench starts is (re)started
/// with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncSetting {
    /// The server's own default: an fsync every 2 minutes.
    Default,
    /// An fsync after every write (`sync_interval: always`).
    Always,
    /// An fsync every this long.
    Interval(Duration),
}

/// What `[server] sync` takes, for its error messages.
pub const SYNC_HELP: &str = "\"default\" (the server's 2 min interval), \"always\" (fsync every write) or an interval such as \"10s\"";

impl SyncSetting {
    /// Reads `"default"`, `"always"` or a duration (`"10s"`).
    pub fn parse(text: &str) -> Result<Self, UsageError> {
        match text.trim() {
            "default" => Ok(SyncSetting::Default),
            "always" => Ok(SyncSetting::Always),
            other => match crate::units::parse_duration(other) {
                Ok(d) if d.is_zero() => Err(UsageError(format!(
                    "{other:?}: an interval must be above 0; {SYNC_HELP}"
                ))),
                Ok(d) => Ok(SyncSetting::Interval(d)),
                Err(_) => Err(UsageError(format!(
                    "{other:?} is not a sync setting; {SYNC_HELP}"
                ))),
            },
        }
    }

    /// The name variants and results use: `default`, `always`, `10s`.
    pub fn label(&self) -> String {
        match self {
            SyncSetting::Default => "default".into(),
            SyncSetting::Always => "always".into(),
            SyncSetting::Interval(d) => crate::units::format_duration(*d),
        }
    }

    /// The `sync_interval` value of the server's configuration; `None`
    /// for the default, which the configuration leaves out.
    pub fn config_value(&self) -> Option<String> {
        match self {
            SyncSetting::Default => None,
            SyncSetting::Always => Some("always".into()),
            // The server parses Go durations: whole milliseconds always read.
            SyncSetting::Interval(d) => Some(format!("{}ms", d.as_millis().max(1))),
        }
    }
}

impl Serialize for SyncSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.label())
    }
}

/// `[server]`: how streams are stored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    storage: Storage,
    replicas: usize,
    sync: Option<OneOrMany<String>>,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            storage: Storage::File,
            replicas: 1,
            sync: None,
        }
    }
}

impl ServerSection {
    /// `[server] sync`, every value read; a list runs every scenario once
    /// per value, the embedded server restarted between them.
    pub fn syncs(&self, problems: &mut Problems) -> Vec<SyncSetting> {
        let given = items(&self.sync);
        if self.sync.is_some() && given.is_empty() {
            problems.push("server.sync", format!("lists no setting; use {SYNC_HELP}"));
        }
        let syncs: Vec<SyncSetting> = given
            .iter()
            .enumerate()
            .filter_map(|(i, text)| {
                let key = indexed("server.sync".into(), i, given.len());
                SyncSetting::parse(text)
                    .map_err(|e| problems.push(key, e.to_string()))
                    .ok()
            })
            .collect();
        if has_repeats(&syncs) {
            problems.push(
                "server.sync",
                "lists a setting twice; each value is one set of variants",
            );
        }
        syncs
    }

    pub fn validate(&self, problems: &mut Problems) -> ServerPlan {
        if ![1, 3, 5].contains(&self.replicas) {
            problems.push(
                "server.replicas",
                format!(
                    "{} is not allowed; JetStream replicas are 1, 3 or 5",
                    self.replicas
                ),
            );
        }
        ServerPlan {
            storage: self.storage,
            replicas: self.replicas,
            sync: items(&self.sync)
                .first()
                .and_then(|t| SyncSetting::parse(t).ok()),
        }
    }
}
