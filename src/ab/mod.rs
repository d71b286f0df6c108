//! `jsbench ab`: two builds (of jsbench or of nats-server) measured in
//! interleaved slices against one server, each metric judged by the
//! confidence interval of its paired ratios NEW/BASE.
//!
//! Two unpaired runs of one build move 15–30% on a shared machine, so a
//! baseline recorded elsewhere cannot catch a 5% regression. Slices run
//! back to back in ABBA order (base, new, new, base, ...), so what drifts
//! linearly over the run cancels, and each pair's ratio cancels what moves
//! both of its slices. The verdicts ([`judge`]) rest on exact signed-rank
//! intervals ([`stats`]); the comparison stops as soon as every judged
//! metric is decided, or at its budget.
//!
//! - [`slice`]: one side's run of the profiles, as a child process.
//! - [`window`]: one side kept warm in a process of its own, a scenario
//!   per turn (`jsbench ab-side`); [`warm`]: the two sides taking turns in
//!   pairs.
//! - [`judge`]: which metrics are judged, and the verdict on each.
//! - [`stats`]: Hodges–Lehmann estimates, signed-rank tests and intervals,
//!   the sign test, Holm's and Tarone's corrections.
//! - [`tails`]: p99 and p99.9 from the pairs' histograms merged per side.
//! - [`report`]: what ab.json holds, and the verdict and exit status read
//!   from the judgements.
//! - [`servers`]: the two sides and the servers ab starts for them.
//! - [`render`]: ab.json, the Markdown table, the terminal table.
//! - [`chart`]: the paired ratios with their intervals, and report.html.
//! - [`simulate`]: detection power from A/A comparisons, by the same judge.

pub mod chart;
pub mod judge;
pub mod render;
pub mod report;
mod servers;
pub mod simulate;
pub mod slice;
pub mod stats;
pub mod tails;
pub mod warm;
pub mod window;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;

use crate::connect::{ConnectionRequest, Resolution, resolve_all};
use crate::profile::{self, format_duration};
use crate::results::summary::Summary;
use crate::scenario::{self, Profile};
use crate::system::about;
use crate::system::error::{EXIT_FAILED, EXIT_OK, UsageError};
use judge::{Look, PairedVerdict, Rule};
pub use report::{
    AB_SCHEMA_VERSION, AbReport, PairRecord, SideInfo, SliceRecord, Stopped, read_report,
};
use report::{conclude, fill_sides, pair_record, side_info};
use servers::{Servers, describe, sides, slice_cpus};
use slice::{Side, SliceError, SliceResult};

/// What the two sides are.
#[derive(Debug, Clone)]
pub enum Sides {
    /// This build against itself: an A/A run that shows the noise.
    Same,
    /// Two jsbench binaries (two commits' builds) against one server.
    Jsbench { base: PathBuf, new: PathBuf },
    /// This jsbench against two nats-server binaries (or wrappers), each
    /// started by ab as its side's embedded server (or cluster).
    Server { base: PathBuf, new: PathBuf },
}

impl Sides {
    fn kind(&self) -> &'static str {
        match self {
            Sides::Same => "same build (A/A)",
            Sides::Jsbench { .. } => "jsbench builds",
            Sides::Server { .. } => "nats-server builds",
        }
    }
}

#[derive(Debug, Clone)]
pub struct AbOptions {
    pub profiles: Vec<String>,
    pub sides: Sides,
    pub connection: ConnectionRequest,
    pub cluster: Option<usize>,
    /// Parent folder of the ab folder.
    pub out: PathBuf,
    pub budget: Duration,
    /// Stop after this many pairs even if undecided.
    pub max_pairs: Option<usize>,
    /// Each scenario's `duration` in a slice; `None` keeps the profile's.
    pub slice: Option<Duration>,
    /// Flags that override the profiles' `[ab]` tables and the defaults.
    pub threshold: Option<f64>,
    pub latency_threshold: Option<f64>,
    pub confidence: f64,
    /// The chance a metric worse by its threshold passes as unchanged.
    pub miss: f64,
    pub only: Vec<String>,
    /// Keep the servers on CPU 0 and the slices on the other CPUs.
    pub pin: bool,
    /// Confine the slices (not the servers) to these CPUs.
    pub slice_cpus: Option<Vec<usize>>,
    /// Whole slices even where both sides could stay warm.
    pub slices_only: bool,
}

