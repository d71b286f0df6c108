//! The command line: raw arguments become typed options once, here; the
//! work lives in the library.

mod profiles;
mod relay;
mod serve;
mod signals;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

use crate::connect::{ConnectionFlags, ConnectionRequest};
use crate::profile::{self, parse_duration};
use crate::run::{RunOptions, run};
use crate::server::CLUSTER_SIZES;
use crate::system::error::{self, EXIT_OK, UsageError};
use crate::system::progress::ProgressMode;
use signals::interruptible;

#[derive(Parser, Debug)]
#[command(
    name = "jsbench",
    version,
    about = "Throughput, latency and delivery-guarantee benchmarks for NATS JetStream",
    long_about = "jsbench measures JetStream's reliable-delivery machinery (publish acks and \
dedup, durable consumers and acks, redelivery, backpressure, dead letters, replay) \
against a real nats-server, and checks that no message is lost while it measures.\n\n\
Without --server it starts its own nats-server on 127.0.0.1 (a free port, a \
temporary store) and stops it afterwards; run scripts/setup.sh once to install it.",
    after_help = "Examples:\n  \
jsbench run quick                           smoke run on the embedded server\n  \
jsbench run default -o /tmp/r               rate sweep, results under /tmp/r\n  \
jsbench report results/<run>                draw charts and report.html again\n  \
jsbench compare results/baseline results/<run>  judge a run against a baseline\n  \
jsbench run my.toml -s nats://staging:4222  an existing server\n  \
jsbench run quick --context staging         a natscli context\n  \
jsbench run quick --cluster 3               a local 3-node cluster, R3 streams\n  \
jsbench run workers --workers 3             split the load with 3 `jsbench worker`s\n  \
jsbench profiles quick > my.toml            start a profile of your own\n\n\
Documentation: README.md and docs/ (docs/profiles.md: profile keys; docs/scenarios/: one page per \
scenario; docs/connecting.md: servers and credentials; docs/troubleshooting.md: common errors)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run profiles and write a results folder per profile
    #[command(
        long_about = "Runs each profile's scenarios and writes results/<utc>-<commit>-<profile>/ with \
summary.json, metrics.csv, histograms/, charts/ and report.html. Exit status: 0 all invariants held, \
1 a scenario failed or an invariant broke, 2 bad input, 3 nothing broke but a rate search found no rate \
down to its search.floor (docs/search.md), 4 nothing broke but some variant checked nothing \
(its every invariant \"not applicable\"), 130 interrupted (results so far are kept).",
        after_help = "Documentation: docs/profiles.md (profiles), docs/scenarios/ (one page per scenario), \
docs/connecting.md (servers, credentials, contexts), docs/cluster.md (--cluster), docs/workers.md \
(--workers), docs/results.md (the results folder), docs/faults.md (exit statuses, bad input)."
    )]
    Run(Box<RunArgs>),
    /// Start an embedded nats-server (JetStream, loopback) and print its URL until Ctrl-C
    #[command(after_help = "Documentation: docs/cluster.md (--cluster), docs/connecting.md")]
    Server(ServerArgs),
    /// Run shares of another jsbench's load: wait for `jsbench run --workers N` and follow it
    #[command(
        long_about = "Connects to the server under test (same connection options as run: -s, --context, \
--creds, ...), announces itself on jsb.workers.<group>.announce and waits. A `jsbench run --workers N` \
with the same --group recruits it, measures and corrects its clock offset over NATS request/reply, \
and then hands it a share of every variant's publishers and consumer clients; the worker sends its \
histograms, ledgers and timelines back when each variant ends, and the coordinator writes one results \
folder. A worker serves run after run until Ctrl-C (--once: one run).\n\n\
The worker must run the same jsbench release as the coordinator; a different version or results \
schema is refused with a message naming both, and the worker exits with status 2.",
        after_help = "Examples:\n  \
jsbench worker -s nats://10.0.0.5:4222                    join the next run on that server\n  \
jsbench worker --context staging --group nightly --once   one run of the `nightly` group\n\n\
Documentation: docs/workers.md (workers), docs/connecting.md (connection options)"
    )]
    Worker(Box<WorkerArgs>),
    /// Relay connections between a loopback port and a Unix socket (or another port) until Ctrl-C
    #[command(
        long_about = "Accepts connections on --listen and relays each to --to, both ways, until Ctrl-C. \
Either end is a loopback address (127.0.0.1:4222) or a Unix socket (unix:/path/to.sock); nothing \
else is accepted. Its use: a worker in a network namespace of its own, where only its own loopback \
exists, reaches the server outside through a Unix socket, which both sides of the namespace see \
in the filesystem.",
        after_help = "Example (a worker in its own network namespace):\n  \
jsbench relay --listen unix:/tmp/nats.sock --to 127.0.0.1:4222 &\n  \
unshare -rn sh -c 'ip link set lo up; jsbench relay --listen 127.0.0.1:4222 --to unix:/tmp/nats.sock & \
sleep 1; jsbench worker -s nats://127.0.0.1:4222'\n\n\
Documentation: docs/workers.md (workers across network stacks)"
    )]
    Relay {
        /// Where to accept connections: 127.0.0.1:PORT or unix:PATH
        #[arg(long, value_name = "ENDPOINT")]
        listen: crate::server::relay::Endpoint,
        /// Where to relay them: 127.0.0.1:PORT or unix:PATH
        #[arg(long, value_name = "ENDPOINT")]
        to: crate::server::relay::Endpoint,
    },
    /// List the bundled profiles, or print one
    #[command(
        after_help = "Documentation: docs/profiles.md (the format), docs/scenarios/ (keys per scenario)"
    )]
    Profiles {
        /// Print this profile's TOML (a starting point for your own)
        name: Option<String>,
    },
    /// Draw the charts and report.html of a results folder again
    #[command(
        long_about = "Re-renders charts/*.svg, charts/*.png, report.html and the CI files in ci/ of a \
results folder from its summary.json and histograms/ alone, with this version's code (results of older commits \
included), and prints the summary table. Exit status: 0 all drawn, 1 a chart failed, \
2 the folder is missing or a file in it is unreadable.",
        after_help = "Documentation: docs/report.md (charts and report.html), docs/results.md (the results folder)"
    )]
    Report {
        /// A results folder (results/<utc>-<commit>-<profile>/) or its summary.json
        #[arg(value_name = "RESULTS_DIR")]
        dir: PathBuf,
    },
    /// Compare two runs' results: base, new, change and a verdict per metric
    #[command(
        long_about = "Matches the metrics of two results folders (or summary.json files) by scenario, \
variant and name and judges each by its direction: a regression is a change beyond --threshold \
that is also outside the min..max range of both runs' repetitions (profile key `repeat`). \
Judged are the metrics --only names, else those the profile's [ab] judge names, else the \
figures of merit (rates, CPU per message, latency p50 to p99.9); the rest are shown, and the \
output says how many were judged. Invariant failures in NEW are always a failure and are listed first. Exit status: 0 no \
regression, 1 a regression or an invariant failure in NEW, 2 unusable input (a missing file, \
different profiles, set-ups or schema versions).",
        after_help = "Documentation: docs/compare.md (the regression rule, noise, baselines, scripts/ci-compare.sh, CI formats)"
    )]
    Compare(CompareArgs),
    /// Compare two builds (of jsbench or nats-server) in interleaved, paired slices
    #[command(
        long_about = "Runs the profiles for two sides in alternating slices (ABBA order, after a warm-up \
pair that is not judged) against one server, and judges each metric by its paired ratios NEW/BASE: \
noise that moves both turns of a pair cancels in their ratio (what remains, and so the smallest \
change caught, depends on the machine: docs/ab.md measures it). A side is a jsbench binary \
(--base-jsbench/--new-jsbench, two commits' builds; an older build runs its slices as a plain `run`), \
a nats-server binary (--base-server/--new-server, started as each slice's embedded server), or, with \
neither, this build twice: an A/A run that shows the noise. A metric regressed when NEW is worse by \
more than half its threshold beyond chance, is unchanged when it is not worse by the threshold (a \
one-sided test per metric at --miss-rate: a change of the threshold passes at most 1 time in 10); \
p99 and p99.9 are judged from the pairs' histograms merged per side. The false-alarm rate (1 - \
--confidence) holds over every metric, check and look (at 8, 16, 32, ... pairs). A check fails NEW \
when NEW breaks it where BASE holds it more often than chance allows. The comparison stops once \
every judged metric is decided, at a failure, or at --budget. Writes ab.json, ab.md (a CI job \
summary), report.html and every slice's results. Exit status: 0 no regression and every judged \
metric decided, 1 a regression, a metric systematically missing in NEW or a check NEW breaks, 2 bad \
input (a pattern that selects no metric included), 3 inconclusive (too few pairs, or a judged metric \
still undecided at the budget: never a pass), 130 interrupted.",
        after_help = "Examples:\n  \
jsbench ab ci                                           A/A: this build twice, the noise floor\n  \
jsbench ab ci --base-jsbench old/jsbench --new-jsbench target/release/jsbench\n  \
jsbench ab ci --base-server nats-server --new-server ./nats-server-1core.sh\n  \
scripts/ab-commits.sh main                              this checkout against main\n\n\
Documentation: docs/ab.md (the method, the sides, detection power measured here), docs/compare.md"
    )]
    Ab(Box<AbArgs>),
    /// Trends over many commits: change points per metric, history.html and a CI summary
    #[command(
        long_about = "Reads results over many commits (results folders, folders of them, ab folders, or \
the JSON-lines history file CI appends to with --append), orders them by the repository's first-parent \
line (--repo; without it by the time each run started) and groups them by machine class (architecture, \
CPU model, cores, memory: never two machines in one series), profile, scenario, variant and metric. \
Each series with a direction is searched for change points by E-Divisive means (Matteson and James \
2014, the method of MongoDB's CI and Apache Otava) with a seeded permutation test: in pure noise a \
series shows a change point with probability --alpha, and the same history gives the same answer \
every time. Each change point has the commits it falls between, its size (median after against \
median before) and its p-value; runs that broke an invariant are marked as events. Writes \
history.html (a chart per metric with its change points, the latest value against the series' noise \
band, links to each run's report.html) and history.md (for a CI job summary) to --out, and prints the \
Markdown. Exit status: 0, or 1 when the newest change point of a figure of merit (a rate, CPU per \
message, a latency p50 to p99.9) is a regression beyond --threshold; 2 bad input (a missing path, a \
line that is not a history record, a --repo that is not a git repository, no runs). With --append FILE \
it only appends the runs it read to FILE (each run once, by id) and exits 0.",
        after_help = "Examples:\n  \
jsbench history --append history.jsonl results/2026*-ci/   record runs in the history file\n  \
jsbench history history.jsonl --repo . --out target/history   change points in git order\n  \
jsbench history results/ --threshold 10%                   every results folder under results/\n  \
scripts/history-commits.sh -n 10                           build and run the last 10 commits, then draw\n\n\
Documentation: docs/history.md (the method, its false-positive rate and the smallest step found here, CI wiring)"
    )]
    History(HistoryArgs),
    /// One side of `jsbench ab`, kept warm: a scenario per request on stdin (src/ab/window.rs)
    #[command(hide = true)]
    AbSide(Box<AbSideArgs>),
    /// Detection power of `jsbench ab`, simulated from A/A comparisons (docs/ab.md)
    #[command(hide = true)]
    AbSimulate(AbSimulateArgs),
}

