//! Scenarios: one folder per scenario kind, each holding its plan (the
//! keys it reads), its run (provision, drive, measure, verify) and what
//! its table shows; beside them the mechanics several share. A kind is
//! one row of the registry below, and adding one touches its folder, its
//! row and its docs page (docs/development.md, "Adding a scenario").

pub mod ack;
pub mod backpressure;
pub mod checks;
pub mod client_cost;
mod combinations;
pub mod dlq;
pub mod fanout;
pub mod filtered;
pub mod idempotence;
mod kind;
pub mod lag;
pub mod latency;
pub mod lifecycle;
pub mod outage;
pub mod power;
pub mod priority;
pub mod publish;
mod recording;
pub mod redelivery;
pub mod replay;
pub mod restart;
pub mod resume;
pub mod schedule;
pub mod scheduled;
mod scope;
pub mod search;
pub mod shape;
pub mod table;
pub mod ttl;

use std::time::Duration;

use anyhow::Result;
use futures::future::LocalBoxFuture;

pub use kind::{Field, Kind, Variants};
pub use scope::{Paced, Scope, VariantNames, Work};

use crate::drive::RunContext;
use crate::profile::{
    self, CommonPlan, ConsumerPlan, FaultKind, Kinds, Problems, ProfileError, Section,
};
use crate::server::target::Fault;
use crate::streams::provision::{Footprint, Need};
use crate::variant::VariantSink;

/// Declares the registry: one row per kind, `Variant => module::Kind`.
/// It makes the enum of the kinds' plans (so every match over them stays
/// exhaustive) and the calls that reach a kind through its row.
macro_rules! registry {
    ($($variant:ident => $module:ident::$kind:ident),* $(,)?) => {
        /// A scenario's own plan, of its kind.
        #[derive(Debug, Clone)]
        pub enum KindPlan {
            $($variant(<$module::$kind as Kind>::Plan),)*
        }

        /// Every kind a profile may name, in the registry's order.
        pub const KINDS: &[&str] = &[$(<$module::$kind as Kind>::NAME,)*];

        /// The terminal table of the kind summary.json names `kind`; a
        /// kind this build does not know reads as a paced load.
        pub fn columns(kind: &str) -> &'static [table::Column] {
            $(if kind == <$module::$kind as Kind>::NAME {
                return <$module::$kind as Kind>::COLUMNS;
            })*
            table::PACED
        }

        /// The lines under the kind's table for a recorded variant.
        pub fn lines(kind: &str, v: &dyn table::Figures) -> Vec<String> {
            $(if kind == <$module::$kind as Kind>::NAME {
                return <$module::$kind as Kind>::lines(v);
            })*
            Vec::new()
        }

        /// The charts of the kind's own figures.
        pub fn charts(kind: &str) -> &'static [table::ChartSpec] {
            $(if kind == <$module::$kind as Kind>::NAME {
                return <$module::$kind as Kind>::CHARTS;
            })*
            &[]
        }

        /// Every kind's own figures a profile's `[ab] judge` may name.
        pub fn figures() -> Vec<&'static str> {
            let mut all = Vec::new();
            $(all.extend_from_slice(<$module::$kind as Kind>::FIGURES);)*
            all
        }

        impl KindPlan {
            /// Reads a table of the kind named `kind`, one of [`KINDS`].
            fn read(
                kind: &str,
                section: Section<'_>,
                problems: &mut Problems,
            ) -> Option<(CommonPlan, KindPlan)> {
                $(if kind == <$module::$kind as Kind>::NAME {
                    return $module::plan::read(section, problems)
                        .map(|(common, plan)| (common, KindPlan::$variant(plan)));
                })*
                None
            }

            fn accepts_retention(kind: &str) -> bool {
                $(if kind == <$module::$kind as Kind>::NAME {
                    return <$module::$kind as Kind>::RETENTION;
                })*
                false
            }

            /// Runs every variant of the scenario; boxed, since together
            /// the kinds' futures would be as large as the largest, and a
            /// debug build runs a whole run's future on a test thread's
            /// stack.
            fn run<'a>(
                &'a self,
                ctx: &'a RunContext,
                scenario: &'a ScenarioPlan,
                sink: &'a mut dyn VariantSink,
            ) -> LocalBoxFuture<'a, Result<()>> {
                match self {
                    $(KindPlan::$variant(p) => {
                        Box::pin(lifecycle::run_kind::<$module::$kind>(ctx, scenario, p, sink))
                    })*
                }
            }

            fn need(&self, common: &CommonPlan) -> Need {
                match self {
                    $(KindPlan::$variant(p) => <$module::$kind as Kind>::need(p, common),)*
                }
            }

            fn estimated_duration(&self, common: &CommonPlan) -> Duration {
                match self {
                    $(KindPlan::$variant(p) => {
                        <$module::$kind as Kind>::estimated_duration(p, common)
                    })*
                }
            }

            pub fn consumer(&self) -> Option<&ConsumerPlan> {
                match self {
                    $(KindPlan::$variant(p) => <$module::$kind as Kind>::CONSUMER.map(|f| f.0(p)),)*
                }
            }

            fn consumer_mut(&mut self) -> Option<&mut ConsumerPlan> {
                match self {
                    $(KindPlan::$variant(p) => <$module::$kind as Kind>::CONSUMER.map(|f| f.1(p)),)*
                }
            }

            pub fn faults(&self) -> Option<FaultKind> {
                match self {
                    $(KindPlan::$variant(p) => <$module::$kind as Kind>::faults(p),)*
                }
            }
        }
    };
}

