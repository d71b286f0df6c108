//! `kind = "publish"`: keys and checks.

use super::fast_keys::check_batch_publish;
use crate::profile::search::{RateKey, Rates, rates};
use crate::profile::shared::{Offer, take};
use crate::profile::{
    CommonPlan, MsgId, Problems, PublishPlan, Rate, RatePer, Reference, SearchPlan, Section, SloOn,
    late_retry_margin,
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
        let with = |r: Reference| usize::from(self.reference.contains(&r));
        // The raw reference runs before and after each of jsbench's.
        let per_id = with(Reference::Idiomatic) + 2 * with(Reference::Raw);
        let minimal = max_rates * self.msg_ids.len() * per_id;
        let core = max_rates * with(Reference::Core);
        let batches = self.rates.len() * self.msg_ids.len() * self.batches.len();
        let fast = self.rates.len() * self.msg_ids.len() * self.fast.variants();
        own + minimal + core + batches + fast
    }
}

/// Every publish key, `msg_id` as a list (`["none", "unique"]`, a
/// variant each); no consumer.
const OFFER: Offer = Offer::TIMING.and(&[
    "publishers",
    "mode",
    "pub_ack_window",
    "pub_ack_timeout",
    "message_size",
    "subjects",
    "headers",
    "msg_id",
    "duplicates",
    "late_duplicates",
    "duplicate_window",
    "wake_every",
    "client",
]);

/// `rates = [..]`: msg/s or "max", a variant each; or "search".
const RATES: RateKey = RateKey {
    key: "rates",
    list: true,
    max: true,
    most: 10_000_000,
    measured: &[SloOn::PubAck],
    missing: "missing or empty; list msg/s or \"max\" per variant, e.g. rates = [10000, \"max\"]",
};

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let prefix = section.prefix;
    let (mut shared, mut k) = take(section.table, OFFER, prefix, problems)?;
    let common = shared.common("publish", problems);
    let read = rates(&mut k, &RATES, None, &common, 1, prefix, problems);
    let searching = read.search.is_some();
    let msg_ids = shared.msg_ids(problems);
    let first = msg_ids.first().copied().unwrap_or(MsgId::None);
    let publish = shared.publish(first, None, problems);
    check_retries(&publish, &msg_ids, &common, prefix, problems);
    let reference = k.choices("reference", Vec::new());
    check_references(&reference, &publish, &read, prefix, problems);
    let rate_per = k.or("rate_per", RatePer::Total);
    let publishers = match rate_per {
        RatePer::Total => 1,
        RatePer::Publisher => publish.publishers,
    };
    read.check_ledger(publishers, &common, prefix, problems);
    let most = crate::load::batch::MAX_ATOMIC_BATCH;
    let batches = k.list("batch", Vec::new(), 1..=most, " messages");
    // Atomic batches (1 to 1000 messages, the server's limit) send one
    // fixed size, and the batch publisher injects no retries.
    if !batches.is_empty() {
        let key = format!("{prefix}.batch");
        check_batch_publish("atomic batches", &publish, searching, &key, problems);
    }
    let fast = super::fast_keys::read(&mut k, &publish, searching, problems);
    if !batches.is_empty() || !fast.sizes.is_empty() {
        crate::profile::publish::refuse_direct(
            &publish,
            "atomic and fast-ingest batches are sent through async-nats",
            prefix,
            problems,
        );
    }
    let plan = Plan {
        batches,
        fast,
        rates: read.rates,
        rate_per,
        msg_ids,
        publish,
        reference,
        verify_stored: k.or("verify_stored", true),
        search: read.search,
    };
    k.finish(problems);
    Some((common, plan))
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

/// Reference publishers run at rate "max", one fixed size, no retries.
fn check_references(
    reference: &[Reference],
    publish: &PublishPlan,
    rates: &Rates,
    prefix: &str,
    problems: &mut Problems,
) {
    if reference.is_empty() {
        return;
    }
    let searching = rates.search.is_some();
    let key = format!("{prefix}.reference");
    let retries = publish.duplicates > 0.0 || publish.late_duplicates > 0.0;
    if retries {
        problems.push(
            &key,
            "reference publishers do not inject duplicates; compare without duplicates",
        );
    }
    if searching {
        problems.push(
            &key,
            "reference publishers run at rate \"max\", which a search does not try",
        );
    }
    if !searching && !rates.rates.contains(&Rate::Max) {
        problems.push(
            &key,
            "reference publishers run at rate \"max\" only: add \"max\" to rates",
        );
    }
    if !matches!(publish.message_size, crate::profile::SizePlan::Fixed(_)) {
        problems.push(
            &key,
            "reference publishers send one fixed size: use a fixed message_size",
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
