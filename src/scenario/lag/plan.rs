//! `kind = "lag"`: its keys. `duration` is how long the origin is
//! published to after `warmup` (published alike, its lag not recorded); `drain_timeout` how long the copies then have to catch
//! up (and a work-queue origin to drain) before what is missing is called
//! lost.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::profile::common::{OneOrMany, has_repeats};
use crate::profile::shared::{Offer, split};
use crate::profile::{Bytes, CommonPlan, Dur, Problems, Section};

/// The `lag` scenario: an origin stream published to at `rate`, copied by
/// the server into a mirror or a source, each copy read as it fills.
#[derive(Debug, Clone)]
pub struct Plan {
    pub variants: Vec<Mode>,
    /// Messages a second into the origin(s), all told.
    pub rate: u64,
    pub message_size: usize,
    /// Publishes awaiting their PubAck at once, per origin (each origin
    /// has a publisher of its own).
    pub pub_ack_window: usize,
    /// Origins the `source` variant's aggregate sources from.
    pub origins: usize,
    /// `wq_paused`: when the sourcing durable is paused, from the first
    /// publish, and for how long.
    pub pause_after: Duration,
    pub pause_for: Duration,
    /// `cut`, `kill`: when the copy's node loses its routes (or is
    /// killed), and for how long.
    pub cut_after: Duration,
    pub down_for: Duration,
    /// `leaf`: the link to the leafnode slowed to this many bytes a
    /// second each way (`None`: as fast as loopback) ...
    pub leaf_bandwidth: Option<u64>,
    /// ... and delayed this much each way.
    pub leaf_delay: Duration,
}

/// One variant: how the copy is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// A mirror of one limits origin.
    Mirror,
    /// An aggregate sourcing from `origins` limits origins.
    Source,
    /// A source of a work-queue origin through a durable jsbench creates
    /// with `ack_policy = flow_control` (ADR-60, nats-server 2.14).
    WqSource,
    /// `wq_source` with its durable paused for `pause_for`.
    WqPaused,
    /// A mirror on a local cluster whose node's routes are cut for
    /// `down_for` (the node leading the mirror).
    Cut,
    /// A mirror on a local cluster whose leader is killed (SIGKILL) and
    /// started again on its store `down_for` later.
    Kill,
    /// A mirror on a leafnode server (`run --leafnode`) of an origin on
    /// its hub, across JetStream domains, through a link slowed to
    /// `leaf_bandwidth` and `leaf_delay`.
    Leaf,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Mirror => "mirror",
            Mode::Source => "source",
            Mode::WqSource => "wq_source",
            Mode::WqPaused => "wq_paused",
            Mode::Cut => "cut",
            Mode::Kill => "kill",
            Mode::Leaf => "leaf",
        }
    }

    /// A work-queue origin, copied through a flow-control durable.
    pub fn work_queue(self) -> bool {
        matches!(self, Mode::WqSource | Mode::WqPaused)
    }

    /// A mirror keeps the origin's sequence numbers, and so its order.
    pub fn mirror(self) -> bool {
        matches!(self, Mode::Mirror | Mode::Cut | Mode::Kill | Mode::Leaf)
    }

    /// The copy's leader struck on a local cluster.
    pub fn outage(self) -> Option<Outage> {
        match self {
            Mode::Cut => Some(Outage::Cut),
            Mode::Kill => Some(Outage::Kill),
            _ => None,
        }
    }
}

/// What befalls the copy's leader in a `cut` or `kill` variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// Its routes cut at their relays, then healed: the node runs on,
    /// alone; a cut shorter than an election keeps its leadership.
    Cut,
    /// SIGKILL, then started again on its store: the other replicas
    /// elect a leader that resumes the copying.
    Kill,
}

