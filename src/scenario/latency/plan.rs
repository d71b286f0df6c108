//! `kind = "latency"`: its rates beside the shared keys.

use crate::profile::consumer::require_explicit_ack;
use crate::profile::search::{RateKey, rates};
use crate::profile::shared::{Offer, take};
use crate::profile::{
    CommonPlan, ConsumerPlan, Keys, MsgId, Problems, PublishPlan, SearchPlan, Section, SloOn,
};

/// The `latency` scenario: fixed-rate publishers and a durable pull consumer,
/// one variant per rate.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Total msg/s across publishers; one variant each. Empty with
    /// `search`.
    pub rates: Vec<u64>,
    pub publish: PublishPlan,
    pub consumer: ConsumerPlan,
    /// `rates = "search"`: find the highest rate that holds the SLO.
    pub search: Option<SearchPlan>,
    /// Each rate also over core NATS (no stream): what JetStream adds.
    pub core_baseline: bool,
    /// Split end-to-end latency at the server's stored time stamp.
    pub hops: bool,
}

/// Latency's publishers are configured in full; its rates are its own.
const OFFER: Offer = Offer::TIMING.and(&[
    "arrival",
    "publishers",
    "message_size",
    "msg_id",
    "pub_ack_window",
    "pub_ack_timeout",
    "wake_every",
    "consumer",
    "client",
]);

/// `rates = [..]`: total msg/s, a variant each; or "search".
const RATES: RateKey = RateKey {
    key: "rates",
    list: true,
    max: false,
    most: 10_000_000,
    measured: &[SloOn::E2e, SloOn::PubAck],
    missing: "missing or empty; list total msg/s per variant, e.g. rates = [1000, 10000], or \
              rates = \"search\" with an slo",
};

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let prefix = section.prefix;
    let (mut shared, mut k) = take(section.table, OFFER, prefix, problems)?;
    let common = shared.common("latency", problems);
    let arrival = shared.arrival(problems);
    let rates = rates(&mut k, &RATES, Some(&arrival), &common, 1, prefix, problems);
    rates.check_ledger(1, &common, prefix, problems);
    let mut publish = shared.publish(MsgId::None, None, problems);
    publish.arrival = arrival;
    publish.trace_every = trace_every(&mut k);
    let consumer = shared.consumer(false, problems);
    // Its checks count acks against deliveries and ask the server for
    // nothing pending: both need every delivery acked on its own.
    require_explicit_ack(&consumer, "latency", prefix, problems);
    let core_baseline = k.or("core_baseline", false);
    if core_baseline && rates.search.is_some() {
        k.problem(
            "core_baseline",
            "applies to a list of rates, not to a search",
        );
    }
    let plan = Plan {
        rates: rates.per_second(),
        publish,
        consumer,
        search: rates.search,
        core_baseline,
        hops: k.or("hops", true),
    };
    k.finish(problems);
    Some((common, plan))
}

