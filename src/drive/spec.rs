//! A variant's load as scenarios describe it, and the share of it one
//! process runs.

use std::sync::Arc;
use std::time::Duration;

use crate::profile::{BehaviourPlan, CommonPlan, ConsumerPlan, CrashPoint, FaultNode, PublishPlan};
use crate::record::ledger::SeqSet;

/// One variant's load: publishers feeding one stream or several, read by
/// one durable or several. It travels whole to workers, which each run the
/// part of it their [`Share`] names (a load of one stream and at most one
/// durable; a larger one stays in the process that leads it).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DriveSpec {
    /// Shown on the progress bar.
    pub label: String,
    /// The streams published into: publisher *p* feeds stream *p* mod *S*.
    /// The first is the variant's stream, the one a fault or a pause names.
    pub streams: Vec<StreamLoad>,
    pub publish: PublishPlan,
    /// The durables read, and how; none: the load only publishes.
    pub readers: Vec<Reader>,
    /// Total msg/s; `None` publishes as fast as the server accepts.
    pub rate: Option<u64>,
    /// With `rate = None`: publish exactly this many messages and stop (a
    /// fill) instead of running for warm-up plus duration.
    pub count: Option<u64>,
    pub warmup: Duration,
    pub duration: Duration,
    pub drain_timeout: Duration,
    pub msg_id_prefix: String,
    /// Seeds sizes and retry choices.
    pub seed: u64,
    /// Kill a server mid-run and start it again (restart).
    pub fault: Option<FaultPlan>,
    /// A server URL the drive's clients stay off (connect and reconnect
    /// to the others only): the node a scenario's own fault cuts off,
    /// which must stop what the scenario measures and not the load.
    #[serde(default)]
    pub avoid_server: Option<String>,
    /// The readers' clients share this many connections and every durable
    /// is bound before the clock starts: a thousand durables would
    /// otherwise want a thousand connections, and one bound late would
    /// find its first messages waiting. `None`: a connection per client.
    #[serde(default)]
    pub shared_connections: Option<usize>,
}

/// One stream of a load.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct StreamLoad {
    pub name: String,
    /// Published to round-robin by message number.
    pub subjects: Vec<String>,
    /// Messages already in the stream that its readers must also finish.
    pub preloaded: u64,
    /// Which stored sequences those are (a fill read by a consume-only
    /// drive): marked persisted before losses are attributed, so one never
    /// delivered is lost and named as a published one would be.
    #[serde(default)]
    pub due: Option<SeqSet>,
    /// Read the stream back once the load is over: what a filtered
    /// reader is due is what the stream holds on its subjects.
    #[serde(default)]
    pub read_back: bool,
}

/// A durable of the load, on one of its streams.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Reader {
    /// Index into [`DriveSpec::streams`].
    pub stream: usize,
    pub consumer: ConsumerSpec,
    /// The stream subjects (indices) its durable's filter selects; `None`:
    /// all of them.
    #[serde(default)]
    pub filter: Option<Vec<usize>>,
}

impl StreamLoad {
    pub fn new(name: &str, subjects: Vec<String>) -> Self {
        StreamLoad {
            name: name.to_string(),
            subjects,
            ..StreamLoad::default()
        }
    }
}

/// When to kill which server, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FaultPlan {
    /// From the start of the schedule.
    pub after: Duration,
    pub node: FaultNode,
    /// From the kill to the restart (the cut or pause to the heal).
    pub down_for: Duration,
    #[serde(default)]
    pub kind: crate::profile::FaultKind,
}

