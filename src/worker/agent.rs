//! `jsbench worker`: waits for a coordinator, then runs the shares of its
//! variants that it is given, on the coordinator's time base.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use async_nats::{Client, Subject};
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::beat;
use super::merge::part_counts;
use super::protocol::{
    self, Announce, Command, Heartbeat, Identity, PartReport, Reply, announce_subject,
    beat_subject, progress_subject, worker_subject,
};
use crate::connect::{ConnectSettings, ConnectionRequest, resolve};
use crate::drive::{
    DriveSpec, Exchange, LocalReports, PeerCounts, PeerPart, Peers, PublisherPart, RunContext,
    Share, drive_share,
};
use crate::record::clock;
use crate::system::error::{EXIT_FAILED, EXIT_OK, UsageError};
use crate::system::progress::VariantBar;

/// A worker gives up a run whose coordinator has been silent this long
/// (it died, or lost its connection), and waits for the next one.
pub const COORDINATOR_SILENCE: Duration = Duration::from_secs(15);

/// How often a worker announces itself while it waits, and reports
/// progress (its proof of life) while in a run.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(1);
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub connection: ConnectionRequest,
    pub group: String,
    /// The worker's id; `<host>-<pid>` by default.
    pub name: Option<String>,
    /// Exit after one run instead of waiting for the next.
    pub once: bool,
}

/// The default id: host and process, which tell an operator where to look.
fn default_id() -> String {
    let host = host_name();
    let clean: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{clean}-{}", std::process::id())
}

pub(super) fn host_name() -> String {
    crate::system::about::host()
        .hostname
        .unwrap_or_else(|| "localhost".into())
}

/// Runs the worker until `stop` (Ctrl-C), or after one run with `once`.
pub async fn serve(options: WorkerOptions, stop: CancellationToken) -> Result<i32> {
    protocol::check_name("--group", &options.group)?;
    let id = options.name.clone().unwrap_or_else(default_id);
    protocol::check_name("--name", &id)?;
    let resolution = resolve(&options.connection, "worker", None, false)?;
    for note in &resolution.notes {
        eprintln!("note: {note}");
    }
    let settings = resolution.remote.clone().ok_or_else(|| {
        UsageError(
            "jsbench worker needs the server the coordinator measures: give -s URL (the \
             coordinator prints it while it waits), NATS_URL or --context"
                .into(),
        )
    })?;
    let client = settings.connect("worker control").await?;
    let me = Announce {
        id: id.clone(),
        identity: Identity::current(),
        host: host_name(),
        pid: std::process::id(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut commands = client
        .subscribe(worker_subject(&options.group, &id))
        .await
        .context("subscribing to the worker's command subject")?;
    eprintln!(
        "jsbench worker {id}: waiting for a run in group {} on {}; Ctrl-C stops",
        options.group,
        settings.describe()
    );
    loop {
        let Some((run, coordinator)) =
            wait_for_run(&client, &options.group, &me, &mut commands, &stop).await?
        else {
            return Ok(EXIT_OK);
        };
        eprintln!(
            "jsbench worker {id}: joined run {run} (coordinator jsbench {})",
            coordinator.jsbench_version
        );
        let (ended, finished) = serve_run(
            &client,
            &settings,
            &options.group,
            &id,
            &run,
            &mut commands,
            &stop,
        )
        .await?;
        eprintln!("jsbench worker {id}: run {run} {ended}");
        // The next run measures the clock afresh; what this one corrected
        // must not be corrected twice.
        clock::adjust(-clock::correction_ns());
        if options.once || stop.is_cancelled() {
            return Ok(if finished { EXIT_OK } else { EXIT_FAILED });
        }
    }
}

/// Announces until a coordinator recruits this worker (or refuses it).
async fn wait_for_run(
    client: &Client,
    group: &str,
    me: &Announce,
    commands: &mut async_nats::Subscriber,
    stop: &CancellationToken,
) -> Result<Option<(String, Identity)>> {
    let announcement = serde_json::to_vec(me)?;
    let mut tick = tokio::time::interval(ANNOUNCE_EVERY);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(None),
            _ = tick.tick() => {
                client
                    .publish(announce_subject(group), announcement.clone().into())
                    .await
                    .context("announcing the worker")?;
            }
            msg = commands.next() => {
                let Some(msg) = msg else {
                    return Err(anyhow!("the worker's subscription closed"));
                };
                match serde_json::from_slice::<Command>(&msg.payload) {
                    Ok(Command::Refuse { reason }) => {
                        return Err(UsageError(format!("the coordinator refused this worker: {reason}")).into());
                    }
                    Ok(Command::Recruit { run, coordinator }) => {
                        let answer = match me.identity.mismatch(&coordinator) {
                            None => Reply::Joined,
                            Some(differs) => Reply::Refused {
                                reason: format!(
                                    "worker {} runs jsbench {} with results schema {}; the coordinator runs {differs}",
                                    me.id, me.identity.jsbench_version, me.identity.schema_version
                                ),
                            },
                        };
                        respond(client, msg.reply.as_ref(), &answer).await;
                        if matches!(answer, Reply::Joined) {
                            return Ok(Some((run, coordinator)));
                        }
                    }
                    Ok(Command::Ping) => respond(client, msg.reply.as_ref(), &pong(clock::now_ns())).await,
                    // Left over from a run that is over.
                    Ok(_) => respond(client, msg.reply.as_ref(), &Reply::Failed { error: "not in a run".into() }).await,
                    Err(e) => respond(client, msg.reply.as_ref(), &unknown(e)).await,
                }
            }
        }
    }
}

