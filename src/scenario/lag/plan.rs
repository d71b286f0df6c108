//! `kind = "lag"`: its keys. `duration` is how long the origin is
//! published to after `warmup` (published alike, its lag not recorded); `drain_timeout` how long the copies then have to catch
//! up (and a work-queue origin to drain) before what is missing is called
//! lost.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::profile::shared::{Offer, take};
use crate::profile::{Bytes, CommonPlan, Dur, Keys, Problems, PublishPlan, Section, SizePlan};

/// The `lag` scenario: an origin stream published to at `rate`, copied by
/// the server into a mirror or a source, each copy read as it fills.
#[derive(Debug, Clone)]
pub struct Plan {
    pub variants: Vec<Mode>,
    /// Messages a second into the origin(s), all told.
    pub rate: u64,
    /// The origins' publishers (one per origin, set per variant), of one
    /// fixed `message_size`, each with `pub_ack_window` PubAcks awaited
    /// at once.
    pub publish: PublishPlan,
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

    /// The copy's leader struck on a local cluster: its routes cut at
    /// their relays, then healed (`cut`: the node runs on, alone; a cut
    /// shorter than an election keeps its leadership), or SIGKILL, then
    /// started again on its store (`kill`: the other replicas elect a
    /// leader that resumes the copying).
    pub fn struck(self) -> bool {
        matches!(self, Mode::Cut | Mode::Kill)
    }
}

const OFFER: Offer = Offer::TIMING.and(&["rate", "message_size", "pub_ack_window"]);

const DEFAULT_VARIANTS: [Mode; 3] = [Mode::Mirror, Mode::Source, Mode::WqSource];

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (mut shared, mut k) = take(section.table, OFFER, section.prefix, problems)?;
    let common = shared.common("lag", problems);
    let size = shared.fixed_size("lag", problems);
    let mut publish = shared.publish_or(1, 256, problems);
    publish.message_size = SizePlan::Fixed(size);
    let third = common.duration / 3;
    let after = |k: &mut Keys, key| k.get::<Dur>(key).map_or(third, |d| d.0);
    let plan = Plan {
        variants: k.choices("variants", DEFAULT_VARIANTS.to_vec()),
        rate: shared.rate_or(1_000, 200_000, problems),
        publish,
        origins: k.within("origins", 2, 1..=16, " streams"),
        pause_after: after(&mut k, "pause_after"),
        pause_for: after(&mut k, "pause_for"),
        cut_after: after(&mut k, "cut_after"),
        down_for: after(&mut k, "down_for"),
        leaf_bandwidth: k.get::<Bytes>("leaf_bandwidth").map(|b| b.0),
        leaf_delay: k.get::<Dur>("leaf_delay").map_or(Duration::ZERO, |d| d.0),
    };
    check(&plan, &common, &mut k);
    k.finish(problems);
    Some((common, plan))
}

fn check(plan: &Plan, common: &CommonPlan, k: &mut Keys) {
    let mut within = |name: &str, after: Duration, lasts: Duration| {
        if after + lasts > common.duration {
            k.problem(
                name,
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
        within("pause_for", plan.pause_after, plan.pause_for);
    }
    if plan.variants.iter().any(|m| m.struck()) {
        within("down_for", plan.cut_after, plan.down_for);
    }
    if let Some(b) = plan.leaf_bandwidth {
        // Below a kilobyte a second the link carries less than its own
        // pings and INFO, and nothing measurable.
        k.bound("leaf_bandwidth", b, 1_000..=10_000_000_000, " bytes/s");
    }
    let delay = plan.leaf_delay.as_millis() as u64;
    k.bound("leaf_delay", delay, 0..=60_000, " ms");
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
        assert_eq!((p.rate, p.origins), (1_000, 2));
        let publish = &p.publish;
        assert_eq!(publish.message_size, crate::profile::SizePlan::Fixed(128));
        assert_eq!(publish.pub_ack_window, 256);
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
            (
                "message_size = { distribution = \"uniform\", min = 64, max = 128 }",
                "one fixed size",
            ),
            ("pub_ack_window = 60000", "allowed 1..=50000"),
            ("origins = 40", "40 is out of range"),
            ("variants = [\"mirror\", \"mirror\"]", "lists a value twice"),
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
