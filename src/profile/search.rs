//! A scenario's rate key, read the same way by every scenario that takes
//! one: a rate (or, for `rates`, a list of them, one variant each), or
//! `"search"` with the objective (`slo`) and bounds (`search`) of a search
//! for the highest sustainable rate.

use serde::Deserialize;

use std::time::Duration;

use serde::Serialize;

use super::arrival::ArrivalPlan;
use super::keys::{Keys, has_repeats};
use super::kinds::CommonPlan;
use super::problems::Problems;
use super::publish::Rate;
use super::shared::shaped_rate;
use crate::record::names;
use crate::units::{format_duration, parse_duration, parse_percent};

/// `search = { min = 1000, max = 200000, precision = "5%", floor = 100 }`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SearchSection {
    floor: Option<u64>,
    min: Option<u64>,
    max: Option<u64>,
    precision: Option<String>,
}

/// Highest rate a search may try, and so the highest any drive runs at
/// (a worker holds a drive it is handed to it).
pub const MAX_RATE: u64 = 10_000_000;

/// A kind's rate key and what it takes.
pub struct RateKey {
    /// `rates` (with `list`: one rate or a list, a variant each) or `rate`.
    pub key: &'static str,
    pub list: bool,
    /// `"max"` is a rate too: as fast as the PubAcks come back.
    pub max: bool,
    /// The highest msg/s a rate may be.
    pub most: u64,
    /// The latencies the kind records, the first the default objective.
    pub measured: &'static [SloOn],
    /// The problem when the key is missing or an empty list.
    pub missing: &'static str,
}

/// What a rate key asks for.
pub struct Rates {
    /// A variant each: empty for a search, the mean of an arrival shape
    /// that sets its own rate.
    pub rates: Vec<Rate>,
    pub search: Option<SearchPlan>,
}

impl Rates {
    /// The rates in msg/s, "max" left out.
    pub fn per_second(&self) -> Vec<u64> {
        let each = |r: &Rate| match *r {
            Rate::PerSecond(n) => Some(n),
            Rate::Max => None,
        };
        self.rates.iter().filter_map(each).collect()
    }

    /// The most msg/s a variant asks for, a search's top included; 0 for
    /// none.
    pub fn top(&self) -> u64 {
        let search = self.search.as_ref().map(|s| s.max);
        let rates = self.per_second().into_iter();
        rates.chain(search).max().unwrap_or(0)
    }

    /// The ledger holds at most 500 million messages a variant:
    /// `publishers` at the top rate each (1 when the rate is the total),
    /// over warm-up and duration.
    pub fn check_ledger(
        &self,
        publishers: usize,
        common: &CommonPlan,
        prefix: &str,
        problems: &mut Problems,
    ) {
        let span = (common.duration + common.warmup).as_secs_f64();
        let messages = self.top() as f64 * publishers as f64 * span;
        if messages > 500e6 {
            problems.push(
                format!("{prefix}.duration"),
                format!(
                    "a variant would publish {messages:.0} messages; the ledger holds at most \
                     500 million per variant"
                ),
            );
        }
    }
}