/// The answer to a ping: when it arrived and when the answer left, on
/// this worker's clock.
fn pong(received_ns: u64) -> Reply {
    Reply::Pong {
        received_ns,
        sent_ns: clock::now_ns(),
    }
}

/// The answer to a command that does not parse.
fn unknown(e: serde_json::Error) -> Reply {
    Reply::Failed {
        error: format!("unknown command: {e}"),
    }
}

async fn respond(client: &Client, reply: Option<&Subject>, answer: &Reply) {
    if let Some(reply) = reply
        && let Ok(bytes) = serde_json::to_vec(answer)
    {
        let _ = client.publish(reply.clone(), bytes.into()).await;
    }
}

/// Results of the current drive, as the coordinator fetches them.
#[derive(Default)]
enum Results {
    /// Still being assembled: "not ready".
    #[default]
    Assembling,
    /// Packed, sent in chunks.
    Packed(Vec<u8>),
    /// The drive failed: why, as the text of an error chunk.
    Failed(String),
}

/// Where a drive leaves its results for the fetches to find.
type Slot = Arc<Mutex<Results>>;

struct Current {
    drive: u64,
    go: Option<oneshot::Sender<u64>>,
    stop: CancellationToken,
    halt: CancellationToken,
    abort: CancellationToken,
    result: Slot,
}

impl Current {
    fn abort(&self) {
        self.abort.cancel();
        self.stop.cancel();
    }
}

/// Follows one run's commands until it is dismissed, its coordinator
/// goes silent, or the worker is stopped; says which, and whether the run
/// ended as planned (dismissed).
async fn serve_run(
    client: &Client,
    settings: &ConnectSettings,
    group: &str,
    id: &str,
    run: &str,
    commands: &mut async_nats::Subscriber,
    stop: &CancellationToken,
) -> Result<(&'static str, bool)> {
    let mut beats = client
        .subscribe(beat_subject(group, run))
        .await
        .context("subscribing to the coordinator's beat")?;
    let latest = Arc::new(Mutex::new(Heartbeat {
        worker: id.to_string(),
        ..Default::default()
    }));
    // The worker's proof of life during a run: its latest progress,
    // published on an interval whether or not a drive is under way.
    let heartbeat = latest.clone();
    let _heartbeat = beat(
        client,
        progress_subject(group, run),
        PROGRESS_EVERY,
        move || {
            let p = heartbeat.lock().expect("not poisoned").clone();
            serde_json::to_vec(&p).ok()
        },
    );
    let mut following = Following {
        client,
        settings,
        group,
        id,
        run,
        latest,
        current: None,
    };
    let mut last_beat = Instant::now();
    let mut watchdog = tokio::time::interval(Duration::from_secs(1));
    let ended = loop {
        tokio::select! {
            _ = stop.cancelled() => break "stopped (interrupted)",
            _ = beats.next() => last_beat = Instant::now(),
            _ = watchdog.tick() => {
                if last_beat.elapsed() > COORDINATOR_SILENCE {
                    break "abandoned: the coordinator has been silent for 15s";
                }
            }
            msg = commands.next() => {
                let received_ns = clock::now_ns();
                let Some(msg) = msg else {
                    return Err(anyhow!("the worker's subscription closed"));
                };
                if let Some(ended) = following.obey(msg, received_ns).await {
                    break ended;
                }
            }
        }
    };
    if let Some(c) = following.current.take() {
        c.abort();
    }
    Ok((ended, ended == "over"))
}

