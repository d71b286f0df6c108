//! `kind = "scheduled"`: its keys. `duration` is the window the `at`
//! schedules are due over and the time the repeating ones are watched.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::profile::shared::{Offer, needs_file_storage, take};
use crate::profile::{CommonPlan, Problems, Section};

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
    /// As the profile spells it, in declaration order.
    pub fn label(self) -> &'static str {
        ["at", "every", "cron", "burst", "restart"][self as usize]
    }

    pub fn repeats(self) -> bool {
        matches!(self, Shape::Every | Shape::Cron)
    }
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
    let (mut shared, mut k) = take(section.table, OFFER, section.prefix, problems)?;
    let common = shared.common("scheduled", problems);
    let (ms, secs) = (Duration::from_millis, Duration::from_secs);
    let plan = Plan {
        variants: k.choices("variants", DEFAULT_VARIANTS.to_vec()),
        schedules: k.within("schedules", 100, 1..=100_000, " schedules"),
        burst: k.within("burst", 1_000, 1..=100_000, " schedules"),
        lead: k.duration("lead", secs(1), ms(200)..=secs(600)),
        // The server refuses `@every` under a second (10189).
        every: k.duration("every", secs(1), secs(1)..=secs(3_600)),
        cron_step: k.or("cron_step", 1),
        grace: k.duration("grace", secs(2), ms(500)..=secs(600)),
        down_for: k.duration("down_for", secs(3), secs(1)..=secs(600)),
    };
    if !plan.every.subsec_nanos().is_multiple_of(1_000_000) {
        k.problem(
            "every",
            "whole milliseconds only: it is sent as \"@every <n>ms\"",
        );
    }
    let step = plan.cron_step;
    if step == 0 || !60u32.is_multiple_of(step) || step == 60 {
        k.problem(
            "cron_step",
            format!(
                "{step} does not step a minute's seconds evenly; allowed 1, 2, 3, 4, 5, 6, 10, \
                 12, 15, 20, 30"
            ),
        );
    }
    k.finish(problems);
    Some((common, plan))
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
    fn every_shape_is_labelled_as_the_profile_spells_it() {
        use super::Shape;
        for shape in [
            Shape::At,
            Shape::Every,
            Shape::Cron,
            Shape::Burst,
            Shape::Restart,
        ] {
            assert_eq!(serde_json::to_value(shape).unwrap(), shape.label());
        }
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
            ("variants = [\"at\", \"at\"]", "lists a value twice"),
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
