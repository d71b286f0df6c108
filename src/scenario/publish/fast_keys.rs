//! `fast_batch`, `fast_acks`, `fast_flow`, `fast_gap`: the keys of the
//! fast-ingest batch variants, and their checks.

use crate::load::fast_batch::{GapMode, MAX_OUTSTANDING};
use crate::profile::keys::{OneOrMany, has_repeats};
use crate::profile::{Problems, PublishPlan, SizePlan};
use crate::record::stamp::STAMP_LEN;

/// The flow jsbench asks for unless told: the most a lone fast publisher
/// is granted by nats-server 2.15 (pinned in tests/server_behaviour.rs).
pub const DEFAULT_FLOW: u16 = 500;

/// The fast-ingest variants a publish scenario adds: one per size,
/// outstanding-ack setting, flow and gap mode, for every rate and msg_id
/// mode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FastPlan {
    pub sizes: Vec<u64>,
    pub outstanding: Vec<u16>,
    /// The flows asked for: with one publisher the server grants each
    /// (up to 500), so this sweeps the flow the server asks for.
    pub flows: Vec<u16>,
    pub gaps: Vec<GapMode>,
}

impl FastPlan {
    pub fn variants(&self) -> usize {
        self.sizes.len() * self.outstanding.len() * self.flows.len() * self.gaps.len()
    }
}

/// The keys as the profile gave them.
pub struct FastKeys {
    pub fast_batch: Option<OneOrMany<u64>>,
    pub fast_acks: Option<OneOrMany<u64>>,
    pub fast_flow: Option<OneOrMany<u64>>,
    pub fast_gap: Option<OneOrMany<GapMode>>,
}

/// Reads and checks the keys; settings without `fast_batch` are refused
/// rather than silently ignored.
pub fn read(
    keys: FastKeys,
    publish: &PublishPlan,
    searching: bool,
    prefix: &str,
    problems: &mut Problems,
) -> FastPlan {
    let sizes = keys.fast_batch.map(|b| b.0).unwrap_or_default();
    if sizes.is_empty() {
        let given = [
            ("fast_acks", keys.fast_acks.is_some()),
            ("fast_flow", keys.fast_flow.is_some()),
            ("fast_gap", keys.fast_gap.is_some()),
        ];
        for (key, _) in given.iter().filter(|g| g.1) {
            problems.push(
                format!("{prefix}.{key}"),
                "applies to fast-ingest batch variants only; list their sizes in fast_batch",
            );
        }
        return FastPlan::default();
    }
    let key = format!("{prefix}.fast_batch");
    let outstanding = keys.fast_acks.map(|a| a.0).unwrap_or_else(|| vec![2]);
    let flows = keys
        .fast_flow
        .map(|f| f.0)
        .unwrap_or_else(|| vec![u64::from(DEFAULT_FLOW)]);
    let most = u64::from(MAX_OUTSTANDING);
    for (name, values, min, max, unit) in [
        ("fast_batch", &sizes, 2, 1_000_000_000, " messages"),
        ("fast_acks", &outstanding, 1, most, " acks outstanding"),
        ("fast_flow", &flows, 1, 65_535, " messages per ack"),
    ] {
        for (i, &v) in values.iter().enumerate() {
            problems.range(&format!("{prefix}.{name}[{i}]"), v, min, max, unit);
        }
    }
    let gaps = keys
        .fast_gap
        .map(|g| g.0)
        .unwrap_or_else(|| vec![GapMode::Fail]);
    let lists = [
        ("fast_batch", has_repeats(&sizes)),
        ("fast_acks", has_repeats(&outstanding)),
        ("fast_flow", has_repeats(&flows)),
        ("fast_gap", has_repeats(&gaps)),
    ];
    for (name, _) in lists.iter().filter(|l| l.1) {
        problems.push(format!("{prefix}.{name}"), "lists a value twice");
    }
    if [outstanding.is_empty(), flows.is_empty(), gaps.is_empty()].contains(&true) {
        problems.push(
            &key,
            "fast_acks, fast_flow and fast_gap need at least one value each",
        );
    }
    // The fast publisher sends one fixed size holding its stamp, injects
    // no retries and runs at listed rates.
    check_batch_publish("fast batches", publish, searching, &key, problems);
    if let SizePlan::Fixed(size) = publish.message_size
        && size < STAMP_LEN
    {
        problems.push(
            &key,
            format!("fast batch messages carry a {STAMP_LEN}-byte stamp; message_size {size} is too small"),
        );
    }
    FastPlan {
        sizes,
        outstanding: outstanding.iter().map(|&a| a.min(65_535) as u16).collect(),
        flows: flows.iter().map(|&f| f.clamp(1, 65_535) as u16).collect(),
        gaps,
    }
}

