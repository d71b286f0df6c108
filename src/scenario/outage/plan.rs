//! `kind = "outage"`: its keys beside the shared paced load.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::profile::shared::{Offer, Paced, outside_load, take, variants};
use crate::profile::{CommonPlan, Dur, PacedLoad, Problems, Section};

/// The `outage` scenario: load at a fixed rate while the consumer's
/// downstream dependency goes down for `lasts` from `after`; one variant
/// per pattern of riding it out.
#[derive(Debug, Clone)]
pub struct Plan {
    pub load: PacedLoad,
    /// From the start of the schedule.
    pub after: Duration,
    pub lasts: Duration,
    /// The nak delay of the nak-with-delay pattern.
    pub retry: Duration,
    pub patterns: Vec<OutagePattern>,
}

/// How a consumer rides out a dependency outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutagePattern {
    /// Pause the durable until the dependency is back; deliveries already
    /// in hand are left unanswered (their ack deadlines run on).
    Pause,
    /// Keep consuming and nak every delivery with a delay of `retry`.
    NakDelay,
}

impl OutagePattern {
    /// As the profile spells it, in declaration order.
    pub fn label(self) -> &'static str {
        ["pause", "nak_delay"][self as usize]
    }
}

/// `outage = { after = "3s", lasts = "3s" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowSection {
    after: Dur,
    lasts: Dur,
}

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let offer = Offer::PACED.less(&["behaviour"]);
    let (mut shared, mut k) = take(section.table, offer, section.prefix, problems)?;
    let mut common = shared.common("outage", problems);
    let load = shared.paced(&common, Paced::of("outage", 500), problems);
    let consumer = &load.consumer;
    if !consumer.backoff.is_empty() || consumer.max_deliver != -1 {
        k.problem(
            "consumer",
            "an outage scenario redelivers until the dependency is back: drop backoff and \
             max_deliver, or a message would be given up on during the outage",
        );
    }
    let given = k.given("outage");
    let (after, lasts) = match k.get::<WindowSection>("outage") {
        Some(WindowSection { after, lasts }) => {
            if let Some(why) = outside_load(after.0, lasts.0, &common) {
                k.problem("outage.after", why);
            }
            (after.0, lasts.0)
        }
        None => {
            if !given {
                k.problem(
                    "outage",
                    "missing; when the dependency goes down and for how long, e.g. \
                     outage = { after = \"3s\", lasts = \"3s\" }",
                );
            }
            (Duration::ZERO, Duration::from_secs(1))
        }
    };
    k.bound(
        "outage.lasts",
        lasts.as_secs_f64(),
        0.1..=3_600.0,
        " seconds",
    );
    let retry = k.duration(
        "retry",
        Duration::from_millis(500),
        Duration::from_millis(1)..=Duration::from_secs(600),
    );
    let patterns = variants(
        &mut k,
        "patterns",
        vec![OutagePattern::Pause, OutagePattern::NakDelay],
        "\"pause\", \"nak_delay\" or both",
    );
    // The backlog of the outage drains after it: room for it and for the
    // last redeliveries.
    let drain = lasts * 2 + consumer.ack_wait + retry + Duration::from_secs(10);
    shared.drain_at_least(&mut common, drain);
    let plan = Plan {
        load,
        after,
        lasts,
        retry,
        patterns,
    };
    k.finish(problems);
    Some((common, plan))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_labelled_as_the_profile_spells_them() {
        for pattern in [OutagePattern::Pause, OutagePattern::NakDelay] {
            assert_eq!(serde_json::to_value(pattern).unwrap(), pattern.label());
        }
    }
}
