//! The coordinator's side: recruit workers, put their clocks on its own
//! time base, and lead each variant's drive across them.
//!
//! - [`recruit`]: workers found, checked, joined and their clocks
//!   corrected, once per run.
//! - [`fetch`]: a worker's results pulled chunk by chunk after a drive.
//! - here: the [`Crew`] that leads each drive (shares, t0, counts, halt,
//!   the parts gathered into the record), and [`Annotate`].

mod fetch;
mod recruit;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use async_nats::Client;
use async_nats::Message;
use async_nats::client::{Request, RequestError};
use futures::future::{BoxFuture, join_all};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::AbortOnDrop;
use super::auth::Link;
use super::clock::{self, ClockEstimate};
use super::merge::{DriveRecord, Participation, annotate, part_counts};
use super::protocol::{Announce, Command, Heartbeat, PartReport, Reply};
use crate::drive::{
    Alone, Distribute, DriveOutcome, DriveSpec, Exchange, LocalReports, PeerCounts, PeerPart,
    Peers, RunContext, Share, drive_share,
};
use crate::profile::CommonPlan;
use crate::system::progress::VariantBar;
use crate::variant::{VariantResult, VariantSink};
use fetch::{Fetched, fetch};
pub use recruit::{RecruitOptions, recruit};

/// A worker of a distributed run, as the coordinator saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub cores: usize,
    pub jsbench_version: String,
    /// Its clock minus the coordinator's when it joined (NTP-style, the
    /// lowest-delay of `clock_samples` exchanges); corrected on the worker
    /// before any load, so stamps from every process share one time base.
    pub clock_offset_us: f64,
    pub clock_rtt_us: f64,
    /// What the correction may still be off by: half that round trip.
    pub clock_uncertainty_us: f64,
    pub clock_samples: usize,
    /// The offset measured again at the end of the run, after the
    /// correction: drift over the run, within its own uncertainty.
    pub residual_offset_us: Option<f64>,
    pub residual_uncertainty_us: Option<f64>,
    /// `ok`, or `lost` when it disappeared during the run.
    pub status: String,
    pub detail: Option<String>,
}

/// How long a worker may take to connect its share's clients.
const PREPARE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a dismissed worker has to confirm before the run ends anyway.
const DISMISS_TIMEOUT: Duration = Duration::from_secs(2);

/// Short commands (go, stop, a chunk) are answered at once by a live worker.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an interrupted run waits for halted workers to report their
/// last publishes.
const HALT_WAIT: Duration = Duration::from_secs(2);

/// Extra lead before t0 so a Go reaches every worker in time, even on
/// hosts a few network hops away.
const REMOTE_LEAD_IN: Duration = Duration::from_millis(300);

/// The recruited workers of a run, shared by its scenarios.
pub struct Workers {
    pub crew: tokio::sync::Mutex<Crew>,
    /// Drives since the last variant was recorded.
    log: Mutex<Vec<DriveRecord>>,
}

struct Member {
    announce: Announce,
    subject: String,
    clock: ClockEstimate,
    residual: Option<ClockEstimate>,
    /// Why it is gone, once it is.
    lost: Option<String>,
}

/// Heard from each worker: when, and its last progress.
type Heard = Arc<Mutex<HashMap<String, (Instant, Heartbeat)>>>;

