//! `kind = "publish"`: keys and checks.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::profile::common::{
    OneOrMany, PublishKeys, RateSpec, SizeSpec, has_repeats, publish_plan,
};
use crate::profile::search::SearchSection;
use crate::profile::shared::{Offer, split};
use crate::profile::{
    CommonPlan, Dur, MsgId, Problems, PublishMode, PublishPlan, Rate, RatePer, Reference,
    SearchPlan, Section, SloOn, late_retry_margin,
};
use crate::scenario::search::SEARCH_PROBES;

/// The `publish` scenario: publishers only, every variant of rate and
/// Nats-Msg-Id mode, duplicates injected on demand.
#[derive(Debug, Clone)]
pub struct Plan {
    pub rates: Vec<Rate>,
    pub rate_per: RatePer,
    /// One variant each, back to back, so the price of dedup is measured in one run.
    pub msg_ids: Vec<MsgId>,
    /// `msg_id` is replaced per variant.
    pub publish: PublishPlan,
    pub reference: Vec<Reference>,
    /// Read the stream back after each variant and check every stored message.
    pub verify_stored: bool,
    /// `rates = "search"`: per msg_id mode, the highest rate whose PubAck
    /// latency holds the SLO.
    pub search: Option<SearchPlan>,
    /// `batch = [...]`: atomic batch sizes, each a variant per rate and
    /// msg_id mode beside the windowed one.
    pub batches: Vec<usize>,
    /// `fast_batch = [...]` and its settings: fast-ingest batch variants
    /// beside the windowed and atomic ones.
    pub fast: super::fast_keys::FastPlan,
}

impl Plan {
    pub fn variant_count(&self) -> usize {
        if self.search.is_some() {
            return SEARCH_PROBES * self.msg_ids.len();
        }
        let own = self.rates.len() * self.msg_ids.len();
        // References run at the "max" rate only.
        let max_rates = self.rates.iter().filter(|r| **r == Rate::Max).count();
        let per_id = |r: Reference, runs: usize| {
            if self.reference.contains(&r) {
                max_rates * self.msg_ids.len() * runs
            } else {
                0
            }
        };
        // The raw reference runs before and after each of jsbench's.
        let minimal = per_id(Reference::Idiomatic, 1) + per_id(Reference::Raw, 2);
        let core = if self.reference.contains(&Reference::Core) {
            max_rates
        } else {
            0
        };
        let batches = self.rates.len() * self.msg_ids.len() * self.batches.len();
        let fast = self.rates.len() * self.msg_ids.len() * self.fast.variants();
        own + minimal + core + batches + fast
    }
}

/// Every publish key is the publish scenario's own: it offers them all,
/// lists included (`msg_id = ["none", "unique"]`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishSection {
    rates: Option<toml::Value>,
    slo: Option<toml::Table>,
    search: Option<SearchSection>,
    rate_per: Option<RatePer>,
    publishers: Option<usize>,
    mode: Option<PublishMode>,
    pub_ack_window: Option<usize>,
    pub_ack_timeout: Option<Dur>,
    message_size: Option<SizeSpec>,
    subjects: Option<usize>,
    headers: Option<BTreeMap<String, String>>,
    msg_id: Option<OneOrMany<MsgId>>,
    duplicates: Option<f64>,
    late_duplicates: Option<f64>,
    duplicate_window: Option<Dur>,
    wake_every: Option<String>,
    reference: Option<OneOrMany<Reference>>,
    verify_stored: Option<bool>,
    batch: Option<OneOrMany<usize>>,
    fast_batch: Option<OneOrMany<u64>>,
    fast_acks: Option<OneOrMany<u64>>,
    fast_flow: Option<OneOrMany<u64>>,
    fast_gap: Option<OneOrMany<crate::load::fast_batch::GapMode>>,
    client: Option<crate::profile::PublishClient>,
}

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (table, prefix) = (section.table, section.prefix);
    let (mut shared, s) = split::<PublishSection>(table, Offer::TIMING, prefix, problems)?;
    let common = shared.common("publish", problems);
    let searching = crate::profile::search::asks_search(s.rates.as_ref());
    let search = crate::profile::search::read(
        searching,
        s.slo,
        s.search,
        "rates",
        &[SloOn::PubAck],
        prefix,
        problems,
    );
    crate::profile::search::check_samples(search.as_ref(), common.duration, 1, prefix, problems);
    let rates = rates(s.rates, searching, prefix, problems);
    let msg_ids = s.msg_id.map(|m| m.0).unwrap_or_else(|| vec![MsgId::None]);
    if msg_ids.is_empty() {
        problems.push(
            format!("{prefix}.msg_id"),
            "lists no mode; use \"none\", \"unique\" or both",
        );
    }
    for list_has_twice in [has_repeats(&rates), has_repeats(&msg_ids)] {
        if list_has_twice {
            problems.push(
                format!("{prefix}.rates"),
                "a rate or msg_id mode is listed twice",
            );
        }
    }
    let publish = publish_plan(
        PublishKeys {
            publishers: s.publishers,
            mode: s.mode,
            pub_ack_window: s.pub_ack_window,
            pub_ack_timeout: s.pub_ack_timeout,
            message_size: s.message_size,
            subjects: s.subjects,
            headers: s.headers,
            msg_id: msg_ids.first().copied().unwrap_or(MsgId::None),
            duplicates: s.duplicates,
            late_duplicates: s.late_duplicates,
            duplicate_window: s.duplicate_window,
            wake_every: s.wake_every,
            client: s.client,
        },
        prefix,
        problems,
    );
    check_retries(&publish, &msg_ids, &common, prefix, problems);
    let reference = s.reference.map(|r| r.0).unwrap_or_default();
    check_references(&reference, &publish, (&rates, searching), prefix, problems);
    let rate_per = s.rate_per.unwrap_or(RatePer::Total);
    check_ledger_size(
        &rates,
        search.as_ref(),
        rate_per,
        &publish,
        &common,
        prefix,
        problems,
    );
    let batches = s.batch.map(|b| b.0).unwrap_or_default();
    check_batches(&batches, &publish, searching, prefix, problems);
    let fast_keys = super::fast_keys::FastKeys {
        fast_batch: s.fast_batch,
        fast_acks: s.fast_acks,
        fast_flow: s.fast_flow,
        fast_gap: s.fast_gap,
    };
    let fast = super::fast_keys::read(fast_keys, &publish, searching, prefix, problems);
    if !batches.is_empty() || !fast.sizes.is_empty() {
        crate::profile::common::refuse_direct(
            &publish,
            "atomic and fast-ingest batches are sent through async-nats",
            prefix,
            problems,
        );
    }
    let plan = Plan {
        batches,
        fast,
        rates,
        rate_per,
        msg_ids,
        publish,
        reference,
        verify_stored: s.verify_stored.unwrap_or(true),
        search,
    };
    Some((common, plan))
}