/// What the publishers of batches (`what`: atomic or fast ones) cannot
/// do: inject retries, run in a rate search, send sizes that vary.
pub(super) fn check_batch_publish(
    what: &str,
    publish: &PublishPlan,
    searching: bool,
    key: &str,
    problems: &mut Problems,
) {
    if publish.duplicates > 0.0 || publish.late_duplicates > 0.0 {
        problems.push(
            key,
            format!("{what} inject no duplicates; set duplicates and late_duplicates to 0"),
        );
    }
    if searching {
        problems.push(
            key,
            format!("a rate search does not run {what}; list rates"),
        );
    }
    if !matches!(publish.message_size, SizePlan::Fixed(_)) {
        problems.push(
            key,
            format!("{what} send one fixed size: use a fixed message_size"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{KindPlan, one_scenario};

    fn fast(body: &str) -> Result<FastPlan, String> {
        one_scenario("publish", &format!("rates = [1000]\n{body}")).map(|p| match p.kind {
            KindPlan::Publish(plan) => plan.fast,
            _ => unreachable!("a publish section"),
        })
    }

    #[test]
    fn sizes_acks_flow_and_gap_are_read_with_defaults() {
        let plan = fast("fast_batch = [500, 10000]").unwrap();
        assert_eq!(plan.sizes, vec![500, 10_000]);
        assert_eq!(plan.outstanding, vec![2]);
        assert_eq!(plan.flows, vec![DEFAULT_FLOW]);
        assert_eq!(plan.gaps, vec![GapMode::Fail]);
        let plan = fast(
            "fast_batch = 100\nfast_acks = [1, 3]\nfast_flow = [50, 500]\nfast_gap = [\"fail\", \"ok\"]",
        )
        .unwrap();
        assert_eq!(plan.variants(), 8);
        assert_eq!(fast("").unwrap(), FastPlan::default());
    }

    #[test]
    fn out_of_range_values_are_named_by_key() {
        let e = fast("fast_batch = [1]").unwrap_err();
        assert!(
            e.contains("fast_batch[0]") && e.contains("2..=1000000000"),
            "{e}"
        );
        let e = fast("fast_batch = 10\nfast_acks = [2, 4]").unwrap_err();
        assert!(e.contains("fast_acks[1]") && e.contains("1..=3"), "{e}");
        let e = fast("fast_batch = 10\nfast_flow = 70000").unwrap_err();
        assert!(e.contains("fast_flow[0]") && e.contains("1..=65535"), "{e}");
        let e = fast("fast_batch = 10\nfast_gap = \"maybe\"").unwrap_err();
        assert!(e.contains("fast_gap") && e.contains("maybe"), "{e}");
    }

    #[test]
    fn settings_without_sizes_and_unfit_publish_keys_are_refused() {
        let e = fast("fast_acks = 1").unwrap_err();
        assert!(e.contains("fast_acks") && e.contains("fast_batch"), "{e}");
        let e = fast("fast_batch = 10\nmessage_size = 16").unwrap_err();
        assert!(e.contains("fast_batch") && e.contains("stamp"), "{e}");
        let e = fast("fast_batch = [10, 10]").unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }
}