/// `jsbench history`.
#[derive(clap::Args, Debug)]
struct HistoryArgs {
    /// Results folders, folders holding them, ab folders, summary.json or
    /// ab.json files, or history files (JSON lines from --append)
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Order runs by this git repository's first-parent line (runs of other
    /// commits are left out); without it, by the time each run started
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
    /// The revision whose first-parent line orders the runs (with --repo)
    #[arg(long, value_name = "REV", default_value = "HEAD")]
    rev: String,
    /// Where history.html and history.md are written
    #[arg(short, long, value_name = "DIR", default_value = ".")]
    out: PathBuf,
    /// A regression fails the exit status only beyond this change, e.g. 5% or 2.5%
    #[arg(long, value_name = "PERCENT", default_value = "5%", value_parser = crate::compare::parse_threshold)]
    threshold: f64,
    /// Significance of each change point: the chance that a series of pure
    /// noise shows one (0.001 to 0.2)
    #[arg(long, value_name = "P", default_value = "0.01", value_parser = parse_alpha)]
    alpha: f64,
    /// Permutations per significance test (99 to 100000)
    #[arg(long, value_name = "N", default_value = "499", value_parser = clap::value_parser!(u32).range(99..=100_000))]
    permutations: u32,
    /// The newest runs of each series that are tested (older ones are drawn)
    #[arg(long, value_name = "RUNS", default_value = "100", value_parser = clap::value_parser!(u32).range(6..=100_000))]
    window: u32,
    /// Append the runs read to this history file and exit, without analysing
    #[arg(long, value_name = "FILE")]
    append: Option<PathBuf>,
}

