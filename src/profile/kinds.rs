//! The seam between a profile and its scenarios. The profile layer reads
//! what every profile has (its name, `repeat`, `[server]`, `[connection]`,
//! `[ab]`, each scenario's `kind` and `[scenario.stream]`); each scenario
//! kind reads its own keys, in the layer above, through [`Kinds`].

use std::time::Duration;

use super::ab::AbPlan;
use super::connection::ConnectionPlan;
use super::problems::Problems;
use super::server::{ServerPlan, SyncSetting};
use super::stream::StreamPlan;

/// A validated profile, its scenarios of type `S` (the scenario layer's
/// plan).
#[derive(Debug, Clone)]
pub struct Profile<S> {
    pub name: String,
    pub description: String,
    /// The file or bundled name it came from.
    pub source: String,
    /// The text as read, kept in the results so a run can be reproduced.
    pub text: String,
    /// How often each scenario runs, one after the other (`repeat`, 1..=100).
    pub repeat: usize,
    pub server: ServerPlan,
    /// Every value of `[server] sync` (`server.sync` is the first).
    pub syncs: Vec<SyncSetting>,
    /// `[connection]`: the server the profile is meant for, if it names one.
    pub connection: Option<ConnectionPlan>,
    /// `[ab]`: what `jsbench ab` judges, and how strictly.
    pub ab: Option<AbPlan>,
    pub scenarios: Vec<S>,
}

/// One `[[scenario]]` table handed to its kind: the table without `kind`
/// and `stream`, where it is (`scenario[i]`, for every problem's path),
/// and what the profile around it says.
pub struct Section<'a> {
    pub table: toml::Table,
    pub prefix: &'a str,
    pub server: &'a ServerPlan,
    /// `None` when `[scenario.stream]` itself could not be read.
    pub stream: Option<&'a StreamPlan>,
}

/// The scenario kinds a profile may name: the scenario layer's registry,
/// as the profile layer sees it.
pub trait Kinds {
    /// A scenario as read.
    type Scenario;
    /// Every kind's name, for the errors that list them.
    const NAMES: &'static [&'static str];
    /// Reads a table of a kind in [`Kinds::NAMES`]; its problems go to
    /// `problems`, and `None` when it could not be read.
    fn read(kind: &str, section: Section<'_>, problems: &mut Problems) -> Option<Self::Scenario>;
    /// Whether the kind's checks account for a work-queue or interest
    /// stream removing what was acknowledged (`[scenario.stream] retention`).
    fn accepts_retention(kind: &str) -> bool;
    fn common_mut(scenario: &mut Self::Scenario) -> &mut CommonPlan;
}

/// Keys every scenario has.
#[derive(Debug, Clone)]
pub struct CommonPlan {
    pub kind: &'static str,
    /// Unique within the profile; filled in from the kind when omitted.
    pub name: Option<String>,
    /// Measured time per variant.
    pub duration: Duration,
    /// Time before the measured window: same load, nothing recorded.
    pub warmup: Duration,
    /// How long to wait, after publishing ends, for the last deliveries.
    pub drain_timeout: Duration,
    /// `[scenario.stream]`: the settings of the scenario's streams.
    pub stream: StreamPlan,
}

impl CommonPlan {
    /// The scenario's name: given, or its kind's (filled in when read).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(self.kind)
    }
}
