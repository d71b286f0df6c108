//! `[scenario.behaviour]`: what consumers do with each delivery.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::consumer::{AckPolicy, ConsumerPlan};
use super::problems::Problems;
use crate::units::{Dur, parse_duration};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BehaviourSection {
    seed: Option<u64>,
    processing: Option<ProcessingSpec>,
    handlers: Option<usize>,
    /// Nak'ed on the first delivery, acked on the second.
    nak: Option<f64>,
    nak_delay: Option<NakDelaySpec>,
    /// Termed on the first delivery.
    term: Option<f64>,
    /// Ignored on the first delivery (the ack deadline expires), acked on the second.
    ignore: Option<f64>,
    in_progress: Option<InProgressSpec>,
    transient: Option<FailingSpec>,
    poison: Option<FailingSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NakDelaySpec {
    fraction: f64,
    delay: Dur,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InProgressSpec {
    fraction: f64,
    /// How long the handler holds the message before acking.
    hold: Dur,
    /// How often it tells the server the work is in progress.
    every: Dur,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailingSpec {
    fraction: f64,
    /// Transient only: deliveries that fail before the ack.
    failures: Option<u32>,
    /// How a delivery fails.
    fail: Option<Failure>,
    /// With `fail = "nak_delay"`.
    delay: Option<Dur>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Failure {
    Nak,
    NakDelay,
    Ignore,
}

/// `processing = "2ms"` or `{ distribution = "uniform", min = "1ms", max = "5ms" }`.
#[derive(Debug)]
enum ProcessingSpec {
    Fixed(Dur),
    Table(ProcessingTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessingTable {
    distribution: ProcessingKind,
    min: Option<Dur>,
    max: Option<Dur>,
    mean: Option<Dur>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ProcessingKind {
    Uniform,
    Exponential,
}

impl<'de> Deserialize<'de> for ProcessingSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ProcessingSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a duration, or a table such as { distribution = \"uniform\", min = \"1ms\", max = \"5ms\" }",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ProcessingSpec, E> {
                parse_duration(v)
                    .map(|d| ProcessingSpec::Fixed(Dur(d)))
                    .map_err(E::custom)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ProcessingSpec, A::Error> {
                ProcessingTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(ProcessingSpec::Table)
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl BehaviourSection {
    pub fn validate(
        &self,
        prefix: &str,
        consumer: &ConsumerPlan,
        problems: &mut Problems,
    ) -> BehaviourPlan {
        let p = format!("{prefix}.behaviour");
        let processing = self.processing_plan(&p, problems);
        let handlers = self.handlers.unwrap_or(1);
        problems.range(
            &format!("{p}.handlers"),
            handlers,
            1,
            10_000,
            " concurrent messages per consumer",
        );
        let mut classes = Classes {
            prefix: &p,
            list: Vec::new(),
        };
        self.first_delivery_classes(&mut classes, problems);
        if let Some(spec) = &self.transient {
            transient_class(spec, &mut classes, problems);
        }
        if let Some(spec) = &self.poison {
            poison_class(spec, consumer, &mut classes, problems);
        }
        let classes = classes.list;
        self.check_classes_together(&p, consumer, &classes, problems);
        BehaviourPlan {
            seed: self.seed.unwrap_or(1),
            classes,
            processing,
            handlers,
        }
    }

    /// The processing time each delivery takes: a distribution needs the
    /// bounds that define it, and a mean above a minute is refused.
    fn processing_plan(&self, p: &str, problems: &mut Problems) -> ProcessingPlan {
        let key = |k: &str| format!("{p}.{k}");
        let processing = match &self.processing {
            None => ProcessingPlan::Fixed(Duration::ZERO),
            Some(ProcessingSpec::Fixed(d)) => ProcessingPlan::Fixed(d.0),
            Some(ProcessingSpec::Table(t)) => match t.distribution {
                ProcessingKind::Uniform => {
                    if t.min.is_none() || t.max.is_none() || t.mean.is_some() {
                        problems.push(
                            key("processing"),
                            "a uniform processing time takes min and max",
                        );
                    }
                    let (min, max) = (t.min.unwrap_or_default().0, t.max.unwrap_or_default().0);
                    if min > max {
                        problems.push(key("processing.min"), "is larger than max");
                    }
                    ProcessingPlan::Uniform { min, max }
                }
                ProcessingKind::Exponential => {
                    if t.mean.is_none() || t.min.is_some() {
                        problems.push(
                            key("processing"),
                            "an exponential processing time takes a mean (and optionally a max)",
                        );
                    }
                    let mean = t.mean.unwrap_or_default().0;
                    ProcessingPlan::Exponential {
                        mean,
                        max: t.max.map(|d| d.0).unwrap_or(mean * 20),
                    }
                }
            },
        };
        if processing.mean() > Duration::from_secs(60) {
            problems.push(
                key("processing"),
                "processing times above a minute are not supported",
            );
        }
        processing
    }

    /// The classes whose outcome is settled by their first delivery's action
    /// (nak, nak_delay, term, ignore, in_progress), in the order the plan
    /// lists them.
    fn first_delivery_classes(&self, classes: &mut Classes, problems: &mut Problems) {
        if let Some(f) = self.nak {
            classes.add(problems, "nak", f, vec![Action::Nak], Action::Ack);
        }
        if let Some(n) = &self.nak_delay {
            classes.add(
                problems,
                "nak_delay",
                n.fraction,
                vec![Action::NakDelay(n.delay.0)],
                Action::Ack,
            );
        }
        if let Some(f) = self.term {
            classes.add(problems, "term", f, Vec::new(), Action::Term);
        }
        if let Some(f) = self.ignore {
            classes.add(problems, "ignore", f, vec![Action::Ignore], Action::Ack);
        }
        if let Some(ip) = &self.in_progress {
            classes.add(
                problems,
                "in_progress",
                ip.fraction,
                Vec::new(),
                Action::InProgressThenAck {
                    hold: ip.hold.0,
                    every: ip.every.0,
                },
            );
        }
    }

    /// Checks that need every class at once, or the consumer: the fractions
    /// share one whole, scripted actions need explicit acks, and in-progress
    /// signals must beat the ack deadline.
    fn check_classes_together(
        &self,
        p: &str,
        consumer: &ConsumerPlan,
        classes: &[MessageClass],
        problems: &mut Problems,
    ) {
        let total: f64 = classes.iter().map(|c| c.fraction).sum();
        if total > 1.0 + 1e-9 {
            problems.push(
                p,
                format!("the class fractions add up to {total:.3}; at most 1"),
            );
        }
        if !classes.is_empty() && consumer.ack != AckPolicy::Explicit {
            problems.push(
                p,
                "naks, terms and in-progress need consumer.ack = \"explicit\"",
            );
        }
        if let Some(ip) = &self.in_progress
            && ip.every.0 >= consumer.ack_deadline(1)
        {
            problems.push(
                format!("{p}.in_progress.every"),
                "must be shorter than the ack deadline, or the message is redelivered anyway",
            );
        }
    }
}

/// The message classes as they are read: each class's fraction is checked
/// where it is added, and a class with no share of the messages is left out.
struct Classes<'a> {
    /// `….behaviour`, which each class's field name extends.
    prefix: &'a str,
    list: Vec<MessageClass>,
}

impl Classes<'_> {
    /// One class: its fraction is checked, and it is kept if it has a share.
    fn add(
        &mut self,
        problems: &mut Problems,
        name: &str,
        fraction: f64,
        script: Vec<Action>,
        then: Action,
    ) {
        let path = format!("{}.{name}", self.prefix);
        problems.fraction(&path, fraction, 1.0, "messages");
        if fraction > 0.0 {
            self.list.push(MessageClass {
                name: name.to_string(),
                fraction,
                script,
                then,
            });
        }
    }
}

/// How a transient or poison delivery fails (`fail`, ignore by default); a
/// delayed nak needs its delay.
fn failure_action(prefix: &str, name: &str, spec: &FailingSpec, problems: &mut Problems) -> Action {
    match (spec.fail.unwrap_or(Failure::Ignore), spec.delay) {
        (Failure::Nak, _) => Action::Nak,
        (Failure::Ignore, _) => Action::Ignore,
        (Failure::NakDelay, Some(d)) => Action::NakDelay(d.0),
        (Failure::NakDelay, None) => {
            problems.push(
                format!("{prefix}.{name}.delay"),
                "fail = \"nak_delay\" needs a delay",
            );
            Action::NakDelay(Duration::ZERO)
        }
    }
}

/// Transient messages fail a set number of deliveries, then are acked.
fn transient_class(spec: &FailingSpec, classes: &mut Classes, problems: &mut Problems) {
    let p = classes.prefix;
    let fail = failure_action(p, "transient", spec, problems);
    let failures = spec.failures.unwrap_or(1);
    let path = format!("{p}.transient.failures");
    problems.range(&path, failures, 1, 1_000, " deliveries");
    classes.add(
        problems,
        "transient",
        spec.fraction,
        vec![fail; failures as usize],
        Action::Ack,
    );
}

/// Poison messages fail every delivery, so only the consumer's max_deliver
/// ends them.
fn poison_class(
    spec: &FailingSpec,
    consumer: &ConsumerPlan,
    classes: &mut Classes,
    problems: &mut Problems,
) {
    let p = classes.prefix;
    let fail = failure_action(p, "poison", spec, problems);
    if spec.failures.is_some() {
        problems.push(
            format!("{p}.poison.failures"),
            "poison messages fail on every delivery",
        );
    }
    if consumer.max_deliver < 1 {
        problems.push(
            format!("{p}.poison"),
            "poison messages never succeed: set consumer.max_deliver so they end",
        );
    }
    classes.add(problems, "poison", spec.fraction, Vec::new(), fail);
}

/// What consumers do with each delivery, decided by a seeded hash of the
/// stream sequence and the delivery count, so every message's fate is known
/// before the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BehaviourPlan {
    pub seed: u64,
    /// Checked in order; a message falls in the first class its hash hits.
    /// Messages in no class are acked on their first delivery.
    pub classes: Vec<MessageClass>,
    pub processing: ProcessingPlan,
    /// Messages a consumer client works on at once.
    pub handlers: usize,
}

impl BehaviourPlan {
    /// Every message acked at once: the clean baseline.
    pub fn all_ack() -> Self {
        BehaviourPlan {
            seed: 0,
            classes: Vec::new(),
            processing: ProcessingPlan::Fixed(Duration::ZERO),
            handlers: 1,
        }
    }
}

/// A class of messages: the fraction of the stream it covers and what the
/// consumer does on each delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageClass {
    pub name: String,
    pub fraction: f64,
    /// Actions for deliveries 1, 2, ...; after the list, `then` repeats.
    pub script: Vec<Action>,
    pub then: Action,
}

impl MessageClass {
    pub fn action(&self, delivery: u32) -> Action {
        self.script
            .get(delivery.max(1) as usize - 1)
            .copied()
            .unwrap_or(self.then)
    }
}

/// What a consumer does with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Ack,
    /// Redeliver now.
    Nak,
    /// Redeliver after the delay.
    NakDelay(#[serde(with = "duration_ms")] Duration),
    /// Never redeliver.
    Term,
    /// Do nothing; the ack deadline expires and the server redelivers.
    Ignore,
    /// Hold the message for `hold`, telling the server "in progress" every
    /// `every`, then ack.
    InProgressThenAck {
        #[serde(with = "duration_ms")]
        hold: Duration,
        #[serde(with = "duration_ms")]
        every: Duration,
    },
}

mod duration_ms {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1e3)
    }

    /// The inverse, for plans sent to workers: rounded to whole
    /// nanoseconds so a worker's plan is the coordinator's exactly.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<std::time::Duration, D::Error> {
        let ms = <f64 as serde::Deserialize>::deserialize(d)?;
        Ok(std::time::Duration::from_nanos((ms * 1e6).round() as u64))
    }
}

/// How long a consumer works on a message before its action.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum ProcessingPlan {
    Fixed(Duration),
    Uniform { min: Duration, max: Duration },
    Exponential { mean: Duration, max: Duration },
}

impl std::fmt::Display for ProcessingPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::units::format_duration as d;
        match *self {
            ProcessingPlan::Fixed(t) => write!(f, "{}", d(t)),
            ProcessingPlan::Uniform { min, max } => write!(f, "uniform {}..{}", d(min), d(max)),
            ProcessingPlan::Exponential { mean, max } => {
                write!(f, "exponential mean {}, max {}", d(mean), d(max))
            }
        }
    }
}

impl ProcessingPlan {
    pub fn is_zero(&self) -> bool {
        *self == ProcessingPlan::Fixed(Duration::ZERO)
    }

    pub fn mean(&self) -> Duration {
        match *self {
            ProcessingPlan::Fixed(t) => t,
            ProcessingPlan::Uniform { min, max } => (min + max) / 2,
            ProcessingPlan::Exponential { mean, .. } => mean,
        }
    }
}