impl Outage {
    pub fn label(self) -> &'static str {
        match self {
            Outage::Cut => "cut",
            Outage::Kill => "kill",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LagSection {
    variants: Option<OneOrMany<Mode>>,
    rate: Option<u64>,
    message_size: Option<usize>,
    pub_ack_window: Option<usize>,
    origins: Option<usize>,
    pause_after: Option<Dur>,
    pause_for: Option<Dur>,
    cut_after: Option<Dur>,
    down_for: Option<Dur>,
    leaf_bandwidth: Option<Bytes>,
    leaf_delay: Option<Dur>,
}

const OFFER: Offer = Offer::TIMING;

const DEFAULT_VARIANTS: [Mode; 3] = [Mode::Mirror, Mode::Source, Mode::WqSource];

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (table, prefix) = (section.table, section.prefix);
    let (mut shared, s) = split::<LagSection>(table, OFFER, prefix, problems)?;
    let key = |k: &str| format!("{prefix}.{k}");
    let common = shared.common("lag", problems);
    let variants = s.variants.map_or(DEFAULT_VARIANTS.to_vec(), |v| v.0);
    if variants.is_empty() || has_repeats(&variants) {
        problems.push(
            key("variants"),
            "list some of \"mirror\", \"source\", \"wq_source\", \"wq_paused\", \"cut\", \
             \"kill\", \"leaf\", each once",
        );
    }
    let third = common.duration / 3;
    let plan = Plan {
        variants,
        rate: s.rate.unwrap_or(1_000),
        message_size: s.message_size.unwrap_or(128),
        pub_ack_window: s.pub_ack_window.unwrap_or(256),
        origins: s.origins.unwrap_or(2),
        pause_after: s.pause_after.map_or(third, |d| d.0),
        pause_for: s.pause_for.map_or(third, |d| d.0),
        cut_after: s.cut_after.map_or(third, |d| d.0),
        down_for: s.down_for.map_or(third, |d| d.0),
        leaf_bandwidth: s.leaf_bandwidth.map(|b| b.0),
        leaf_delay: s.leaf_delay.map_or(Duration::ZERO, |d| d.0),
    };
    check(&plan, &common, prefix, problems);
    Some((common, plan))
}

fn check(plan: &Plan, common: &CommonPlan, prefix: &str, problems: &mut Problems) {
    let key = |k: &str| format!("{prefix}.{k}");
    problems.range(&key("rate"), plan.rate, 1, 200_000, " msg/s");
    // The publisher's stamp (send time, message number) fills the
    // payload's first bytes.
    problems.range(
        &key("message_size"),
        plan.message_size,
        crate::record::stamp::STAMP_LEN,
        1 << 20,
        " bytes",
    );
    problems.range(&key("pub_ack_window"), plan.pub_ack_window, 1, 65_536, "");
    problems.range(&key("origins"), plan.origins, 1, 16, " streams");
    let within = |name: &str, after: Duration, lasts: Duration, problems: &mut Problems| {
        if after + lasts > common.duration {
            problems.push(
                key(name),
                format!(
                    "{} plus {} ends after the {} of publishing: the copy must catch up \
                     while the origin is still published to, or nothing shows",
                    crate::profile::format_duration(after),
                    crate::profile::format_duration(lasts),
                    crate::profile::format_duration(common.duration),
                ),
            );
        }
    };
    if plan.variants.contains(&Mode::WqPaused) {
        within("pause_for", plan.pause_after, plan.pause_for, problems);
    }
    if plan.variants.iter().any(|m| m.outage().is_some()) {
        within("down_for", plan.cut_after, plan.down_for, problems);
    }
    if let Some(b) = plan.leaf_bandwidth {
        // Below a kilobyte a second the link carries less than its own
        // pings and INFO, and nothing measurable.
        problems.range(&key("leaf_bandwidth"), b, 1_000, 10_000_000_000, " bytes/s");
    }
    problems.range(
        &key("leaf_delay"),
        plan.leaf_delay.as_millis() as u64,
        0,
        60_000,
        " ms",
    );
}

#[cfg(test)]
mod tests {
    use super::Mode;
    use crate::scenario::{KindPlan, one_scenario};

    fn plan(body: &str) -> Result<super::Plan, String> {
        one_scenario("lag", body).map(|s| match s.kind {
            KindPlan::Lag(p) => p,
            other => panic!("not lag: {other:?}"),
        })
    }

    #[test]
    fn defaults_copy_three_ways() {
        let p = plan("").unwrap();
        assert_eq!(p.variants, [Mode::Mirror, Mode::Source, Mode::WqSource]);
        assert_eq!((p.rate, p.message_size, p.origins), (1_000, 128, 2));
        let p =
            plan("variants = [\"leaf\"]\nleaf_bandwidth = \"1MB\"\nleaf_delay = \"30ms\"").unwrap();
        assert_eq!(p.variants, [Mode::Leaf]);
        assert_eq!(p.leaf_bandwidth, Some(1_000_000));
        assert_eq!(p.leaf_delay, std::time::Duration::from_millis(30));
    }

    #[test]
    fn bad_keys_are_named_with_their_values() {
        for (body, needle) in [
            ("rate = 0", "0 is out of range"),
            ("message_size = 16", "16 is out of range"),
            ("origins = 40", "40 is out of range"),
            ("variants = [\"mirror\", \"mirror\"]", "list some"),
            ("variants = [\"hub\"]", "hub"),
            ("leaf_bandwidth = 10", "10 is out of range"),
            ("leaf_bandwidth = \"fast\"", "not a size"),
            ("leaf_delay = \"2m\"", "120000 is out of range"),
            ("warmup = \"2h\"", "7200 is out of range"),
            (
                "variants = [\"wq_paused\"]\npause_for = \"2s\"",
                "ends after the 1s of publishing",
            ),
            (
                "variants = [\"cut\"]\ndown_for = \"2s\"",
                "ends after the 1s of publishing",
            ),
            (
                "variants = [\"kill\"]\ndown_for = \"2s\"",
                "ends after the 1s of publishing",
            ),
        ] {
            let e = plan(body).unwrap_err();
            let key = body.rsplit('\n').next().unwrap().split(' ').next().unwrap();
            assert!(e.contains(needle) && e.contains(key), "{body}: {e}");
        }
    }
}
