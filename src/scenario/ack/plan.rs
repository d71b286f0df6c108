//! `kind = "ack"`: keys and checks.

use serde::Serialize;

use crate::profile::shared::{Offer, take};
use crate::profile::{AckPolicy, CommonPlan, ConsumerKind, ConsumerPlan, Keys, Problems, Section};

/// How a variant of the `ack` scenario acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckMode {
    None,
    /// Ack every `ack_every`-th message with AckAll.
    All,
    Explicit,
    /// Explicit, each ack confirmed by the server.
    Double,
}

impl AckMode {
    /// As the profile spells it, in declaration order.
    pub fn label(&self) -> &'static str {
        ["none", "all", "explicit", "double"][*self as usize]
    }
}

/// The `ack` scenario: one pre-filled stream, read by a fresh durable per
/// ack mode and read mode, side by side.
#[derive(Debug, Clone)]
pub struct Plan {
    pub messages: u64,
    pub message_size: usize,
    pub modes: Vec<AckMode>,
    pub reads: Vec<ConsumerKind>,
    /// `kind`, `ack` and `double_ack` are set per variant.
    pub consumer: ConsumerPlan,
    /// Consume loops run before and after the explicit-ack consume
    /// variant, on the same stream, to tell what jsbench's consumer costs
    /// or gains over the code a user would write.
    pub reference: Vec<ConsumeReference>,
}

impl Plan {
    pub fn variant_count(&self) -> usize {
        passes(&self.modes).len() * self.reads.len() + 2 * self.reference.len()
    }
}

/// Which pass over the modes a run belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The modes in the profile's order.
    Listed,
    /// The modes again, in reverse.
    Reversed,
}

/// The runs of one read mode: the modes in the profile's order, then in
/// reverse, as the references bracket the explicit-ack consume. Run once
/// each, the first mode always met the coldest caches and every mode a
/// drift of the machine at its own point; mirrored, each mode's two runs
/// centre on the same point, so the mean of its two rates carries neither.
/// A single mode has nothing to be compared with and runs once.
pub fn passes(modes: &[AckMode]) -> Vec<(AckMode, Pass)> {
    let listed = modes.iter().map(|&m| (m, Pass::Listed));
    if modes.len() < 2 {
        return listed.collect();
    }
    listed
        .chain(modes.iter().rev().map(|&m| (m, Pass::Reversed)))
        .collect()
}

/// A consume loop read beside jsbench's consumer: the yardstick that says
/// whether jsbench's recording, not the server, sets its consume rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsumeReference {
    /// `consumer.messages()` with its defaults and `ack().await` per
    /// message: what a user of async-nats writes first.
    Idiomatic,
    /// Pull requests and acks as core NATS publishes, no client library
    /// machinery: the client's ceiling for an explicit-ack consume.
    Raw,
}

impl ConsumeReference {
    /// As the profile spells it, in declaration order.
    pub fn label(self) -> &'static str {
        ["idiomatic", "raw"][self as usize]
    }
}

/// Counted, not timed: each variant consumes `messages`.
const OFFER: Offer = Offer::TIMING
    .less(&["duration", "warmup"])
    .and(&["consumer", "message_size"]);

const DEFAULT_MODES: [AckMode; 4] = [
    AckMode::None,
    AckMode::All,
    AckMode::Explicit,
    AckMode::Double,
];

/// How long a variant may take to consume what it filled, by default.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (mut shared, mut k) = take(section.table, OFFER, section.prefix, problems)?;
    let common = shared.counted("ack", DRAIN_TIMEOUT, problems);
    let plan = Plan {
        messages: k.required(
            "messages",
            1..=100_000_000,
            " messages",
            "how many messages each variant consumes, e.g. messages = 100000",
        ),
        message_size: shared.fixed_size("ack", problems),
        modes: k.choices("acks", DEFAULT_MODES.to_vec()),
        reads: k.choices("reads", vec![ConsumerKind::Pull]),
        consumer: shared.consumer(true, problems),
        reference: k.choices("reference", Vec::new()),
    };
    let consumer = &plan.consumer;
    if consumer.ack != AckPolicy::Explicit || consumer.double_ack {
        k.problem(
            "consumer",
            "the ack scenario sets ack and double_ack per variant from `acks`",
        );
    }
    if !consumer.backoff.is_empty() || consumer.max_deliver != -1 {
        k.problem(
            "consumer",
            "the ack scenario does not redeliver: drop backoff and max_deliver",
        );
    }
    check_reference(&plan, &mut k);
    k.finish(problems);
    Some((common, plan))
}

/// References run beside one variant, the explicit-ack consume, with one
/// client: anything else would have nothing to pair them with.
fn check_reference(plan: &Plan, k: &mut Keys) {
    if plan.reference.is_empty() {
        return;
    }
    if !plan.modes.contains(&AckMode::Explicit) || !plan.reads.contains(&ConsumerKind::Pull) {
        k.problem(
            "reference",
            "consume references run before and after the explicit-ack consume variant: \
             add \"explicit\" to acks and \"pull\" to reads",
        );
    }
    if plan.consumer.consumers != 1 {
        k.problem(
            "reference",
            "consume references read with one client: set consumer.consumers = 1 \
             or drop reference",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_references_are_labelled_as_the_profile_spells_them() {
        for mode in DEFAULT_MODES {
            assert_eq!(serde_json::to_value(mode).unwrap(), mode.label());
        }
        for reference in [ConsumeReference::Idiomatic, ConsumeReference::Raw] {
            assert_eq!(serde_json::to_value(reference).unwrap(), reference.label());
        }
    }
}
