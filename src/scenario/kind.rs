//! What a scenario kind is to the rest of jsbench: the one trait each
//! kind's folder implements and its registry row names. A kind supplies
//! only what is its own: its plan, its variants (grouped by what they
//! share), and for one variant what to provision, what load to drive and
//! how to judge it; the shared loop ([`super::lifecycle`]) does the rest.

use std::future::Future;
use std::time::Duration;

use anyhow::Result;

use super::scope::Scope;
use super::table::{ChartSpec, Column, Figures};
use crate::profile::{CommonPlan, ConsumerPlan, FaultKind};
use crate::streams::provision::Need;
use crate::variant::VariantResult;

/// What the shared loop asks of a kind beyond its registry row: its
/// variants, grouped by what they share, and how one of them runs.
pub trait Kind: 'static {
    /// The `kind = "..."` a profile names it by.
    const NAME: &'static str;
    /// Its table in the terminal, by the figures its module reports.
    const COLUMNS: &'static [Column];
    /// Whether its checks account for a work-queue or interest stream
    /// removing what was acknowledged, so a profile may set
    /// `[scenario.stream] retention` for it.
    const RETENTION: bool = false;
    /// The kind's own plan, beside the keys every scenario has.
    type Plan: std::fmt::Debug + Clone;
    /// What of its variants stays in the coordinator in a run with
    /// workers, and why: said beside each variant then.
    const COORDINATOR_SIDE: Option<&'static str> = None;
    /// Figures of its own a profile's `[ab] judge` may name, beside the
    /// names every kind reports.
    const FIGURES: &'static [&'static str] = &[];
    /// Charts of its own figures, beside the ones every kind's data gets.
    const CHARTS: &'static [ChartSpec] = &[];
    /// Variants that share what [`Kind::setup`] provisions (a stream
    /// filled once and read by each) and whose figures
    /// [`Kind::compare`] sets against each other; `()` for a kind
    /// whose variants share nothing.
    type Group: Default;
    /// What `setup` left for the group's variants; nothing by default.
    type Shared: Default;
    /// One variant's parameters.
    type Variant;
    /// Records a group's variants together once all have run, after
    /// `compare` has added the figures that set them against each other;
    /// otherwise each is recorded as soon as it is done.
    const COMPARES: bool = false;
    /// Records the setup as a variant of its own (it measures and checks
    /// something: replay's recording), not only when it fails.
    const SETUP_RECORDED: bool = false;

    /// What its variants put into the account at most at once.
    fn need(plan: &Self::Plan, common: &CommonPlan) -> Need;

    /// The timed phases of its variants on one stream (warm-up included);
    /// set-up, drain and read-back come on top.
    fn estimated_duration(plan: &Self::Plan, common: &CommonPlan) -> Duration;

    /// The durable's plan in the kind's plan, for a kind that reads
    /// through one: its pull keys may be swept.
    const CONSUMER: Option<Field<Self::Plan>> = None;

    /// The fault it injects into the servers, if any: only servers
    /// jsbench started may be killed, and route faults need relays.
    fn faults(_plan: &Self::Plan) -> Option<FaultKind> {
        None
    }

    /// The groups, in run order.
    fn groups(_plan: &Self::Plan) -> Vec<Self::Group> {
        vec![Self::Group::default()]
    }

    /// The name of a group's setup, which names its record.
    fn setup_label(_plan: &Self::Plan, _group: &Self::Group) -> String {
        "setup".into()
    }

    /// Provisions (and fills) what the group's variants share, in the
    /// group's scope: deleted once they have all run.
    fn setup(
        _s: &mut Scope<'_>,
        _r: &mut VariantResult,
        _plan: &Self::Plan,
        _group: &Self::Group,
    ) -> impl Future<Output = Result<Self::Shared>> {
        async { Ok(Self::Shared::default()) }
    }

    /// The group's variants, in run order, or the rate search that picks them.
    fn variants(plan: &Self::Plan, group: &Self::Group) -> Variants<Self::Variant>;

    /// A variant's name in the results.
    fn label(plan: &Self::Plan, v: &Self::Variant) -> String;

    /// One variant: provision through `s`, drive, measure and verify into
    /// `r`. Whatever it created is deleted after it returns.
    fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Self::Plan,
        shared: &mut Self::Shared,
        v: &Self::Variant,
    ) -> impl Future<Output = Result<()>>;

    /// Lines under its terminal table for a recorded variant: what its
    /// figures say together, in words.
    fn lines(_v: &dyn Figures) -> Vec<String> {
        Vec::new()
    }

    /// Figures that set a group's variants against each other (a ratio
    /// against a baseline), once all have run; with [`Kind::COMPARES`].
    fn compare(
        _plan: &Self::Plan,
        _group: &Self::Group,
        _done: &mut [(Self::Variant, VariantResult)],
    ) {
    }
}

/// Where a plan keeps its durable's plan: read, and written.
pub type Field<P> = (fn(&P) -> &ConsumerPlan, fn(&mut P) -> &mut ConsumerPlan);

/// A group's variants: a list, or a rate search whose probes are the
/// variant `at(rate)` under the names the search gives them.
pub enum Variants<V> {
    List(Vec<V>),
    Search {
        search: crate::profile::SearchPlan,
        /// Tells apart the searches of one scenario (`id-unique.`).
        prefix: String,
        at: Box<dyn Fn(u64) -> V>,
    },
}