fn parse_alpha(text: &str) -> Result<f64, UsageError> {
    let why = " is not a significance level between 0.001 and 0.2";
    within(text, text.parse().ok(), |a| (0.001..=0.2).contains(a), why)
}

/// `value` if it is `ok`, else a usage error: `text` (quoted) and `why`.
fn within<T>(
    text: &str,
    value: Option<T>,
    ok: impl FnOnce(&T) -> bool,
    why: &str,
) -> Result<T, UsageError> {
    value
        .filter(ok)
        .ok_or_else(|| UsageError(format!("{text:?}{why}")))
}

/// `jsbench ab-simulate`: what the docs' power table is drawn with.
#[derive(clap::Args, Debug)]
struct AbSimulateArgs {
    /// ab folders of A/A comparisons (each holds an ab.json)
    #[arg(value_name = "FOLDER", required = true)]
    folders: Vec<PathBuf>,
    /// Simulated comparisons per row
    #[arg(long, default_value_t = 400)]
    runs: usize,
    /// Planted effects, each a change in the metric's worse direction
    #[arg(long, value_delimiter = ',', default_value = "5%,10%,20%", value_parser = crate::compare::parse_threshold)]
    effects: Vec<f64>,
    /// Simulate only the judged metrics whose scenario/variant/metric matches (`*` a
    /// wildcard): the judge list a profile would have
    #[arg(long, value_name = "PATTERN")]
    only: Vec<String>,
    /// Give every metric this many pairs instead of what the comparisons gave it: the
    /// budget or rotation a profile would have
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(4..=10000))]
    pairs: Option<u32>,
}

