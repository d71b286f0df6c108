//! `kind = "scheduled"`: its keys. `duration` is the window the `at`
//! schedules are due over and the time the repeating ones are watched.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::profile::common::{OneOrMany, has_repeats};
use crate::profile::shared::{Offer, needs_file_storage, split};
use crate::profile::{CommonPlan, Dur, Problems, Section};

/// The `scheduled` scenario: schedules published into a stream that
/// allows them, their firings watched; one variant per shape.
#[derive(Debug, Clone)]
pub struct Plan {
    pub variants: Vec<Shape>,
    /// Schedules of the `at`, `every`, `cron` and `restart` variants.
    pub schedules: u64,
    /// Schedules of the `burst` variant, all due at one instant.
    pub burst: u64,
    /// From the start of publishing to the first due time (and, in
    /// `restart`, to the kill): room for the schedules to be stored.
    pub lead: Duration,
    /// The `every` variant's interval.
    pub every: Duration,
    /// The `cron` variant's step in seconds: `*/step * * * * *`.
    pub cron_step: u32,
    /// How long after its due time a firing may arrive and still count;
    /// later, it is lost.
    pub grace: Duration,
    /// `restart`: how long the server stays down, schedules due meanwhile.
    pub down_for: Duration,
}

/// One variant: the kind of schedule it publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// `@at` schedules, due evenly over `duration`.
    At,
    /// `@every <every>`, watched for `duration`.
    Every,
    /// `*/cron_step * * * * *`, watched for `duration`.
    Cron,
    /// `burst` `@at` schedules due at one instant.
    Burst,
    /// `@at` schedules due while the server is down for `down_for`.
    Restart,
}

impl Shape {
    pub fn label(self) -> &'static str {
        match self {
            Shape::At => "at",
            Shape::Every => "every",
            Shape::Cron => "cron",
            Shape::Burst => "burst",
            Shape::Restart => "restart",
        }
    }

    pub fn repeats(self) -> bool {
        matches!(self, Shape::Every | Shape::Cron)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduledSection {
    variants: Option<OneOrMany<Shape>>,
    schedules: Option<u64>,
    burst: Option<u64>,
    lead: Option<Dur>,
    every: Option<Dur>,
    cron_step: Option<u32>,
    grace: Option<Dur>,
    down_for: Option<Dur>,
}

const OFFER: Offer = Offer::TIMING.less(&["warmup", "drain_timeout"]);

const DEFAULT_VARIANTS: [Shape; 4] = [Shape::At, Shape::Every, Shape::Cron, Shape::Burst];

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let restart = section
        .table
        .get("variants")
        .is_some_and(|v| v.to_string().contains("\"restart\""));
    if restart {
        needs_file_storage(
            &section,
            problems,
            "the restart variant kills the server: its schedules need storage = \"file\" \
             to survive",
        );
    }
    let (table, prefix) = (section.table, section.prefix);
    let (mut shared, s) = split::<ScheduledSection>(table, OFFER, prefix, problems)?;
    let key = |k: &str| format!("{prefix}.{k}");
    let common = shared.common("scheduled", problems);
    let variants = s.variants.map_or(DEFAULT_VARIANTS.to_vec(), |v| v.0);
    if variants.is_empty() || has_repeats(&variants) {
        problems.push(
            key("variants"),
            "list some of \"at\", \"every\", \"cron\", \"burst\", \"restart\", each once",
        );
    }
    let plan = Plan {
        variants,
        schedules: s.schedules.unwrap_or(100),
        burst: s.burst.unwrap_or(1_000),
        lead: s.lead.map_or(Duration::from_secs(1), |d| d.0),
        every: s.every.map_or(Duration::from_secs(1), |d| d.0),
        cron_step: s.cron_step.unwrap_or(1),
        grace: s.grace.map_or(Duration::from_secs(2), |d| d.0),
        down_for: s.down_for.map_or(Duration::from_secs(3), |d| d.0),
    };
    check(&plan, prefix, problems);
    Some((common, plan))
}

fn check(plan: &Plan, prefix: &str, problems: &mut Problems) {
    let key = |k: &str| format!("{prefix}.{k}");
    problems.range(&key("schedules"), plan.schedules, 1, 100_000, " schedules");
    problems.range(&key("burst"), plan.burst, 1, 100_000, " schedules");
    let secs = |d: Duration| d.as_secs_f64();
    problems.range(&key("lead"), secs(plan.lead), 0.2, 600.0, " seconds");
    problems.range(&key("grace"), secs(plan.grace), 0.5, 600.0, " seconds");
    problems.range(
        &key("down_for"),
        secs(plan.down_for),
        1.0,
        600.0,
        " seconds",
    );
    // The server refuses `@every` under a second (10189).
    problems.range(&key("every"), secs(plan.every), 1.0, 3_600.0, " seconds");
    if !plan.every.subsec_nanos().is_multiple_of(1_000_000) {
        problems.push(
            key("every"),
            "whole milliseconds only: it is sent as \"@every <n>ms\"",
        );
    }
    if plan.cron_step == 0 || !60u32.is_multiple_of(plan.cron_step) || plan.cron_step == 60 {
        problems.push(
            key("cron_step"),
            format!(
                "{} does not step a minute's seconds evenly; allowed 1, 2, 3, 4, 5, 6, 10, 12, \
                 15, 20, 30",
                plan.cron_step
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::scenario::{KindPlan, one_scenario};

    fn plan(body: &str) -> Result<super::Plan, String> {
        one_scenario("scheduled", body).map(|s| match s.kind {
            KindPlan::Scheduled(p) => p,
            other => panic!("not scheduled: {other:?}"),
        })
    }

    #[test]
    fn defaults_run_four_variants() {
        let p = plan("").unwrap();
        assert_eq!(p.variants.len(), 4);
        assert_eq!((p.schedules, p.burst, p.cron_step), (100, 1_000, 1));
    }

    #[test]
    fn bad_keys_are_named_with_their_values() {
        for (body, needle) in [
            ("every = \"500ms\"", "0.5 is out of range"),
            ("cron_step = 7", "7 does not step"),
            ("schedules = 0", "0 is out of range"),
            ("variants = [\"at\", \"at\"]", "list some"),
            ("variants = [\"soon\"]", "soon"),
            ("warmup = \"1s\"", "unknown field `warmup`"),
            ("every = \"1500500us\"", "whole milliseconds"),
        ] {
            let e = plan(body).unwrap_err();
            let key = body.split(' ').next().unwrap();
            assert!(e.contains(needle) && e.contains(key), "{body}: {e}");
        }
    }

    #[test]
    fn restart_needs_file_storage() {
        let memory = "[server]\nstorage = \"memory\"\n";
        let text = format!(
            "name = \"t\"\n{memory}[[scenario]]\nkind = \"scheduled\"\nduration = \"1s\"\n\
             variants = [\"restart\"]\n"
        );
        let e = crate::scenario::parse("test", &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("restart variant kills the server"), "{e}");
    }
}