/// `rates = [...]`: msg/s or "max" each; empty when the scenario searches.
fn rates(
    given: Option<toml::Value>,
    searching: bool,
    prefix: &str,
    problems: &mut Problems,
) -> Vec<Rate> {
    // `wrong`: a problem already says what is wrong with the list.
    let (rates, wrong): (Vec<Rate>, bool) = match given {
        Some(toml::Value::Array(items)) => {
            let given = items.len();
            let rates: Vec<Rate> = items
                .into_iter()
                .enumerate()
                .filter_map(|(i, v)| match RateSpec::deserialize(v) {
                    Ok(r) => Some(r.0),
                    Err(e) => {
                        problems.push(format!("{prefix}.rates[{i}]"), e.to_string());
                        None
                    }
                })
                .collect();
            let wrong = rates.len() < given;
            (rates, wrong)
        }
        Some(other) if !searching => {
            problems.push(
                format!("{prefix}.rates"),
                format!("{other} is neither a list of msg/s or \"max\" nor \"search\""),
            );
            (Vec::new(), true)
        }
        _ => (Vec::new(), false),
    };
    if rates.is_empty() && !searching && !wrong {
        problems.push(
            format!("{prefix}.rates"),
            "missing or empty; list msg/s or \"max\" per variant, e.g. rates = [10000, \"max\"]",
        );
    }
    for (i, rate) in rates.iter().enumerate() {
        if let Rate::PerSecond(r) = *rate {
            problems.range(&format!("{prefix}.rates[{i}]"), r, 1, 10_000_000, " msg/s");
        }
    }
    rates
}

/// Retries find their original by its Nats-Msg-Id, and late ones wait
/// out the duplicate window inside the run.
fn check_retries(
    publish: &PublishPlan,
    msg_ids: &[MsgId],
    common: &CommonPlan,
    prefix: &str,
    problems: &mut Problems,
) {
    let retries = publish.duplicates > 0.0 || publish.late_duplicates > 0.0;
    if retries && msg_ids != [MsgId::Unique] {
        problems.push(
            format!("{prefix}.msg_id"),
            "duplicates and late_duplicates retry messages by their Nats-Msg-Id: set msg_id = \"unique\"",
        );
    }
    if publish.late_duplicates > 0.0 {
        let wait = publish.duplicate_window + late_retry_margin(publish.duplicate_window);
        if common.duration + common.warmup <= wait * 2 {
            problems.push(
                format!("{prefix}.late_duplicates"),
                format!(
                    "late retries wait out the duplicate window ({} plus a margin); make warmup + duration \
                     longer than twice that or the window shorter",
                    crate::profile::format_duration(publish.duplicate_window)
                ),
            );
        }
    }
}