/// `jsbench ab`: runs the pairs, writes the folder, prints the table;
/// returns the exit status (0 no regression, 1 a regression or a broken
/// invariant, 130 interrupted). Bad input is a [`UsageError`] (exit 2).
pub async fn command(options: AbOptions, stop: CancellationToken) -> Result<i32> {
    let profiles: Vec<Profile> = options
        .profiles
        .iter()
        .map(|p| scenario::load(p))
        .collect::<Result<_>>()?;
    let rule = rule(&options, &profiles)?;
    let profiles = slice::without_faults(profiles)?;
    let named = profiles
        .iter()
        .map(|p| (p.name.as_str(), p.connection.as_ref()));
    let resolution = resolve_all(&options.connection, named, options.cluster.is_some())?;
    let given = resolution.remote.is_some();
    if given && matches!(options.sides, Sides::Server { .. }) {
        return Err(UsageError(
            "--base-server/--new-server start each side's own server; they cannot be used with a \
             given server (-s, --context, NATS_URL or a profile's [connection])"
                .into(),
        )
        .into());
    }
    let slice_cpus = slice_cpus(&options, given)?;
    // Servers ab starts itself outlive every slice and stop when the
    // comparison ends: one both sides share, or one per side.
    let mut servers = Servers::default();
    let (base, new, target_name) = sides(&options, given, &mut servers)?;
    let (dir, mut report) = start(
        &options,
        &profiles,
        rule,
        &resolution,
        (&base, &new),
        target_name,
    )?;
    let _servers = servers;
    let clock = Instant::now();
    let pairs = Pairs {
        options: &options,
        profiles: &profiles,
        dir: &dir,
        sides: (&base, &new),
        slice_cpus: slice_cpus.as_deref(),
        stop: &stop,
    };
    let mut source = open_source(&pairs, &mut report).await?;
    let (slices, failure) = run_pairs(&pairs, &mut source, &mut report, clock).await?;
    if let Source::Windows(sides) = source
        && let Err(e) = sides.quit().await
    {
        report
            .notes
            .push(format!("a warm side did not end cleanly: {e:#}"));
    }
    report.elapsed_s = clock.elapsed().as_secs_f64();
    report.finished_at = Some(rfc3339(time::OffsetDateTime::now_utc()));
    last_look(&mut report, &slices);
    conclude(&mut report);
    write_report(&dir, &report)?;
    if let Err(e) = chart::write(&dir, &report) {
        eprintln!("warning: the ab chart and report.html were not written: {e:#}");
    }
    crate::system::stdout::outln!("{}", render::terminal(&report));
    crate::system::stdout::outln!("results: {}", dir.display());
    if let Some(e) = failure {
        return Err(e.context(format!("results so far are in {}", dir.display())));
    }
    Ok(report.exit_code)
}

