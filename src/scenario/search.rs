//! The search for the highest rate a scenario sustains: bracket upward by
//! doubling from the lowest rate, bisect between the highest rate that
//! passed and the lowest that failed until they are within the precision,
//! then probe both ends again. A rate's verdict is the majority of its
//! probes: two that agree decide it, a split calls a third. A failure is
//! confirmed exactly as a pass is, so one noisy probe neither caps the
//! answer (a failure that passes twice is lifted and the search goes on
//! above it) nor raises it (an answer that fails twice is dropped and the
//! search goes on below it); a rate that failed beneath one that passed
//! is noise at one of them, and the less certain is probed again.
//!
//! The order of probes ([`RateSearch`]) and the judging of each (schedule
//! kept, every invariant held, the SLO held on enough samples:
//! [`Verdict`]) live here; what a probe is (a variant run at a rate) is
//! the scenario's.

use std::time::Instant;

use anyhow::Result;

use super::ScenarioPlan;
use crate::drive::RunContext;
use crate::profile::SearchPlan;
use crate::record::metrics::Direction;
use crate::record::names;
use crate::variant::{VariantResult, VariantSink};

/// Probes a search usually takes, for estimates (simulated: 12 to 13
/// with every verdict right, 14 to 16 with one in twenty wrong).
pub const SEARCH_PROBES: usize = 14;

/// Probes after which a search settles for what it has: each rate is
/// probed at most [`VOTES`] times and the bracket halves at every new
/// rate, so a search that needs more is a knee that will not hold still.
const MAX_PROBES: usize = 40;

/// The most probes one rate gets: a majority of three always decides.
const VOTES: u32 = 3;

/// Where a search stands.
#[derive(Debug, Clone)]
pub struct RateSearch {
    /// The lowest rate a search may go down to when `min` fails: a host
    /// whose generator cannot keep a schedule at `min` (a busy machine
    /// waking it late) still gets an answer below it, or a stated
    /// "below the floor".
    floor: u64,
    min: u64,
    max: u64,
    /// Relative width at which bisection stops, e.g. 0.05.
    precision: f64,
    /// Every probe so far: rate and whether it passed, in order.
    tried: Vec<(u64, bool)>,
    /// The answer, or `Some(None)` when nothing passed.
    answer: Option<Option<u64>>,
    /// Why the search settled without every verdict decided, if it did.
    settled: Option<String>,
}

/// A rate's verdict from its probes so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Votes {
    pub passed: u32,
    pub failed: u32,
}

impl Votes {
    /// Passed more often than failed (a provisional verdict after one
    /// probe, a decided one after two that agree).
    fn passes(&self) -> bool {
        self.passed > self.failed
    }

    fn fails(&self) -> bool {
        self.failed > self.passed
    }

    /// Two probes agree, or every vote was cast.
    fn decided(&self) -> bool {
        self.passed.max(self.failed) >= 2 && self.passed != self.failed
    }

    fn probes(&self) -> u32 {
        self.passed + self.failed
    }
}

impl RateSearch {
    /// A search from `min` up to `max` that never goes below `min` (see
    /// [`RateSearch::floor`]).
    pub fn new(min: u64, max: u64, precision: f64) -> Self {
        RateSearch {
            floor: min.max(1),
            min: min.max(1),
            max: max.max(min.max(1)),
            precision,
            tried: Vec::new(),
            answer: None,
            settled: None,
        }
    }

    /// Lets the search go down to `floor` (at least 1 msg/s, at most
    /// `min`) by halving when `min` fails.
    pub fn floor(mut self, floor: u64) -> Self {
        self.floor = floor.clamp(1, self.min);
        self
    }

    /// A rate's probes so far.
    pub fn votes(&self, rate: u64) -> Votes {
        let of = |passed| self.tried.iter().filter(|&&t| t == (rate, passed)).count() as u32;
        Votes {
            passed: of(true),
            failed: of(false),
        }
    }

