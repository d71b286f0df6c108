//! The search for the highest rate a scenario sustains: bracket upward by
//! doubling from the lowest rate, bisect between the highest rate that
//! passed and the lowest that failed until they are within the precision,
//! then run the answer again to confirm it. A confirmation that fails
//! counts as a failure at that rate, and the search goes on below it.
//!
//! The order of probes ([`RateSearch`]) and the judging of each (schedule
//! kept, every invariant held, the SLO held: [`Verdict`]) live here; what
//! a probe is (a variant run at a rate) is the scenario's.

use std::time::Instant;

use anyhow::Result;

use super::ScenarioPlan;
use crate::drive::RunContext;
use crate::profile::SearchPlan;
use crate::record::metrics::{Direction, Metric};
use crate::record::names;
use crate::variant::{VariantResult, VariantSink};

/// Probes a search usually takes (measured: 12 to 15), for estimates.
pub const SEARCH_PROBES: usize = 13;

/// Where a search stands.
#[derive(Debug, Clone)]
pub struct RateSearch {
    min: u64,
    max: u64,
    /// Relative width at which bisection stops, e.g. 0.05.
    precision: f64,
    /// Every probe so far: rate and whether it passed.
    tried: Vec<(u64, bool)>,
    /// A confirmation of this rate is the next probe's meaning.
    confirming: Option<u64>,
    /// The confirmed answer, or `Some(None)` when nothing passed.
    answer: Option<Option<u64>>,
}

/// Confirmations a search may fail before it gives up on confirming.
const MAX_CONFIRMATIONS: usize = 3;

impl RateSearch {
    pub fn new(min: u64, max: u64, precision: f64) -> Self {
        RateSearch {
            min: min.max(1),
            max: max.max(min.max(1)),
            precision,
            tried: Vec::new(),
            confirming: None,
            answer: None,
        }
    }

    /// The highest rate that passed, and the lowest that failed above it.
    fn bounds(&self) -> (Option<u64>, Option<u64>) {
        let fail = self.tried.iter().filter(|t| !t.1).map(|t| t.0).min();
        let pass = self
            .tried
            .iter()
            .filter(|t| t.1 && fail.is_none_or(|f| t.0 < f))
            .map(|t| t.0)
            .max();
        (pass, fail)
    }

    /// The next rate to try; `None` once the search has its answer.
    pub fn next_rate(&mut self) -> Option<u64> {
        if self.answer.is_some() {
            return None;
        }
        let (pass, fail) = self.bounds();
        let confirmations = self.tried.len() - self.distinct();
        let next = match (pass, fail) {
            (None, Some(_)) => {
                // The lowest rate failed: nothing is sustainable in range.
                self.answer = Some(None);
                return None;
            }
            (None, None) => self.min,
            (Some(p), None) if p < self.max => (p * 2).min(self.max),
            (Some(p), Some(f)) if (f - p) as f64 > self.precision * p as f64 => p + (f - p) / 2,
            (Some(p), _) => {
                if self.tried.iter().filter(|t| t.0 == p).count() > 1
                    || confirmations >= MAX_CONFIRMATIONS
                {
                    // Passed twice (found and confirmed), or confirmed
                    // often enough: the answer.
                    self.answer = Some(Some(p));
                    return None;
                }
                self.confirming = Some(p);
                p
            }
        };
        Some(next)
    }

    /// Probes that repeated a rate.
    fn distinct(&self) -> usize {
        let mut rates: Vec<u64> = self.tried.iter().map(|t| t.0).collect();
        rates.sort_unstable();
        rates.dedup();
        rates.len()
    }

    /// Records a probe of `rate`. A failed confirmation fails the rate for
    /// good: every earlier pass at it is forgotten.
    pub fn record(&mut self, rate: u64, passed: bool) {
        if self.confirming.take() == Some(rate) && !passed {
            for t in self.tried.iter_mut().filter(|t| t.0 == rate) {
                t.1 = false;
            }
        }
        self.tried.push((rate, passed));
    }

    /// Whether the rate was probed to confirm an earlier pass.
    pub fn is_confirmation(&self, rate: u64) -> bool {
        self.tried.iter().any(|t| t.0 == rate)
    }

    /// The highest sustainable rate, once found (`None` inside when even
    /// the lowest failed).
    pub fn answer(&self) -> Option<Option<u64>> {
        self.answer
    }

    /// The lowest rate that failed above the answer: where the limit was
    /// met.
    pub fn first_failure(&self) -> Option<u64> {
        self.bounds().1
    }

    pub fn tried(&self) -> &[(u64, bool)] {
        &self.tried
    }
}

/// The param every probe of a search carries: its verdict. What reads
/// results back tells probes (how an answer was found) from figures by it.
pub const PROBE_PARAM: &str = "search_verdict";