/// The comparison's folder and its report as it starts, announced.
fn start(
    options: &AbOptions,
    profiles: &[Profile],
    rule: Rule,
    resolution: &Resolution,
    (base, new): (&Side, &Side),
    target_name: String,
) -> Result<(PathBuf, AbReport)> {
    let started_at = time::OffsetDateTime::now_utc();
    let tool = about::tool();
    let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
    let id =
        crate::results::metadata::run_id(started_at, &tool, &format!("ab-{}", names.join("+")));
    let dir = options.out.join(&id);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let report = AbReport {
        schema_version: AB_SCHEMA_VERSION,
        id,
        started_at: rfc3339(started_at),
        finished_at: None,
        tool,
        host: about::host(),
        profiles: names.iter().map(|s| s.to_string()).collect(),
        sides_kind: options.sides.kind().into(),
        mode: "slices".into(),
        base: side_info(base),
        new: side_info(new),
        target: target_name,
        budget_s: options.budget.as_secs_f64(),
        slice_s: options.slice.map(|d| d.as_secs_f64()),
        pairs_needed: pairs_needed(&rule),
        rule,
        warmup: None,
        pairs: Vec::new(),
        looks: Vec::new(),
        stopped: None,
        elapsed_s: 0.0,
        metrics: Vec::new(),
        failures: Vec::new(),
        checks: Vec::new(),
        notes: resolution.notes.clone(),
        verdict: "running".into(),
        exit_code: EXIT_OK,
    };
    eprintln!(
        "jsbench ab: {} ({}), BASE {} vs NEW {}, against {}; up to {} in pairs -> {}",
        names.join(", "),
        report.sides_kind,
        describe(base),
        describe(new),
        report.target,
        format_duration(options.budget),
        dir.display()
    );

    Ok((dir, report))
}

/// What every pair of slices runs with.
struct Pairs<'a> {
    options: &'a AbOptions,
    profiles: &'a [Profile],
    dir: &'a Path,
    sides: (&'a Side, &'a Side),
    slice_cpus: Option<&'a [usize]>,
    stop: &'a CancellationToken,
}

/// The fewest judged pairs that can decide one metric at the final look:
/// below it the signed-rank test cannot reach the look's rate whatever
/// the pairs say.
fn pairs_needed(rule: &Rule) -> usize {
    (1..=1024)
        .find(|&n| stats::smallest_p(n) <= Look::last(n, rule).metrics_alpha())
        .unwrap_or(1024)
}