struct Part {
    member: usize,
    share: Share,
    /// `None` while it takes part; else `lost` or `failed` and why.
    status: Option<(&'static str, String)>,
    report: Option<PartReport>,
}

/// Leads one drive at a time (the lock in [`Workers`] sees to that).
pub struct Crew {
    client: Client,
    group: String,
    /// The run, its key and its command numbering.
    link: Link,
    members: Vec<Member>,
    heard: Heard,
    silence: Duration,
    drive: u64,
    label: String,
    local: Share,
    parts: Vec<Part>,
    record: Option<DriveRecord>,
    /// The last drive told to halt.
    halted: u64,
    /// The progress listener and the beat, for as long as the crew lives;
    /// held only to be dropped with it: a recruiting that fails, or a crew
    /// that is dropped, stops its beat (workers then give the run up) and
    /// its listener, instead of leaving them running in the process.
    _tasks: Vec<AbortOnDrop>,
}

/// Sends a sealed command as a request: the number it was sealed with,
/// and the answer as it came (the fetch tells a gone worker from a slow
/// one by it).
async fn ask(
    client: &Client,
    link: &Link,
    subject: &str,
    command: &Command,
    timeout: Duration,
) -> Result<(u64, Result<Message, RequestError>)> {
    let (seq, payload) = link.command(command)?;
    let request = Request::new()
        .payload(payload.into())
        .timeout(Some(timeout));
    Ok((seq, client.send_request(subject.to_string(), request).await))
}

/// Sends a sealed command and takes only the sealed reply to it.
async fn request(
    client: &Client,
    link: &Link,
    subject: &str,
    command: &Command,
    timeout: Duration,
) -> Result<Reply> {
    let (seq, reply) = ask(client, link, subject, command, timeout).await?;
    let reply = reply.map_err(|e| anyhow!("{e}"))?;
    link.key
        .open_reply(&link.run, seq, &reply.payload)
        .context("a worker's reply is refused")
}

/// Sends a command that is not answered; a worker that misses it is
/// found out by its silence.
async fn tell(client: &Client, link: &Link, subject: &str, command: &Command) {
    if let Ok((_, bytes)) = link.command(command) {
        let _ = client.publish(subject.to_string(), bytes.into()).await;
    }
}

/// Why a drive must stay on the coordinator, if it must.
pub fn local_only_reason(spec: &DriveSpec) -> Option<&'static str> {
    if spec.fault.is_some() {
        return Some(
            "it kills and restarts a server this process started, and times the outage from here",
        );
    }
    if spec.consumer().is_some_and(|c| c.crash.is_some()) {
        return Some(
            "it crashes a consumer client and binds a new one in its place, a sequence timed in one process",
        );
    }
    if !spec.is_simple() {
        return Some(
            "it publishes into several streams or reads several durables, whose counts one process keeps",
        );
    }
    None
}

impl Distribute for Workers {
    /// Splits the variant among the coordinator and the live workers, or
    /// keeps it here when it must stay.
    fn drive<'a>(
        &'a self,
        ctx: &'a RunContext,
        spec: &'a DriveSpec,
    ) -> BoxFuture<'a, Result<DriveOutcome>> {
        Box::pin(async move {
            let mut crew = self.crew.lock().await;
            crew.check_liveness();
            let live = crew.live();
            let reason = local_only_reason(spec)
                .or_else(|| live.is_empty().then_some("every worker of the run is gone"));
            if let Some(reason) = reason {
                drop(crew);
                self.push(DriveRecord::coordinator_only(&spec.label, reason));
                return drive_share(ctx, spec, &Share::all(spec), &mut Alone).await;
            }
            let shares = Share::split(spec, live.len() + 1);
            crew.begin(
                &spec.label,
                &shares[0],
                live.into_iter().zip(shares[1..].iter().cloned()),
            );
            let local = shares[0].clone();
            let outcome = drive_share(ctx, spec, &local, &mut *crew).await;
            if let Err(e) = &outcome {
                crew.abort(&format!("{e:#}")).await;
            }
            if let Some(record) = crew.record.take() {
                self.push(record);
            }
            outcome
        })
    }
}

/// The coordinator leads: it sets t0, hears every worker's counts, watches
/// the server, and merges the workers' parts into the variant's outcome.
impl Peers for Crew {
    fn watches_server(&self) -> bool {
        true
    }

    async fn start_time(&mut self, spec: &DriveSpec, lead_in: Duration) -> Result<u64> {
        self.prepare(spec).await?;
        let t0 = crate::record::clock::now_ns() + (lead_in + REMOTE_LEAD_IN).as_nanos() as u64;
        self.go(t0).await;
        Ok(t0)
    }

    async fn exchange(&mut self, _local: PeerCounts, interrupted: bool) -> Exchange {
        if interrupted {
            // The workers stop publishing too, and keep what they measured.
            self.halt().await;
        }
        Exchange {
            others: self.sum_counts(),
            halt: false,
        }
    }

    async fn published(
        &mut self,
        _local: PeerCounts,
        stop: &CancellationToken,
        bar: &VariantBar,
    ) -> u64 {
        bar.phase("waiting for workers to finish publishing");
        self.wait_published(stop).await
    }

    fn counts(&mut self) -> PeerCounts {
        self.sum_counts()
    }

    /// Never asked: the coordinator watches the server.
    async fn hold(&mut self, _bound: Duration, _counts: impl Fn() -> PeerCounts + Send) {}