/// Reads `r.key` with `slo` and `search`: each rate within 1..=most and
/// none twice, or a search. With an arrival shape that sets its own rate
/// the shape's mean is the one rate, and a rate given beside it is
/// refused. `deliveries`: each message's, as [`check_samples`] counts.
pub fn rates(
    k: &mut Keys,
    r: &RateKey,
    arrival: Option<&ArrivalPlan>,
    common: &CommonPlan,
    deliveries: usize,
    prefix: &str,
    problems: &mut Problems,
) -> Rates {
    let path = k.path(r.key);
    let value = k.get::<toml::Value>(r.key);
    let searching = matches!(&value, Some(toml::Value::String(s)) if s == "search");
    let (slo, bounds) = (k.get("slo"), k.get::<SearchSection>("search"));
    let floor_given = bounds.as_ref().is_some_and(|b| b.floor.is_some());
    let mut search = read(searching, slo, bounds, r, prefix, problems);
    check_samples(
        search.as_mut(),
        floor_given,
        common,
        deliveries,
        prefix,
        problems,
    );
    let items: Vec<(String, toml::Value)> = match value {
        Some(toml::Value::Array(items)) if r.list => {
            let at = |(i, v)| (format!("{path}[{i}]"), v);
            items.into_iter().enumerate().map(at).collect()
        }
        Some(v) if !searching => vec![(path.clone(), v)],
        _ => Vec::new(),
    };
    let (given, mut wrong, mut rates) = (searching || !items.is_empty(), false, Vec::new());
    let what = if r.max {
        "a rate in msg/s or \"max\""
    } else {
        "a rate in msg/s"
    };
    for (at, v) in items {
        match v {
            toml::Value::Integer(n) if n >= 0 => {
                problems.range(&at, n as u64, 1, r.most, " msg/s");
                rates.push(Rate::PerSecond(n as u64));
            }
            toml::Value::String(s) if r.max && s == "max" => rates.push(Rate::Max),
            v if at == path => {
                let list = if r.list { " (or a list of them)" } else { "" };
                problems.push(at, format!("{v} is neither {what}{list} nor \"search\""));
                wrong = true;
            }
            v => {
                problems.push(at, format!("{v} is not {what}"));
                wrong = true;
            }
        }
    }
    if has_repeats(&rates) {
        problems.push(&path, "lists a rate twice; each rate is one variant");
    }
    match arrival.filter(|a| !a.uses_rate()) {
        Some(shape) => {
            let mean = shaped_rate(shape, given, r.key, common, prefix, problems);
            rates = vec![Rate::PerSecond(mean)];
        }
        None if rates.is_empty() && !searching && !wrong => problems.push(path, r.missing),
        None => {}
    }
    Rates { rates, search }
}

/// The search a scenario's keys describe, or `None` (with problems when
/// `slo` or `search` are given without a search, or are wrong).
fn read(
    searching: bool,
    slo: Option<toml::Table>,
    search: Option<SearchSection>,
    r: &RateKey,
    prefix: &str,
    problems: &mut Problems,
) -> Option<SearchPlan> {
    let key = |k: &str| format!("{prefix}.{k}");
    let (rate_key, measured) = (r.key, r.measured);
    if !searching {
        for (k, given) in [("slo", slo.is_some()), ("search", search.is_some())] {
            if given {
                problems.push(key(k), format!("applies only with {rate_key} = \"search\""));
            }
        }
        return None;
    }
    let Some(slo) = slo else {
        problems.push(
            key("slo"),
            format!(
                "missing; a search needs an objective, e.g. slo = {{ p99 = \"5ms\" }} (on {})",
                names(measured)
            ),
        );
        return None;
    };
    let slo = read_slo(slo, &key("slo"), measured, problems);
    let search = search.unwrap_or_default();
    let min = search.min.unwrap_or(1_000);
    let max = search.max.unwrap_or(200_000);
    problems.range(&key("search.min"), min, 1, MAX_RATE, " msg/s");
    problems.range(&key("search.max"), max, min.max(1), MAX_RATE, " msg/s");
    // Under `min` only when `min` fails: a sixteenth of it (four halvings)
    // unless the profile says how low an answer is still worth having.
    let floor = search.floor.unwrap_or(min / 16).max(1);
    if floor > min {
        problems.push(
            key("search.floor"),
            format!(
                "{floor} msg/s is above search.min ({min} msg/s); the floor is the lowest rate \
                 the search goes down to when search.min fails, so at most search.min"
            ),
        );
    }
    problems.range(&key("search.floor"), floor, 1, MAX_RATE, " msg/s");
    let precision = match search.precision.as_deref().map(parse_percent) {
        None => 0.05,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            problems.push(key("search.precision"), e.to_string());
            0.05
        }
    };
    problems.range(&key("search.precision"), precision, 0.005, 0.5, "");
    slo.map(|slo| SearchPlan {
        slo,
        floor: floor.min(min),
        min,
        max,
        precision,
    })
}

