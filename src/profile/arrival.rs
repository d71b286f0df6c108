//! `arrival`: when messages are due, as a profile writes it.
//!
//! ```toml
//! arrival = "steady"                                   # j / rate (the default)
//! arrival = "poisson"                                  # exponential gaps at the rate, seed 1
//! arrival = { pattern = "poisson", seed = 7 }
//! arrival = { pattern = "bursts", size = 50, spacing = "200us", pause = "300ms" }
//! arrival = { pattern = "gaps", gaps = ["500us", "2ms", "20ms"] }   # repeated in order
//! arrival = { pattern = "steps", steps = [{ rate = 1000, for = "5s" }, { rate = 5000, for = "5s" }] }
//! arrival = { pattern = "ramp", from = 1000, to = 20000 }   # linear over the schedule
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::problems::Problems;
use crate::units::Dur;

/// The written form, checked by [`ArrivalSpec::validate`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArrivalSpec(ArrivalTable);

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArrivalTable {
    pattern: Pattern,
    seed: Option<u64>,
    size: Option<u64>,
    spacing: Option<Dur>,
    pause: Option<Dur>,
    gaps: Option<Vec<Dur>>,
    steps: Option<Vec<StepSpec>>,
    from: Option<u64>,
    to: Option<u64>,
}

/// `{ rate = 1000, for = "5s" }`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepSpec {
    rate: u64,
    #[serde(rename = "for")]
    for_: Dur,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Pattern {
    #[default]
    Steady,
    Poisson,
    Bursts,
    Gaps,
    Steps,
    Ramp,
}

impl<'de> Deserialize<'de> for ArrivalSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Through a Value, so a plain name and a table both read and the
        // table keeps its own error messages.
        let value = toml::Value::deserialize(d)?;
        let table = match value {
            toml::Value::String(name) => {
                let pattern = Pattern::deserialize(toml::Value::String(name.clone())).map_err(|_| {
                    serde::de::Error::custom(format!(
                        "unknown arrival pattern {name:?}; expected \"steady\", \"poisson\", or a table (bursts, gaps, steps, ramp) \
                         such as {{ pattern = \"bursts\", size = 50, spacing = \"200us\", pause = \"300ms\" }}"
                    ))
                })?;
                ArrivalTable {
                    pattern,
                    ..Default::default()
                }
            }
            other => ArrivalTable::deserialize(other).map_err(serde::de::Error::custom)?,
        };
        Ok(ArrivalSpec(table))
    }
}

impl ArrivalSpec {
    pub fn validate(&self, path: &str, problems: &mut Problems) -> ArrivalPlan {
        let t = &self.0;
        let key = |k: &str| format!("{path}.{k}");
        // Each pattern's own keys, refused beside any other pattern.
        let owned = [
            ("seed", t.seed.is_some(), Pattern::Poisson, "poisson"),
            ("size", t.size.is_some(), Pattern::Bursts, "bursts"),
            ("spacing", t.spacing.is_some(), Pattern::Bursts, "bursts"),
            ("pause", t.pause.is_some(), Pattern::Bursts, "bursts"),
            ("gaps", t.gaps.is_some(), Pattern::Gaps, "gaps"),
            ("steps", t.steps.is_some(), Pattern::Steps, "steps"),
            ("from", t.from.is_some(), Pattern::Ramp, "ramp"),
            ("to", t.to.is_some(), Pattern::Ramp, "ramp"),
        ];
        for (k, set, owner, pattern) in owned {
            if set && t.pattern != owner {
                problems.push(key(k), format!("applies to pattern = \"{pattern}\" only"));
            }
        }
        let hour = 3_600.0;
        match t.pattern {
            Pattern::Steady => ArrivalPlan::Steady,
            Pattern::Poisson => ArrivalPlan::Poisson {
                seed: t.seed.unwrap_or(1),
            },
            Pattern::Bursts => {
                if t.size.is_none() || t.spacing.is_none() || t.pause.is_none() {
                    problems.push(
                        path,
                        "bursts need size, spacing and pause, e.g. \
                         { pattern = \"bursts\", size = 50, spacing = \"200us\", pause = \"300ms\" }",
                    );
                }
                let size = t.size.unwrap_or(1);
                problems.range(&key("size"), size, 1, 1_000_000, " messages per burst");
                let spacing = t.spacing.map_or(Duration::ZERO, |d| d.0);
                let pause = t.pause.map_or(Duration::ZERO, |d| d.0);
                problems.seconds(&key("spacing"), spacing, 0.0, hour);
                problems.range(&key("pause"), pause.as_secs_f64(), 0.0, hour, " seconds");
                if t.pause.is_some() && pause.is_zero() {
                    problems.push(key("pause"), "must be more than 0: a burst ends in a pause");
                }
                ArrivalPlan::Bursts {
                    size,
                    spacing,
                    pause,
                }
            }
            Pattern::Gaps => {
                let gaps: Vec<Duration> = t.gaps.iter().flatten().map(|d| d.0).collect();
                if gaps.is_empty() {
                    problems.push(
                        key("gaps"),
                        "missing or empty; the gaps between consecutive messages, repeated, \
                         e.g. gaps = [\"500us\", \"2ms\", \"20ms\"]",
                    );
                } else if gaps.len() > 10_000 {
                    problems.push(key("gaps"), format!("{} gaps; at most 10000", gaps.len()));
                }
                for (i, g) in gaps.iter().enumerate() {
                    problems.seconds(&format!("{path}.gaps[{i}]"), *g, 0.0, hour);
                }
                if !gaps.is_empty() && gaps.iter().all(Duration::is_zero) {
                    problems.push(key("gaps"), "at least one gap must be more than 0");
                }
                ArrivalPlan::Gaps(gaps)
            }
            Pattern::Steps => {
                let steps: Vec<(u64, Duration)> = t
                    .steps
                    .iter()
                    .flatten()
                    .map(|s| (s.rate, s.for_.0))
                    .collect();
                if steps.is_empty() {
                    problems.push(
                        key("steps"),
                        "missing or empty; e.g. steps = [{ rate = 1000, for = \"5s\" }, \
                         { rate = 5000, for = \"5s\" }]",
                    );
                }
                for (i, (rate, t)) in steps.iter().enumerate() {
                    let at = format!("{path}.steps[{i}]");
                    problems.range(&format!("{at}.rate"), *rate, 1, 10_000_000, " msg/s");
                    problems.seconds(&format!("{at}.for"), *t, 0.001, hour);
                }
                ArrivalPlan::Steps(steps)
            }
            Pattern::Ramp => {
                if t.from.is_none() || t.to.is_none() {
                    problems.push(
                        path,
                        "a ramp needs from and to (msg/s), e.g. { pattern = \"ramp\", from = 1000, to = 20000 }",
                    );
                }
                let (from, to) = (t.from.unwrap_or(1), t.to.unwrap_or(1));
                problems.range(&key("from"), from, 1, 10_000_000, " msg/s");
                problems.range(&key("to"), to, 1, 10_000_000, " msg/s");
                ArrivalPlan::Ramp { from, to }
            }
        }
    }
}