/// One run as this worker follows it: what answering the coordinator's
/// commands needs, and the drive in hand.
struct Following<'a> {
    client: &'a Client,
    settings: &'a ConnectSettings,
    group: &'a str,
    id: &'a str,
    run: &'a str,
    /// What the heartbeat publishes; each drive's orders update it.
    latest: Arc<Mutex<Heartbeat>>,
    current: Option<Current>,
}

impl Following<'_> {
    /// Answers one command of the run; says how the run ended when the
    /// command ends it (a dismissal).
    async fn obey(&mut self, msg: async_nats::Message, received_ns: u64) -> Option<&'static str> {
        let client = self.client;
        let reply = msg.reply.clone();
        let command = match serde_json::from_slice::<Command>(&msg.payload) {
            Ok(c) => c,
            Err(e) => {
                respond(client, reply.as_ref(), &unknown(e)).await;
                return None;
            }
        };
        match command {
            Command::Ping => respond(client, reply.as_ref(), &pong(received_ns)).await,
            Command::Adjust { ns } => {
                clock::adjust(ns);
                respond(client, reply.as_ref(), &Reply::Ok).await;
            }
            Command::Recruit { .. } => {
                let (id, run) = (self.id, self.run);
                let reason = format!("worker {id} is busy in run {run}");
                respond(client, reply.as_ref(), &Reply::Refused { reason }).await;
            }
            Command::Refuse { .. } => {}
            Command::Prepare { drive, spec, share } => self.prepare(drive, spec, share, reply),
            Command::Go { drive, t0_ns } => {
                let answer = self.go(drive, t0_ns);
                respond(client, reply.as_ref(), &answer).await;
            }
            Command::Stop { drive } => {
                if let Some(c) = self.in_hand(drive) {
                    c.stop.cancel();
                }
                respond(client, reply.as_ref(), &Reply::Ok).await;
            }
            Command::Fetch { drive, chunk } => {
                let payload = self.results_chunk(drive, chunk);
                if let Some(r) = reply {
                    let _ = client.publish(r, payload.into()).await;
                }
            }
            Command::Halt { drive } => {
                if let Some(c) = self.in_hand(drive) {
                    c.halt.cancel();
                }
            }
            Command::Abort { drive } => {
                if let Some(c) = self.in_hand(drive) {
                    c.abort();
                }
            }
            Command::Dismiss => {
                respond(client, reply.as_ref(), &Reply::Ok).await;
                let _ = client.flush().await;
                return Some("over");
            }
        }
        None
    }

    /// The drive in hand, if it is the one a command names.
    fn in_hand(&self, drive: u64) -> Option<&Current> {
        self.current.as_ref().filter(|c| c.drive == drive)
    }

    /// Gives up the drive in hand, if any, and starts connecting this
    /// one's share in the background; the share says "ready" on `reply`
    /// once its clients are connected.
    fn prepare(&mut self, drive: u64, spec: Box<DriveSpec>, share: Share, reply: Option<Subject>) {
        let id = self.id;
        eprintln!(
            "jsbench worker {id}: {}: publishers {:?}, consumer clients {:?}",
            spec.label, share.publishers, share.consumers
        );
        if let Some(c) = self.current.take() {
            c.abort();
        }
        let (go_tx, go_rx) = oneshot::channel();
        let c = Current {
            drive,
            go: Some(go_tx),
            stop: CancellationToken::new(),
            halt: CancellationToken::new(),
            abort: CancellationToken::new(),
            result: Arc::default(),
        };
        let orders = Orders {
            client: self.client.clone(),
            drive,
            ready_reply: reply,
            go: Some(go_rx),
            stop: c.stop.clone(),
            halt: c.halt.clone(),
            abort: c.abort.clone(),
            latest: self.latest.clone(),
            progress_subject: progress_subject(self.group, self.run),
        };
        tokio::spawn(run_part(
            self.settings.clone(),
            self.id.to_string(),
            *spec,
            share,
            orders,
            c.result.clone(),
        ));
        self.current = Some(c);
    }

    /// Hands the start time to the drive in hand, once; the answer says
    /// whether it took it.
    fn go(&mut self, drive: u64, t0_ns: u64) -> Reply {
        let sent = self
            .current
            .as_mut()
            .filter(|c| c.drive == drive)
            .and_then(|c| c.go.take())
            .is_some_and(|go| go.send(t0_ns).is_ok());
        if sent {
            Reply::Ok
        } else {
            Reply::Failed {
                error: format!("drive {drive} is not prepared here"),
            }
        }
    }

    /// One chunk of the drive's packed results, "not ready" while they are
    /// assembled, or why there are none.
    fn results_chunk(&self, drive: u64, chunk: u32) -> Vec<u8> {
        match self.in_hand(drive) {
            None => error_chunk(&format!("drive {drive} is not this worker's current drive")),
            Some(c) => match &*c.result.lock().expect("not poisoned") {
                Results::Assembling => vec![protocol::chunk::NOT_READY],
                Results::Failed(e) => error_chunk(e),
                Results::Packed(bytes) => {
                    let size = chunk_size(self.client);
                    let total = bytes.len().div_ceil(size).max(1) as u32;
                    let from = (chunk as usize * size).min(bytes.len());
                    let to = (from + size).min(bytes.len());
                    protocol::chunk::data(total, chunk, &bytes[from..to])
                }
            },
        }
    }
}

