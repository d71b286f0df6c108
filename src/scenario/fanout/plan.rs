//! `kind = "fanout"`: its streams, durables and rate beside the shared keys.

use serde::{Deserialize, Serialize};

use crate::profile::consumer::require_explicit_ack;
use crate::profile::keys::OneOrMany;
use crate::profile::search::{RateKey, rates};
use crate::profile::shared::{Offer, take};
use crate::profile::{
    CommonPlan, ConsumerPlan, MsgId, Problems, PublishPlan, SearchPlan, Section, SloOn,
};

/// The `fanout` scenario: S streams of F subjects each, one publisher
/// per stream at its share of the rate, and D durables per stream, each
/// filtering as `filters` says; one variant per (S, D) pair.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Total msg/s over all streams; each stream gets `rate / S`.
    pub rate: u64,
    /// Stream counts to run (each one or more variants).
    pub streams: Vec<usize>,
    /// Durables per stream to run.
    pub durables: Vec<usize>,
    /// Subjects per stream.
    pub subjects: usize,
    /// Durable k of a stream filters as `filters[k % len]`.
    pub filters: Vec<FilterShape>,
    /// Connections the durables share, round-robin.
    pub connections: usize,
    pub publish: PublishPlan,
    pub consumer: ConsumerPlan,
    /// `rate = "search"`: per (S, D) pair, the highest total rate that
    /// holds the SLO (`rate` is then the search's lowest).
    pub search: Option<SearchPlan>,
}

impl Plan {
    /// Every (streams, durables per stream) pair, streams outer.
    pub fn variants(&self) -> Vec<(usize, usize)> {
        self.streams
            .iter()
            .flat_map(|&s| self.durables.iter().map(move |&d| (s, d)))
            .collect()
    }
}

/// What a fanout durable filters on, among its stream's F subjects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FilterShape {
    /// Durable k: subject k mod F (`filter_subject`).
    One,
    /// Durable k: subjects k and k+1 mod F (`filter_subjects`).
    Two,
    /// No filter: every subject.
    All,
}

impl FilterShape {
    /// The subject indices durable `k` of a stream with `subjects` reads.
    pub fn subjects(self, k: usize, subjects: usize) -> Vec<usize> {
        match self {
            FilterShape::One => vec![k % subjects],
            FilterShape::Two => vec![k % subjects, (k + 1) % subjects],
            FilterShape::All => (0..subjects).collect(),
        }
    }

    /// The mean share of a stream's messages a durable reads when the
    /// durables cycle through `shapes`.
    pub fn mean_share(shapes: &[FilterShape], subjects: usize) -> f64 {
        let share = |s: &FilterShape| match s {
            FilterShape::One => 1.0 / subjects as f64,
            FilterShape::Two => (2.0 / subjects as f64).min(1.0),
            FilterShape::All => 1.0,
        };
        shapes.iter().map(share).sum::<f64>() / shapes.len().max(1) as f64
    }
}

/// One publisher per stream: fanout offers no `publishers`, and reads
/// `rate` itself (a number or "search").
const OFFER: Offer = Offer::TIMING.and(&[
    "arrival",
    "message_size",
    "msg_id",
    "pub_ack_window",
    "pub_ack_timeout",
    "consumer",
]);

/// Most streams, durables per stream, and consumers in all, one variant
/// may ask for: past these the limits are the account's, not jsbench's.
const MAX_STREAMS: usize = 1_000;
const MAX_DURABLES: usize = 1_000;
const MAX_CONSUMERS: usize = 10_000;
/// Deliveries one variant may plan: every consumer's histograms and
/// ledger live in this process until the variant ends.
const MAX_DELIVERIES: f64 = 50e6;