/// The warm-up pair, then pairs of slices, BASE and NEW in ABBA order,
/// looked at after 8, 16, 32, ... pairs, until the budget, a decision, a
/// failure or a stop; the judged slices, and the error that ended them.
async fn run_pairs(
    pairs: &Pairs<'_>,
    source: &mut Source,
    report: &mut AbReport,
    clock: Instant,
) -> Result<(Vec<(SliceResult, SliceResult)>, Option<anyhow::Error>)> {
    let options = pairs.options;
    let mut slices: Vec<(SliceResult, SliceResult)> = Vec::new();
    let warm_units = match source {
        Source::Windows(_) => undecided_scenarios(report, pairs.profiles).len().max(1),
        Source::Slices(_) => 1,
    };
    let warm = match run_pair(pairs, source, report, 0, order_of(0)).await {
        Ok(pair) => pair,
        Err(stop) => return Ok((slices, stop)),
    };
    // The longest pair of each unit so far, for whether the next block
    // fits; before a unit's first, the warm-up pair's share per unit.
    let mut longest: BTreeMap<Option<ScenarioRef>, Duration> = BTreeMap::new();
    let first_guess = warm.2 / warm_units as u32;
    report.warmup = Some(pair_record(
        pairs.dir,
        0,
        order_of(0),
        None,
        (&warm.0, &warm.1),
    ));
    if let Some(e) = unmatched_patterns(&report.rule, &warm.0, &warm.1) {
        report.stopped = Some(Stopped::BadInput);
        report.notes.push(format!("{e}"));
        return Ok((slices, Some(e.into())));
    }
    write_report(pairs.dir, report)?;
    // A block of two pairs (AB, then BA) is started only when it fits
    // whole, so the pairs judged are always balanced.
    let max_pairs = options.max_pairs.map(|n| n.next_multiple_of(2));
    loop {
        let index = slices.len() + 1;
        if max_pairs.is_some_and(|max| slices.len() >= max) {
            report.stopped = Some(Stopped::Pairs);
            break;
        }
        let unit = source.unit(report, pairs.profiles, index);
        let expected = longest.get(&unit).copied().unwrap_or(first_guess);
        if index % 2 == 1 && clock.elapsed() + expected * 2 > options.budget {
            report.stopped = Some(Stopped::Budget);
            break;
        }
        let order = order_in(report, index, unit.as_ref());
        let (b, n, elapsed) = match run_pair(pairs, source, report, index, order).await {
            Ok(pair) => pair,
            Err(stop) => return Ok((slices, stop)),
        };
        let slot = longest.entry(unit.clone()).or_default();
        *slot = (*slot).max(elapsed);
        report.pairs.push(pair_record(
            pairs.dir,
            index,
            order,
            unit.as_ref(),
            (&b, &n),
        ));
        slices.push((b, n));
        fill_sides(report, &slices);
        report.elapsed_s = clock.elapsed().as_secs_f64();
        let Some(look) = Look::interim(slices.len(), &report.rule) else {
            write_report(pairs.dir, report)?;
            continue;
        };
        judge_at(report, &slices, look);
        let judged = report.judged().count();
        let decided = report.judged().filter(|m| m.verdict.decided()).count();
        eprintln!(
            "jsbench ab: look {} at pair {index}: {decided} of {judged} judged metrics decided, {} regressed; {} of {}",
            report.looks.len(),
            report.count(PairedVerdict::Regressed),
            format_duration(Duration::from_secs(clock.elapsed().as_secs())),
            format_duration(options.budget),
        );
        write_report(pairs.dir, report)?;
        if failed(report) {
            report.stopped = Some(Stopped::Failed);
            break;
        }
        // Every judged metric decided, or nothing left that a pair could
        // decide (no scenario holds an undecided judged metric); never
        // while NEW breaks a check more often than BASE, undecided.
        let open_checks = report.checks.iter().any(|c| c.verdict.open());
        if !open_checks
            && ((judged > 0 && decided == judged)
                || undecided_scenarios(report, pairs.profiles).is_empty())
        {
            report.stopped = Some(Stopped::Decided);
            break;
        }
    }
    Ok((slices, None))
}

/// Where pairs come from: whole slices, or turns of two warm sides.
enum Source {
    /// A process per slice; the slice profiles kept while the scenarios
    /// they hold stay the same (scenarios whose judged metrics are all
    /// decided leave them, so the budget goes to the ones still undecided).
    Slices(Option<(Vec<PathBuf>, Vec<ScenarioRef>)>),
    /// BASE's and NEW's warm sides.
    Windows(Box<warm::Sides>),
}

impl Source {
    /// The scenario a judged pair runs with warm sides: each undecided
    /// scenario in turn, a block of two pairs (AB, BA) each, so a
    /// scenario's pairs lie close in time; `None` with slices (a slice
    /// runs every undecided scenario).
    fn unit(&self, report: &AbReport, profiles: &[Profile], index: usize) -> Option<ScenarioRef> {
        let Source::Windows(_) = self else {
            return None;
        };
        let units = undecided_scenarios(report, profiles);
        let block = (index.max(1) - 1) / 2;
        units.get(block % units.len().max(1)).cloned()
    }
}

/// Warm sides when both builds can stay up (`jsbench ab-side`), else
/// slices, with a note saying why.
async fn open_source(pairs: &Pairs<'_>, report: &mut AbReport) -> Result<Source> {
    if pairs.options.slices_only {
        report.notes.push("--slices: a process per slice".into());
        return Ok(Source::Slices(None));
    }
    let folder = pairs.dir.join("profiles").join("windows");
    let profiles =
        slice::write_profiles(pairs.profiles, pairs.options.slice, &folder, &|_, _| true)?;
    let logs = pairs.dir.join("windows");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let opened = warm::Sides::open(pairs.sides, &profiles, &logs, pairs.slice_cpus, pairs.stop);
    match opened.await? {
        warm::Opened::Warm(sides) => {
            report.mode = "windows".into();
            eprintln!(
                "jsbench ab: both sides warm (jsbench ab-side): a pair is one scenario, run by each side in turn"
            );
            Ok(Source::Windows(sides))
        }
        warm::Opened::Cold(why) => {
            eprintln!("jsbench ab: slices, a process each: {why}");
            report.notes.push(format!("slices, not warm sides: {why}"));
            Ok(Source::Slices(None))
        }
    }
}

