//! `jsbench run`: validate every profile, bring up the server, run the
//! scenarios, write the results, clean up: in that order, on every way out.
//! [`side`] serves the same run turn by turn to `jsbench ab`.

pub mod side;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use tokio_util::sync::CancellationToken;

use crate::connect::{ConnectSettings, ConnectionRequest, Resolution, resolve_all};
use crate::drive::{Distribute, RunContext};
use crate::profile::{self, ServerPlan};
use crate::record::names;
use crate::report::terminal;
use crate::results::summary::{ProfileInfo, RunMetadata, ServerInfo, Summary};
use crate::results::{ResultsWriter, metadata};
use crate::scenario::{self, Profile};
use crate::server::target::{Target, check_faults, check_replicas, check_sync};
use crate::server::telemetry::read_persistence;
use crate::streams::provision::{self, Names, Provisioner, SizedMaxBytes};
use crate::system::error::{
    EXIT_FAILED, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_NOT_APPLICABLE, EXIT_OK,
};
use crate::system::progress::{Progress, ProgressMode};
use crate::variant::{VariantResult, VariantSink};
use crate::worker::coordinator::{Annotate, RecruitOptions, recruit};
use crate::worker::{AbortOnDrop, Workers};

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Bundled profile names or paths to TOML files.
    pub profiles: Vec<String>,
    /// Connection flags and environment; with no server named in them
    /// or in a profile, jsbench starts its own.
    pub connection: ConnectionRequest,
    /// Start a local cluster of this many nodes instead of one server.
    pub cluster: Option<usize>,
    /// Start a leafnode server beside the server jsbench starts.
    pub leafnode: bool,
    /// Stream replicas, overriding the profiles (and `cluster`'s default).
    pub replicas: Option<usize>,
    /// Parent folder of the results folders.
    pub out: PathBuf,
    /// Leave the streams in place after the run.
    pub keep: bool,
    /// Stop at the first scenario that fails instead of running the rest.
    pub fail_fast: bool,
    /// Monitoring endpoint of an external server (`http://host:8222`), for
    /// server CPU per message.
    pub monitor: Option<String>,
    /// Processes of an external server on this host: server CPU from
    /// /proc instead of /varz.
    pub server_pids: Vec<u32>,
    /// Serve live metrics (Prometheus text) here while the run goes on.
    pub metrics_listen: Option<std::net::SocketAddr>,
    pub progress: ProgressMode,
    /// Split every drive with this many `jsbench worker` processes.
    pub workers: Option<RecruitOptions>,
}

/// What a run produced, for the caller's exit status and for tests.
#[derive(Debug, Default)]
pub struct RunOutcome {
    pub results: Vec<PathBuf>,
    pub passed: bool,
    /// Some variant checked nothing that could apply: a run that broke
    /// nothing still did not prove all it claims.
    pub checked_nothing: bool,
    /// Some variant could not answer its question (a search where nothing
    /// held down to its floor): nothing broke, and nothing was found.
    pub inconclusive: bool,
    pub interrupted: bool,
}

impl RunOutcome {
    pub fn exit_code(&self) -> i32 {
        if self.interrupted {
            EXIT_INTERRUPTED
        } else if !self.passed {
            EXIT_FAILED
        } else if self.inconclusive {
            EXIT_INCONCLUSIVE
        } else if self.checked_nothing {
            EXIT_NOT_APPLICABLE
        } else {
            EXIT_OK
        }
    }
}

pub async fn run(options: RunOptions, stop: CancellationToken) -> Result<RunOutcome> {
    // Bad input fails before anything starts.
    let (profiles, resolution) = validate(&options)?;
    // Bound before anything starts, so a taken port fails first; served
    // until the run returns.
    let _metrics = match options.metrics_listen {
        Some(addr) => Some(serve_metrics(addr).await?),
        None => None,
    };
    let (target, leaf) = start_target(&options, &profiles, &resolution)?;
    let session = Session::open(&options, &stop, &target, leaf.clone(), &resolution).await?;
    let mut outcome = RunOutcome {
        passed: true,
        ..RunOutcome::default()
    };
    // Every way out of the profiles below dismisses the workers, so they
    // wait for the next run at once instead of noticing the silence.
    let profiles_run = async {
        for profile in &profiles {
            if stop.is_cancelled() {
                break;
            }
            session.run_profile(profile, &mut outcome).await?;
        }
        Ok::<(), anyhow::Error>(())
    }
    .await;
    if let Some(w) = &session.workers {
        w.dismiss().await;
    }
    profiles_run?;
    outcome.interrupted = stop.is_cancelled();
    drop(session);
    drop(leaf);
    drop(target);
    Ok(outcome)
}