/// Runs a search: probes chosen by [`RateSearch`], each a variant of its
/// own that `probe(rate, name)` runs (the latency curve of every rate
/// tried), then a `<prefix>search` variant with the answer,
/// `max_sustainable_rate`, and what limited it. Probes are named
/// `<prefix>rate-<n>` (`-again` when confirming); `prefix` tells apart the
/// searches of one scenario (a fan-out's pairs, a publish's msg_id modes).
pub async fn run(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    search: &SearchPlan,
    prefix: &str,
    sink: &mut dyn VariantSink,
    mut probe: impl AsyncFnMut(u64, String) -> VariantResult,
) -> Result<()> {
    let started = Instant::now();
    let mut s = RateSearch::new(search.min, search.max, search.precision);
    let mut verdicts: Vec<(u64, Verdict)> = Vec::new();
    while let Some(rate) = s.next_rate() {
        if ctx.stop.is_cancelled() {
            break;
        }
        let again = if s.is_confirmation(rate) {
            "-again"
        } else {
            ""
        };
        let mut result = probe(rate, format!("{prefix}rate-{rate}{again}")).await;
        let shared = matches!(ctx.server_cpu, crate::system::cpu::ServerCpu::Processes(_));
        let verdict = Verdict::judge(&result, rate, &search.slo, shared);
        result.param(PROBE_PARAM, verdict.describe());
        ctx.progress.println(&format!(
            "{prefix}search: {rate} msg/s {}",
            verdict.describe()
        ));
        s.record(rate, verdict.passed());
        verdicts.push((rate, verdict));
        sink.record(&scenario.common, result)?;
    }

    let mut r = VariantResult::new(format!("{prefix}search"));
    r.param("slo", search.slo.describe());
    r.param("bracket", format!("{}..{} msg/s", search.min, search.max));
    r.param("precision", search.precision);
    r.param(
        "tried",
        verdicts
            .iter()
            .map(|(rate, v)| format!("{rate}: {}", v.describe()))
            .collect::<Vec<_>>(),
    );
    match s.answer() {
        Some(Some(rate)) => {
            r.metrics.push(Metric::new(
                "max_sustainable_rate",
                "msg/s",
                rate as f64,
                Direction::Higher,
            ));
            let (tag, why) = match s.first_failure() {
                Some(f) => verdicts
                    .iter()
                    .rev()
                    .find(|(rate, _)| *rate == f)
                    .map(|(_, v)| v.limit())
                    .unwrap_or(("unknown", String::new())),
                None => (
                    "search_max",
                    format!(
                        "the bracket's top, {} msg/s, held: raise search.max to look higher",
                        search.max
                    ),
                ),
            };
            r.param("limited_by", tag);
            r.param("limiting_factor", &why);
            ctx.progress.println(&format!(
                "{prefix}search: max sustainable rate {rate} msg/s for {}; limited by {why}",
                search.slo.describe()
            ));
            // Found and run again; after three failed confirmations the
            // search settles for a rate that passed once, and says so.
            let passes = verdicts
                .iter()
                .filter(|(x, v)| *x == rate && v.passed())
                .count();
            r.param("confirmed", passes >= 2);
            if passes < 2 {
                r.warnings.push(format!(
                    "{rate} msg/s passed once and was not confirmed: three confirmations above it \
                     failed, so the knee is noisy here (lengthen duration)"
                ));
            }
        }
        Some(None) => {
            r.error = Some(format!(
                "no rate in {}..{} msg/s holds {}: the lowest failed ({})",
                search.min,
                search.max,
                search.slo.describe(),
                verdicts
                    .first()
                    .map(|(_, v)| v.describe())
                    .unwrap_or_default()
            ));
        }
        None => r
            .warnings
            .push("interrupted: the search stopped before its answer".into()),
    }
    r.elapsed = started.elapsed();
    sink.record(&scenario.common, r)
}

