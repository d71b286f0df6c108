//! `jsbench worker`: waits for a coordinator, then runs the shares of its
//! variants that it is given, on the coordinator's time base.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use async_nats::{Client, Subject};
use futures::StreamExt;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::auth::{self, Forward, Key, Link, SecretChoice};
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
    /// The secret shared with coordinators ([`auth`]).
    pub secret: SecretChoice,
}

/// The default id: host and process, which tell an operator where to look.
fn default_id() -> String {
    let clean = host_name().replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
    let clean: String = clean.chars().take(40).collect();
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
    let key = Key::load(&options.secret, "jsbench worker")?;
    if key.is_insecure() {
        eprintln!(
            "warning: --insecure-no-secret: this worker obeys anyone who can publish on jsb.workers.{}.>",
            options.group
        );
    }
    let client = settings.connect("worker control").await?;
    let mut me = Announce {
        id: id.clone(),
        identity: Identity::current(),
        host: host_name(),
        pid: std::process::id(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        nonce: String::new(),
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
        me.nonce = auth::nonce();
        let Some((run, coordinator, seq)) =
            wait_for_run(&client, &options.group, &me, &key, &mut commands, &stop).await?
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
            (&options.group, &id),
            (&key, &run, seq),
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

/// Announces until a coordinator recruits this worker (or refuses it):
/// the run, the coordinator and the recruit's sequence number. Only a
/// sealed recruit or refusal carrying this wait's nonce counts; anything
/// else is ignored, so a stranger can neither recruit nor stop the worker.
async fn wait_for_run(
    client: &Client,
    group: &str,
    me: &Announce,
    key: &Key,
    commands: &mut async_nats::Subscriber,
    stop: &CancellationToken,
) -> Result<Option<(String, Identity, u64)>> {
    let announcement = key.seal_announce(me)?;
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
                let opened = match key.open::<Command>(auth::COMMAND, &msg.payload) {
                    Ok(o) => o,
                    Err(e) => {
                        ignored(&me.id, &e);
                        continue;
                    }
                };
                let (sealed_run, seq) = (opened.run.clone(), opened.seq);
                match opened.value {
                    Command::Refuse { reason, nonce } if nonce == me.nonce => {
                        return Err(UsageError(format!("the coordinator refused this worker: {reason}")).into());
                    }
                    Command::Recruit { run, coordinator, nonce } if nonce == me.nonce && run == sealed_run => {
                        let answer = match me.identity.mismatch(&coordinator) {
                            None => Reply::Joined,
                            Some(differs) => Reply::Refused {
                                reason: format!(
                                    "worker {} runs jsbench {} with results schema {}; the coordinator runs {differs}",
                                    me.id, me.identity.jsbench_version, me.identity.schema_version
                                ),
                            },
                        };
                        respond(client, msg.reply.as_ref(), (key, &run, seq), &answer).await;
                        if matches!(answer, Reply::Joined) {
                            return Ok(Some((run, coordinator, seq)));
                        }
                    }
                    Command::Recruit { .. } | Command::Refuse { .. } => ignored(
                        &me.id,
                        &anyhow!("a recruit or refusal for another wait than this one (a replay)"),
                    ),
                    // Left over from a run that is over.
                    _ => {
                        let answer = Reply::Failed { error: "not in a run".into() };
                        respond(client, msg.reply.as_ref(), (key, &sealed_run, seq), &answer).await;
                    }
                }
            }
        }
    }
}

/// Says that a message was not obeyed, and why: a coordinator with
/// another secret shows up here, as does a stranger. A stranger may send
/// thousands a second, so only the first [`IgnoredLog::LINES`] are said
/// each, then a count once a minute.
fn ignored(id: &str, why: &anyhow::Error) {
    static LOG: Mutex<IgnoredLog> = Mutex::new(IgnoredLog::new());
    let now = Instant::now();
    let said = LOG.lock().unwrap_or_else(|p| p.into_inner()).admit(now);
    match said {
        Admit::Line => eprintln!("jsbench worker {id}: ignored a command: {why:#}"),
        Admit::Count(n) => eprintln!(
            "jsbench worker {id}: {n} commands ignored so far (the latest: {why:#}); \
             from here a count once a minute"
        ),
        Admit::Quiet => {}
    }
}

/// How many "ignored" lines were said, and when the last count was.
struct IgnoredLog {
    seen: u64,
    counted_at: Option<Instant>,
}