/// `rate`: total msg/s over all streams, or "search".
const RATE: RateKey = RateKey {
    key: "rate",
    list: false,
    max: false,
    most: 1_000_000,
    measured: &[SloOn::E2e, SloOn::PubAck],
    missing: "missing; the offered load in total msg/s, e.g. rate = 1000",
};

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let prefix = section.prefix;
    let (mut shared, mut k) = take(section.table, OFFER, prefix, problems)?;
    let common = shared.common("fanout", problems);
    let arrival = shared.arrival(problems);
    let streams = k.list("streams", vec![1], 1..=MAX_STREAMS, "");
    let durables = k.list("durables", vec![1], 1..=MAX_DURABLES, "");
    let fewest = durables.iter().copied().min().unwrap_or(1);
    let read = rates(
        &mut k,
        &RATE,
        Some(&arrival),
        &common,
        fewest,
        prefix,
        problems,
    );
    // A search's rates lie in its bracket: the checks below hold its
    // lowest to the per-stream floor and its highest to the delivery cap.
    let top = read.top();
    let rate = read.search.as_ref().map_or(top, |s| s.min);
    let subjects = k.within("subjects", 4, 1..=64, " subjects per stream");
    let filters = k.get::<OneOrMany<FilterShape>>("filters").map_or_else(
        || match subjects {
            2.. => vec![FilterShape::One, FilterShape::Two, FilterShape::All],
            _ => vec![FilterShape::All],
        },
        |f| f.0,
    );
    if filters.is_empty() {
        k.problem(
            "filters",
            "an empty list; e.g. filters = [\"one\", \"two\", \"all\"]",
        );
    }
    if filters.contains(&FilterShape::Two) && subjects < 2 {
        let why = "\"two\" filters on two subjects of the stream; it needs subjects = 2 or more";
        k.problem("filters", why);
    }
    let connections = k.within("connections", 4, 1..=1_000, " connections");
    let most_streams = streams.iter().copied().max().unwrap_or(1);
    let most_durables = durables.iter().copied().max().unwrap_or(1);
    if most_streams * most_durables > MAX_CONSUMERS {
        k.problem(
            "durables",
            format!(
                "{most_streams} streams x {most_durables} durables is {} consumers; at most {MAX_CONSUMERS} in one variant",
                most_streams * most_durables
            ),
        );
    }
    if rate > 0 && rate < most_streams as u64 {
        k.problem(
            "rate",
            format!(
                "{rate} msg/s over {most_streams} streams is under 1 msg/s per stream; the rate is the total over all streams"
            ),
        );
    }
    // Going below `search.min`, a search stops at 1 msg/s per stream.
    let mut search = read.search;
    if let Some(s) = &mut search {
        s.floor = s.floor.max(most_streams as u64).min(s.min);
    }
    let mut publish = shared.publish(MsgId::None, None, problems);
    publish.subjects = subjects;
    publish.arrival = arrival;
    let consumer = shared.consumer(false, problems);
    // Every durable's check counts acks against deliveries and asks the
    // server for nothing pending.
    require_explicit_ack(&consumer, "fanout", prefix, problems);
    if consumer.consumers != 1 {
        k.problem(
            "consumer.consumers",
            "a fanout durable has one client; connections sets how many connections the durables share",
        );
    }
    if consumer.filter.is_some() {
        k.problem(
            "consumer.filter_subject",
            "a fanout scenario sets each durable's filter from filters = [\"one\", \"two\", \"all\"]",
        );
    }
    let share = FilterShape::mean_share(&filters, subjects);
    let deliveries =
        top as f64 * (common.duration + common.warmup).as_secs_f64() * most_durables as f64 * share;
    if deliveries > MAX_DELIVERIES {
        k.problem(
            "rate",
            format!(
                "a variant would make about {deliveries:.0} deliveries; at most {MAX_DELIVERIES:.0} (lower the rate, the duration or the durables)"
            ),
        );
    }
    let plan = Plan {
        rate,
        streams,
        durables,
        subjects,
        filters,
        connections,
        publish,
        consumer,
        search,
    };
    k.finish(problems);
    Some((common, plan))
}

#[cfg(test)]
mod tests {
    use super::{FilterShape, Plan};
    use crate::scenario::{KindPlan, one_scenario};

    fn fanout(body: &str) -> Result<Plan, String> {
        match one_scenario("fanout", body)?.kind {
            KindPlan::Fanout(f) => Ok(f),
            _ => unreachable!(),
        }
    }

    #[test]
    fn counts_sweep_and_filters_default_to_every_shape() {
        let f = fanout("rate = 1000\nstreams = [10, 100]\ndurables = [1, 10]\n").unwrap();
        assert_eq!(f.streams, [10, 100]);
        assert_eq!(f.durables, [1, 10]);
        assert_eq!(f.subjects, 4);
        assert_eq!(
            f.filters,
            [FilterShape::One, FilterShape::Two, FilterShape::All]
        );
        assert_eq!(f.variants().len(), 4);
    }

    #[test]
    fn bad_counts_name_their_key() {
        for (body, key) in [
            ("rate = 1000\nstreams = 0\n", "scenario[0].streams"),
            ("rate = 1000\ndurables = [5, 5]\n", "scenario[0].durables"),
            ("rate = 10\nstreams = 100\n", "scenario[0].rate"),
            (
                "rate = 1000\nsubjects = 1\nfilters = \"two\"\n",
                "scenario[0].filters",
            ),
            (
                "rate = 1000\nstreams = 200\ndurables = 100\n",
                "scenario[0].durables",
            ),
            (
                "rate = 1000\n[scenario.consumer]\nconsumers = 2\n",
                "scenario[0].consumer.consumers",
            ),
            (
                "rate = 1000\n[scenario.consumer]\nfilter_subject = \"0\"\n",
                "scenario[0].consumer.filter_subject",
            ),
            ("rate = 1000\nfilters = \"some\"\n", "scenario[0]"),
        ] {
            let e = fanout(body).expect_err(body);
            assert!(e.contains(key), "{body}: {e}");
        }
    }
}