#[derive(clap::Args, Debug)]
struct AbSideArgs {
    /// Bundled profile names or paths to TOML files
    #[arg(value_name = "PROFILE", required = true)]
    profiles: Vec<String>,

    #[command(flatten)]
    connection: ConnectionFlags,

    /// Monitoring URLs of an external server, as `run --monitor` takes them
    #[arg(long, value_name = "URL", env = "JSBENCH_MONITOR_URL")]
    monitor: Option<String>,

    /// Process ids of the external server's processes on this host, whose CPU time is
    /// read from /proc per variant (ab passes the servers it started)
    #[arg(long = "server-pid", value_name = "PID")]
    server_pids: Vec<u32>,
}

#[derive(clap::Args, Debug)]
struct AbArgs {
    /// Bundled profile names or paths to TOML files; a slice runs them all once
    #[arg(value_name = "PROFILE", default_value = "ci")]
    profiles: Vec<String>,

    /// BASE side: this jsbench binary runs BASE's slices
    #[arg(long, value_name = "PATH", requires = "new_jsbench", conflicts_with_all = ["base_server", "new_server"], help_heading = "Sides")]
    base_jsbench: Option<PathBuf>,
    /// NEW side: this jsbench binary runs NEW's slices
    #[arg(
        long,
        value_name = "PATH",
        requires = "base_jsbench",
        help_heading = "Sides"
    )]
    new_jsbench: Option<PathBuf>,
    /// BASE side: this nats-server binary (or a wrapper script) is BASE's slices' embedded server
    #[arg(
        long,
        value_name = "PATH",
        requires = "new_server",
        help_heading = "Sides"
    )]
    base_server: Option<PathBuf>,
    /// NEW side: this nats-server binary (or a wrapper script) is NEW's slices' embedded server
    #[arg(
        long,
        value_name = "PATH",
        requires = "base_server",
        help_heading = "Sides"
    )]
    new_server: Option<PathBuf>,

    /// Stop starting pairs once the next would end after this
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    budget: Duration,
    /// Stop after this many pairs, decided or not
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pairs: Option<u32>,
    /// Set every scenario's duration in a slice (default: the profile's)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    slice: Option<Duration>,

    /// The change of a rate (or of CPU per message) to catch: NEW worse by more than half of
    /// it is a regression, not worse by it is unchanged [default: the profile's [ab]
    /// threshold, else 5%]
    #[arg(long, value_name = "PERCENT", value_parser = crate::compare::parse_threshold)]
    threshold: Option<f64>,
    /// The same for latency percentiles (p50, p90, p99, p99.9) [default: the profile's, else 10%]
    #[arg(long, value_name = "PERCENT", value_parser = crate::compare::parse_threshold)]
    latency_threshold: Option<f64>,
    /// 1 - the false-alarm rate of the whole comparison: over every metric, check and look
    #[arg(long, value_name = "PERCENT", default_value = "99%", value_parser = confidence)]
    confidence: f64,
    /// The chance that a metric NEW makes worse by its threshold still passes as unchanged,
    /// per metric (passing needs every judged metric unchanged, so no correction across them)
    #[arg(long, value_name = "PERCENT", default_value = "10%", value_parser = miss_rate)]
    miss_rate: f64,
    /// Judge only metrics whose name matches (`*` a wildcard; with a `/`,
    /// scenario/variant/metric); repeatable; one that selects nothing is bad input.
    /// Default: the profile's [ab] judge list, else every rate, latency percentile and CPU
    /// per message
    #[arg(long, value_name = "PATTERN")]
    only: Vec<String>,

    /// Keep the servers ab starts on CPU 0 and the slices on the other CPUs, so they
    /// never trade cores: run-to-run noise on 2 cores drops by about half (docs/ab.md)
    #[arg(long, conflicts_with = "slice_cpus")]
    pin: bool,

    /// Confine the slices (the load generator), not the servers, to these CPUs, e.g. 0 or 0,2-3
    #[arg(long, value_name = "LIST", value_parser = cpu_list)]
    slice_cpus: Option<CpuList>,

    /// Run a process per slice even where both sides can stay warm and take turns
    /// (by default a side that knows `ab-side` stays up for the whole comparison)
    #[arg(long)]
    slices: bool,

    #[command(flatten)]
    connection: ConnectionFlags,

    /// Run against a local cluster of N nodes (3 or 5) instead of one server
    #[arg(long, value_name = "N", value_parser = cluster_size)]
    cluster: Option<usize>,

    /// Parent folder of the ab results folder
    #[arg(short = 'o', long, value_name = "DIR", default_value = "results")]
    out: PathBuf,
}