/// Atomic batches hold 1 to 1000 messages (the server's limit), of one
/// fixed size, and the batch publisher injects no retries.
fn check_batches(
    batches: &[usize],
    publish: &PublishPlan,
    searching: bool,
    prefix: &str,
    problems: &mut Problems,
) {
    if batches.is_empty() {
        return;
    }
    let key = format!("{prefix}.batch");
    let most = crate::load::batch::MAX_ATOMIC_BATCH;
    for (i, &size) in batches.iter().enumerate() {
        problems.range(&format!("{key}[{i}]"), size, 1, most, " messages");
    }
    if has_repeats(batches) {
        problems.push(&key, "lists a batch size twice");
    }
    if publish.duplicates > 0.0 || publish.late_duplicates > 0.0 {
        problems.push(
            &key,
            "atomic batches inject no duplicates; set duplicates and late_duplicates to 0",
        );
    }
    if searching {
        problems.push(
            &key,
            "a rate search does not run atomic batches; list rates",
        );
    }
    if !matches!(publish.message_size, crate::profile::SizePlan::Fixed(_)) {
        problems.push(
            &key,
            "atomic batches send one fixed size: use a fixed message_size",
        );
    }
}

/// Reference publishers run at rate "max", one fixed size, no retries.
fn check_references(
    reference: &[Reference],
    publish: &PublishPlan,
    (rates, searching): (&[Rate], bool),
    prefix: &str,
    problems: &mut Problems,
) {
    let key = format!("{prefix}.reference");
    let retries = publish.duplicates > 0.0 || publish.late_duplicates > 0.0;
    if !reference.is_empty() && retries {
        problems.push(
            &key,
            "reference publishers do not inject duplicates; compare without duplicates",
        );
    }
    if !reference.is_empty() && searching {
        problems.push(
            &key,
            "reference publishers run at rate \"max\", which a search does not try",
        );
    }
    if has_repeats(reference) {
        problems.push(&key, "lists a reference twice");
    }
    if !reference.is_empty() && !searching && !rates.contains(&Rate::Max) {
        problems.push(
            &key,
            "reference publishers run at rate \"max\" only: add \"max\" to rates",
        );
    }
    if !reference.is_empty() && !matches!(publish.message_size, crate::profile::SizePlan::Fixed(_))
    {
        problems.push(
            &key,
            "reference publishers send one fixed size: use a fixed message_size",
        );
    }
}

/// The ledger holds at most 500 million messages a variant; a search
/// tries rates up to its bracket's top.
fn check_ledger_size(
    rates: &[Rate],
    search: Option<&SearchPlan>,
    rate_per: RatePer,
    publish: &PublishPlan,
    common: &CommonPlan,
    prefix: &str,
    problems: &mut Problems,
) {
    let top = search.map(|s| Rate::PerSecond(s.max));
    let messages = rates
        .iter()
        .chain(top.as_ref())
        .map(|r| match (*r, rate_per) {
            (Rate::PerSecond(r), RatePer::Total) => r as f64,
            (Rate::PerSecond(r), RatePer::Publisher) => r as f64 * publish.publishers as f64,
            (Rate::Max, _) => 0.0,
        })
        .fold(0.0, f64::max)
        * (common.duration + common.warmup).as_secs_f64();
    if messages > 500e6 {
        problems.push(
            format!("{prefix}.duration"),
            format!("a variant would publish {messages:.0} messages; the ledger holds at most 500 million"),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::scenario::{KindPlan, one_scenario};

    fn batches(body: &str) -> Result<Vec<usize>, String> {
        one_scenario("publish", &format!("rates = [1000]\n{body}")).map(|p| match p.kind {
            KindPlan::Publish(plan) => plan.batches,
            _ => unreachable!("a publish section"),
        })
    }

    #[test]
    fn batch_sizes_are_read_as_one_or_many() {
        assert_eq!(batches("batch = [1, 10, 1000]"), Ok(vec![1, 10, 1000]));
        assert_eq!(batches("batch = 100"), Ok(vec![100]));
        assert_eq!(batches(""), Ok(vec![]));
    }

    #[test]
    fn a_batch_size_outside_the_servers_limit_is_named() {
        let e = batches("batch = [10, 1001]").unwrap_err();
        assert!(e.contains("batch[1]") && e.contains("1..=1000"), "{e}");
        let e = batches("batch = [0]").unwrap_err();
        assert!(e.contains("batch[0]"), "{e}");
    }

    #[test]
    fn batches_refuse_duplicates_and_varying_sizes() {
        let e = batches("batch = [10]\nmsg_id = \"unique\"\nduplicates = 0.1").unwrap_err();
        assert!(e.contains("batch") && e.contains("no duplicates"), "{e}");
        let e = batches(
            "batch = [10]\nmessage_size = { distribution = \"uniform\", min = 10, max = 20 }",
        )
        .unwrap_err();
        assert!(e.contains("one fixed size"), "{e}");
        let e = batches("batch = [10, 10]").unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }
}