/// The durable a variant reads and what its clients do with deliveries.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ConsumerSpec {
    pub durable: String,
    pub plan: ConsumerPlan,
    pub behaviour: Arc<BehaviourPlan>,
    /// Keep a record of every delivery (for redelivery delays).
    pub log_events: bool,
    /// Split each first delivery's latency at the server's stored time
    /// stamp ([`crate::consume::ConsumerConfig::hops`]).
    #[serde(default)]
    pub hops: bool,
    /// Poll consumer info this often while the variant runs.
    pub sample_every: Option<Duration>,
    /// Crash the first client mid-run and bind a new one (resume).
    pub crash: Option<CrashPlan>,
    /// Keep the messages planned to be dead-lettered as the clients first
    /// saw them (the dlq audit's independent record of a work queue's
    /// deleted originals).
    #[serde(default)]
    pub keep_doomed: bool,
    /// Read the variant's subject over core NATS instead of a durable,
    /// answering each message in place of a PubAck (the latency
    /// scenario's core baseline; [`crate::consume::core`]).
    #[serde(default)]
    pub core: bool,
    /// A dependency outage the handlers see (the outage scenario).
    #[serde(default)]
    pub outage: Option<OutagePlan>,
    /// Idempotent handlers: the KV bucket they dedup in.
    #[serde(default)]
    pub dedup: Option<String>,
}

/// A downstream dependency down for a while: every delivery the handlers
/// get meanwhile is answered with `answer`, and with `pause` the durable is
/// paused for the outage (`pause_until` its planned end) as soon as it
/// begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutagePlan {
    /// From the start of the schedule.
    pub after: Duration,
    pub lasts: Duration,
    pub answer: crate::profile::Action,
    pub pause: bool,
}

/// When and how the first consumer client crashes, and when a new client
/// binds to the same durable in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CrashPlan {
    /// From the start of the schedule.
    pub after: Duration,
    pub point: CrashPoint,
    /// From the crash to the new client's bind.
    pub rebind_after: Duration,
}

impl ConsumerSpec {
    /// A durable whose clients follow `behaviour`, with every delivery
    /// logged and consumer info sampled: what fates and redelivery
    /// accounting are built from.
    pub fn observed(
        durable: String,
        plan: ConsumerPlan,
        behaviour: Arc<BehaviourPlan>,
        sample_every: Duration,
    ) -> Self {
        ConsumerSpec {
            behaviour,
            log_events: true,
            sample_every: Some(sample_every),
            ..ConsumerSpec::acking(durable, plan)
        }
    }

    /// An explicit-ack durable whose clients ack everything at once.
    pub fn acking(durable: String, plan: ConsumerPlan) -> Self {
        ConsumerSpec {
            durable,
            plan,
            behaviour: Arc::new(BehaviourPlan::all_ack()),
            log_events: false,
            hops: false,
            sample_every: None,
            crash: None,
            keep_doomed: false,
            core: false,
            outage: None,
            dedup: None,
        }
    }

    /// A core-NATS subscriber to the variant's subject, no durable.
    pub fn core(plan: ConsumerPlan) -> Self {
        ConsumerSpec {
            core: true,
            ..ConsumerSpec::acking(String::new(), plan)
        }
    }
}

/// The most messages a drive that publishes a count (a fill) may ask
/// for: a billion, beyond any fill a profile makes.
pub const MAX_COUNT: u64 = 1_000_000_000;

/// The most streams and durables one drive names.
const MAX_STREAMS: usize = 1024;

