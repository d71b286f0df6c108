//! One variant's life, the same for every scenario kind: timed, run in a
//! [`Scope`] of its own (provision, drive, measure and verify are the
//! kind's [`Kind::run`]), everything it created recorded and deleted, its
//! error kept beside what it measured, and recorded as soon as it is done
//! (or, for a kind that compares its variants, as soon as its group is).
//! The rule that a variant which checked nothing does not pass lives here
//! once.

use std::time::Instant;

use anyhow::{Context, Result};

use super::ScenarioPlan;
use super::kind::{Kind, Variants};
use super::scope::Scope;
use crate::drive::RunContext;
use crate::variant::{VariantResult, VariantSink};

/// Runs every group of a kind's scenario, each variant recorded as soon as
/// it is done (or, for a kind that compares, as soon as its group is), so
/// a later failure or a Ctrl-C loses none.
pub async fn run_kind<K: Kind>(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &K::Plan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    let sink = &mut CoordinatorSide {
        inner: sink,
        note: K::COORDINATOR_SIDE.filter(|_| ctx.workers.is_some()),
    };
    for group in K::groups(plan) {
        if ctx.stop.is_cancelled() {
            break;
        }
        let started = Instant::now();
        let mut scope = Scope::new(ctx, scenario, K::setup_label(plan, &group));
        let mut setup = VariantResult::new(scope.label());
        let shared = K::setup(&mut scope, &mut setup, plan, &group).await;
        let mut shared = match shared {
            Ok(shared) => shared,
            Err(e) => {
                let closed = scope.close(&mut setup).await;
                settle(&mut setup, Err(e), closed, started);
                sink.record(&scenario.common, setup)?;
                continue;
            }
        };
        if K::SETUP_RECORDED {
            settle(&mut setup, Ok(()), Ok(()), started);
            sink.record(&scenario.common, setup)?;
        }
        let ran = run_group::<K>(ctx, scenario, plan, &group, &mut shared, sink).await;
        let closed = scope.close(&mut VariantResult::new("")).await;
        ran?;
        closed.with_context(|| format!("cleaning up after {}", K::setup_label(plan, &group)))?;
    }
    Ok(())
}

async fn run_group<K: Kind>(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &K::Plan,
    group: &K::Group,
    shared: &mut K::Shared,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    match K::variants(plan, group) {
        Variants::List(list) => {
            let mut done = Vec::new();
            for v in list {
                if ctx.stop.is_cancelled() {
                    break;
                }
                let name = K::label(plan, &v);
                let r = one::<K>(ctx, scenario, plan, shared, &v, name).await;
                match K::COMPARES {
                    true => done.push((v, r)),
                    false => sink.record(&scenario.common, r)?,
                }
            }
            K::compare(plan, group, &mut done);
            for (_, r) in done {
                sink.record(&scenario.common, r)?;
            }
            Ok(())
        }
        Variants::Search { search, prefix, at } => {
            let probe =
                async |rate, name| one::<K>(ctx, scenario, plan, shared, &at(rate), name).await;
            super::search::run(ctx, scenario, &search, &prefix, sink, probe).await
        }
    }
}

/// One variant, timed, in a scope of its own.
async fn one<K: Kind>(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &K::Plan,
    shared: &mut K::Shared,
    v: &K::Variant,
    name: String,
) -> VariantResult {
    let started = Instant::now();
    let mut r = VariantResult::new(name);
    let mut scope = Scope::new(ctx, scenario, r.name.clone());
    let ran = K::run(&mut scope, &mut r, plan, shared, v).await;
    let closed = scope.close(&mut r).await;
    settle(&mut r, ran, closed, started);
    r
}

/// What every variant's end has in common: its error (the run's, else the
/// clean-up's) kept beside what it measured, the time it took, and a
/// variant that checked nothing saying why each check could not apply (its
/// verdict is "not applicable", never a pass: [`VariantResult::checked_nothing`]).
fn settle(r: &mut VariantResult, ran: Result<()>, closed: Result<()>, started: Instant) {
    let error = match (ran, closed) {
        (Err(e), _) => Some(e),
        (Ok(()), Err(e)) => Some(e.context("cleaning up after the variant")),
        (Ok(()), Ok(())) => None,
    };
    match error {
        Some(e) => r.error = Some(format!("{e:#}")),
        None if r.checked_nothing() => {
            let why: Vec<String> = r
                .invariants
                .iter()
                .map(|i| format!("{}: {}", i.name, i.detail))
                .collect();
            r.warnings.push(match why.is_empty() {
                true => "nothing was checked: the variant made no check".to_string(),
                false => format!("nothing was checked: no check applied ({})", why.join("; ")),
            });
        }
        None => {}
    }
    r.elapsed = started.elapsed();
}

/// Says beside every variant of a run with workers what of the kind stays
/// in the coordinator ([`Kind::COORDINATOR_SIDE`]).
struct CoordinatorSide<'a> {
    inner: &'a mut dyn VariantSink,
    note: Option<&'static str>,
}

impl VariantSink for CoordinatorSide<'_> {
    fn record(
        &mut self,
        scenario: &crate::profile::CommonPlan,
        mut r: VariantResult,
    ) -> Result<()> {
        if let Some(note) = self.note {
            r.param("workers_coordinator_side", note);
        }
        self.inner.record(scenario, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::variant::Invariant;

    fn settled(invariants: Vec<Invariant>, ran: Result<()>) -> VariantResult {
        let mut r = VariantResult::new("v");
        r.invariants = invariants;
        settle(&mut r, ran, Ok(()), Instant::now());
        r
    }

    #[test]
    fn a_variant_that_checked_nothing_says_why_and_never_passes() {
        let r = settled(vec![Invariant::not_applicable("a", "no ids")], Ok(()));
        assert!(r.checked_nothing() && r.broken().is_empty(), "{r:?}");
        assert!(r.warnings[0].contains("a: no ids"), "{:?}", r.warnings);
        assert!(settled(Vec::new(), Ok(())).checked_nothing());
        // One check that applied is enough; an error speaks for itself.
        let one = vec![
            Invariant::not_applicable("a", "x"),
            Invariant::check("b", true, ""),
        ];
        let one = settled(one, Ok(()));
        assert!(one.passed() && !one.checked_nothing());
        let failed = settled(Vec::new(), Err(anyhow::anyhow!("refused")));
        assert!(failed.broken().is_empty() && failed.error.as_deref() == Some("refused"));
        assert!(!failed.checked_nothing() && failed.warnings.is_empty());
    }
}