/// CPU numbers as taskset takes them (one value, so clap keeps it whole).
#[derive(Debug, Clone)]
struct CpuList(Vec<usize>);

/// `0`, `0,2` or `1-3`.
fn cpu_list(text: &str) -> Result<CpuList, UsageError> {
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let bad = || UsageError(format!("{text:?}: give CPU numbers like 0, 0,2 or 1-3"));
        match part.trim().split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().map_err(|_| bad())?),
        }
    }
    Ok(CpuList(cpus))
}

fn confidence(text: &str) -> Result<f64, UsageError> {
    let value = crate::compare::parse_threshold(text)?;
    let why = ": a confidence is between 50% and 99.99%";
    within(text, Some(value), |v| (0.5..1.0).contains(v), why)
}

fn miss_rate(text: &str) -> Result<f64, UsageError> {
    let value = crate::compare::parse_threshold(text)?;
    let why = ": a miss rate is above 0% and at most 50%";
    within(text, Some(value), |&v| v > 0.0 && v <= 0.5, why)
}

#[derive(clap::Args, Debug)]
struct CompareArgs {
    /// The baseline: a results folder or its summary.json
    #[arg(value_name = "BASE")]
    base: PathBuf,
    /// The run to judge: a results folder or its summary.json
    #[arg(value_name = "NEW")]
    new: PathBuf,
    /// Smallest relative change that can count, e.g. 10% or 2.5%
    #[arg(long, value_name = "PERCENT", default_value = "10%", value_parser = crate::compare::parse_threshold)]
    threshold: f64,
    /// Output: a terminal table, Markdown for a pull-request comment, or JSON
    #[arg(long, value_enum, default_value = "table")]
    format: FormatArg,
    /// What makes the exit status 1: regressions and invariant failures, or
    /// invariant failures only (regressions are then reported, not fatal)
    #[arg(long, value_enum, default_value = "regressions")]
    fail_on: FailOnArg,
    /// Judge only metrics whose name matches (`*` is a wildcard; with a `/`,
    /// the pattern matches scenario/variant/metric); repeatable. The others
    /// are shown as not judged. Without it: the profile's [ab] judge, else
    /// rates, CPU per message and latency p50 to p99.9
    #[arg(long, value_name = "PATTERN")]
    only: Vec<String>,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum FormatArg {
    Table,
    Markdown,
    Json,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum FailOnArg {
    Regressions,
    Invariants,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Bundled profile names (see `jsbench profiles`) or paths to TOML files
    #[arg(value_name = "PROFILE", default_value = "default")]
    profiles: Vec<String>,

    #[command(flatten)]
    connection: ConnectionFlags,

    /// Start a local cluster of N JetStream nodes (3 or 5) instead of one server; streams get N replicas
    #[arg(long, value_name = "N", value_parser = cluster_size)]
    cluster: Option<usize>,

    /// Start a leafnode server (JetStream domain `leaf`) connected to the server jsbench
    /// starts (domain `hub`; node 1 of a cluster) through a relay jsbench can slow: the
    /// lag scenario's `leaf` variant mirrors across it
    #[arg(long)]
    leafnode: bool,

    /// Stream replicas (1, 3 or 5), overriding the profile's and --cluster's
    #[arg(long, value_name = "N", value_parser = replicas)]
    replicas: Option<usize>,

    /// Parent folder of the results folders
    #[arg(short = 'o', long, value_name = "DIR", default_value = "results")]
    out: PathBuf,

    /// Keep the streams jsbench created (they are deleted by default)
    #[arg(long)]
    keep: bool,

    /// Stop at the first scenario that fails (the rest run by default)
    #[arg(long)]
    fail_fast: bool,

    /// Monitoring URLs of an external server, one per node, comma-separated
    /// (http://host:8222): its /varz and /jsz give server CPU per message,
    /// memory, slow consumers and API errors over each variant. The embedded
    /// server and a local cluster are sampled without it.
    #[arg(long, value_name = "URL", env = "JSBENCH_MONITOR_URL")]
    monitor: Option<String>,

    /// Serve live metrics at http://ADDR/metrics (Prometheus text) while the run
    /// goes on, e.g. 127.0.0.1:9464: messages sent and received, in flight,
    /// end-to-end percentiles since the last scrape, variants and invariants
    /// so far (docs/results.md); port 0 takes a free port and prints it
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,

    /// Progress bar on stderr: auto shows it on a terminal only
    #[arg(long, value_enum, default_value = "auto")]
    progress: ProgressMode,

    /// Worker threads for publishers' connections and PubAck readers (each
    /// publisher also sends from a thread of its own); default one per core.
    /// See docs/sizing.md
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256), help_heading = "Threads")]
    publisher_threads: Option<u16>,

    /// Worker threads for consumer clients, their connections and handlers;
    /// default one per core
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256), help_heading = "Threads")]
    consumer_threads: Option<u16>,

    /// Wait for N `jsbench worker` processes and split every variant's publishers and
    /// consumer clients among them and this process (needs a profile with several of each)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64), help_heading = "Workers")]
    workers: Option<u16>,

    /// The group workers join (their --group); keeps concurrent benchmarks on one cluster apart
    #[arg(long, value_name = "NAME", default_value = crate::worker::protocol::DEFAULT_GROUP, help_heading = "Workers")]
    group: String,

    /// How long to wait for the workers before giving up
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration, help_heading = "Workers")]
    workers_timeout: Duration,

    /// A worker silent this long is declared lost: the run goes on, marked incomplete
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, help_heading = "Workers")]
    worker_silence: Duration,

    #[command(flatten)]
    secret: SecretFlags,
}