/// One pair, from whichever source, its sides run in `order` (the
/// warm-up pair is index 0).
async fn run_pair(
    pairs: &Pairs<'_>,
    source: &mut Source,
    report: &mut AbReport,
    index: usize,
    order: warm::Order,
) -> Result<(SliceResult, SliceResult, Duration), Option<anyhow::Error>> {
    let unit = source.unit(report, pairs.profiles, index);
    match source {
        Source::Slices(running) => slice_pair(pairs, running, report, (index, order)).await,
        Source::Windows(sides) => {
            let units = match (index, unit) {
                (0, _) => undecided_scenarios(report, pairs.profiles),
                (_, Some(unit)) => vec![unit],
                (_, None) => Vec::new(),
            };
            let result = sides
                .pair(pairs.sides, &units, order, pairs.dir, index, pairs.stop)
                .await;
            result.map_err(|e| stopped_by(report, e))
        }
    }
}

/// What stopped a pair, in the report: a Ctrl-C (kept quiet: what was
/// measured is judged) or a side that failed (its error comes back).
fn stopped_by(report: &mut AbReport, e: anyhow::Error) -> Option<anyhow::Error> {
    let interrupted = matches!(
        e.downcast_ref::<SliceError>(),
        Some(SliceError::Interrupted)
    );
    report.stopped = Some(if interrupted {
        Stopped::Interrupted
    } else {
        Stopped::SliceFailed
    });
    (!interrupted).then_some(e)
}

/// Whether BASE goes first: in odd pairs and the warm-up pair (ABBA: every
/// other pair starts with NEW, so a linear drift weighs on both sides alike).
fn order_of(index: usize) -> warm::Order {
    if index % 2 == 1 || index == 0 {
        warm::Order::BaseFirst
    } else {
        warm::Order::NewFirst
    }
}

/// A pair's order with warm sides: ABBA within a block, and every other
/// block of the same scenario the other way round (BAAB). The first turn
/// of a block follows another scenario's turns and finds the server cold
/// for its own; with ABBA alone that turn was always BASE's, and five A/A
/// comparisons of the ci profile measured NEW's max-rate publish faster in
/// all five (+2% to +13%, the first variant of the turn only). Swapping
/// the block gives the cold turn to each side alike.
fn order_in(report: &AbReport, index: usize, unit: Option<&ScenarioRef>) -> warm::Order {
    let abba = order_of(index);
    let Some((profile, scenario)) = unit else {
        return abba;
    };
    let name = format!("{profile}:{scenario}");
    let earlier = report
        .pairs
        .iter()
        .filter(|p| p.unit.as_deref() == Some(name.as_str()))
        .count();
    match (earlier / 2 % 2 == 1, abba) {
        (false, order) => order,
        (true, warm::Order::BaseFirst) => warm::Order::NewFirst,
        (true, warm::Order::NewFirst) => warm::Order::BaseFirst,
    }
}