/// Holds a search's lowest rate to enough samples for its objective: a
/// probe of `duration` at `search.min` records about min x duration x
/// `deliveries` end-to-end latencies (one PubAck per message), and a
/// percentile judged on fewer than ten beyond it is one or two outliers
/// ([`Slo::min_samples`]; probes that still fall short fail as
/// "samples"). `deliveries`: each message's deliveries, at
/// the fewest (a fan-out's durables per stream). The floor is held to
/// the same: a default floor is raised to the lowest rate that gives
/// enough (a probe under it could only fail as "samples"), a floor the
/// profile gives under it is refused, naming `search.floor`.
fn check_samples(
    search: Option<&mut SearchPlan>,
    floor_given: bool,
    common: &CommonPlan,
    deliveries: usize,
    prefix: &str,
    problems: &mut Problems,
) {
    let Some(search) = search else { return };
    let duration = common.duration;
    let needed = search.slo.min_samples() as f64;
    let per_message = match search.slo.on {
        SloOn::E2e => deliveries.max(1) as f64,
        SloOn::PubAck => 1.0,
    };
    let lowest = (needed / duration.as_secs_f64() / per_message).ceil();
    let quantile = search.slo.quantile;
    let recorded = |rate: u64| rate as f64 * duration.as_secs_f64() * per_message;
    let mut too_few = |key: &str, rate: u64| {
        problems.push(
            format!("{prefix}.search.{key}"),
            format!(
                "{rate} msg/s for {} records about {:.0} latencies, and p{} needs at least \
                 {needed:.0}: raise search.{key} to {lowest:.0} or lengthen duration",
                format_duration(duration),
                recorded(rate),
                quantile * 100.0,
            ),
        )
    };
    if (search.floor as f64) < lowest {
        if floor_given {
            too_few("floor", search.floor);
        }
        search.floor = (lowest as u64).min(search.min);
    }
    if recorded(search.min) < needed {
        too_few("min", search.min);
    }
}

/// `"e2e" or "pub_ack"`, as a profile writes them.
fn names(measured: &[SloOn]) -> String {
    measured
        .iter()
        .map(|m| format!("\"{}\"", m.key()))
        .collect::<Vec<_>>()
        .join(" or ")
}

/// `{ p99 = "5ms" }`, `{ "p99.9" = "20ms", on = "pub_ack" }`: one
/// percentile and its limit.
fn read_slo(
    table: toml::Table,
    key: &str,
    measured: &[SloOn],
    problems: &mut Problems,
) -> Option<Slo> {
    let mut on = measured[0];
    let mut objective = None;
    for (name, value) in table {
        if name == "on" {
            match measured.iter().find(|m| value.as_str() == Some(m.key())) {
                Some(m) => on = *m,
                None => problems.push(
                    format!("{key}.on"),
                    format!(
                        "{value} is not a latency this scenario measures: {}",
                        names(measured)
                    ),
                ),
            }
            continue;
        }
        let quantile = name
            .strip_prefix('p')
            .and_then(|p| p.parse::<f64>().ok())
            .filter(|p| *p > 0.0 && *p < 100.0);
        let limit = value.as_str().map(parse_duration);
        match (quantile, limit) {
            (Some(q), Some(Ok(limit))) if objective.is_none() => {
                objective = Some((q / 100.0, limit))
            }
            (Some(_), Some(Ok(_))) => problems.push(
                key,
                "names more than one percentile; a search holds one objective",
            ),
            (None, _) => problems.push(
                format!("{key}.{name}"),
                format!(
                    "is not a percentile like p99 or \"p99.9\" (or on = {})",
                    names(measured)
                ),
            ),
            (_, Some(Err(e))) => problems.push(format!("{key}.{name}"), e.to_string()),
            (_, None) => problems.push(
                format!("{key}.{name}"),
                "must be a duration such as \"5ms\"",
            ),
        }
    }
    match objective {
        Some((quantile, limit)) => Some(Slo {
            quantile,
            limit,
            on,
        }),
        None => {
            problems.push(key, "names no percentile; e.g. slo = { p99 = \"5ms\" }");
            None
        }
    }
}