    /// Every rate probed, ascending, with its votes.
    fn rates(&self) -> Vec<(u64, Votes)> {
        let mut rates: Vec<u64> = self.tried.iter().map(|t| t.0).collect();
        rates.sort_unstable();
        rates.dedup();
        rates.into_iter().map(|r| (r, self.votes(r))).collect()
    }

    /// The highest rate that passed below the lowest that failed, and
    /// that failure. A pass above a decided failure does not count: it
    /// was probed as often as it may be, and the failure beneath it was
    /// decided too, so the knee is where the failure says.
    fn bounds(&self) -> (Option<u64>, Option<u64>) {
        let rates = self.rates();
        let fail = rates.iter().find(|(_, v)| v.fails()).map(|(r, _)| *r);
        let pass = rates
            .iter()
            .filter(|(r, v)| v.passes() && fail.is_none_or(|f| *r < f))
            .map(|(r, _)| *r)
            .max();
        (pass, fail)
    }

    /// A rate to probe again because its verdicts disagree: one split
    /// evenly, or a failure beneath a pass (the less certain of the two,
    /// the failure when both are provisional).
    fn disputed(&self) -> Option<u64> {
        let rates = self.rates();
        if let Some((r, _)) = rates
            .iter()
            .find(|(_, v)| v.probes() > 0 && v.passed == v.failed)
        {
            return Some(*r);
        }
        let (f, fv) = *rates.iter().find(|(_, v)| v.fails())?;
        let (p, pv) = *rates.iter().rev().find(|(r, v)| v.passes() && *r > f)?;
        match (fv.decided(), pv.decided()) {
            (false, _) => Some(f),
            (true, false) => Some(p),
            (true, true) => None,
        }
    }

    /// The next rate to try; `None` once the search has its answer.
    pub fn next_rate(&mut self) -> Option<u64> {
        if self.answer.is_some() {
            return None;
        }
        if self.tried.len() >= MAX_PROBES {
            self.settled = Some(format!(
                "settled after {MAX_PROBES} probes with verdicts still in dispute"
            ));
            self.answer = Some(self.bounds().0);
            return None;
        }
        if let Some(rate) = self.disputed() {
            return Some(rate);
        }
        let confirm = |rate: u64| (!self.votes(rate).decided()).then_some(rate);
        let next = match self.bounds() {
            (None, None) => Some(self.min),
            // Nothing held yet: halve towards the floor. A failure on the
            // way down is provisional as a pass on the way up is (the
            // bisection confirms whichever bounds the answer); only the
            // floor's must be confirmed before nothing is the answer.
            (None, Some(f)) if f > self.floor => Some((f / 2).max(self.floor)),
            (None, Some(f)) => confirm(f),
            (Some(p), None) if p < self.max => Some((p * 2).min(self.max)),
            (Some(p), None) => confirm(p),
            (Some(p), Some(f)) => {
                let mid = p + (f - p) / 2;
                let wide = (f - p) as f64 > self.precision * p as f64;
                // A gap too narrow to halve in whole msg/s has converged,
                // however fine the precision asked.
                if wide && mid > p && mid < f {
                    Some(mid)
                } else {
                    confirm(p).or_else(|| confirm(f))
                }
            }
        };
        if next.is_none() {
            self.answer = Some(self.bounds().0);
        }
        next
    }

    /// Records a probe of `rate`.
    pub fn record(&mut self, rate: u64, passed: bool) {
        self.tried.push((rate, passed));
    }