    async fn collect(&mut self, local: LocalReports<'_>) -> Vec<PeerPart> {
        let local_counts = part_counts(local.sends, local.acks, local.consumers);
        self.fetch_parts(local_counts)
            .await
            .into_iter()
            .map(|part| PeerPart {
                publishers: part.publishers,
                consumers: part.consumers,
                errors: part.errors,
                client_cpu: part.client_cpu,
            })
            .collect()
    }
}

impl Workers {
    fn push(&self, record: DriveRecord) {
        self.log.lock().expect("not poisoned").push(record);
    }

    /// The drives since the last call: what the next recorded variant ran.
    pub fn take_log(&self) -> Vec<DriveRecord> {
        std::mem::take(&mut *self.log.lock().expect("not poisoned"))
    }

    /// How many workers have disappeared so far: when a profile ends with
    /// more than it started with, its results lack their parts.
    pub async fn lost(&self) -> usize {
        self.crew
            .lock()
            .await
            .members
            .iter()
            .filter(|m| m.lost.is_some())
            .count()
    }

    /// What the results list about the workers.
    pub async fn info(&self) -> Vec<WorkerInfo> {
        let crew = self.crew.lock().await;
        crew.members.iter().map(worker_info).collect()
    }

    /// Measures every live worker's clock once more: what the correction
    /// made when it joined still leaves after the load.
    pub async fn remeasure(&self) {
        let mut crew = self.crew.lock().await;
        crew.check_liveness();
        let client = crew.client.clone();
        let link = crew.link.clone();
        for m in crew.members.iter_mut().filter(|m| m.lost.is_none()) {
            m.residual = clock::measure(&client, &link, &m.subject, clock::EXCHANGES)
                .await
                .ok();
        }
    }

    /// Ends the run for every live worker, and waits (briefly) for each to
    /// confirm: the embedded server stops right after this, and a dismissal
    /// still in the server's buffers when it dies would leave the worker
    /// waiting for a coordinator that is gone.
    pub async fn dismiss(&self) {
        let crew = self.crew.lock().await;
        let confirmations = crew.members.iter().filter(|m| m.lost.is_none()).map(|m| {
            request(
                &crew.client,
                &crew.link,
                &m.subject,
                &Command::Dismiss,
                DISMISS_TIMEOUT,
            )
        });
        join_all(confirmations).await;
        let _ = crew.client.flush().await;
    }
}

fn worker_info(m: &Member) -> WorkerInfo {
    let us = |ns: u64| ns as f64 / 1_000.0;
    WorkerInfo {
        id: m.announce.id.clone(),
        host: m.announce.host.clone(),
        pid: m.announce.pid,
        cores: m.announce.cores,
        jsbench_version: m.announce.identity.jsbench_version.clone(),
        clock_offset_us: m.clock.offset_ns as f64 / 1_000.0,
        clock_rtt_us: us(m.clock.rtt_ns),
        clock_uncertainty_us: us(m.clock.uncertainty_ns),
        clock_samples: m.clock.samples,
        residual_offset_us: m.residual.map(|r| r.offset_ns as f64 / 1_000.0),
        residual_uncertainty_us: m.residual.map(|r| us(r.uncertainty_ns)),
        status: if m.lost.is_some() { "lost" } else { "ok" }.into(),
        detail: m.lost.clone(),
    }
}