/// `trace_every = N`: every Nth message traced through the servers
/// ([`crate::drive::trace`]); absent or 0 traces none. A fraction or a
/// negative number would leave it unclear which messages are sampled, so
/// only whole numbers are taken.
fn trace_every(k: &mut Keys) -> u64 {
    match k.get::<toml::Value>("trace_every") {
        None => 0,
        Some(toml::Value::Integer(n)) if n >= 0 => n as u64,
        Some(v) => {
            let why = format!(
                "{v} is not a sampling interval: a whole number of messages >= 1 (1 traces \
                 every message, 100 every hundredth), or 0 for none"
            );
            k.problem("trace_every", why);
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Plan;
    use crate::profile::SloOn;
    use crate::scenario::{KindPlan, one_scenario};

    fn read(body: &str) -> Result<Plan, String> {
        match one_scenario("latency", body)?.kind {
            KindPlan::Latency(l) => Ok(l),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_search_reads_its_objective_and_bounds() {
        let l =
            read("rates = \"search\"\nslo = { \"p98.5\" = \"20ms\", on = \"pub_ack\" }\n").unwrap();
        let s = l.search.unwrap();
        assert!((s.slo.quantile - 0.985).abs() < 1e-12);
        assert_eq!(s.slo.limit, std::time::Duration::from_millis(20));
        assert_eq!(s.slo.on, SloOn::PubAck);
        assert_eq!((s.min, s.max, s.precision), (1_000, 200_000, 0.05));
        assert!(l.rates.is_empty());
    }

    #[test]
    fn trace_every_is_read_into_the_publish_plan_and_off_by_default() {
        assert_eq!(read("rates = [10]\n").unwrap().publish.trace_every, 0);
        let l = read("rates = [10]\ntrace_every = 100\n").unwrap();
        assert_eq!(l.publish.trace_every, 100);
    }

    #[test]
    fn a_shape_sets_one_variant_at_its_mean_rate() {
        let l = read(
            "warmup = \"1s\"\narrival = { pattern = \"steps\", steps = [{ rate = 1000, for = \"1s\" }, \
             { rate = 3000, for = \"1s\" }] }\n",
        )
        .unwrap();
        // 1,000 + 3,000 in 2 s; gaps of a third of a millisecond fit one
        // more.
        assert!((1999..=2001).contains(&l.rates[0]), "{:?}", l.rates);
        assert_eq!(l.publish.arrival.name(), "steps");
    }

    #[test]
    fn a_bad_search_names_its_key() {
        for (body, key) in [
            ("rates = \"search\"\n", "scenario[0].slo"),
            (
                "rates = \"search\"\nslo = { q99 = \"5ms\" }\n",
                "scenario[0].slo.q99",
            ),
            (
                "rates = \"search\"\nslo = { p99 = \"fast\" }\n",
                "scenario[0].slo.p99",
            ),
            (
                "rates = \"search\"\nslo = { p99 = \"5ms\", on = \"disk\" }\n",
                "scenario[0].slo.on",
            ),
            (
                "rates = \"search\"\nslo = { p99 = \"5ms\", p50 = \"1ms\" }\n",
                "more than one percentile",
            ),
            (
                "rates = \"search\"\nslo = { p99 = \"5ms\" }\nsearch = { min = 5000, max = 100 }\n",
                "scenario[0].search.max",
            ),
            (
                "rates = \"search\"\nslo = { p99 = \"5ms\" }\nsearch = { precision = \"90%\" }\n",
                "scenario[0].search.precision",
            ),
            (
                "rates = [1000]\nslo = { p99 = \"5ms\" }\n",
                "only with rates = \"search\"",
            ),
            ("rates = \"fast\"\n", "scenario[0].rates"),
            (
                "rates = [10]\ntrace_every = 2.5\n",
                "scenario[0].trace_every",
            ),
            (
                "rates = [10]\ntrace_every = -1\n",
                "scenario[0].trace_every",
            ),
            (
                "rates = [10]\ntrace_every = \"often\"\n",
                "scenario[0].trace_every",
            ),
            (
                "rates = [1000]\narrival = { pattern = \"ramp\", from = 1, to = 9 }\n",
                "sets its own rate; remove rates",
            ),
            (
                "arrival = { pattern = \"ramp\", from = 10 }\n",
                "needs from and to",
            ),
            (
                "arrival = { pattern = \"steps\", steps = [] }\n",
                "scenario[0].arrival.steps",
            ),
            (
                "arrival = { pattern = \"steps\", steps = [{ rate = 0, for = \"1s\" }] }\n",
                "scenario[0].arrival.steps[0].rate",
            ),
            (
                "rates = [10]\narrival = { pattern = \"poisson\", from = 5 }\n",
                "applies to pattern = \"ramp\" only",
            ),
        ] {
            let e = read(body).expect_err(body);
            assert!(e.contains(key), "{body}: {e}");
        }
    }
}
