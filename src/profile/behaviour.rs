//! `[scenario.behaviour]`: what consumers do with each delivery.

use std::time::Duration;

use serde::Deserialize;

use super::{
    AckPolicy, Action, BehaviourPlan, ConsumerPlan, Dur, MessageClass, Problems, ProcessingPlan,
};

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
                super::parse_duration(v)
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
        let handlers = self.handlers.unwrap_or(1);
        problems.range(
            &key("handlers"),
            handlers,
            1,
            10_000,
            " concurrent messages per consumer",
        );

        let mut classes = Vec::new();
        let mut class = |problems: &mut Problems,
                         name: &str,
                         fraction: f64,
                         script: Vec<Action>,
                         then: Action| {
            problems.range(
                &format!("{p}.{name}"),
                fraction,
                0.0,
                1.0,
                " (a fraction of messages)",
            );
            if fraction > 0.0 {
                classes.push(MessageClass {
                    name: name.to_string(),
                    fraction,
                    script,
                    then,
                });
            }
        };
        if let Some(f) = self.nak {
            class(problems, "nak", f, vec![Action::Nak], Action::Ack);
        }
        if let Some(n) = &self.nak_delay {
            class(
                problems,
                "nak_delay",
                n.fraction,
                vec![Action::NakDelay(n.delay.0)],
                Action::Ack,
            );
        }
        if let Some(f) = self.term {
            class(problems, "term", f, Vec::new(), Action::Term);
        }
        if let Some(f) = self.ignore {
            class(problems, "ignore", f, vec![Action::Ignore], Action::Ack);
        }
        if let Some(ip) = &self.in_progress {
            class(
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
        let mut failing = Vec::new();
        if let Some(t) = &self.transient {
            failing.push(("transient", t));
        }
        if let Some(t) = &self.poison {
            failing.push(("poison", t));
        }
        for (name, spec) in failing {
            let fail = match (spec.fail.unwrap_or(Failure::Ignore), spec.delay) {
                (Failure::Nak, _) => Action::Nak,
                (Failure::Ignore, _) => Action::Ignore,
                (Failure::NakDelay, Some(d)) => Action::NakDelay(d.0),
                (Failure::NakDelay, None) => {
                    problems.push(
                        format!("{p}.{name}.delay"),
                        "fail = \"nak_delay\" needs a delay",
                    );
                    Action::NakDelay(Duration::ZERO)
                }
            };
            if name == "transient" {
                let failures = spec.failures.unwrap_or(1);
                problems.range(
                    &format!("{p}.transient.failures"),
                    failures,
                    1,
                    1_000,
                    " deliveries",
                );
                class(
                    problems,
                    name,
                    spec.fraction,
                    vec![fail; failures as usize],
                    Action::Ack,
                );
            } else {
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
                class(problems, name, spec.fraction, Vec::new(), fail);
            }
        }
        let total: f64 = classes.iter().map(|c| c.fraction).sum();
        if total > 1.0 + 1e-9 {
            problems.push(
                &p,
                format!("the class fractions add up to {total:.3}; at most 1"),
            );
        }
        if !classes.is_empty() && consumer.ack != AckPolicy::Explicit {
            problems.push(
                &p,
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
        BehaviourPlan {
            seed: self.seed.unwrap_or(1),
            classes,
            processing,
            handlers,
        }
    }
}