enum Admit {
    Line,
    Count(u64),
    Quiet,
}

impl IgnoredLog {
    const LINES: u64 = 10;
    const EVERY: Duration = Duration::from_secs(60);

    const fn new() -> Self {
        IgnoredLog {
            seen: 0,
            counted_at: None,
        }
    }

    fn admit(&mut self, now: Instant) -> Admit {
        self.seen += 1;
        if self.seen <= Self::LINES {
            return Admit::Line;
        }
        match self.counted_at {
            Some(at) if now.duration_since(at) < Self::EVERY => Admit::Quiet,
            _ => {
                self.counted_at = Some(now);
                Admit::Count(self.seen)
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

/// Answers command `seq` of `run`, sealed so the coordinator knows it
/// came from a worker holding the secret, in answer to that command.
async fn respond(
    client: &Client,
    reply: Option<&Subject>,
    (key, run, seq): (&Key, &str, u64),
    answer: &Reply,
) {
    if let Some(reply) = reply
        && let Ok(bytes) = key.seal_reply(run, seq, answer)
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
    (group, id): (&str, &str),
    (key, run, recruited): (&Key, &str, u64),
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
    // This worker's own numbering of what it sends unasked (heartbeats),
    // so the coordinator can refuse a replayed one.
    let link = Link::new(key.clone(), run);
    let beats_link = link.clone();
    let _heartbeat = beat(
        client,
        progress_subject(group, run),
        PROGRESS_EVERY,
        move || {
            let p = heartbeat.lock().expect("not poisoned").clone();
            let l = &beats_link;
            l.key.seal_heartbeat(&l.run, l.next(), &p).ok()
        },
    );
    let mut following = Following {
        client,
        settings,
        group,
        id,
        link,
        commands: Forward::new(recruited),
        latest,
        current: None,
    };
    let mut beat_seqs = Forward::default();
    let mut last_beat = Instant::now();
    let mut watchdog = tokio::time::interval(Duration::from_secs(1));
    let ended = loop {
        tokio::select! {
            _ = stop.cancelled() => break "stopped (interrupted)",
            beat = beats.next() => {
                // Only the coordinator's own beat keeps the run alive: a
                // forged one would hold the worker in a run that is over.
                if let Some(b) = beat
                    && let Ok(opened) = key.open::<String>(auth::BEAT, &b.payload)
                    && opened.run == run
                    && beat_seqs.take(opened.seq)
                {
                    last_beat = Instant::now();
                }
            }
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
    /// The key, the run, and this worker's numbering of what it sends.
    link: Link,
    /// The coordinator's sequence numbers obeyed so far.
    commands: Forward,
    /// What the heartbeat publishes; each drive's orders update it.
    latest: Arc<Mutex<Heartbeat>>,
    current: Option<Current>,
}

impl Following<'_> {
    /// Answers one command of the run; says how the run ended when the
    /// command ends it (a dismissal). A command not sealed with the
    /// secret, for another run, or numbered no higher than one already
    /// obeyed (a replay) is ignored.
    async fn obey(&mut self, msg: async_nats::Message, received_ns: u64) -> Option<&'static str> {
        let client = self.client;
        let reply = msg.reply.clone();
        let opened = (self.link.key.open::<Command>(auth::COMMAND, &msg.payload)).and_then(|o| {
            if o.run != self.link.run {
                bail!("a command of run {:?}, not this one", o.run);
            }
            if !self.commands.take(o.seq) {
                bail!("command {} came again or out of order (a replay)", o.seq);
            }
            Ok(o)
        });
        let opened = match opened {
            Ok(o) => o,
            Err(e) => {
                ignored(self.id, &e);
                return None;
            }
        };
        let seq = opened.seq;
        let link = self.link.clone();
        let to = (&link.key, link.run.as_str(), seq);
        match opened.value {
            Command::Ping => respond(client, reply.as_ref(), to, &pong(received_ns)).await,
            Command::Adjust { ns } => {
                clock::adjust(ns);
                respond(client, reply.as_ref(), to, &Reply::Ok).await;
            }
            Command::Recruit { .. } => {
                let (id, run) = (self.id, &self.link.run);
                let reason = format!("worker {id} is busy in run {run}");
                respond(client, reply.as_ref(), to, &Reply::Refused { reason }).await;
            }
            Command::Refuse { .. } => {}
            Command::Prepare { drive, spec, share } => {
                // Checked as a profile is: a drive out of bounds (a 1 TiB
                // message) is refused, not attempted.
                if let Err(e) = spec.check(&share) {
                    eprintln!("jsbench worker {}: refused drive {drive}: {e:#}", self.id);
                    let error = format!("refused the drive: {e:#}");
                    respond(client, reply.as_ref(), to, &Reply::Failed { error }).await;
                    return None;
                }
                self.prepare(drive, spec, share, reply.map(|r| (r, seq)))
            }
            Command::Go { drive, t0_ns } => {
                let answer = self.go(drive, t0_ns);
                respond(client, reply.as_ref(), to, &answer).await;
            }
            Command::Stop { drive } => {
                if let Some(c) = self.in_hand(drive) {
                    c.stop.cancel();
                }
                respond(client, reply.as_ref(), to, &Reply::Ok).await;
            }
            Command::Fetch { drive, chunk } => {
                let payload = self.results_chunk(drive, chunk);
                if let Some(r) = reply {
                    let sealed = link.key.seal_chunk(&link.run, seq, &payload);
                    let _ = client.publish(r, sealed.into()).await;
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
                respond(client, reply.as_ref(), to, &Reply::Ok).await;
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
    fn prepare(
        &mut self,
        drive: u64,
        spec: Box<DriveSpec>,
        share: Share,
        reply: Option<(Subject, u64)>,
    ) {
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
            progress_subject: progress_subject(self.group, &self.link.run),
            link: self.link.clone(),
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
        if let Some((reply, seq)) = orders.ready_reply.take() {
            let to = (&orders.link.key, orders.link.run.as_str(), seq);
            let error = format!("{e:#}");
            respond(&orders.client, Some(&reply), to, &Reply::Failed { error }).await;
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
    /// Where "ready" goes once the share's clients are connected, and
    /// the number of the prepare it answers.
    ready_reply: Option<(Subject, u64)>,
    go: Option<oneshot::Receiver<u64>>,
    stop: CancellationToken,
    halt: CancellationToken,
    abort: CancellationToken,
    latest: Arc<Mutex<Heartbeat>>,
    progress_subject: String,
    /// What seals the replies and heartbeats.
    link: Link,
}

impl Orders {
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
            && let Ok(bytes) = self
                .link
                .key
                .seal_heartbeat(&self.link.run, self.link.next(), &p)
        {
            let _ = self
                .client
                .publish(self.progress_subject.clone(), bytes.into())
                .await;
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

    /// Says the share is connected, then waits for the start time.
    async fn start_time(&mut self, _spec: &DriveSpec, _lead_in: Duration) -> Result<u64> {
        if let Some((reply, seq)) = self.ready_reply.take() {
            let to = (&self.link.key, self.link.run.as_str(), seq);
            respond(&self.client, Some(&reply), to, &Reply::Ready).await;
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

    async fn exchange(&mut self, local: PeerCounts, _interrupted: bool) -> Exchange {
        self.report(local, false).await;
        // Publishing stops early when the coordinator was interrupted
        // (halt) or gave the drive up (abort).
        Exchange {
            others: PeerCounts::default(),
            halt: self.halt.is_cancelled() || self.abort.is_cancelled(),
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

    /// Keeps reporting until the coordinator stops the drive (or gives it
    /// up); `bound` past the usual drain is a last resort.
    async fn hold(&mut self, bound: Duration, counts: impl Fn() -> PeerCounts + Send) {
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

    /// The coordinator fetches this worker's part; a worker merges none.
    async fn collect(&mut self, _local: LocalReports<'_>) -> Vec<PeerPart> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 51: every ignored message was a line, so a stranger's flood
    /// filled the worker's log as fast as it could send.
    #[test]
    fn a_flood_of_ignored_commands_is_ten_lines_then_a_count_a_minute() {
        let mut log = IgnoredLog::new();
        let t0 = Instant::now();
        let said: Vec<&str> = (0..10_000)
            .map(|i| match log.admit(t0 + Duration::from_millis(i)) {
                Admit::Line => "line",
                Admit::Count(_) => "count",
                Admit::Quiet => "",
            })
            .filter(|s| !s.is_empty())
            .collect();
        // 10 s of a thousand a second: ten lines and one count.
        assert_eq!(said.len(), 11, "{said:?}");
        assert!(matches!(
            log.admit(t0 + Duration::from_secs(71)),
            Admit::Count(10_001)
        ));
    }
}