fn error_chunk(text: &str) -> Vec<u8> {
    let mut out = vec![protocol::chunk::ERROR];
    out.extend_from_slice(text.as_bytes());
    out
}

/// Chunks leave room under the server's max_payload for the headers.
fn chunk_size(client: &Client) -> usize {
    let max = client.server_info().max_payload;
    max.saturating_sub(4096).clamp(4096, 512 * 1024)
}

/// Runs a share and leaves its packed results (or its error) in `slot`.
async fn run_part(
    settings: ConnectSettings,
    id: String,
    spec: DriveSpec,
    share: Share,
    mut orders: Orders,
    slot: Slot,
) {
    // The worker's id in every connection name, so the server's /connz
    // tells whose clients are whose.
    let mut settings = settings;
    settings.name = format!("{} {id}", settings.name);
    let result = async {
        let control = settings.connect("worker jetstream").await?;
        let ctx = RunContext {
            provisioner: crate::streams::provision::Provisioner::new(
                settings.jetstream(control),
                true,
            ),
            connect: settings.clone(),
            names: crate::streams::provision::Names::from_token("worker"),
            server: crate::profile::ServerPlan {
                storage: crate::profile::Storage::File,
                replicas: 1,
                sync: None,
            },
            stream: Default::default(),
            progress: crate::system::progress::Progress::hidden(),
            stop: orders.abort.clone(),
            server_cpu: crate::system::cpu::ServerCpu::Unavailable,
            monitors: Vec::new(),
            faults: None,
            leaf: None,
            workers: None,
            lead_in: crate::drive::LEAD_IN,
        };
        let outcome = drive_share(&ctx, &spec, &share, &mut orders).await?;
        let counts = part_counts(&outcome.sends, &outcome.acks, &outcome.consumers);
        let publishers = share
            .publishers
            .iter()
            .zip(outcome.sends.into_iter().zip(outcome.acks))
            .map(|(&index, (send, ack))| PublisherPart { index, send, ack })
            .collect();
        let report = PartReport {
            worker: id.clone(),
            publishers,
            consumers: outcome.consumers,
            errors: outcome.errors,
            client_cpu: outcome.client_cpu,
            counts,
        };
        protocol::pack(&report)
    }
    .await;
    if let Err(e) = &result {
        // Failed before it could say it was ready: say why instead.
        if let Some(reply) = orders.ready_reply.take() {
            respond(
                &orders.client,
                Some(&reply),
                &Reply::Failed {
                    error: format!("{e:#}"),
                },
            )
            .await;
        }
        eprintln!("jsbench worker {id}: drive {} failed: {e:#}", orders.drive);
    }
    *slot.lock().expect("not poisoned") = match result {
        Ok(bytes) => Results::Packed(bytes),
        Err(e) => Results::Failed(format!("{e:#}")),
    };
}