impl DriveSpec {
    /// Checks a drive handed over the wire (to a worker) against the
    /// bounds a profile is held to, through the profile's own checks and
    /// constants: a worker runs only what some profile could have asked,
    /// never a 1 TiB message or a rate of 2^64. `share` must name
    /// publishers and consumer clients the drive has. The error lists
    /// every problem, by field.
    pub fn check(&self, share: &Share) -> anyhow::Result<()> {
        use crate::profile::{DRAIN_SECONDS, DURATION_SECONDS, MAX_RATE, WARMUP_SECONDS};
        let mut p = crate::profile::Problems::default();
        if let Some(rate) = self.rate {
            p.range("drive.rate", rate, 1, MAX_RATE, " msg/s");
        }
        if let Some(count) = self.count {
            p.range("drive.count", count, 1, MAX_COUNT, " messages");
        }
        // A fill runs for its count, not a time: zero is its duration.
        let (min, max) = DURATION_SECONDS;
        let min = if self.count.is_some() { 0.0 } else { min };
        p.seconds("drive.duration", self.duration, min, max);
        let (min, max) = WARMUP_SECONDS;
        p.seconds("drive.warmup", self.warmup, min, max);
        let (_, max) = DRAIN_SECONDS;
        p.seconds("drive.drain_timeout", self.drain_timeout, 0.0, max);
        self.publish.check("drive.publish", &mut p);
        p.range(
            "drive.streams",
            self.streams.len(),
            1,
            MAX_STREAMS,
            " streams",
        );
        p.range(
            "drive.readers",
            self.readers.len(),
            0,
            MAX_STREAMS,
            " durables",
        );
        for (i, s) in self.streams.iter().enumerate() {
            let subjects = s.subjects.len();
            let max = crate::profile::MAX_SUBJECTS;
            p.range(
                &format!("drive.streams[{i}].subjects"),
                subjects,
                1,
                max,
                " subjects",
            );
        }
        let mut clients = 0usize;
        for (i, r) in self.readers.iter().enumerate() {
            let key = format!("drive.readers[{i}]");
            if r.stream >= self.streams.len() {
                p.push(
                    format!("{key}.stream"),
                    format!("{} names no stream", r.stream),
                );
            }
            let subjects = self.streams.get(r.stream).map_or(0, |s| s.subjects.len());
            if r.filter.iter().flatten().any(|&f| f >= subjects) {
                p.push(
                    format!("{key}.filter"),
                    "names a subject the stream does not have",
                );
            }
            r.consumer.plan.check(&format!("{key}.consumer"), &mut p);
            clients = clients.saturating_add(r.consumer.plan.consumers);
        }
        if let Some(n) = self.shared_connections {
            p.range(
                "drive.shared_connections",
                n,
                1,
                crate::profile::MAX_CONSUMER_CLIENTS,
                "",
            );
        }
        let publishers = self.publish.publishers;
        if share.publishers.iter().any(|&i| i >= publishers) || share.publishers.len() > publishers
        {
            p.push(
                "share.publishers",
                format!("names publishers beyond the drive's {publishers}"),
            );
        }
        if share.consumers.iter().any(|&i| i >= clients) || share.consumers.len() > clients {
            p.push(
                "share.consumers",
                format!("names consumer clients beyond the drive's {clients}"),
            );
        }
        if p.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = p
            .list()
            .iter()
            .map(|problem| format!("{}: {}", problem.path, problem.message))
            .collect();
        Err(anyhow::anyhow!(
            "drive {:?} is out of bounds: {}",
            self.label,
            list.join("; ")
        ))
    }

    /// Messages a paced variant or a fill publishes, warm-up included; 0
    /// when it runs for a time instead.
    pub fn messages(&self) -> u64 {
        if let Some(arrivals) = self.arrivals() {
            return arrivals.len() as u64;
        }
        match (self.rate, self.count) {
            (Some(rate), _) => ((rate as f64) * (self.warmup + self.duration).as_secs_f64())
                .round()
                .max(1.0) as u64,
            (None, Some(n)) => n,
            (None, None) => 0,
        }
    }

    /// The variant's stream: the first.
    pub fn stream(&self) -> &str {
        self.streams.first().map_or("", |s| s.name.as_str())
    }

    /// The first durable: the one a crash, a pause and consumer info name.
    pub fn consumer(&self) -> Option<&ConsumerSpec> {
        self.readers.first().map(|r| &r.consumer)
    }

    /// One stream and at most one durable: what workers can split.
    pub fn is_simple(&self) -> bool {
        self.streams.len() <= 1 && self.readers.len() <= 1
    }

    /// Messages already stored that the readers must also finish.
    pub fn preloaded(&self) -> u64 {
        self.streams.iter().map(|s| s.preloaded).sum()
    }

    /// Intended send offsets of an irregular arrival pattern
    /// (`publish.arrival`, over warm-up plus duration; `rate` is its mean),
    /// or `None` for the steady schedule at `rate`.
    pub fn arrivals(&self) -> Option<Arc<[u64]>> {
        crate::profile::arrival_offsets(
            &self.publish.arrival,
            self.rate,
            self.warmup + self.duration,
        )
        .map(Arc::from)
    }