registry! {
    Latency => latency::Latency,
    Publish => publish::Publish,
    Ack => ack::Ack,
    Redelivery => redelivery::Redelivery,
    Replay => replay::Replay,
    Backpressure => backpressure::Backpressure,
    Resume => resume::Resume,
    Restart => restart::Restart,
    Dlq => dlq::Dlq,
    Fanout => fanout::Fanout,
    Outage => outage::Outage,
    Power => power::Power,
    Ttl => ttl::TtlKind,
    Filtered => filtered::Filtered,
    Scheduled => scheduled::Scheduled,
    Priority => priority::Priority,
    Lag => lag::Lag,
}

/// One `[[scenario]]` of a profile: the keys every scenario has, and its
/// kind's own plan.
#[derive(Debug, Clone)]
pub struct ScenarioPlan {
    pub common: CommonPlan,
    pub kind: KindPlan,
}

/// A profile with its scenarios read by the registry.
pub type Profile = profile::Profile<ScenarioPlan>;

/// The registry, as the profile layer reads scenarios through it.
pub struct Registry;

impl Kinds for Registry {
    type Scenario = ScenarioPlan;
    const NAMES: &'static [&'static str] = KINDS;

    fn read(kind: &str, section: Section<'_>, problems: &mut Problems) -> Option<ScenarioPlan> {
        KindPlan::read(kind, section, problems).map(|(common, kind)| ScenarioPlan { common, kind })
    }

    fn accepts_retention(kind: &str) -> bool {
        KindPlan::accepts_retention(kind)
    }

    fn common_mut(scenario: &mut ScenarioPlan) -> &mut CommonPlan {
        &mut scenario.common
    }
}

/// Loads a profile by bundled name or path, every scenario read by its kind.
pub fn load(spec: &str) -> Result<Profile> {
    profile::load::<Registry>(spec)
}

/// Parses and validates profile text; `source` names it in errors.
pub fn parse(source: &str, text: &str) -> Result<Profile, ProfileError> {
    profile::parse::<Registry>(source, text)
}

impl ScenarioPlan {
    /// Unique within the profile.
    pub fn name(&self) -> &str {
        self.common.name()
    }

    pub fn kind(&self) -> &'static str {
        self.common.kind
    }

    /// The plan once per combination of its swept pull keys, with the
    /// suffix that names it; itself, unnamed, when nothing is swept.
    pub fn pull_combinations(&self) -> Vec<(Option<String>, ScenarioPlan)> {
        let Some(consumer) = self.kind.consumer().filter(|c| c.sweep.combinations() > 1) else {
            return vec![(None, self.clone())];
        };
        consumer
            .sweep
            .apply(consumer)
            .into_iter()
            .map(|(suffix, c)| {
                let mut plan = self.clone();
                if let Some(slot) = plan.kind.consumer_mut() {
                    *slot = c;
                }
                (suffix, plan)
            })
            .collect()
    }

    /// Timed phases only (warm-up included); set-up, drain and read-back
    /// come on top. Every variant runs once per stream and pull
    /// combination.
    pub fn estimated_duration(&self) -> Duration {
        let pulls = self.kind.consumer().map_or(1, |c| c.sweep.combinations());
        self.kind.estimated_duration(&self.common)
            * (self.common.stream.combinations() * pulls) as u32
    }

    /// What the scenario puts into the account at most at once.
    pub fn need(&self) -> Need {
        self.kind.need(&self.common)
    }

    /// Runs one scenario of a profile: every variant once per combination
    /// of its `[scenario.stream]` lists and of its swept pull keys.
    pub async fn run(&self, ctx: &mut RunContext, sink: &mut dyn VariantSink) -> Result<()> {
        combinations::run(ctx, self, sink).await
    }
}