/// Every profile loaded and checked against the connection, the
/// replicas asked for, and the faults and sync settings the server must
/// allow: all bad input, before anything starts.
fn validate(options: &RunOptions) -> Result<(Vec<Profile>, Resolution)> {
    let profiles: Vec<Profile> = options
        .profiles
        .iter()
        .map(|p| scenario::load(p))
        .collect::<Result<_>>()?;
    let named = profiles
        .iter()
        .map(|p| (p.name.as_str(), p.connection.as_ref()));
    let resolution = resolve_all(&options.connection, named, options.cluster.is_some())?;
    for note in &resolution.notes {
        eprintln!("note: {note}");
    }
    let replicas_override = options.replicas.or(options.cluster);
    check_replicas(&profiles, replicas_override, &resolution, options.cluster)?;
    check_faults(&scenario::faults(&profiles), &resolution, options.cluster)?;
    check_sync(&profiles, &resolution, options.cluster)?;
    Ok((profiles, resolution))
}

/// Starts what the run needs started ([`Target::start`]), with the first
/// profile's first `[server] sync`, routes through relays when a scenario
/// faults them.
fn start_target(
    options: &RunOptions,
    profiles: &[Profile],
    resolution: &Resolution,
) -> Result<(Target, Option<crate::server::LeafHandle>)> {
    let sync = profiles.first().and_then(|p| p.server.sync);
    let faults = scenario::faults(profiles);
    Target::start(resolution, options.cluster, &faults, sync, options.leafnode)
}

/// What every profile of a run shares: the server under test and the
/// control connection to it, its account, and the workers recruited.
struct Session<'a> {
    options: &'a RunOptions,
    stop: &'a CancellationToken,
    target: &'a Target,
    leaf: Option<crate::server::LeafHandle>,
    connect: ConnectSettings,
    /// Holds the control connection open for the run.
    js: async_nats::jetstream::Context,
    account: async_nats::jetstream::account::Account,
    info: async_nats::ServerInfo,
    cluster_size: Option<usize>,
    progress: Progress,
    workers: Option<Arc<Workers>>,
}

