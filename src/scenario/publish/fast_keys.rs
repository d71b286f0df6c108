//! `fast_batch`, `fast_acks`, `fast_flow`, `fast_gap`: the keys of the
//! fast-ingest batch variants, and their checks.

use crate::load::fast_batch::{GapMode, MAX_OUTSTANDING};
use crate::profile::{Keys, Problems, PublishPlan, SizePlan};
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

/// Reads and checks the keys; settings without `fast_batch` are refused
/// rather than silently ignored.
pub fn read(
    k: &mut Keys,
    publish: &PublishPlan,
    searching: bool,
    problems: &mut Problems,
) -> FastPlan {
    let sizes = k.list("fast_batch", Vec::new(), 2..=1_000_000_000, " messages");
    if sizes.is_empty() {
        for key in ["fast_acks", "fast_flow", "fast_gap"] {
            if k.get::<toml::Value>(key).is_some() {
                let why =
                    "applies to fast-ingest batch variants only; list their sizes in fast_batch";
                k.problem(key, why);
            }
        }
        return FastPlan::default();
    }
    let key = k.path("fast_batch");
    let most = u64::from(MAX_OUTSTANDING);
    let outstanding = k.list("fast_acks", vec![2], 1..=most, " acks outstanding");
    let flow = vec![u64::from(DEFAULT_FLOW)];
    let flows = k.list("fast_flow", flow, 1..=65_535, " messages per ack");
    let gaps = k.choices("fast_gap", vec![GapMode::Fail]);
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