impl Crew {
    /// Members still taking part in the run.
    fn live(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].lost.is_none())
            .collect()
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn run(&self) -> &str {
        &self.link.run
    }

    /// Marks members silent for longer than the allowed silence as lost.
    fn check_liveness(&mut self) {
        let heard = self.heard.lock().expect("not poisoned").clone();
        for m in self.members.iter_mut().filter(|m| m.lost.is_none()) {
            let last = heard.get(&m.announce.id);
            if last.map_or(Duration::MAX, |(at, _)| at.elapsed()) > self.silence {
                let last = last.map(|(_, p)| p.clone()).unwrap_or_default();
                let detail = format!(
                    "silent for more than {}; last heard: {} sent, {} received, {} finished",
                    crate::profile::format_duration(self.silence),
                    last.sent,
                    last.received,
                    last.finished
                );
                eprintln!(
                    "error: worker {} ({}) is gone: {detail}",
                    m.announce.id, m.announce.host
                );
                m.lost = Some(detail);
            }
        }
        for part in self.parts.iter_mut().filter(|p| p.status.is_none()) {
            if let Some(detail) = &self.members[part.member].lost {
                part.status = Some(("lost", detail.clone()));
            }
        }
    }

    fn begin(&mut self, label: &str, local: &Share, parts: impl Iterator<Item = (usize, Share)>) {
        self.drive += 1;
        self.label = label.to_string();
        self.local = local.clone();
        self.parts = parts
            .filter(|(_, share)| !share.is_empty())
            .map(|(member, share)| Part {
                member,
                share,
                status: None,
                report: None,
            })
            .collect();
        self.record = None;
    }

    fn active(&self) -> impl Iterator<Item = &Part> {
        self.parts.iter().filter(|p| p.status.is_none())
    }

    /// The parts still taking part, by index.
    fn active_indexes(&self) -> Vec<usize> {
        (0..self.parts.len())
            .filter(|&i| self.parts[i].status.is_none())
            .collect()
    }

    /// Sends each active part's worker its command at once; every reply
    /// beside its part's index.
    async fn ask_active(
        &self,
        command: impl Fn(&Part) -> Command,
        timeout: Duration,
    ) -> Vec<(usize, Result<Reply>)> {
        let active = self.active_indexes();
        let asks = active.iter().map(|&i| {
            let part = &self.parts[i];
            let (subject, command) = (&self.members[part.member].subject, command(part));
            async move { request(&self.client, &self.link, subject, &command, timeout).await }
        });
        let replies = join_all(asks).await;
        active.into_iter().zip(replies).collect()
    }

    /// Asks every worker of the drive to connect its share's clients.
    async fn prepare(&mut self, spec: &DriveSpec) -> Result<()> {
        let drive = self.drive;
        let prepare = |p: &Part| Command::Prepare {
            drive,
            spec: Box::new(spec.clone()),
            share: p.share.clone(),
        };
        for (i, reply) in self.ask_active(prepare, PREPARE_TIMEOUT).await {
            match reply {
                Ok(Reply::Ready) => {}
                Ok(Reply::Failed { error }) => {
                    self.parts[i].status = Some(("failed", format!("could not start: {error}")));
                }
                Ok(other) => {
                    self.parts[i].status =
                        Some(("failed", format!("answered {other:?} to prepare")));
                }
                Err(e) => {
                    let detail = format!("did not answer when asked to connect: {e:#}");
                    self.members[self.parts[i].member].lost = Some(detail.clone());
                    self.parts[i].status = Some(("lost", detail));
                }
            }
        }
        Ok(())
    }

    /// Sends the start time to every worker of the drive.
    async fn go(&mut self, t0_ns: u64) {
        let go = Command::Go {
            drive: self.drive,
            t0_ns,
        };
        for (i, reply) in self.ask_active(|_| go.clone(), COMMAND_TIMEOUT).await {
            if !matches!(reply, Ok(Reply::Ok)) {
                self.parts[i].status =
                    Some(("failed", format!("did not take the start time: {reply:?}")));
            }
        }
    }

    /// The workers' latest counts for this drive, summed; checks who is
    /// still there on the way.
    fn sum_counts(&mut self) -> PeerCounts {
        self.check_liveness();
        let heard = self.heard.lock().expect("not poisoned");
        let mut sum = PeerCounts::default();
        for p in self.active() {
            if let Some((_, progress)) = heard.get(&self.members[p.member].announce.id)
                && progress.drive == self.drive
            {
                sum.sent += progress.sent;
                sum.received += progress.received;
                sum.finished += progress.finished;
                sum.stored += progress.stored;
                sum.in_flight += progress.in_flight;
            }
        }
        sum
    }

    /// Waits until every worker of the drive has published its share (or
    /// is gone, or the run is interrupted); returns what they stored.
    async fn wait_published(&mut self, stop: &CancellationToken) -> u64 {
        let mut halted_at: Option<Instant> = None;
        loop {
            let counts = self.sum_counts();
            let done = {
                let heard = self.heard.lock().expect("not poisoned");
                self.active().all(|p| {
                    heard
                        .get(&self.members[p.member].announce.id)
                        .is_some_and(|(_, pr)| pr.drive == self.drive && pr.published)
                })
            };
            if stop.is_cancelled() && halted_at.is_none() {
                // Halted workers stop within a tick; a little wait lets
                // their last messages into the drain.
                self.halt().await;
                halted_at = Some(Instant::now());
            }
            if done || halted_at.is_some_and(|at| at.elapsed() > HALT_WAIT) {
                return counts.stored;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops every worker of the drive and fetches its results.
    async fn fetch_parts(&mut self, local_counts: super::protocol::PartCounts) -> Vec<PartReport> {
        self.check_liveness();
        let drive = self.drive;
        self.ask_active(|_| Command::Stop { drive }, COMMAND_TIMEOUT)
            .await;
        let active = self.active_indexes();
        let fetches = active.iter().map(|&i| {
            let member = &self.members[self.parts[i].member];
            let (subject, id) = (&member.subject, &member.announce.id);
            fetch(
                &self.client,
                &self.link,
                subject,
                drive,
                (&self.heard, id),
                self.silence,
            )
        });
        let results = join_all(fetches).await;
        for (i, result) in active.into_iter().zip(results) {
            match result {
                Ok(report) => self.parts[i].report = Some(report),
                Err(Fetched::Failed(e)) => self.parts[i].status = Some(("failed", e)),
                Err(Fetched::Lost(e)) => {
                    self.members[self.parts[i].member].lost = Some(e.clone());
                    self.parts[i].status = Some(("lost", e));
                }
            }
        }
        self.record = Some(self.build_record(Some(local_counts)));
        self.parts
            .iter_mut()
            .filter_map(|p| p.report.take())
            .map(|mut r| {
                let id = r.worker.clone();
                for e in &mut r.errors {
                    *e = format!("worker {id}: {e}");
                }
                r
            })
            .collect()
    }

    /// Sends a member a command that is not answered.
    async fn tell(&self, member: usize, command: &Command) {
        tell(
            &self.client,
            &self.link,
            &self.members[member].subject,
            command,
        )
        .await;
    }

    /// Tells the drive's workers to stop publishing (once): the run was
    /// interrupted, and what they measured so far is still wanted.
    async fn halt(&mut self) {
        if self.halted == self.drive {
            return;
        }
        self.halted = self.drive;
        let halt = Command::Halt { drive: self.drive };
        for p in self.active() {
            self.tell(p.member, &halt).await;
        }
    }

    /// Tells the drive's workers to give up (the coordinator's drive failed).
    async fn abort(&mut self, why: &str) {
        let abort = Command::Abort { drive: self.drive };
        for p in &self.parts {
            self.tell(p.member, &abort).await;
        }
        for p in self.parts.iter_mut() {
            if p.status.is_none() && p.report.is_none() {
                p.status = Some(("aborted", format!("the coordinator's drive failed: {why}")));
            }
        }
        if self.record.is_none() {
            self.record = Some(self.build_record(None));
        }
    }

    fn build_record(&self, local_counts: Option<super::protocol::PartCounts>) -> DriveRecord {
        let mut processes = vec![Participation {
            process: "coordinator".into(),
            host: super::agent::host_name(),
            publishers: self.local.publishers.clone(),
            consumers: self.local.consumers.clone(),
            status: "ok".into(),
            counts: local_counts,
            clock_offset_ns: 0,
            clock_uncertainty_ns: 0,
            detail: None,
        }];
        for p in &self.parts {
            let m = &self.members[p.member];
            processes.push(Participation {
                process: m.announce.id.clone(),
                host: m.announce.host.clone(),
                publishers: p.share.publishers.clone(),
                consumers: p.share.consumers.clone(),
                status: p.status.as_ref().map_or("ok", |(s, _)| s).to_string(),
                counts: p.report.as_ref().map(|r| r.counts),
                clock_offset_ns: m.clock.offset_ns,
                clock_uncertainty_ns: m.clock.uncertainty_ns,
                detail: p.status.as_ref().map(|(_, d)| d.clone()),
            });
        }
        DriveRecord {
            label: self.label.clone(),
            coordinator_only: None,
            processes,
        }
    }
}

/// Attaches each variant's drives to it on its way to the results.
pub struct Annotate<'a> {
    pub inner: &'a mut dyn VariantSink,
    pub workers: &'a Workers,
}

impl VariantSink for Annotate<'_> {
    fn record(&mut self, scenario: &CommonPlan, mut variant: VariantResult) -> Result<()> {
        annotate(&mut variant, self.workers.take_log());
        self.inner.record(scenario, variant)
    }
}