/// How long a profile's measured phases take (warm-up included), without
/// set-up and drain; what `jsbench profiles` shows.
pub fn estimated_duration(profile: &Profile) -> Duration {
    profile
        .scenarios
        .iter()
        .map(ScenarioPlan::estimated_duration)
        .sum::<Duration>()
        * profile.repeat as u32
}

/// What a profile puts into the account at most at once: its largest
/// scenario's need.
pub fn footprint(profile: &Profile) -> Footprint {
    Footprint::of(
        profile
            .scenarios
            .iter()
            .map(|s| (s.need(), &s.common.stream)),
    )
}

/// The scenarios that inject a fault into the servers: what the target
/// must allow before anything starts.
pub fn faults(profiles: &[Profile]) -> Vec<Fault<'_>> {
    profiles
        .iter()
        .flat_map(|p| {
            p.scenarios.iter().filter_map(move |s| {
                s.kind.faults().map(|kind| Fault {
                    profile: &p.name,
                    scenario: s.name(),
                    kind,
                })
            })
        })
        .collect()
}

/// The one scenario of a profile made of `body` under a `kind` scenario
/// with a 1 s duration, or the profile's error text: what a kind's own
/// unit tests read.
#[cfg(test)]
pub(crate) fn one_scenario(kind: &str, body: &str) -> Result<ScenarioPlan, String> {
    let text = format!("name = \"t\"\n[[scenario]]\nkind = \"{kind}\"\nduration = \"1s\"\n{body}");
    parse("test", &text)
        .map(|mut p| p.scenarios.remove(0))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::behaviour::Cause;
    use crate::consume::fates;
    use crate::record::names;

    /// The metric names a profile's `[ab] judge` may name, from the
    /// constants the scenarios write them under. Not `redelivery_late`:
    /// signed, early negative, it has no better direction and is only shown.
    fn reported() -> Vec<String> {
        let mut histograms: Vec<String> = names::HISTOGRAMS.iter().map(|h| h.to_string()).collect();
        for family in [fates::REDELIVERY_DELAY, fates::REDELIVERY_OFF_BY] {
            histograms.extend(Cause::ALL.map(|c| fates::per_cause(family, c)));
        }
        // A kind's own figure may be a value or a histogram's.
        histograms.extend(figures().into_iter().map(String::from));
        let mut all: Vec<String> = names::VALUES.iter().map(|v| v.to_string()).collect();
        for h in &histograms {
            all.push(h.clone());
            all.extend(names::QUANTILES.iter().map(|q| names::quantile(h, q)));
        }
        all
    }

    /// A renamed figure fails here rather than leave a bundled profile's
    /// `[ab]` judging nothing.
    #[test]
    fn every_bundled_ab_judge_pattern_names_a_figure_jsbench_reports() {
        let reported = reported();
        let mut judged = 0;
        for (name, text) in profile::BUNDLED {
            let p = parse(name, text).unwrap_or_else(|e| panic!("{e}"));
            for pattern in p.ab.iter().flat_map(|ab| &ab.judge) {
                let metric = pattern.rsplit('/').next().unwrap_or(pattern);
                judged += 1;
                assert!(
                    reported.iter().any(|r| crate::compare::glob(metric, r)),
                    "profile {name}: [ab] judge {pattern:?} names no figure jsbench reports"
                );
            }
        }
        assert!(
            judged > 5,
            "only {judged} judge patterns in the bundled profiles"
        );
        assert!(
            !reported
                .iter()
                .any(|r| crate::compare::glob("renamed_rate", r))
        );
    }

    #[test]
    fn every_kind_has_a_table_that_names_and_judges_its_variants() {
        for kind in KINDS {
            let columns = columns(kind);
            assert_eq!(columns.first(), Some(&table::VARIANT), "{kind}");
            assert_eq!(columns.last(), Some(&table::VERDICT), "{kind}");
        }
        assert_eq!(columns("a-kind-from-elsewhere"), table::PACED);
    }
}