/// One pair of slices. On a stop, `report.stopped` says why and the error
/// that ended it, if it was one, comes back.
async fn slice_pair(
    pairs: &Pairs<'_>,
    running: &mut Option<(Vec<PathBuf>, Vec<ScenarioRef>)>,
    report: &mut AbReport,
    (index, order): (usize, warm::Order),
) -> Result<(SliceResult, SliceResult, Duration), Option<anyhow::Error>> {
    let (options, profiles, dir) = (pairs.options, pairs.profiles, pairs.dir);
    let undecided = undecided_scenarios(report, profiles);
    let slice_profiles = match running {
        Some((paths, set)) if *set == undecided => paths.clone(),
        _ => {
            let folder = dir.join("profiles").join(format!("from-pair-{index:03}"));
            let written = slice::write_profiles(profiles, options.slice, &folder, &|p, s| {
                undecided.iter().any(|(up, us)| up == p && us == s)
            });
            let paths = written.map_err(Some)?;
            *running = Some((paths.clone(), undecided.clone()));
            paths
        }
    };
    let (base, new) = pairs.sides;
    let sides = match order {
        warm::Order::BaseFirst => [base, new],
        warm::Order::NewFirst => [new, base],
    };
    let started = Instant::now();
    let limit = (options.budget * 2).max(Duration::from_secs(600));
    let mut done = Vec::new();
    for side in sides {
        let name = match index {
            0 => format!("warmup-{}", side.role),
            i => format!("{i:03}-{}", side.role),
        };
        let slice_dir = dir.join("slices").join(name);
        let cpus = pairs.slice_cpus;
        let result = slice::run(side, &slice_profiles, &slice_dir, limit, cpus, pairs.stop).await;
        done.push(result.map_err(|e| stopped_by(report, e))?);
    }
    let elapsed = started.elapsed();
    if order == warm::Order::NewFirst {
        done.reverse();
    }
    let [b, n]: [SliceResult; 2] = done.try_into().expect("two slices ran");
    announce(index, &order.roles().join(","), (&b, &n));
    Ok((b, n, elapsed))
}

/// A pair done, on stderr: which pair, `what` it ran, and each side's time.
fn announce(index: usize, what: &str, (b, n): (&SliceResult, &SliceResult)) {
    let which = match index {
        0 => "warm-up pair (not judged)".to_string(),
        i => format!("pair {i}"),
    };
    eprintln!(
        "jsbench ab: {which} ({what}): base {:.1}s, new {:.1}s",
        b.elapsed.as_secs_f64(),
        n.elapsed.as_secs_f64(),
    );
}

/// The first `--only` or `[ab] judge` pattern that selects no metric the
/// warm-up pair measured, as the bad input it is: a comparison that
/// judges nothing must not pass.
fn unmatched_patterns(rule: &Rule, base: &SliceResult, new: &SliceResult) -> Option<UsageError> {
    if rule.only.is_empty() {
        return None;
    }
    let pairs = [(base.summaries.as_slice(), new.summaries.as_slice())];
    // Examples: what the default rule would judge first, then the rest.
    let plain = Rule {
        only: Vec::new(),
        ..rule.clone()
    };
    let mut tracks = judge::tracks(&pairs, &plain);
    tracks.sort_by_key(|t| t.class.is_none());
    let keys: Vec<judge::Key> = tracks.into_iter().map(|t| t.key).collect();
    let with_profile = keys
        .iter()
        .map(|k| &k.profile)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        > 1;
    let pattern = rule
        .only
        .iter()
        .find(|p| !keys.iter().any(|k| Rule::pattern_selects(p, k)))?;
    let mut examples: Vec<String> = keys.iter().map(|k| k.label(with_profile)).collect();
    examples.truncate(12);
    Some(UsageError(format!(
        "the pattern '{pattern}' (--only or [ab] judge) selects no metric the profiles measure; \
         they measure, for example: {}",
        examples.join(", ")
    )))
}