/// A search for the maximum sustainable rate under an SLO.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchPlan {
    pub slo: Slo,
    /// The lowest rate the search goes down to, halving, when `min`
    /// fails; `min` itself when it may not go lower.
    pub floor: u64,
    /// The bracket: the search starts at `min` and never goes above `max`.
    pub min: u64,
    pub max: u64,
    /// Bisection stops when the bounds are this close (relative).
    pub precision: f64,
}

/// A latency objective: the `quantile` of `on` at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slo {
    pub quantile: f64,
    pub limit: Duration,
    pub on: SloOn,
}

impl Slo {
    /// Samples the percentile needs to be judged: ten beyond it (1,000
    /// for a p99, 10,000 for a p99.9), so that one or two outliers do not
    /// set it.
    pub fn min_samples(&self) -> u64 {
        (10.0 / (1.0 - self.quantile)).round() as u64
    }

    /// `p99 <= 5ms on e2e_latency`.
    pub fn describe(&self) -> String {
        format!(
            "p{} <= {} on {}",
            self.quantile * 100.0,
            format_duration(self.limit),
            self.on.histogram()
        )
    }
}

/// Which latency an SLO holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloOn {
    /// End to end, from the intended send.
    E2e,
    /// The PubAck, from the intended send.
    PubAck,
}