/// A worker's side of one drive: when to start, when to stop, and where
/// its counts go meanwhile.
pub struct Orders {
    client: Client,
    drive: u64,
    /// Where "ready" goes once the share's clients are connected.
    ready_reply: Option<Subject>,
    go: Option<oneshot::Receiver<u64>>,
    stop: CancellationToken,
    halt: CancellationToken,
    abort: CancellationToken,
    latest: Arc<Mutex<Heartbeat>>,
    progress_subject: String,
}

impl Orders {
    /// Says the share is connected, then waits for the start time.
    pub async fn ready_then_go(&mut self) -> Result<u64> {
        if let Some(reply) = self.ready_reply.take() {
            respond(&self.client, Some(&reply), &Reply::Ready).await;
        }
        let go = self
            .go
            .take()
            .ok_or_else(|| anyhow!("the start time was already taken"))?;
        tokio::select! {
            t0 = go => t0.map_err(|_| anyhow!("the coordinator never sent the start time")),
            _ = self.abort.cancelled() => Err(anyhow!("the coordinator gave up the drive before it started")),
        }
    }

    /// Leaves the counts for the heartbeat; the moment publishing is done
    /// it is told at once, since the coordinator's drain waits for it.
    pub async fn report(&self, counts: PeerCounts, published: bool) {
        let now = {
            let mut p = self.latest.lock().expect("not poisoned");
            let first_done = published && !(p.published && p.drive == self.drive);
            p.drive = self.drive;
            p.sent = counts.sent;
            p.received = counts.received;
            p.finished = counts.finished;
            p.stored = counts.stored;
            p.in_flight = counts.in_flight;
            p.published = published;
            first_done.then(|| p.clone())
        };
        if let Some(p) = now
            && let Ok(bytes) = serde_json::to_vec(&p)
        {
            let _ = self
                .client
                .publish(self.progress_subject.clone(), bytes.into())
                .await;
        }
    }

    /// Whether publishing must stop early: the coordinator was
    /// interrupted (halt), or gave the drive up (abort).
    pub fn halted(&self) -> bool {
        self.halt.is_cancelled() || self.abort.is_cancelled()
    }

    /// Keeps reporting until the coordinator stops the drive (or gives it
    /// up); `bound` past the usual drain is a last resort.
    pub async fn until_stopped(&self, bound: Duration, counts: impl Fn() -> PeerCounts) {
        let give_up = Instant::now() + bound + Duration::from_secs(60);
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = self.abort.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    self.report(counts(), true).await;
                    if Instant::now() > give_up {
                        return;
                    }
                }
            }
        }
    }
}

/// A worker follows: it takes t0 from the coordinator, reports its counts,
/// stops publishing when told, and drains until the coordinator, which
/// sees every process's count, ends the variant.
impl Peers for Orders {
    fn watches_server(&self) -> bool {
        false
    }

    async fn start_time(&mut self, _spec: &DriveSpec, _lead_in: Duration) -> Result<u64> {
        self.ready_then_go().await
    }

    async fn exchange(&mut self, local: PeerCounts, _interrupted: bool) -> Exchange {
        self.report(local, false).await;
        Exchange {
            others: PeerCounts::default(),
            halt: self.halted(),
        }
    }

    async fn published(
        &mut self,
        local: PeerCounts,
        _stop: &CancellationToken,
        _bar: &VariantBar,
    ) -> u64 {
        self.report(local, true).await;
        0
    }

    /// Never asked: a worker does not watch the server.
    fn counts(&mut self) -> PeerCounts {
        PeerCounts::default()
    }

    async fn hold(&mut self, bound: Duration, counts: impl Fn() -> PeerCounts + Send) {
        self.until_stopped(bound, counts).await;
    }

    /// The coordinator fetches this worker's part; a worker merges none.
    async fn collect(&mut self, _local: LocalReports<'_>) -> Vec<PeerPart> {
        Vec::new()
    }
}