/// When messages are due. Irregular patterns give a replay a known history
/// to reproduce; random ones are drawn from a seeded generator, so every
/// run of a profile sends the same pattern.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ArrivalPlan {
    /// Message *j* at `j / rate`: the open-loop default.
    Steady,
    /// A Poisson process at the rate: independent exponential gaps with
    /// mean `1 / rate`, so every gap size occurs, sub-millisecond ones included.
    Poisson { seed: u64 },
    /// `size` messages `spacing` apart, then `pause` of silence, repeated.
    Bursts {
        size: u64,
        spacing: Duration,
        pause: Duration,
    },
    /// These gaps between consecutive messages, in order, repeated.
    Gaps(Vec<Duration>),
    /// Each (msg/s, for how long) in turn; the last rate holds after them.
    Steps(Vec<(u64, Duration)>),
    /// From one rate to another, linearly over the schedule's span.
    Ramp { from: u64, to: u64 },
}

impl ArrivalPlan {
    pub fn is_steady(&self) -> bool {
        *self == ArrivalPlan::Steady
    }

    /// The pattern's name, which names a variant of a shape that sets its
    /// own rate.
    pub fn name(&self) -> &'static str {
        match self {
            ArrivalPlan::Steady => "steady",
            ArrivalPlan::Poisson { .. } => "poisson",
            ArrivalPlan::Bursts { .. } => "bursts",
            ArrivalPlan::Gaps(_) => "gaps",
            ArrivalPlan::Steps(_) => "steps",
            ArrivalPlan::Ramp { .. } => "ramp",
        }
    }

    /// Whether the rate comes from the scenario (steady, Poisson) rather
    /// than from the pattern itself.
    pub fn uses_rate(&self) -> bool {
        matches!(self, ArrivalPlan::Steady | ArrivalPlan::Poisson { .. })
    }
}

impl std::fmt::Display for ArrivalPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::units::format_duration as d;
        match self {
            ArrivalPlan::Steady => write!(f, "steady"),
            ArrivalPlan::Poisson { seed } => write!(f, "poisson (seed {seed})"),
            ArrivalPlan::Bursts {
                size,
                spacing,
                pause,
            } => write!(
                f,
                "bursts of {size}, {} apart, {} pause",
                d(*spacing),
                d(*pause)
            ),
            ArrivalPlan::Gaps(gaps) => {
                let gaps: Vec<String> = gaps.iter().map(|g| d(*g)).collect();
                write!(f, "gaps {}", gaps.join(", "))
            }
            ArrivalPlan::Steps(steps) => {
                let steps: Vec<String> = steps
                    .iter()
                    .map(|(rate, t)| format!("{rate}/s for {}", d(*t)))
                    .collect();
                write!(f, "steps {}", steps.join(", "))
            }
            ArrivalPlan::Ramp { from, to } => write!(f, "ramp {from}/s to {to}/s"),
        }
    }
}