impl<'a> Session<'a> {
    /// Connects to the target, asks for its JetStream account (a refusal
    /// named for what jsbench needs), and recruits the workers asked for.
    async fn open(
        options: &'a RunOptions,
        stop: &'a CancellationToken,
        target: &'a Target,
        leaf: Option<crate::server::LeafHandle>,
        resolution: &Resolution,
    ) -> Result<Session<'a>> {
        let connect = resolution.settings(&target.urls())?;
        let control = connect.connect("control").await?;
        let js = connect.jetstream(control.clone());
        let account = js.query_account().await.map_err(|e| {
            if let Some(denied) = connect
                .take_refusals()
                .into_iter()
                .find(|r| r.contains("Permissions Violation"))
            {
                return anyhow!(
                    "{} may not use JetStream on {}: the server said '{denied}'; jsbench needs \
                     publish on $JS.API.> (or the domain's API prefix), $JS.ACK.> and its subjects \
                     (jsb.>), and subscribe on _INBOX.> and jsb.>",
                    connect.who(),
                    connect.display_urls()
                );
            }
            anyhow!(
                "JetStream is not available on {}: {e}; start nats-server with -js, or check the account's JetStream limits",
                connect.display_urls()
            )
        })?;
        let info = control.server_info();
        let cluster_size = target.cluster_size(&info);
        let progress = Progress::new(options.progress);
        let workers = match &options.workers {
            Some(w) => Some(Arc::new(
                recruit(&control, w, &connect.display_urls(), &progress).await?,
            )),
            None => None,
        };
        Ok(Session {
            options,
            stop,
            target,
            leaf,
            connect,
            js,
            account,
            info,
            cluster_size,
            progress,
            workers,
        })
    }

    /// One profile: its account check, its results folder, its scenarios,
    /// its summary, report and table; an error after the folder exists
    /// says where its results are.
    async fn run_profile(&self, profile: &Profile, outcome: &mut RunOutcome) -> Result<()> {
        let server_plan = self.server_plan(profile);
        let stream_max_bytes = self.check_account(profile, &server_plan)?;
        // A server jsbench started runs with this profile's sync before
        // the metadata reads it back (a list switches it per variant).
        // block_in_place, not spawn_blocking: the restarted server dies
        // with the thread that started it (PR_SET_PDEATHSIG), and a
        // blocking-pool thread exits once idle.
        if let Some(faults) = self.target.faults() {
            let sync = server_plan.sync.unwrap_or(profile::SyncSetting::Default);
            tokio::task::block_in_place(|| faults.set_sync(sync))?;
        }
        let mut metadata = self.metadata(profile, &server_plan, stream_max_bytes);
        let monitors = self.target.monitors(self.options.monitor.as_deref());
        metadata.server.persistence = Some(read_persistence(&monitors, &self.js).await?);
        let mut writer = ResultsWriter::create(&self.options.out, metadata)?;
        let lost_before = match &self.workers {
            Some(w) => w.lost().await,
            None => 0,
        };
        self.announce(profile, &server_plan, stream_max_bytes, &writer);
        let mut ctx = self.context(server_plan, stream_max_bytes);
        let failure = self.run_scenarios(profile, &mut ctx, &mut writer).await?;
        let cleanup_failures = ctx.provisioner.teardown().await;
        let mut lost_worker = false;
        if let Some(w) = &self.workers {
            w.remeasure().await;
            writer.summary_mut().run.workers = w.info().await;
            lost_worker = w.lost().await > lost_before;
        }
        let clean = failure.is_none() && cleanup_failures.is_empty() && !lost_worker;
        let passed = self.conclude(&mut writer, &ctx, clean, lost_worker)?;
        crate::system::stdout::outln!("{}", terminal::render(writer.summary()));
        for f in &cleanup_failures {
            eprintln!("warning: clean-up failed: {f}");
        }
        crate::system::stdout::outln!("results: {}", writer.dir().display());
        outcome.results.push(writer.dir().to_path_buf());
        outcome.passed &= passed;
        outcome.checked_nothing |= writer.summary().checked_nothing();
        outcome.inconclusive |= writer.summary().inconclusive();
        match failure {
            Some(e) => {
                Err(e).with_context(|| format!("results so far are in {}", writer.dir().display()))
            }
            None => Ok(()),
        }
    }

    /// The profile's server settings, with the replicas the command line
    /// asked for.
    fn server_plan(&self, profile: &Profile) -> ServerPlan {
        let mut server_plan = profile.server;
        if let Some(r) = self.options.replicas.or(self.options.cluster) {
            server_plan.replicas = r;
        }
        server_plan
    }

    /// The account's limits against what the profile puts into it at
    /// most; the max_bytes jsbench must set when the account requires one.
    fn check_account(
        &self,
        profile: &Profile,
        server_plan: &ServerPlan,
    ) -> Result<Option<SizedMaxBytes>> {
        let need = scenario::footprint(profile);
        let too_small = provision::check_account(&self.account, &need, server_plan);
        if !too_small.is_empty() {
            return Err(anyhow!(
                "the account's JetStream limits on {} are too small for profile {}:\n  - {}",
                self.connect.display_urls(),
                profile.name,
                too_small.join("\n  - ")
            ));
        }
        Ok(provision::size_max_bytes(&self.account, &need, server_plan))
    }

    /// What the results folder says about the run before it starts.
    fn metadata(
        &self,
        profile: &Profile,
        server_plan: &ServerPlan,
        stream_max_bytes: Option<SizedMaxBytes>,
    ) -> RunMetadata {
        let started = time::OffsetDateTime::now_utc();
        let tool = crate::system::about::tool();
        let info = &self.info;
        RunMetadata {
            id: metadata::run_id(started, &tool, &profile.name),
            started_at: rfc3339(started),
            finished_at: None,
            tool,
            server: ServerInfo {
                mode: self.target.mode().into(),
                version: info.version.clone(),
                urls: self.connect.display_urls(),
                server_name: info.server_name.clone(),
                cluster: info.cluster.clone(),
                jetstream_domain: info.domain.clone(),
                storage: format!("{:?}", server_plan.storage).to_lowercase(),
                replicas: server_plan.replicas,
                log_problems: Vec::new(),
                cluster_size: self.cluster_size,
                nodes: self.target.nodes(info),
                connection: Some(self.connect.info()),
                stream_max_bytes,
                persistence: None,
            },
            host: crate::system::about::host(),
            profile: ProfileInfo {
                name: profile.name.clone(),
                source: profile.source.clone(),
                description: profile.description.clone(),
                text: profile.text.clone(),
            },
            kept_streams: Vec::new(),
            repeat: profile.repeat,
            workers: Vec::new(),
            peak_rss: None,
            ledger_bytes_per_msg: None,
            client_threads: None,
        }
    }

    /// One line for the profile, and one for a max_bytes the account
    /// forced on jsbench's streams.
    fn announce(
        &self,
        profile: &Profile,
        server_plan: &ServerPlan,
        stream_max_bytes: Option<SizedMaxBytes>,
        writer: &ResultsWriter,
    ) {
        let topology = match (&self.info.cluster, self.cluster_size) {
            (Some(name), Some(n)) => {
                format!(" (cluster {name}, {n} nodes, R{})", server_plan.replicas)
            }
            _ => format!(" (R{})", server_plan.replicas),
        };
        self.progress.println(&format!(
            "jsbench: profile {} against nats-server {}{topology} at {} -> {}",
            profile.name,
            self.info.version,
            self.connect.describe(),
            writer.dir().display()
        ));
        if let Some(m) = &stream_max_bytes {
            self.progress.println(&format!(
                "jsbench: the account requires max_bytes on every stream: jsbench's streams set {:.1} MiB ({})",
                m.bytes as f64 / (1 << 20) as f64,
                m.basis()
            ));
        }
    }

    /// What every scenario of the profile needs from the run.
    fn context(
        &self,
        server_plan: ServerPlan,
        stream_max_bytes: Option<SizedMaxBytes>,
    ) -> RunContext {
        let monitor = self.options.monitor.as_deref();
        RunContext {
            connect: self.connect.clone(),
            provisioner: Provisioner::new(self.js.clone(), self.options.keep)
                .with_max_bytes(stream_max_bytes.map(|m| m.bytes)),
            names: Names::generate(),
            server: server_plan,
            stream: Default::default(),
            progress: self.progress.clone(),
            stop: self.stop.clone(),
            server_cpu: self.target.server_cpu(monitor, &self.options.server_pids),
            monitors: self.target.monitors(monitor),
            faults: self.target.faults(),
            leaf: self.leaf.clone(),
            workers: self.workers.clone().map(|w| w as Arc<dyn Distribute>),
            lead_in: crate::drive::LEAD_IN,
        }
    }

    /// Every scenario, each repetition back to back (a drift of the
    /// machine spreads over the variants alike); the error that ends the
    /// profile early under --fail-fast.
    async fn run_scenarios(
        &self,
        profile: &Profile,
        ctx: &mut RunContext,
        writer: &mut ResultsWriter,
    ) -> Result<Option<anyhow::Error>> {
        'scenarios: for plan in &profile.scenarios {
            for index in 1..=profile.repeat {
                if self.stop.is_cancelled() {
                    break 'scenarios;
                }
                let mut name = plan.name().to_string();
                if profile.repeat > 1 {
                    name = format!("{name} (repetition {index} of {})", profile.repeat);
                    self.progress.println(&format!("jsbench: scenario {name}"));
                    // Fresh stream names: with --keep the last
                    // repetition's streams are still there.
                    if index > 1 {
                        ctx.names = Names::generate();
                    }
                }
                let mut repetition = writer.repetition(index);
                if let Some(e) = self.run_scenario(plan, &name, ctx, &mut repetition).await? {
                    // The next scenario runs unless asked not to.
                    if self.options.fail_fast {
                        return Ok(Some(e));
                    }
                    continue 'scenarios;
                }
                // A variant that failed its invariants or recorded an error
                // fails the scenario as much as an error returned.
                let failed = writer
                    .summary()
                    .scenarios
                    .iter()
                    .find(|s| s.name == plan.name())
                    .is_some_and(|s| s.variants.iter().any(|v| !v.passed));
                if failed && self.options.fail_fast {
                    return Ok(Some(anyhow!(
                        "scenario {name} failed; --fail-fast skipped the scenarios after it"
                    )));
                }
            }
        }
        Ok(None)
    }

    /// Runs one scenario into `sink`, each variant annotated with the
    /// workers' part when there are workers. A scenario's error is recorded
    /// beside what it measured, as a variant of its own, and returned.
    async fn run_scenario(
        &self,
        plan: &scenario::ScenarioPlan,
        name: &str,
        ctx: &mut RunContext,
        sink: &mut dyn VariantSink,
    ) -> Result<Option<anyhow::Error>> {
        let mut annotated;
        let sink: &mut dyn VariantSink = match &self.workers {
            Some(w) => {
                annotated = Annotate {
                    inner: sink,
                    workers: w,
                };
                &mut annotated
            }
            None => sink,
        };
        let sink = &mut ServerCpuMethod {
            inner: sink,
            method: ctx.server_cpu.describe(),
        };
        let Err(e) = plan.run(ctx, sink).await else {
            return Ok(None);
        };
        let mut e = e.context(format!("scenario {name}"));
        for refusal in ctx.connect.take_refusals() {
            e = e.context(format!("the server refused: {refusal}"));
        }
        let mut result = VariantResult::new("scenario");
        result.error = Some(format!("{e:#}"));
        sink.record(&plan.common, result)?;
        eprintln!("error: {e:#}");
        Ok(Some(e))
    }

    /// The summary's last word: what the run cost, what it kept, the
    /// servers' log, the verdict; written, then drawn. Whether it passed
    /// (`clean`: no failure, no clean-up failure, no worker lost).
    fn conclude(
        &self,
        writer: &mut ResultsWriter,
        ctx: &RunContext,
        clean: bool,
        lost_worker: bool,
    ) -> Result<bool> {
        let passed = self.finish(writer.summary_mut(), ctx, clean, lost_worker);
        writer.write()?;
        // Pictures come after the data is safe; failing to draw one never
        // fails the run or touches the data files.
        match crate::report::render_folder(writer.dir()) {
            Ok(rendered) => {
                for w in &rendered.warnings {
                    eprintln!("warning: {w}");
                }
            }
            Err(e) => eprintln!("warning: charts and report.html not written: {e:#}"),
        }
        Ok(passed)
    }

    /// Fills in what the summary can say only at the end (what the run
    /// cost, what it kept, the servers' log) and its verdict; whether it
    /// passed.
    fn finish(
        &self,
        summary: &mut Summary,
        ctx: &RunContext,
        clean: bool,
        lost_worker: bool,
    ) -> bool {
        summary.run.finished_at = Some(rfc3339(time::OffsetDateTime::now_utc()));
        summary.run.peak_rss = Some(crate::system::cpu::own_peak_rss());
        summary.run.ledger_bytes_per_msg = summary
            .scenarios
            .iter()
            .flat_map(|s| &s.variants)
            .filter_map(|v| v.metric(names::LEDGER_BYTES_PER_MSG))
            .map(|m| m.value)
            .reduce(f64::max);
        summary.run.client_threads = Some(crate::system::runtimes::threads());
        summary.run.kept_streams = ctx.provisioner.created();
        summary.run.server.log_problems = self.target.log_problems();
        if self.target.is_external() {
            summary.run.server.nodes = self.connect.seen_servers();
        }
        let passed = clean && summary.passed();
        summary.verdict = if self.stop.is_cancelled() {
            "interrupted"
        } else if lost_worker {
            "incomplete"
        } else if passed && summary.inconclusive() {
            "inconclusive"
        } else if passed && summary.checked_nothing() {
            "not applicable"
        } else if passed {
            "passed"
        } else {
            "failed"
        }
        .into();
        passed
    }
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// Serves `GET /metrics` on `addr` until the returned guard is dropped:
/// the metrics listener stops when the run returns.
async fn serve_metrics(addr: std::net::SocketAddr) -> Result<AbortOnDrop> {
    let (task, _) = crate::system::metrics_http::serve(addr).await?;
    Ok(AbortOnDrop(task))
}

/// Names how the server's CPU was read beside every variant reporting a
/// figure from it: process accounting and /varz differ in window and lag,
/// and a comparison across methods compares those too.
struct ServerCpuMethod<'a> {
    inner: &'a mut dyn VariantSink,
    method: String,
}

impl VariantSink for ServerCpuMethod<'_> {
    fn record(&mut self, scenario: &profile::CommonPlan, mut variant: VariantResult) -> Result<()> {
        // A combination that restarted the server named its new process
        // already; the scenario's start would name the old one.
        if !variant.params.contains_key("server_cpu_method")
            && variant
                .metrics
                .iter()
                .any(|m| m.name.contains("server_cpu"))
        {
            variant.param("server_cpu_method", &self.method);
        }
        self.inner.record(scenario, variant)
    }
}