/// A probe's outcome against the search's conditions: the generator kept
/// its schedule, every invariant held, the SLO held.
#[derive(Debug, Clone)]
enum Verdict {
    Pass { value_us: f64 },
    Fail { limit: &'static str, why: String },
}

impl Verdict {
    /// `shared_host`: the server runs on this host (jsbench started it),
    /// so client and server draw on the same cores.
    fn judge(
        r: &VariantResult,
        rate: u64,
        slo: &crate::profile::Slo,
        shared_host: bool,
    ) -> Verdict {
        let metric = |name: &str| r.metrics.iter().find(|m| m.name == name).map(|m| m.value);
        // What the variant aimed at (a fan-out rounds it to whole msg/s per
        // stream; a publish at rate_per = "publisher" multiplies it).
        let target = metric(names::TARGET_RATE).unwrap_or(rate as f64);
        // Cores each side used at this rate: CPU per message times the
        // rate, or (a fan-out) CPU per delivery times deliveries a second.
        let cores = |side: &str| {
            let per_msg = metric(&format!("{side}_cpu_per_msg")).map(|us| us * target);
            let per_delivery = || {
                Some(metric(&format!("{side}_cpu_per_delivery"))? * metric(names::CONSUME.rate)?)
            };
            per_msg.or_else(per_delivery).unwrap_or(0.0) / 1e6
        };
        let (client, server) = (cores("client"), cores("server"));
        let available = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let cpu = format!("client {client:.2} cores, server {server:.2} of {available:.0}");
        if let Some(e) = &r.error {
            return Verdict::Fail {
                limit: "errors",
                why: format!("the variant failed: {e}"),
            };
        }
        let broken = r.broken();
        if !broken.is_empty() {
            return Verdict::Fail {
                limit: "errors",
                why: format!("invariants failed: {}", broken.join(", ")),
            };
        }
        let achieved = metric(names::PUBLISH.rate).unwrap_or(0.0);
        let behind = r
            .warnings
            .iter()
            .any(|w| w.starts_with("the load generator fell behind"));
        if behind || achieved < 0.97 * target {
            let limit = if server > client {
                "server_cpu"
            } else {
                "client_cpu"
            };
            return Verdict::Fail {
                limit,
                why: format!(
                    "the generator could not keep its schedule: {achieved:.0} of {target:.0} msg/s ({cpu})"
                ),
            };
        }
        let value_us = r
            .histograms
            .iter()
            .find(|(name, _)| name == slo.on.histogram())
            .map_or(f64::INFINITY, |(_, h)| {
                h.quantile(slo.quantile) as f64 / 1e3
            });
        let limit_us = slo.limit.as_secs_f64() * 1e6;
        if value_us <= limit_us {
            return Verdict::Pass { value_us };
        }
        let limit = if server >= 0.8 * available {
            "server_cpu"
        } else if client >= 0.8 * available {
            "client_cpu"
        } else if shared_host && client + server >= 0.8 * available {
            // One host's cores, shared by the generator and the server.
            "host_cpu"
        } else {
            "slo"
        };
        Verdict::Fail {
            limit,
            why: format!(
                "p{} {} = {:.0} us > {:.0} us ({cpu})",
                slo.quantile * 100.0,
                slo.on.histogram(),
                value_us,
                limit_us
            ),
        }
    }

    fn passed(&self) -> bool {
        matches!(self, Verdict::Pass { .. })
    }

    fn describe(&self) -> String {
        match self {
            Verdict::Pass { value_us } => format!("held ({value_us:.0} us)"),
            Verdict::Fail { why, .. } => format!("failed: {why}"),
        }
    }

    /// What limited the rate: a tag and the evidence.
    fn limit(&self) -> (&'static str, String) {
        match self {
            Verdict::Pass { .. } => ("none", String::new()),
            Verdict::Fail { limit, why } => (limit, why.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mut s: RateSearch, passes: impl Fn(u64, usize) -> bool) -> RateSearch {
        let mut n = 0;
        while let Some(rate) = s.next_rate() {
            s.record(rate, passes(rate, n));
            n += 1;
            assert!(n < 50, "the search ends: {:?}", s.tried());
        }
        s
    }

    #[test]
    fn brackets_bisects_and_confirms_below_the_knee() {
        let s = run(RateSearch::new(1000, 100_000, 0.05), |r, _| r <= 13_700);
        let answer = s.answer().unwrap().unwrap();
        assert!(
            answer <= 13_700 && answer as f64 >= 13_700.0 * 0.95,
            "{answer}"
        );
        let rates: Vec<u64> = s.tried().iter().map(|t| t.0).collect();
        // Doubling first, then halving the gap, the answer run twice.
        assert_eq!(&rates[..5], [1000, 2000, 4000, 8000, 16_000]);
        assert_eq!(rates.iter().filter(|&&r| r == answer).count(), 2);
        assert_eq!(
            s.first_failure(),
            rates.iter().copied().filter(|&r| r > 13_700).min()
        );
    }

    #[test]
    fn the_maximum_passing_is_the_answer_and_the_minimum_failing_is_none() {
        let s = run(RateSearch::new(1000, 5000, 0.05), |_, _| true);
        assert_eq!(s.answer(), Some(Some(5000)));
        assert_eq!(s.first_failure(), None);
        let s = run(RateSearch::new(1000, 5000, 0.05), |_, _| false);
        assert_eq!(s.answer(), Some(None));
        assert_eq!(s.tried(), [(1000, false)]);
    }

    #[test]
    fn a_failed_confirmation_moves_the_answer_down() {
        // 12,000 passes once and then never again: a flaky knee.
        let s = run(RateSearch::new(1000, 100_000, 0.05), |r, n| {
            r <= 11_000 || (r <= 12_000 && n < 7)
        });
        let answer = s.answer().unwrap().unwrap();
        assert!(answer <= 12_000, "{answer}: {:?}", s.tried());
        let confirmed = s.tried().iter().filter(|t| t.0 == answer && t.1).count();
        assert_eq!(confirmed, 2, "{:?}", s.tried());
    }
}