impl SloOn {
    /// The histogram of a latency variant it reads.
    pub fn histogram(self) -> &'static str {
        match self {
            SloOn::E2e => names::E2E_LATENCY,
            SloOn::PubAck => names::PUB_ACK_LATENCY,
        }
    }

    /// As a profile writes it: `on = "e2e"`.
    pub fn key(self) -> &'static str {
        match self {
            SloOn::E2e => "e2e",
            SloOn::PubAck => "pub_ack",
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::profile::SloOn;
    use crate::scenario::{KindPlan, one_scenario};

    #[test]
    fn publish_searches_on_pub_ack_and_fanout_on_either() {
        let KindPlan::Publish(p) = one_scenario(
            "publish",
            "rates = \"search\"\nslo = { p99 = \"2ms\" }\nmsg_id = [\"none\", \"unique\"]\n",
        )
        .unwrap()
        .kind
        else {
            unreachable!()
        };
        assert_eq!(p.search.as_ref().unwrap().slo.on, SloOn::PubAck);
        assert!(p.rates.is_empty());
        assert_eq!(
            p.variant_count(),
            2 * crate::scenario::search::SEARCH_PROBES
        );

        let KindPlan::Fanout(f) = one_scenario(
            "fanout",
            "rate = \"search\"\nslo = { p99 = \"20ms\", on = \"pub_ack\" }\n\
             search = { min = 1000, max = 8000 }\nstreams = 2\ndurables = [1, 4]\n",
        )
        .unwrap()
        .kind
        else {
            unreachable!()
        };
        let s = f.search.unwrap();
        assert_eq!((s.slo.on, s.min, s.max), (SloOn::PubAck, 1000, 8000));
    }

    #[test]
    fn a_search_floor_defaults_to_a_sixteenth_of_min_raised_to_enough_samples() {
        let floor = |search: &str| {
            let body =
                format!("rates = \"search\"\nslo = {{ p99 = \"5ms\" }}\nsearch = {search}\n");
            match one_scenario("latency", &body).unwrap().kind {
                KindPlan::Latency(l) => l.search.unwrap().floor,
                _ => unreachable!(),
            }
        };
        // 1s a probe: a p99 needs 1,000 msg/s.
        assert_eq!(floor("{ min = 32000 }"), 2000);
        assert_eq!(floor("{ min = 4000 }"), 1000);
        assert_eq!(floor("{ min = 4000, floor = 1500 }"), 1500);
        assert_eq!(floor("{ min = 4000, floor = 4000 }"), 4000);
    }

    #[test]
    fn every_rate_key_reads_one_rate_or_a_list_and_refuses_repeats_and_strays() {
        let KindPlan::Latency(l) = one_scenario("latency", "rates = 1000\n").unwrap().kind else {
            unreachable!()
        };
        assert_eq!(l.rates, [1000], "one rate is a list of one");
        for (kind, body, expected) in [
            (
                "publish",
                "rates = [1000, 1000]\n",
                "rates (line 5): lists a rate twice",
            ),
            (
                "publish",
                "rates = [\"fast\"]\n",
                "rates[0] (line 5): \"fast\" is not a rate",
            ),
            (
                "latency",
                "rates = [\"max\"]\n",
                "rates[0] (line 5): \"max\" is not a rate",
            ),
            (
                "fanout",
                "rate = [1000]\n",
                "rate (line 5): [1000] is neither a rate",
            ),
            // A search's top counts against the ledger as a listed rate does.
            (
                "latency",
                "rates = \"search\"\nslo = { p99 = \"5ms\" }\nsearch = { max = 10000000 }\n\
                 warmup = \"60s\"\n",
                "duration (line 4): a variant would publish 610000000 messages",
            ),
            (
                "fanout",
                "rate = 1000\nmsg_id = [\"none\", \"unique\"]\n",
                "msg_id (line 6): takes one mode here",
            ),
        ] {
            let e = one_scenario(kind, body).expect_err(body);
            assert!(
                e.contains(&format!("scenario[0].{expected}")),
                "{kind}: {body}: {e}"
            );
        }
    }

    #[test]
    fn a_search_a_scenario_cannot_run_names_its_key() {
        for (kind, body, expected) in [
            (
                "publish",
                "rates = \"search\"\nslo = { p99 = \"2ms\", on = \"e2e\" }\n",
                "scenario[0].slo.on",
            ),
            (
                "publish",
                "rates = \"search\"\nslo = { p99 = \"2ms\" }\nreference = \"raw\"\n",
                "scenario[0].reference",
            ),
            ("publish", "rates = \"search\"\n", "scenario[0].slo"),
            ("publish", "rates = [\"fast\"]\n", "scenario[0].rates"),
            (
                "publish",
                "rates = [1000]\nsearch = { max = 5000 }\n",
                "only with rates = \"search\"",
            ),
            ("fanout", "rate = \"quick\"\n", "scenario[0].rate"),
            (
                "fanout",
                "rate = 1000\nslo = { p99 = \"5ms\" }\n",
                "only with rate = \"search\"",
            ),
            (
                "fanout",
                "rate = \"search\"\nslo = { p99 = \"5ms\" }\nstreams = 50\nsearch = { min = 10 }\n",
                "under 1 msg/s per stream",
            ),
            (
                "latency",
                "rates = \"search\"\nslo = { \"p99.9\" = \"5ms\" }\nsearch = { min = 1000 }\n",
                "scenario[0].search.min (line 7): 1000 msg/s for 1s records about 1000 latencies, \
                 and p99.9 needs at least 10000: raise search.min to 10000",
            ),
            (
                "latency",
                "rates = \"search\"\nslo = { p99 = \"5ms\" }\nsearch = { min = 1000, floor = 2000 }\n",
                "2000 msg/s is above search.min (1000 msg/s)",
            ),
            (
                "publish",
                "rates = \"search\"\nslo = { p99 = \"5ms\" }\nsearch = { min = 4000, floor = 100 }\n",
                "100 msg/s for 1s records about 100 latencies, and p99 needs at least 1000: \
                 raise search.floor to 1000",
            ),
        ] {
            let e = match one_scenario(kind, body) {
                Ok(_) => panic!("{kind}: {body} was accepted"),
                Err(e) => e,
            };
            assert!(e.contains(expected), "{kind}: {body}: {e}");
        }
    }
}
