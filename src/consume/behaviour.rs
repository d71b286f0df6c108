//! Behaviour plans at run time: what a consumer does with delivery *n* of
//! stream sequence *s*, and, from the same rules, what must then happen:
//! the message's final fate and the delay before each redelivery. The
//! consumer and the verification read the same functions, so "expected" is
//! never a second implementation of "planned".

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::profile::{Action, BehaviourPlan, ConsumerPlan, MessageClass, ProcessingPlan};
use crate::record::random;

/// How a message's story ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Acked,
    Termed,
    /// MaxDeliver reached without an ack or term.
    Exhausted,
}

/// The planned end of a message: how and after how many deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fate {
    pub outcome: Outcome,
    pub deliveries: u32,
}

/// Why a message is delivered again, which sets the delay to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// A plain nak: redelivered at once (BackOff does not apply).
    Nak,
    /// A nak with a delay: redelivered after that delay.
    NakDelay,
    /// No response: redelivered when AckWait expires.
    AckWait,
    /// No response on a consumer with BackOff: BackOff[n-1], last repeating.
    Backoff,
}

impl Cause {
    pub const ALL: [Cause; 4] = [Cause::Nak, Cause::NakDelay, Cause::AckWait, Cause::Backoff];

    pub fn name(&self) -> &'static str {
        match self {
            Cause::Nak => "nak",
            Cause::NakDelay => "nak_delay",
            Cause::AckWait => "ack_wait",
            Cause::Backoff => "backoff",
        }
    }
}

impl BehaviourPlan {
    /// The class a stream sequence falls in; `None` means acked at once.
    pub fn class_of(&self, seq: u64) -> Option<&MessageClass> {
        if self.classes.is_empty() {
            return None;
        }
        let u = random::unit(self.seed, seq, 0xC1A55);
        let mut edge = 0.0;
        for class in &self.classes {
            edge += class.fraction;
            if u < edge {
                return Some(class);
            }
        }
        None
    }

    /// What to do with delivery `delivery` (1-based) of `seq`.
    #[inline]
    pub fn action(&self, seq: u64, delivery: u32) -> Action {
        match self.class_of(seq) {
            Some(class) => class.action(delivery),
            None => Action::Ack,
        }
    }

    /// How `seq` must end on a consumer allowing `max_deliver` deliveries
    /// (-1: unlimited; a message that never succeeds then has no fate and
    /// validation refuses such plans).
    pub fn fate(&self, seq: u64, max_deliver: i64) -> Fate {
        let limit = if max_deliver > 0 {
            max_deliver as u32
        } else {
            10_000
        };
        for n in 1..=limit {
            let outcome = match self.action(seq, n) {
                Action::Ack | Action::InProgressThenAck { .. } => Outcome::Acked,
                Action::Term => Outcome::Termed,
                Action::Nak | Action::NakDelay(_) | Action::Ignore => continue,
            };
            return Fate {
                outcome,
                deliveries: n,
            };
        }
        Fate {
            outcome: Outcome::Exhausted,
            deliveries: limit,
        }
    }

    /// Work time for delivery `delivery` of `seq`, seeded like the plan.
    pub fn processing_time(&self, seq: u64, delivery: u32) -> Duration {
        match self.processing {
            ProcessingPlan::Fixed(t) => t,
            ProcessingPlan::Uniform { min, max } => {
                let u = random::unit(self.seed ^ 0x7157, seq, u64::from(delivery));
                min + (max - min).mul_f64(u)
            }
            ProcessingPlan::Exponential { mean, max } => {
                let u = random::unit(self.seed ^ 0x7158, seq, u64::from(delivery));
                mean.mul_f64(-(1.0 - u).ln()).min(max)
            }
        }
    }
}