/// The secret a coordinator and its workers share (`--workers` and
/// `jsbench worker`): every command and result between them is sealed
/// with it, so nobody else who can publish on the cluster commands them.
#[derive(clap::Args, Debug)]
struct SecretFlags {
    /// File holding the secret shared by the coordinator and its workers (the same on
    /// every host; make one with `head -c 32 /dev/urandom | base64 > secret`, at least
    /// 16 bytes). Every command and result between them is signed with it (HMAC-SHA256);
    /// without it anyone who can publish on jsb.workers.> could command the workers.
    /// Or set JSBENCH_WORKER_SECRET to the secret itself
    #[arg(long, value_name = "PATH", help_heading = "Workers")]
    secret_file: Option<PathBuf>,

    /// Run without a secret: workers obey anyone who can publish on jsb.workers.>.
    /// Only for experiments on a loopback server nobody else can reach
    #[arg(long, help_heading = "Workers")]
    insecure_no_secret: bool,
}

impl SecretFlags {
    fn choice(self) -> crate::worker::auth::SecretChoice {
        crate::worker::auth::SecretChoice {
            file: self.secret_file,
            insecure: self.insecure_no_secret,
        }
    }
}

#[derive(clap::Args, Debug)]
struct WorkerArgs {
    #[command(flatten)]
    connection: ConnectionFlags,