    /// The shape most scenarios drive: `rate` msg/s over the plan's
    /// warm-up and duration to one subject, read by `consumer`, seeded by
    /// the rate so variants at one rate publish alike. Scenarios change
    /// the fields that make them different (ids, a crash, a kill).
    pub fn paced(
        label: String,
        stream: &str,
        subject: String,
        publish: &PublishPlan,
        common: &CommonPlan,
        rate: u64,
        consumer: ConsumerSpec,
    ) -> Self {
        DriveSpec {
            readers: vec![Reader {
                stream: 0,
                consumer,
                filter: None,
            }],
            ..DriveSpec::publish_only(label, stream, vec![subject], publish, common, rate)
        }
    }

    /// [`DriveSpec::paced`] with nobody consuming: `rate` msg/s over the
    /// plan's warm-up and duration to `subjects`, for a variant whose
    /// messages are read by something other than jsbench's consumers (a
    /// server copying them elsewhere).
    pub fn publish_only(
        label: String,
        stream: &str,
        subjects: Vec<String>,
        publish: &PublishPlan,
        common: &CommonPlan,
        rate: u64,
    ) -> Self {
        // A fill of nothing, paced instead.
        DriveSpec {
            publish: publish.clone(),
            rate: Some(rate),
            count: None,
            warmup: common.warmup,
            duration: common.duration,
            seed: rate,
            ..DriveSpec::fill(label, stream, subjects, (0, 128), common.drain_timeout)
        }
    }

    /// A fill: `messages` published as fast as the server takes them to
    /// `subjects` round-robin, nobody reading, before a consumer starts,
    /// so a consume measured afterwards is measured alone. One publisher
    /// on one connection: stream sequence *m* + 1 is message *m* unless
    /// a publish was retried.
    pub fn fill(
        label: String,
        stream: &str,
        subjects: Vec<String>,
        (messages, message_size): (u64, usize),
        drain_timeout: Duration,
    ) -> Self {
        DriveSpec {
            label,
            streams: vec![StreamLoad::new(stream, subjects)],
            publish: PublishPlan::simple(
                1,
                message_size,
                crate::profile::MsgId::None,
                4096,
                Duration::from_secs(10),
            ),
            readers: Vec::new(),
            rate: None,
            count: Some(messages),
            warmup: Duration::ZERO,
            duration: Duration::ZERO,
            drain_timeout,
            msg_id_prefix: String::new(),
            seed: 1,
            fault: None,
            avoid_server: None,
            shared_connections: None,
        }
    }

    /// A spec that publishes nothing and only consumes what is stored:
    /// the sequences `due`.
    pub fn consume_only(
        label: String,
        stream: String,
        consumer: ConsumerSpec,
        due: SeqSet,
        drain_timeout: Duration,
    ) -> Self {
        // A fill of nothing: its publisher's settings are never read.
        let mut spec = DriveSpec::fill(label, &stream, Vec::new(), (0, 128), drain_timeout);
        spec.publish.publishers = 0;
        spec.streams[0].preloaded = due.len();
        spec.streams[0].due = Some(due);
        spec.readers = vec![Reader {
            stream: 0,
            consumer,
            filter: None,
        }];
        spec
    }
}

/// Which publishers and consumer clients, by their index in the whole
/// variant, one process runs. Publisher *p* keeps its slots of the one
/// schedule (every *P*-th message from *p*) wherever it runs, so a split
/// changes who sends a message, never when it is due or what it carries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Share {
    pub publishers: Vec<usize>,
    pub consumers: Vec<usize>,
}

impl Share {
    /// Everything: a single-process run.
    pub fn all(spec: &DriveSpec) -> Share {
        Share {
            publishers: (0..spec.publish.publishers).collect(),
            consumers: (0..spec.readers.iter().map(|r| r.consumer.plan.consumers).sum()).collect(),
        }
    }

    /// Round-robin over `parts` processes, the coordinator first: the
    /// coordinator's share is never smaller than a worker's.
    pub fn split(spec: &DriveSpec, parts: usize) -> Vec<Share> {
        let parts = parts.max(1);
        let all = Share::all(spec);
        let every = |of: &[usize], k| of.iter().copied().filter(|i| i % parts == k).collect();
        (0..parts)
            .map(|k| Share {
                publishers: every(&all.publishers, k),
                consumers: every(&all.consumers, k),
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.publishers.is_empty() && self.consumers.is_empty()
    }
}
