//! `kind = "outage"`: its keys beside the shared paced load.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::profile::common::{OneOrMany, has_repeats};
use crate::profile::shared::{Offer, Paced, split};
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
    pub fn label(self) -> &'static str {
        match self {
            OutagePattern::Pause => "pause",
            OutagePattern::NakDelay => "nak_delay",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutageSection {
    outage: Option<WindowSection>,
    patterns: Option<OneOrMany<OutagePattern>>,
    retry: Option<Dur>,
}

/// `outage = { after = "3s", lasts = "3s" }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowSection {
    after: Dur,
    lasts: Dur,
}

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (table, prefix) = (section.table, section.prefix);
    let (mut shared, s) =
        split::<OutageSection>(table, Offer::PACED.less(&["behaviour"]), prefix, problems)?;
    let key = |k: &str| format!("{prefix}.{k}");
    let mut common = shared.common("outage", problems);
    let load = shared.paced(&common, Paced::of("outage", 500), problems);
    let consumer = &load.consumer;
    if !consumer.backoff.is_empty() || consumer.max_deliver != -1 {
        problems.push(
            key("consumer"),
            "an outage scenario redelivers until the dependency is back: drop backoff and \
             max_deliver, or a message would be given up on during the outage",
        );
    }
    let span = common.warmup + common.duration;
    let (after, lasts) = match s.outage {
        Some(w) => (w.after.0, w.lasts.0),
        None => {
            problems.push(
                key("outage"),
                "missing; when the dependency goes down and for how long, e.g. \
                 outage = { after = \"3s\", lasts = \"3s\" }",
            );
            (Duration::ZERO, Duration::from_secs(1))
        }
    };
    if after.is_zero() || after + lasts >= span {
        problems.push(
            key("outage.after"),
            format!(
                "the outage must begin after the start and end before publishing does \
                 (warmup + duration = {})",
                crate::profile::format_duration(span)
            ),
        );
    }
    problems.range(
        &key("outage.lasts"),
        lasts.as_secs_f64(),
        0.1,
        3_600.0,
        " seconds",
    );
    let retry = s.retry.map_or(Duration::from_millis(500), |d| d.0);
    problems.range(&key("retry"), retry.as_secs_f64(), 0.001, 600.0, " seconds");
    let patterns = s
        .patterns
        .map(|p| p.0)
        .unwrap_or_else(|| vec![OutagePattern::Pause, OutagePattern::NakDelay]);
    if patterns.is_empty() || has_repeats(&patterns) {
        problems.push(
            key("patterns"),
            "list \"pause\", \"nak_delay\" or both, each once",
        );
    }
    if !shared.drain_timeout_given() {
        // The backlog of the outage drains after it: room for it and for
        // the last redeliveries.
        common.drain_timeout = common
            .drain_timeout
            .max(lasts * 2 + consumer.ack_wait + retry + Duration::from_secs(10));
    }
    let plan = Plan {
        load,
        after,
        lasts,
        retry,
        patterns,
    };
    Some((common, plan))
}