/// Every metric and check judged at `look` over the pairs so far.
fn judge_at(report: &mut AbReport, slices: &[(SliceResult, SliceResult)], look: Look) {
    let pairs: Vec<(&[Summary], &[Summary])> = slices
        .iter()
        .map(|(b, n)| (b.summaries.as_slice(), n.summaries.as_slice()))
        .collect();
    let tracks = judge::tracks(&pairs, &report.rule);
    let tails = merged_tails(&tracks, slices, &mut report.notes);
    report.metrics = judge::judge_metrics(&tracks, &report.rule, &look, &tails);
    report.checks = judge::judge_checks(&pairs, &look);
    report.failures = slices
        .iter()
        .enumerate()
        .flat_map(|(i, (_, n))| {
            n.summaries.iter().flat_map(move |s| {
                crate::compare::failures_of(s)
                    .into_iter()
                    .map(move |mut f| {
                        f.detail = format!("pair {}: {}", i + 1, f.detail);
                        f
                    })
            })
        })
        .collect();
    report.looks.push(look);
}

/// Judged tails (p99, p99.9) whose histograms at least [`MERGED_PAIRS`]
/// pairs carry on both sides, estimated from the merged histograms.
fn merged_tails(
    tracks: &[judge::Track],
    slices: &[(SliceResult, SliceResult)],
    notes: &mut Vec<String>,
) -> judge::Tails {
    let hists: Vec<(&tails::PairHistograms, &tails::PairHistograms)> = slices
        .iter()
        .map(|(b, n)| (&b.histograms, &n.histograms))
        .collect();
    let mut out = judge::Tails::new();
    for t in tracks
        .iter()
        .filter(|t| t.class == Some(judge::Class::Latency))
    {
        let Some((name, q)) = tails::tail_of(&t.key.metric) else {
            continue;
        };
        let key = (
            t.key.profile.clone(),
            t.key.scenario.clone(),
            t.key.variant.clone(),
            name.to_string(),
        );
        match tails::Merged::of(&hists, &key) {
            Ok(Some(merged)) => {
                if let Some(e) = merged.estimate(q).filter(|e| e.pairs >= MERGED_PAIRS) {
                    out.insert(t.key.clone(), (q, e));
                }
            }
            Ok(None) => {}
            Err(e) => notes.push(format!("{}: judged per pair: {e:#}", t.key.label(true))),
        }
    }
    out
}

/// The fewest pairs a merged tail is judged on; below it, per pair.
const MERGED_PAIRS: usize = 4;

/// The final look, unless an interim look already ended the comparison
/// with a decision: the pairs so far (an odd last pair left out, so ABBA
/// stays balanced), every metric and check judged at the rate kept for it.
fn last_look(report: &mut AbReport, slices: &[(SliceResult, SliceResult)]) {
    let decided_early = matches!(report.stopped, Some(Stopped::Decided | Stopped::Failed))
        && report.looks.last().is_some_and(|l| l.pairs == slices.len());
    if decided_early || report.stopped == Some(Stopped::BadInput) {
        return;
    }
    let even = slices.len() - slices.len() % 2;
    if even < slices.len() {
        report.notes.push(format!(
            "pair {} was left out of the judgement: an odd last pair would unbalance ABBA",
            slices.len()
        ));
    }
    if even == 0 {
        return;
    }
    judge_at(report, &slices[..even], Look::last(even, &report.rule));
}

fn failed(report: &AbReport) -> bool {
    report.failing_checks().next().is_some() || report.metrics.iter().any(|m| m.verdict.fails())
}

/// The change of a rate (and of CPU per message) a comparison is built to
/// catch when neither a flag nor the profile says; half of it is the
/// smallest it calls a regression (docs/ab.md).
pub const DEFAULT_THRESHOLD: f64 = 0.05;
/// The same for latency percentiles, whose pairs scatter more.
pub const DEFAULT_LATENCY_THRESHOLD: f64 = 0.10;