    /// Join runs of this group only (the coordinator's --group); letters, digits, - and _
    #[arg(long, value_name = "NAME", default_value = crate::worker::protocol::DEFAULT_GROUP)]
    group: String,

    /// This worker's id in results and messages [default: <host>-<pid>]
    #[arg(long, value_name = "ID")]
    name: Option<String>,

    /// Exit after one run instead of waiting for the next
    #[arg(long)]
    once: bool,

    #[command(flatten)]
    secret: SecretFlags,
}

#[derive(clap::Args, Debug)]
struct ServerArgs {
    /// Start a local cluster of N JetStream nodes (3 or 5) with routes between them
    #[arg(long, value_name = "N", value_parser = cluster_size)]
    cluster: Option<usize>,

    /// Also start a leafnode server (JetStream domain `leaf`) connected to the
    /// server (domain `hub`; node 1 of a cluster) through a relay jsbench owns
    #[arg(long)]
    leafnode: bool,
}

fn cluster_size(text: &str) -> Result<usize, UsageError> {
    let why = ": a local cluster has 3 or 5 nodes";
    within(text, text.parse().ok(), |n| CLUSTER_SIZES.contains(n), why)
}

fn replicas(text: &str) -> Result<usize, UsageError> {
    let why = ": JetStream replicas are 1, 3 or 5";
    within(text, text.parse().ok(), |n| [1, 3, 5].contains(n), why)
}

/// Entry point of the binary; returns the exit status.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                error::EXIT_USAGE
            } else {
                EXIT_OK
            };
        }
    };
    if let Err(e) = crate::record::clock::check_env() {
        eprintln!("error: {e:#}");
        return error::EXIT_USAGE;
    }
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit_code(&e)
        }
    }
}

fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Profiles { name } => profiles::command(name.as_deref()),
        Command::Server(args) => serve::command(args.cluster, args.leafnode),
        Command::Relay { listen, to } => relay::command(listen, to),
        Command::Worker(args) => {
            let options = crate::worker::agent::WorkerOptions {
                connection: ConnectionRequest::from_process(args.connection),
                group: args.group,
                name: args.name,
                once: args.once,
                secret: args.secret.choice(),
            };
            let (runtime, stop) = interruptible()?;
            runtime.block_on(crate::worker::agent::serve(options, stop))
        }
        Command::Run(args) => run_command(*args),
        Command::History(args) => history(args),
        // An ab folder holds ab.json where a run's holds summary.json.
        Command::Report { dir } if dir.join("ab.json").is_file() => crate::ab::render_folder(&dir),
        Command::Report { dir } => crate::report::command(&dir),
        Command::Ab(args) => ab(*args),
        Command::AbSide(args) => ab_side(*args),
        Command::AbSimulate(args) => {
            crate::system::stdout::out!(
                "{}",
                crate::ab::simulate::command(&crate::ab::simulate::Options {
                    folders: &args.folders,
                    runs: args.runs,
                    effects: &args.effects,
                    only: &args.only,
                    pairs: args.pairs.map(|n| n as usize),
                })?
            );
            Ok(EXIT_OK)
        }
        Command::Compare(args) => crate::compare::command(&crate::compare::CompareOptions {
            base: args.base,
            new: args.new,
            threshold: args.threshold,
            format: match args.format {
                FormatArg::Table => crate::compare::Format::Table,
                FormatArg::Markdown => crate::compare::Format::Markdown,
                FormatArg::Json => crate::compare::Format::Json,
            },
            fail_on: match args.fail_on {
                FailOnArg::Regressions => crate::compare::FailOn::Regressions,
                FailOnArg::Invariants => crate::compare::FailOn::Invariants,
            },
            only: args.only,
        }),
    }
}

