//! What a scenario kind is to the rest of jsbench: the one trait each
//! scenario module implements, and that its registry row names.

use std::future::Future;
use std::time::Duration;

use anyhow::Result;

use super::ScenarioPlan;
use super::table::Column;
use crate::drive::RunContext;
use crate::profile::{CommonPlan, ConsumerPlan, FaultKind, Problems, Section};
use crate::streams::provision::Need;
use crate::variant::VariantSink;

/// A scenario kind. Its module holds its plan (the keys it reads), its
/// run (provision, drive, measure, verify) and its terminal table; this
/// trait is how the registry reaches them.
pub trait ScenarioKind {
    /// The `kind = "..."` a profile names it by.
    const NAME: &'static str;
    /// Whether its checks account for a work-queue or interest stream
    /// removing what was acknowledged, so a profile may set
    /// `[scenario.stream] retention` for it.
    const RETENTION: bool = false;
    /// Its table in the terminal, by the figures its module reports.
    const COLUMNS: &'static [Column];
    /// The kind's own plan, beside the keys every scenario has.
    type Plan: std::fmt::Debug + Clone;

    /// Reads one `[[scenario]]` table of this kind.
    fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Self::Plan)>;

    /// Runs every variant, each recorded in `sink` as soon as it is done.
    fn run<'a>(
        ctx: &'a RunContext,
        scenario: &'a ScenarioPlan,
        plan: &'a Self::Plan,
        sink: &'a mut dyn VariantSink,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// What its variants put into the account at most at once.
    fn need(plan: &Self::Plan, common: &CommonPlan) -> Need;

    /// The timed phases of its variants on one stream (warm-up included);
    /// set-up, drain and read-back come on top.
    fn estimated_duration(plan: &Self::Plan, common: &CommonPlan) -> Duration;

    /// The durable's plan, for a kind that reads through one: its pull
    /// keys may be swept.
    fn consumer(_plan: &Self::Plan) -> Option<&ConsumerPlan> {
        None
    }

    fn consumer_mut(_plan: &mut Self::Plan) -> Option<&mut ConsumerPlan> {
        None
    }

    /// The fault it injects into the servers, if any: only servers
    /// jsbench started may be killed, and route faults need relays.
    fn faults(_plan: &Self::Plan) -> Option<FaultKind> {
        None
    }
}