/// The rule: flags first, then the profiles' `[ab]` tables, then the
/// defaults. Profiles that disagree on a threshold need the flag.
fn rule(options: &AbOptions, profiles: &[Profile]) -> Result<Rule> {
    let plans: Vec<(&str, &profile::AbPlan)> = profiles
        .iter()
        .filter_map(|p| p.ab.as_ref().map(|a| (p.name.as_str(), a)))
        .collect();
    let agreed = |flag: Option<f64>, key: &str, pick: fn(&profile::AbPlan) -> Option<f64>| {
        if flag.is_some() {
            return Ok(flag);
        }
        let values: Vec<(&str, f64)> = plans
            .iter()
            .filter_map(|(n, a)| Some((*n, pick(a)?)))
            .collect();
        match values.as_slice() {
            [] => Ok(None),
            [(_, v), rest @ ..] if rest.iter().all(|(_, w)| w == v) => Ok(Some(*v)),
            _ => Err(UsageError(format!(
                "the profiles' [ab] tables disagree on {key} ({}); give --{} to decide",
                values
                    .iter()
                    .map(|(n, v)| format!("{n}: {}%", v * 100.0))
                    .collect::<Vec<_>>()
                    .join(", "),
                key.replace('_', "-")
            ))),
        }
    };
    let only = if options.only.is_empty() {
        plans
            .iter()
            .flat_map(|(_, a)| a.judge.iter().cloned())
            .collect()
    } else {
        options.only.clone()
    };
    let throughput =
        agreed(options.threshold, "threshold", |a| a.threshold)?.unwrap_or(DEFAULT_THRESHOLD);
    Ok(Rule {
        throughput,
        cost: throughput,
        latency: agreed(options.latency_threshold, "latency_threshold", |a| {
            a.latency_threshold
        })?
        .unwrap_or(DEFAULT_LATENCY_THRESHOLD),
        confidence: options.confidence,
        miss: options.miss,
        only,
    })
}

/// A scenario by its profile's name and its own.
type ScenarioRef = (String, String);

/// The (profile, scenario) names the pairs must still run: every scenario
/// until a look has judged it, then those with a judged metric still
/// undecided or a check NEW breaks more often than BASE. A scenario no judged pair has measured yet stays (with warm
/// sides the scenarios take turns, and a look may come before a
/// scenario's first turn).
fn undecided_scenarios(report: &AbReport, profiles: &[Profile]) -> Vec<(String, String)> {
    let all = profiles.iter().flat_map(|p| {
        p.scenarios
            .iter()
            .map(move |s| (p.name.clone(), s.name().to_string()))
    });
    if report.looks.is_empty() {
        return all.collect();
    }
    all.filter(|(p, s)| {
        let mut metrics = report
            .metrics
            .iter()
            .filter(|m| &m.key.profile == p && &m.key.scenario == s)
            .peekable();
        metrics.peek().is_none()
            || metrics.any(|m| m.verdict != PairedVerdict::NotJudged && !m.verdict.decided())
            || report
                .checks
                .iter()
                .any(|c| &c.profile == p && &c.scenario == s && c.verdict.open())
    })
    .collect()
}

/// `jsbench report` on an ab folder: ab.md, the chart and report.html
/// drawn again from ab.json, and the table printed. Exit status 0, or 1
/// when the chart failed.
pub fn render_folder(dir: &Path) -> Result<i32> {
    let report = read_report(&dir.join("ab.json"))?;
    std::fs::write(dir.join("ab.md"), render::markdown(&report)).context("writing ab.md")?;
    crate::system::stdout::outln!("{}", render::terminal(&report));
    match chart::write(dir, &report) {
        Ok(()) => Ok(EXIT_OK),
        Err(e) => {
            eprintln!("error: the ab chart and report.html were not written: {e:#}");
            Ok(EXIT_FAILED)
        }
    }
}

fn write_report(dir: &Path, report: &AbReport) -> Result<()> {
    let json = serde_json::to_string_pretty(report).context("serialising ab.json")?;
    std::fs::write(dir.join("ab.json"), json).context("writing ab.json")?;
    std::fs::write(dir.join("ab.md"), render::markdown(report)).context("writing ab.md")?;
    Ok(())
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}