/// `jsbench run`: its flags into [`RunOptions`], the exit status from how
/// the run went.
fn run_command(args: RunArgs) -> Result<i32> {
    let key = match args.workers {
        Some(_) => {
            crate::worker::protocol::check_name("--group", &args.group)?;
            let key =
                crate::worker::auth::Key::load(&args.secret.choice(), "jsbench run --workers")?;
            if key.is_insecure() {
                eprintln!(
                    "warning: --insecure-no-secret: the workers obey anyone who can publish on jsb.workers.{}.>",
                    args.group
                );
            }
            Some(key)
        }
        None => None,
    };
    let options = RunOptions {
        workers: args.workers.zip(key).map(|(count, key)| {
            crate::worker::coordinator::RecruitOptions {
                count: usize::from(count),
                group: args.group.clone(),
                timeout: args.workers_timeout,
                silence: args.worker_silence,
                key,
            }
        }),
        profiles: args.profiles,
        connection: ConnectionRequest::from_process(args.connection),
        cluster: args.cluster,
        leafnode: args.leafnode,
        replicas: args.replicas,
        out: args.out,
        keep: args.keep,
        monitor: args.monitor,
        server_pids: Vec::new(),
        metrics_listen: args.metrics_listen,
        fail_fast: args.fail_fast,
        progress: args.progress,
    };
    if args.publisher_threads.is_some() || args.consumer_threads.is_some() {
        let (publish, consume) = crate::system::runtimes::threads_default();
        crate::system::runtimes::set_threads(
            args.publisher_threads.map_or(publish, usize::from),
            args.consumer_threads.map_or(consume, usize::from),
        );
    }
    let (runtime, stop) = interruptible()?;
    let outcome = runtime.block_on(run(options, stop));
    // Everything measured is written by now: a task still blocked
    // (a failed variant's publishers get 15 s to stop, and one
    // that does not is left behind) must not keep the process from
    // exiting with its status.
    runtime.shutdown_timeout(Duration::from_secs(5));
    Ok(outcome?.exit_code())
}

/// `jsbench ab`: its flags into the sides and the rule they are judged by.
fn ab(args: AbArgs) -> Result<i32> {
    let sides = match (
        args.base_jsbench,
        args.new_jsbench,
        args.base_server,
        args.new_server,
    ) {
        (Some(base), Some(new), _, _) => crate::ab::Sides::Jsbench { base, new },
        (_, _, Some(base), Some(new)) => crate::ab::Sides::Server { base, new },
        _ => crate::ab::Sides::Same,
    };
    let options = crate::ab::AbOptions {
        profiles: args.profiles,
        sides,
        connection: ConnectionRequest::from_process(args.connection),
        cluster: args.cluster,
        out: args.out,
        budget: args.budget,
        max_pairs: args.pairs.map(|n| n as usize),
        slice: args.slice,
        threshold: args.threshold,
        latency_threshold: args.latency_threshold,
        confidence: args.confidence,
        miss: args.miss_rate,
        only: args.only,
        pin: args.pin,
        slice_cpus: args.slice_cpus.map(|c| c.0),
        slices_only: args.slices,
    };
    let (runtime, stop) = interruptible()?;
    runtime.block_on(crate::ab::command(options, stop))
}

/// `jsbench history`: its flags into the rule it judges by.
fn history(args: HistoryArgs) -> Result<i32> {
    crate::history::command(&crate::history::HistoryOptions {
        paths: args.paths,
        repo: args.repo,
        rev: args.rev,
        out: args.out,
        rule: crate::history::analyse::Rule {
            settings: crate::history::changepoint::Settings {
                alpha: args.alpha,
                permutations: args.permutations as usize,
                ..Default::default()
            },
            threshold: args.threshold,
            window: args.window as usize,
        },
        append: args.append,
    })
}

/// Serves `ab` on stdin and stdout until told to quit; Ctrl-C stops the
/// turn running, which is answered before the side exits.
fn ab_side(args: AbSideArgs) -> Result<i32> {
    let options = crate::run::side::SideOptions {
        profiles: args.profiles,
        connection: ConnectionRequest::from_process(args.connection),
        monitor: args.monitor,
        server_pids: args.server_pids,
    };
    let (runtime, stop) = interruptible()?;
    let code = runtime.block_on(crate::run::side::serve(options, stop));
    // As after a run: a task still blocked must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_secs(5));
    code
}

/// The exit status for an error that ended a command: a usage error or a
/// profile that cannot be run anywhere in its chain is bad input.
pub fn exit_code(error: &anyhow::Error) -> i32 {
    let usage = error.chain().any(|cause| {
        cause.downcast_ref::<UsageError>().is_some()
            || cause.downcast_ref::<profile::ProfileError>().is_some()
    });
    if usage {
        error::EXIT_USAGE
    } else {
        error::EXIT_FAILED
    }
}