/// The redelivery that follows `action` on delivery `delivery`: its cause
/// and the delay the configuration promises, counted from the nak (for
/// naks) or from the delivery (for an expired ack deadline).
pub fn expected_redelivery(
    action: Action,
    delivery: u32,
    consumer: &ConsumerPlan,
) -> Option<(Cause, Duration)> {
    match action {
        Action::Nak => Some((Cause::Nak, Duration::ZERO)),
        Action::NakDelay(d) => Some((Cause::NakDelay, d)),
        Action::Ignore if consumer.backoff.is_empty() => Some((Cause::AckWait, consumer.ack_wait)),
        Action::Ignore => Some((Cause::Backoff, consumer.ack_deadline(delivery))),
        Action::Ack | Action::Term | Action::InProgressThenAck { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, fraction: f64, script: Vec<Action>, then: Action) -> MessageClass {
        MessageClass {
            name: name.into(),
            fraction,
            script,
            then,
        }
    }

    fn plan() -> BehaviourPlan {
        BehaviourPlan {
            seed: 3,
            classes: vec![
                class("term", 0.1, vec![Action::Term], Action::Term),
                class(
                    "transient",
                    0.2,
                    vec![Action::Nak, Action::Ignore],
                    Action::Ack,
                ),
                class("poison", 0.1, vec![], Action::Ignore),
            ],
            processing: ProcessingPlan::Uniform {
                min: Duration::from_millis(1),
                max: Duration::from_millis(3),
            },
            handlers: 1,
        }
    }

    /// The class name of `seq` ("ack" for the unclassed rest).
    fn class_name(p: &BehaviourPlan, seq: u64) -> &str {
        p.class_of(seq).map_or("ack", |c| c.name.as_str())
    }

    #[test]
    fn classes_cover_their_fractions_deterministically() {
        let p = plan();
        let n = 100_000u64;
        let count =
            |name: &str| (1..=n).filter(|&s| class_name(&p, s) == name).count() as f64 / n as f64;
        assert!((count("term") - 0.1).abs() < 0.01);
        assert!((count("transient") - 0.2).abs() < 0.01);
        assert!((count("poison") - 0.1).abs() < 0.01);
        assert!((count("ack") - 0.6).abs() < 0.01);
        assert_eq!(class_name(&p, 77), class_name(&p.clone(), 77));
    }

    #[test]
    fn fates_follow_the_scripts_and_max_deliver() {
        let p = plan();
        let seq_of = |name: &str| (1..).find(|&s| class_name(&p, s) == name).unwrap();
        assert_eq!(
            p.fate(seq_of("ack"), 5),
            Fate {
                outcome: Outcome::Acked,
                deliveries: 1
            }
        );
        assert_eq!(
            p.fate(seq_of("term"), 5),
            Fate {
                outcome: Outcome::Termed,
                deliveries: 1
            }
        );
        assert_eq!(
            p.fate(seq_of("transient"), 5),
            Fate {
                outcome: Outcome::Acked,
                deliveries: 3
            }
        );
        assert_eq!(
            p.fate(seq_of("transient"), 2),
            Fate {
                outcome: Outcome::Exhausted,
                deliveries: 2
            }
        );
        assert_eq!(
            p.fate(seq_of("poison"), 4),
            Fate {
                outcome: Outcome::Exhausted,
                deliveries: 4
            }
        );
        let t = seq_of("transient");
        assert_eq!(p.action(t, 1), Action::Nak);
        assert_eq!(p.action(t, 2), Action::Ignore);
        assert_eq!(p.action(t, 3), Action::Ack);
    }

    #[test]
    fn expected_delays_follow_the_server_rules() {
        let mut c = ConsumerPlan::simple();
        c.ack_wait = Duration::from_secs(2);
        assert_eq!(
            expected_redelivery(Action::Nak, 1, &c),
            Some((Cause::Nak, Duration::ZERO))
        );
        assert_eq!(
            expected_redelivery(Action::Ignore, 3, &c),
            Some((Cause::AckWait, Duration::from_secs(2)))
        );
        c.backoff = vec![Duration::from_millis(100), Duration::from_millis(500)];
        // BackOff[n-1], the last entry repeating; a plain nak ignores BackOff.
        assert_eq!(
            expected_redelivery(Action::Ignore, 1, &c),
            Some((Cause::Backoff, Duration::from_millis(100)))
        );
        assert_eq!(
            expected_redelivery(Action::Ignore, 5, &c),
            Some((Cause::Backoff, Duration::from_millis(500)))
        );
        assert_eq!(
            expected_redelivery(Action::Nak, 2, &c),
            Some((Cause::Nak, Duration::ZERO))
        );
        assert_eq!(expected_redelivery(Action::Ack, 1, &c), None);
    }

    #[test]
    fn processing_times_stay_in_their_range() {
        let p = plan();
        for s in 1..1000 {
            let t = p.processing_time(s, 1);
            assert!(
                t >= Duration::from_millis(1) && t <= Duration::from_millis(3),
                "{t:?}"
            );
        }
    }
}