    /// How many times the rate was probed before: 0 for a first probe,
    /// 1 for its confirmation, 2 for a deciding third.
    pub fn repeats(&self, rate: u64) -> u32 {
        self.votes(rate).probes().min(VOTES - 1)
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

    /// Why the search settled with verdicts undecided, when it did.
    pub fn settled(&self) -> Option<&str> {
        self.settled.as_deref()
    }

    /// Passes that were outvoted by a decided failure beneath them: the
    /// evidence that the knee moved while the search ran.
    pub fn passes_above_failure(&self) -> Vec<u64> {
        let Some(f) = self.first_failure() else {
            return Vec::new();
        };
        self.rates()
            .into_iter()
            .filter(|(r, v)| *r > f && v.passed > 0)
            .map(|(r, _)| r)
            .collect()
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
/// `<prefix>rate-<n>` (`-again` when confirming, `-third` when deciding a
/// split); `prefix` tells apart the searches of one scenario (a fan-out's
/// pairs, a publish's msg_id modes).
pub async fn run(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    search: &SearchPlan,
    prefix: &str,
    sink: &mut dyn VariantSink,
    mut probe: impl AsyncFnMut(u64, String) -> VariantResult,
) -> Result<()> {
    let started = Instant::now();
    let mut s = RateSearch::new(search.min, search.max, search.precision).floor(search.floor);
    let mut verdicts: Vec<(u64, Verdict)> = Vec::new();
    // The checks of each probe that held: the answer's stand for it.
    let mut checks: Vec<(u64, Vec<crate::variant::Invariant>)> = Vec::new();
    let capacity = Capacity::of(ctx);
    while let Some(rate) = s.next_rate() {
        if ctx.stop.is_cancelled() {
            break;
        }
        let again = ["", "-again", "-third"][s.repeats(rate) as usize];
        let mut result = probe(rate, format!("{prefix}rate-{rate}{again}")).await;
        let verdict = Verdict::judge(&result, rate, &search.slo, &capacity);
        result.param(PROBE_PARAM, verdict.describe());
        ctx.progress.println(&format!(
            "{prefix}search: {rate} msg/s {}",
            verdict.describe()
        ));
        s.record(rate, verdict.passed());
        if verdict.passed() {
            checks.push((rate, result.invariants.clone()));
        }
        verdicts.push((rate, verdict));
        sink.record(&scenario.common, result)?;
    }

    let mut r = VariantResult::new(format!("{prefix}search"));
    r.param("slo", search.slo.describe());
    r.param("bracket", format!("{}..{} msg/s", search.min, search.max));
    r.param("floor", format!("{} msg/s", search.floor));
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
            let why = answer(&s, rate, search, &verdicts, &mut r);
            // The answer is what its probes checked: nothing lost,
            // nothing redelivered, nothing pending at that rate (a search
            // with no checks of its own read as "checked nothing").
            if let Some((_, held)) = checks.iter().rev().find(|(x, _)| *x == rate) {
                r.invariants = held.clone();
            }
            ctx.progress.println(&format!(
                "{prefix}search: max sustainable rate {rate} msg/s for {}; limited by {why}",
                search.slo.describe()
            ));
        }
        Some(None) => {
            // Nothing held down to the floor: no answer, and no evidence
            // against the server either (a probe that broke an invariant
            // fails the run by itself), so the search is inconclusive.
            let lowest = s.first_failure().unwrap_or(search.floor);
            let votes = s.votes(lowest);
            let why = format!(
                "below {lowest} msg/s: no rate from {} down to {lowest} msg/s holds {}; \
                 {lowest} msg/s failed {} of {} probes ({})",
                search.max,
                search.slo.describe(),
                votes.failed,
                votes.probes(),
                last_failure(&verdicts, lowest).map_or(String::new(), Verdict::describe)
            );
            ctx.progress
                .println(&format!("{prefix}search: inconclusive, {why}"));
            r.param("limited_by", "floor");
            r.inconclusive = Some(why);
        }
        None => r
            .warnings
            .push("interrupted: the search stopped before its answer".into()),
    }
    r.elapsed = started.elapsed();
    sink.record(&scenario.common, r)
}

/// Records the answer on `r`: the rate, where the next failure was met
/// (the answer lies between them: that is its spread), how often each was
/// probed and held, the objective's value on each of the answer's probes,
/// and what limited it. Returns the limit's evidence.
fn answer(
    s: &RateSearch,
    rate: u64,
    search: &SearchPlan,
    verdicts: &[(u64, Verdict)],
    r: &mut VariantResult,
) -> String {
    r.metric(
        "max_sustainable_rate",
        "msg/s",
        rate as f64,
        Direction::Higher,
    );
    let votes = s.votes(rate);
    let held = format!("{} of {}", votes.passed, votes.probes());
    r.param("answer_held", held);
    let values = verdicts.iter().filter(|(x, _)| *x == rate);
    let values: Vec<String> = values.map(|(_, v)| v.describe()).collect();
    r.param("answer_values", values);
    // The generator's own lag on the answer's probes: on a busy host it
    // is most of what the objective allows (a probe fails over half), so
    // the answer states it rather than leave it to be guessed.
    let lag = verdicts
        .iter()
        .filter_map(|(x, v)| match v {
            Verdict::Pass { lag_us, .. } if *x == rate => *lag_us,
            _ => None,
        })
        .reduce(f64::max);
    if let Some(lag) = lag {
        r.metric("generator_send_lag", "us", lag, Direction::None);
        r.param(
            "generator_lag",
            format!(
                "send lag p{} up to {lag:.0} us on the answer's probes, of the {:.0} us \
                 (half the objective) a probe may have",
                search.slo.quantile * 100.0,
                search.slo.limit.as_secs_f64() * 1e6 / 2.0
            ),
        );
    }
    let (tag, why) = match s.first_failure() {
        Some(f) => {
            let failed = s.votes(f);
            r.metric("lowest_failing_rate", "msg/s", f as f64, Direction::None);
            let of = format!("{} of {}", failed.failed, failed.probes());
            r.param("failure_failed", of);
            last_failure(verdicts, f).map_or(("unknown", String::new()), Verdict::limit)
        }
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
    r.param("confirmed", votes.decided());
    if let Some(settled) = s.settled() {
        r.warnings.push(format!(
            "{rate} msg/s is the search's best guess, not a confirmed answer: it {settled} \
             (the knee moves between probes here: lengthen duration)"
        ));
    }
    let outvoted = s.passes_above_failure();
    if !outvoted.is_empty() {
        r.warnings.push(format!(
            "{} msg/s passed above the confirmed failure at {} msg/s: the knee moved while \
             the search ran, and the answer is the lower",
            outvoted
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            s.first_failure().unwrap_or_default()
        ));
    }
    why
}

/// The last probe of `rate` that failed: its verdict says why.
fn last_failure(verdicts: &[(u64, Verdict)], rate: u64) -> Option<&Verdict> {
    let failed = verdicts
        .iter()
        .rev()
        .find(|(x, v)| *x == rate && !v.passed());
    failed.map(|(_, v)| v)
}

/// What each role of a probe may use: the capacity its CPU is judged
/// against when a probe fails.
#[derive(Debug, Clone)]
struct Capacity {
    /// The server runs on this host (jsbench started it), so client and
    /// server draw on the same cores.
    shared_host: bool,
    /// This host's cores.
    host: f64,
    /// The server's own cores (its processes' allowed CPUs, or /varz's).
    server: Option<f64>,
    /// The consume runtime's threads.
    consumer_threads: f64,
}

impl Capacity {
    fn of(ctx: &RunContext) -> Capacity {
        Capacity {
            shared_host: matches!(ctx.server_cpu, crate::system::cpu::ServerCpu::Processes(_)),
            host: crate::system::cores::host() as f64,
            server: crate::system::cores::server(&ctx.server_cpu).map(|n| n as f64),
            consumer_threads: crate::system::runtimes::threads().1 as f64,
        }
    }
}

/// A role at this share of its capacity or more is what limits the rate;
/// a sending thread at this share of its one core.
const SATURATED: f64 = 0.8;
const SENDER_SATURATED: f64 = 0.9;

/// Cores each role of a probe used (CPU per message times the rate, or a
/// fan-out's CPU per delivery times deliveries a second; a sending
/// thread's from its own clock), each beside its capacity. `None`: not
/// measured.
#[derive(Debug, Clone)]
struct Loads {
    client: Option<f64>,
    sender: Option<f64>,
    /// The share of its span a sending thread was runnable without a CPU
    /// (the most any waited).
    sender_waiting: Option<f64>,
    consumer: Option<f64>,
    server: Option<f64>,
    capacity: Capacity,
}

impl Loads {
    fn read(r: &VariantResult, target: f64, capacity: &Capacity) -> Loads {
        let metric = |name: &str| r.metrics.iter().find(|m| m.name == name).map(|m| m.value);
        let cores = |side: &str| {
            let per_msg = metric(&format!("{side}_cpu_per_msg")).map(|us| us * target);
            let per_delivery = || {
                Some(metric(&format!("{side}_cpu_per_delivery"))? * metric(names::CONSUME.rate)?)
            };
            per_msg.or_else(per_delivery).map(|us| us / 1e6)
        };
        Loads {
            client: cores("client"),
            sender: metric(names::SENDER_THREAD_LOAD),
            sender_waiting: metric(names::SENDER_THREAD_WAITING),
            consumer: cores("consumer"),
            server: cores("server"),
            capacity: capacity.clone(),
        }
    }

    /// The role at its capacity, if one is: a sending thread near its
    /// core, the server near its cores, the consumers near their
    /// threads; where client and server share a host, the two near its
    /// cores; elsewhere, the client near this host's.
    fn saturated(&self) -> Option<&'static str> {
        let c = &self.capacity;
        let at = |used: Option<f64>, of: Option<f64>, share: f64| matches!((used, of), (Some(u), Some(n)) if u >= share * n);
        let both = self.client.zip(self.server).map(|(a, b)| a + b);
        if at(self.sender, Some(1.0), SENDER_SATURATED) {
            Some("sender_thread")
        } else if at(self.server, c.server, SATURATED) {
            Some("server_cpu")
        } else if at(self.consumer, Some(c.consumer_threads), SATURATED) {
            Some("consumer_cpu")
        } else if c.shared_host && at(both, Some(c.host), SATURATED) {
            Some("host_cpu")
        } else if !c.shared_host && at(self.client, Some(c.host), SATURATED) {
            Some("client_cpu")
        } else {
            None
        }
    }

    /// Whether a generator that fell behind was busy or waiting, from its
    /// sending thread's CPU and run delay over its span: busy near its
    /// core, a faster client (or more publishers) would help; otherwise
    /// it was ready and not running (waiting for a CPU, or woken late
    /// from its sleeps), and a quieter host would help. `None`: the
    /// thread's CPU was not measured.
    fn sender_state(&self) -> Option<String> {
        let busy = self.sender?;
        let waiting = self.sender_waiting.map_or(String::new(), |w| {
            format!(", waiting for a CPU {:.0}%", w * 100.0)
        });
        let (state, help) = match busy >= SENDER_SATURATED {
            true => ("busy", "a faster client or more publishers would help"),
            false => (
                "not busy",
                "it waited to be scheduled, and a quieter host would help",
            ),
        };
        let share = busy * 100.0;
        Some(format!(
            "the sending thread was {state} ({share:.0}% of its span{waiting}): {help}"
        ))
    }

    /// `client 0.92 cores of 2 (busiest sending thread 0.61), server 0.80
    /// of 2`, with "not measured" where a side was not.
    fn describe(&self) -> String {
        let c = &self.capacity;
        let of = |used: Option<f64>| used.map_or("not measured".to_string(), |u| format!("{u:.2}"));
        let server_cores = c.server.map_or("?".to_string(), |n| format!("{n:.0}"));
        let mut text = format!("client {} cores of {:.0}", of(self.client), c.host);
        if let Some(sender) = self.sender {
            text += &format!(" (busiest sending thread {sender:.2})");
        }
        text + &format!(", server {} of {server_cores}", of(self.server))
    }
}

/// A probe's outcome against the search's conditions: the generator kept
/// its schedule, every invariant held, the SLO held.
#[derive(Debug, Clone)]
enum Verdict {
    /// `lag_us`: the generator's send lag at the objective's percentile,
    /// when recorded: part of what the answer states.
    Pass {
        value_us: f64,
        lag_us: Option<f64>,
    },
    Fail {
        limit: &'static str,
        why: String,
    },
}

impl Verdict {
    fn judge(
        r: &VariantResult,
        rate: u64,
        slo: &crate::profile::Slo,
        capacity: &Capacity,
    ) -> Verdict {
        let metric = |name: &str| r.metrics.iter().find(|m| m.name == name).map(|m| m.value);
        // What the variant aimed at (a fan-out rounds it to whole msg/s per
        // stream; a publish at rate_per = "publisher" multiplies it).
        let target = metric(names::TARGET_RATE).unwrap_or(rate as f64);
        let loads = Loads::read(r, target, capacity);
        let cpu = loads.describe();
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
        let limit_us = slo.limit.as_secs_f64() * 1e6;
        let histogram = |name: &str| r.histograms.iter().find(|(n, _)| n == name).map(|(_, h)| h);
        // The generator's own delay at the objective's percentile: over
        // half the limit, the objective would measure the generator. A
        // probe without the histogram goes by the scenario's warning.
        let lag_us = histogram(names::SEND_LAG).map(|h| h.quantile(slo.quantile) as f64 / 1e3);
        let behind = match lag_us {
            Some(lag) => lag > limit_us / 2.0,
            None => r
                .warnings
                .iter()
                .any(|w| w.starts_with(super::schedule::FELL_BEHIND)),
        };
        if behind || achieved < super::schedule::RATE_SHARE * target {
            // Behind with no role at its capacity: something else held
            // the generator back (a full PubAck window, a descheduled
            // thread), and the loads say so.
            let limit = loads.saturated().unwrap_or("unknown");
            let lag = lag_us.map_or(String::new(), |lag| {
                format!(", send lag p{} {lag:.0} us", slo.quantile * 100.0)
            });
            let state = loads
                .sender_state()
                .map_or(String::new(), |s| format!("; {s}"));
            return Verdict::Fail {
                limit,
                why: format!(
                    "the generator could not keep its schedule: {achieved:.0} of {target:.0} msg/s{lag} ({cpu}){state}"
                ),
            };
        }
        let Some(histogram) = histogram(slo.on.histogram()) else {
            return Verdict::Fail {
                limit: "samples",
                why: format!("no {} was recorded", slo.on.histogram()),
            };
        };
        let needed = slo.min_samples();
        if histogram.count() < needed {
            return Verdict::Fail {
                limit: "samples",
                why: format!(
                    "{} {} samples, and p{} needs at least {needed} to be more than its                      largest few (lengthen duration)",
                    histogram.count(),
                    slo.on.histogram(),
                    slo.quantile * 100.0
                ),
            };
        }
        let value_us = histogram.quantile(slo.quantile) as f64 / 1e3;
        if value_us <= limit_us {
            return Verdict::Pass { value_us, lag_us };
        }
        // Over the objective with every role under its capacity: the
        // latency broke first, unless a side was not measured.
        let limit = loads.saturated().unwrap_or(if loads.server.is_some() {
            "slo"
        } else {
            "unknown"
        });
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
            Verdict::Pass { value_us, lag_us } => match lag_us {
                Some(lag) => format!("held ({value_us:.0} us; send lag {lag:.0} us)"),
                None => format!("held ({value_us:.0} us)"),
            },
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
mod tests;
