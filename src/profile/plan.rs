//! The validated plan a profile turns into: typed, with every default filled
//! in, so scenarios never re-check what validation already guaranteed.

use std::time::Duration;

use serde::Serialize;

use super::StreamPlan;
use crate::record::names;
use crate::system::error::UsageError;

/// What `jsbench ab` judges in a profile (`[ab]`); its flags override.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AbPlan {
    /// Patterns as for `--only`; empty: the default set.
    pub judge: Vec<String>,
    /// Fractions (0.02 for 2%).
    pub threshold: Option<f64>,
    pub latency_threshold: Option<f64>,
}

/// How jsbench provisions its streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ServerPlan {
    pub storage: Storage,
    pub replicas: usize,
    /// `[server] sync`, its first value: what a server jsbench starts runs
    /// with; `None` leaves the server's own default (a 2 min interval).
    pub sync: Option<SyncSetting>,
}

/// When the server fsyncs its file store (`jetstream { sync_interval }`):
/// a PubAck promises the write was flushed to the OS, not that it reached
/// the disk, so this decides what a power loss may take after an ack, and
/// what a rate costs. Server-wide: a server jsbench starts is (re)started
/// with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncSetting {
    /// The server's own default: an fsync every 2 minutes.
    Default,
    /// An fsync after every write (`sync_interval: always`).
    Always,
    /// An fsync every this long.
    Interval(Duration),
}

/// What `[server] sync` takes, for its error messages.
pub const SYNC_HELP: &str = "\"default\" (the server's 2 min interval), \"always\" (fsync every write) or an interval such as \"10s\"";

impl SyncSetting {
    /// Reads `"default"`, `"always"` or a duration (`"10s"`).
    pub fn parse(text: &str) -> Result<Self, UsageError> {
        match text.trim() {
            "default" => Ok(SyncSetting::Default),
            "always" => Ok(SyncSetting::Always),
            other => match super::parse_duration(other) {
                Ok(d) if d.is_zero() => Err(UsageError(format!(
                    "{other:?}: an interval must be above 0; {SYNC_HELP}"
                ))),
                Ok(d) => Ok(SyncSetting::Interval(d)),
                Err(_) => Err(UsageError(format!(
                    "{other:?} is not a sync setting; {SYNC_HELP}"
                ))),
            },
        }
    }

    /// The name variants and results use: `default`, `always`, `10s`.
    pub fn label(&self) -> String {
        match self {
            SyncSetting::Default => "default".into(),
            SyncSetting::Always => "always".into(),
            SyncSetting::Interval(d) => super::format_duration(*d),
        }
    }

    /// The `sync_interval` value of the server's configuration; `None`
    /// for the default, which the configuration leaves out.
    pub fn config_value(&self) -> Option<String> {
        match self {
            SyncSetting::Default => None,
            SyncSetting::Always => Some("always".into()),
            // The server parses Go durations: whole milliseconds always read.
            SyncSetting::Interval(d) => Some(format!("{}ms", d.as_millis().max(1))),
        }
    }
}

impl Serialize for SyncSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.label())
    }
}

/// A profile's `[connection]`, with natscli's context field names; paths
/// are expanded (`~`, `$VAR`) when the connection is resolved. Never holds
/// a secret.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnectionPlan {
    pub context: Option<String>,
    /// Comma-separated.
    pub url: Option<String>,
    pub user: Option<String>,
    pub creds: Option<String>,
    pub nkey: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub ca: Option<String>,
    pub tls_first: Option<bool>,
    pub timeout: Option<Duration>,
    pub connection_name: Option<String>,
    pub jetstream_domain: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    File,
    Memory,
}

/// Keys every scenario has.
#[derive(Debug, Clone)]
pub struct CommonPlan {
    pub kind: &'static str,
    /// Unique within the profile; filled in from the kind when omitted.
    pub name: Option<String>,
    /// Measured time per variant.
    pub duration: Duration,
    /// Time before the measured window: same load, nothing recorded.
    pub warmup: Duration,
    /// How long to wait, after publishing ends, for the last deliveries.
    pub drain_timeout: Duration,
    /// `[scenario.stream]`: the settings of the scenario's streams.
    pub stream: StreamPlan,
}

impl CommonPlan {
    /// The scenario's name: given, or its kind's (filled in when read).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(self.kind)
    }
}

/// Whether and how publishes carry a Nats-Msg-Id header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MsgId {
    /// No header: the cheapest publish.
    #[default]
    None,
    /// A distinct id per message: pays for dedup, never triggers it.
    Unique,
}

/// How messages are published.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PublishPlan {
    pub publishers: usize,
    pub mode: PublishMode,
    /// Outstanding PubAcks each publisher allows before it waits; 1 in sync mode.
    pub pub_ack_window: usize,
    /// How long a publisher waits for a PubAck before calling it missing.
    pub pub_ack_timeout: Duration,
    pub message_size: SizePlan,
    /// Messages fan out round-robin over this many subjects of the stream.
    pub subjects: usize,
    /// Extra headers on every message (their client cost is part of the run).
    pub headers: Vec<(String, String)>,
    pub msg_id: MsgId,
    /// Fraction of sends that retry an earlier message with its id, inside
    /// the duplicate window: the server must flag each one.
    pub duplicates: f64,
    /// Fraction of sends that retry an earlier message after the duplicate
    /// window has passed: the server must store each one again.
    pub late_duplicates: f64,
    /// The stream's duplicate window, which late retries wait out.
    pub duplicate_window: Duration,
    /// Resend a message (same Nats-Msg-Id) whose PubAck is this overdue.
    pub resend_after: Option<Duration>,
    /// When each message is due: steady at the rate unless a scenario
    /// offers an irregular pattern (replay records one).
    pub arrival: ArrivalPlan,
    /// How often a paced publisher wakes to send what is due: `None` by
    /// the rate ([`crate::record::schedule::Pacer::for_schedule`]), zero for every
    /// message. Older plans (a worker of an earlier version) have none.
    #[serde(default)]
    pub wake_every: Option<Duration>,
    /// Which client publishes (the `client` key); `auto` by default.
    #[serde(default)]
    pub client: PublishClient,
    /// Every this many messages (by message number) carries
    /// `Nats-Trace-Dest`, so the servers it crosses report its hops
    /// (the drive's trace collector); 0 traces none. Set by the latency
    /// scenario's own `trace_every` key, not a shared one.
    #[serde(default)]
    pub trace_every: u64,
}

/// The client a publisher sends through. The direct one (the sending
/// thread writes its own frames, [`crate::wire`]) costs a fraction of
/// async-nats' per-message wake-ups but speaks plain TCP only and does not
/// reconnect; `Auto` takes it wherever that cannot matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PublishClient {
    /// Direct unless the settings need TLS or the variant plans a fault
    /// (a server killed, cut or paused) that a reconnect must ride out.
    #[default]
    Auto,
    Direct,
    AsyncNats,
}

impl PublishClient {
    /// The client that publishes: `self`, with `Auto` resolved. A variant
    /// planning a fault or settings needing TLS keep async-nats; asked for
    /// `Direct` there (the plan refuses what it can see, so only TLS from
    /// the command line or a context gets here), an error says why.
    pub fn resolve(self, fault_planned: bool, tls: bool) -> anyhow::Result<PublishClient> {
        match self {
            PublishClient::AsyncNats => Ok(PublishClient::AsyncNats),
            PublishClient::Auto if fault_planned || tls => Ok(PublishClient::AsyncNats),
            PublishClient::Auto => Ok(PublishClient::Direct),
            PublishClient::Direct if tls => anyhow::bail!(
                "client = \"direct\": the connection settings require TLS, which the direct \
                 client does not speak; use \"auto\" or \"async-nats\""
            ),
            PublishClient::Direct if fault_planned => anyhow::bail!(
                "client = \"direct\": the variant plans a server fault and the direct client \
                 does not reconnect; use \"auto\" or \"async-nats\""
            ),
            PublishClient::Direct => Ok(PublishClient::Direct),
        }
    }

    /// As results name it (the `publisher_client` parameter).
    pub fn name(self) -> &'static str {
        match self {
            PublishClient::Auto => "auto",
            PublishClient::Direct => "direct",
            PublishClient::AsyncNats => "async-nats",
        }
    }
}

impl PublishPlan {
    /// The plain publisher the latency-style scenarios use.
    pub fn simple(
        publishers: usize,
        message_size: usize,
        msg_id: MsgId,
        pub_ack_window: usize,
        pub_ack_timeout: Duration,
    ) -> Self {
        PublishPlan {
            publishers,
            mode: PublishMode::Async,
            pub_ack_window,
            pub_ack_timeout,
            message_size: SizePlan::Fixed(message_size),
            subjects: 1,
            headers: Vec::new(),
            msg_id,
            duplicates: 0.0,
            late_duplicates: 0.0,
            duplicate_window: Duration::from_secs(120),
            resend_after: None,
            arrival: ArrivalPlan::Steady,
            wake_every: None,
            trace_every: 0,
            client: PublishClient::Auto,
        }
    }
}

/// How much later than the duplicate window a late retry is sent: the
/// window runs from when the server stored the original, a little after it
/// was sent. Measured: a 500 ms window expired after about 512 ms.
pub fn late_retry_margin(window: Duration) -> Duration {
    (window / 5).max(Duration::from_millis(250))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PublishMode {
    /// Await each PubAck before the next publish.
    Sync,
    /// Keep up to `pub_ack_window` PubAcks outstanding.
    Async,
}

/// Payload sizes, drawn per message from a seeded generator so every run of
/// a profile sends the same sizes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub enum SizePlan {
    Fixed(usize),
    Uniform {
        min: usize,
        max: usize,
    },
    /// Exponential with the given mean, clamped to `min..=max`.
    Exponential {
        mean: usize,
        min: usize,
        max: usize,
    },
}

impl std::fmt::Display for SizePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            SizePlan::Fixed(n) => write!(f, "{n}"),
            SizePlan::Uniform { min, max } => write!(f, "uniform {min}..={max}"),
            SizePlan::Exponential { mean, min, max } => {
                write!(f, "exponential mean {mean}, {min}..={max}")
            }
        }
    }
}

impl SizePlan {
    pub fn max(&self) -> usize {
        match *self {
            SizePlan::Fixed(n) => n,
            SizePlan::Uniform { max, .. } | SizePlan::Exponential { max, .. } => max,
        }
    }

    /// Expected size, for MB/s figures of planned load.
    pub fn mean(&self) -> f64 {
        match *self {
            SizePlan::Fixed(n) => n as f64,
            SizePlan::Uniform { min, max } => (min + max) as f64 / 2.0,
            SizePlan::Exponential { mean, .. } => mean as f64,
        }
    }
}

/// When messages are due. Irregular patterns give a replay a known history
/// to reproduce; random ones are drawn from a seeded generator, so every
/// run of a profile sends the same pattern.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub enum ArrivalPlan {
    /// Message *j* at `j / rate`: the open-loop default.
    Steady,
    /// A Poisson process at the rate: independent exponential gaps with
    /// mean `1 / rate`, so every gap size occurs, sub-millisecond ones included.
    Poisson { seed: u64 },
    /// `size` messages `spacing` apart, then `pause` of silence, repeated.
    Bursts {
        size: u64,
        spacing: Duration,
        pause: Duration,
    },
    /// These gaps between consecutive messages, in order, repeated.
    Gaps(Vec<Duration>),
    /// Each (msg/s, for how long) in turn; the last rate holds after them.
    Steps(Vec<(u64, Duration)>),
    /// From one rate to another, linearly over the schedule's span.
    Ramp { from: u64, to: u64 },
}

impl ArrivalPlan {
    pub fn is_steady(&self) -> bool {
        *self == ArrivalPlan::Steady
    }

    /// The pattern's name, which names a variant of a shape that sets its
    /// own rate.
    pub fn name(&self) -> &'static str {
        match self {
            ArrivalPlan::Steady => "steady",
            ArrivalPlan::Poisson { .. } => "poisson",
            ArrivalPlan::Bursts { .. } => "bursts",
            ArrivalPlan::Gaps(_) => "gaps",
            ArrivalPlan::Steps(_) => "steps",
            ArrivalPlan::Ramp { .. } => "ramp",
        }
    }

    /// Whether the rate comes from the scenario (steady, Poisson) rather
    /// than from the pattern itself.
    pub fn uses_rate(&self) -> bool {
        matches!(self, ArrivalPlan::Steady | ArrivalPlan::Poisson { .. })
    }
}

impl std::fmt::Display for ArrivalPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use super::format_duration as d;
        match self {
            ArrivalPlan::Steady => write!(f, "steady"),
            ArrivalPlan::Poisson { seed } => write!(f, "poisson (seed {seed})"),
            ArrivalPlan::Bursts {
                size,
                spacing,
                pause,
            } => write!(
                f,
                "bursts of {size}, {} apart, {} pause",
                d(*spacing),
                d(*pause)
            ),
            ArrivalPlan::Gaps(gaps) => {
                let gaps: Vec<String> = gaps.iter().map(|g| d(*g)).collect();
                write!(f, "gaps {}", gaps.join(", "))
            }
            ArrivalPlan::Steps(steps) => {
                let steps: Vec<String> = steps
                    .iter()
                    .map(|(rate, t)| format!("{rate}/s for {}", d(*t)))
                    .collect();
                write!(f, "steps {}", steps.join(", "))
            }
            ArrivalPlan::Ramp { from, to } => write!(f, "ramp {from}/s to {to}/s"),
        }
    }
}

/// A publish rate: messages per second, or as fast as the server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Rate {
    PerSecond(u64),
    Max,
}

impl Rate {
    pub fn label(&self) -> String {
        match self {
            Rate::PerSecond(r) => r.to_string(),
            Rate::Max => "max".into(),
        }
    }
}

/// Whether a profile's rate is the total or each publisher's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RatePer {
    Total,
    Publisher,
}

/// Reference publishers run beside jsbench's own, to show what it costs
/// and that it is not the bottleneck it measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reference {
    /// jsbench's own publishing path without its measurement (same thread
    /// placement, reply subjects and window): run before and after
    /// jsbench's variant, so drift cancels in their mean.
    Raw,
    /// The loop a user of async-nats writes: `send_publish` and await the
    /// PubAck futures, same window, size and ids. `minimal` is its old name.
    #[serde(alias = "minimal")]
    Idiomatic,
    /// Core NATS publish without JetStream: the client's ceiling.
    Core,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsumerKind {
    /// A durable pull consumer read continuously (`consume`).
    Pull,
    /// A durable pull consumer read by repeated fetches of `batch` messages.
    Fetch,
    /// A durable push consumer: the server sends to a deliver subject the
    /// clients subscribe to (as a queue group when there are several).
    Push,
}

/// What a push consumer adds to the durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PushPlan {
    /// The clients share deliveries as a queue group (`deliver_group`).
    pub queue: bool,
    /// The server waits for the client's answer to its flow-control
    /// messages before sending more.
    pub flow_control: bool,
    /// The server's delivery rate cap, in bits per second.
    pub rate_limit: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckPolicy {
    /// No acks: the server forgets a message once delivered.
    None,
    /// An ack covers every earlier message; jsbench acks every `ack_every`-th.
    All,
    /// Every message is acked (or nak'ed, termed, ...) on its own.
    Explicit,
}

/// How the durable consumer is configured and read.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ConsumerPlan {
    pub kind: ConsumerKind,
    pub ack: AckPolicy,
    /// With `ack = "all"`: ack every this-many messages.
    pub ack_every: usize,
    /// Wait for the server to confirm each ack (a request, not a publish).
    pub double_ack: bool,
    /// Clients bound to the one durable.
    pub consumers: usize,
    /// Messages per pull request (or per fetch).
    pub batch: usize,
    pub max_ack_pending: i64,
    pub ack_wait: Duration,
    /// Redelivery delays per attempt; empty for none. The server replaces
    /// AckWait with BackOff[0].
    pub backoff: Vec<Duration>,
    /// Deliveries before the server gives up on a message; -1 for unlimited.
    pub max_deliver: i64,
    /// A suffix of the scenario's subject the durable filters on
    /// (`"0"`, `"*"`); `None` for every subject.
    pub filter: Option<String>,
    /// Pull request settings beyond the batch; `None`s are jsbench's
    /// defaults.
    #[serde(default)]
    pub pull: PullTuning,
    /// The durable's max_waiting (pull requests the server holds at once);
    /// `None`: the server's default (512).
    #[serde(default)]
    pub max_waiting: Option<i64>,
    /// With `kind = "push"`: the deliver group, flow control, rate limit.
    #[serde(default)]
    pub push: PushPlan,
    /// Keys given as lists: each combination runs every variant once.
    #[serde(default)]
    pub sweep: PullSweep,
    /// Create the durable with the create request's `pedantic` flag: the
    /// server refuses a config it would otherwise change in silence
    /// (AckWait rewritten to BackOff[0]) instead of creating it.
    #[serde(default)]
    pub pedantic: bool,
    /// Which client reads: jsbench's direct connection where it can do the
    /// job, async-nats elsewhere ([`ConsumerClient`]).
    #[serde(default)]
    pub client: ConsumerClient,
    /// The direct client's pull requests kept ahead: a new request of
    /// `batch` goes out when fewer than `pulls_ahead * batch - batch / 2`
    /// messages are owed (1: one request ahead at half the batch).
    #[serde(default = "default_pulls_ahead")]
    pub pulls_ahead: usize,
}

/// Measured in the ack profile (docs/self-benchmarks.md, "A consumer at
/// the server's limit").
pub const DEFAULT_PULLS_AHEAD: usize = 2;

fn default_pulls_ahead() -> usize {
    DEFAULT_PULLS_AHEAD
}

/// The client a durable consumer reads with (`[scenario.consumer] client`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConsumerClient {
    /// Direct where the consumer's plan allows it, async-nats elsewhere.
    #[default]
    Auto,
    /// A NATS connection read frame by frame, acks written in place
    /// ([`crate::wire`]): pull consumers that ack every delivery at once.
    Direct,
    AsyncNats,
}

impl ConsumerClient {
    /// The name results give the client that ran.
    pub fn label(self) -> &'static str {
        match self {
            ConsumerClient::Auto => "auto",
            ConsumerClient::Direct => "direct",
            ConsumerClient::AsyncNats => "async-nats",
        }
    }
}

pub fn kind_name(kind: ConsumerKind) -> &'static str {
    match kind {
        ConsumerKind::Pull => "pull",
        ConsumerKind::Fetch => "fetch",
        ConsumerKind::Push => "push",
    }
}

/// What one pull request asks beyond its batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PullTuning {
    /// Bytes per request: the server stops a batch at this size.
    pub max_bytes: Option<usize>,
    /// How long a request waits on the server.
    pub expires: Option<Duration>,
    /// The server's idle heartbeat on a continuous consume.
    pub idle_heartbeat: Option<Duration>,
}

/// The pull keys given as lists, swept as max_ack_pending is in the
/// backpressure scenario: every combination is one run of each variant,
/// named with its values (`rate-5000.batch-100.expires-5s`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PullSweep {
    /// Consumer kinds side by side: pull against push at the same load.
    #[serde(default)]
    pub kind: Vec<ConsumerKind>,
    pub batch: Vec<usize>,
    pub max_bytes: Vec<usize>,
    pub expires: Vec<Duration>,
    pub max_waiting: Vec<i64>,
    pub idle_heartbeat: Vec<Duration>,
}

impl PullSweep {
    pub fn combinations(&self) -> usize {
        [
            self.kind.len(),
            self.batch.len(),
            self.max_bytes.len(),
            self.expires.len(),
            self.max_waiting.len(),
            self.idle_heartbeat.len(),
        ]
        .iter()
        .map(|&n| n.max(1))
        .product()
    }

    /// Every combination applied to `base`, with the suffix that names it;
    /// one unnamed copy of `base` when nothing is swept.
    pub fn apply(&self, base: &ConsumerPlan) -> Vec<(Option<String>, ConsumerPlan)> {
        let mut all = vec![(Vec::<String>::new(), base.clone())];
        fn extend<T: Copy>(
            all: Vec<(Vec<String>, ConsumerPlan)>,
            values: &[T],
            name: impl Fn(T) -> String,
            set: impl Fn(&mut ConsumerPlan, T),
        ) -> Vec<(Vec<String>, ConsumerPlan)> {
            if values.is_empty() {
                return all;
            }
            let mut out = Vec::new();
            for (parts, plan) in all {
                for &v in values {
                    let mut parts = parts.clone();
                    parts.push(name(v));
                    let mut plan = plan.clone();
                    set(&mut plan, v);
                    out.push((parts, plan));
                }
            }
            out
        }
        let d = crate::profile::format_duration;
        all = extend(
            all,
            &self.kind,
            |v| kind_name(v).to_string(),
            |p, v| p.kind = v,
        );
        all = extend(
            all,
            &self.batch,
            |v| format!("batch-{v}"),
            |p, v| p.batch = v,
        );
        all = extend(
            all,
            &self.max_bytes,
            |v| format!("max_bytes-{v}"),
            |p, v| p.pull.max_bytes = Some(v),
        );
        all = extend(
            all,
            &self.expires,
            |v| format!("expires-{}", d(v)),
            |p, v| p.pull.expires = Some(v),
        );
        all = extend(
            all,
            &self.max_waiting,
            |v| format!("max_waiting-{v}"),
            |p, v| p.max_waiting = Some(v),
        );
        all = extend(
            all,
            &self.idle_heartbeat,
            |v| format!("heartbeat-{}", d(v)),
            |p, v| p.pull.idle_heartbeat = Some(v),
        );
        all.into_iter()
            .map(|(parts, mut plan)| {
                plan.sweep = PullSweep::default();
                ((!parts.is_empty()).then(|| parts.join(".")), plan)
            })
            .collect()
    }
}

impl ConsumerPlan {
    /// The plain explicit-ack durable the latency-style scenarios read.
    pub fn simple() -> Self {
        ConsumerPlan {
            kind: ConsumerKind::Pull,
            ack: AckPolicy::Explicit,
            ack_every: 1,
            double_ack: false,
            consumers: 1,
            batch: 500,
            max_ack_pending: 10_000,
            ack_wait: Duration::from_secs(30),
            backoff: Vec::new(),
            max_deliver: -1,
            filter: None,
            pull: PullTuning::default(),
            max_waiting: None,
            push: PushPlan::default(),
            sweep: PullSweep::default(),
            pedantic: false,
            client: ConsumerClient::Auto,
            pulls_ahead: DEFAULT_PULLS_AHEAD,
        }
    }

    /// The ack deadline of delivery `n` (1-based): BackOff[n-1], its last
    /// entry repeating, or AckWait without BackOff.
    pub fn ack_deadline(&self, delivery: u32) -> Duration {
        match self.backoff.len() {
            0 => self.ack_wait,
            len => self.backoff[(delivery.max(1) as usize - 1).min(len - 1)],
        }
    }
}

/// What a consumer does with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Ack,
    /// Redeliver now.
    Nak,
    /// Redeliver after the delay.
    NakDelay(#[serde(with = "duration_ms")] Duration),
    /// Never redeliver.
    Term,
    /// Do nothing; the ack deadline expires and the server redelivers.
    Ignore,
    /// Hold the message for `hold`, telling the server "in progress" every
    /// `every`, then ack.
    InProgressThenAck {
        #[serde(with = "duration_ms")]
        hold: Duration,
        #[serde(with = "duration_ms")]
        every: Duration,
    },
}

mod duration_ms {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1e3)
    }

    /// The inverse, for plans sent to workers: rounded to whole
    /// nanoseconds so a worker's plan is the coordinator's exactly.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<std::time::Duration, D::Error> {
        let ms = <f64 as serde::Deserialize>::deserialize(d)?;
        Ok(std::time::Duration::from_nanos((ms * 1e6).round() as u64))
    }
}

/// A class of messages: the fraction of the stream it covers and what the
/// consumer does on each delivery.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct MessageClass {
    pub name: String,
    pub fraction: f64,
    /// Actions for deliveries 1, 2, ...; after the list, `then` repeats.
    pub script: Vec<Action>,
    pub then: Action,
}

impl MessageClass {
    pub fn action(&self, delivery: u32) -> Action {
        self.script
            .get(delivery.max(1) as usize - 1)
            .copied()
            .unwrap_or(self.then)
    }
}

/// How long a consumer works on a message before its action.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub enum ProcessingPlan {
    Fixed(Duration),
    Uniform { min: Duration, max: Duration },
    Exponential { mean: Duration, max: Duration },
}

impl std::fmt::Display for ProcessingPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use super::format_duration as d;
        match *self {
            ProcessingPlan::Fixed(t) => write!(f, "{}", d(t)),
            ProcessingPlan::Uniform { min, max } => write!(f, "uniform {}..{}", d(min), d(max)),
            ProcessingPlan::Exponential { mean, max } => {
                write!(f, "exponential mean {}, max {}", d(mean), d(max))
            }
        }
    }
}

impl ProcessingPlan {
    pub fn is_zero(&self) -> bool {
        *self == ProcessingPlan::Fixed(Duration::ZERO)
    }

    pub fn mean(&self) -> Duration {
        match *self {
            ProcessingPlan::Fixed(t) => t,
            ProcessingPlan::Uniform { min, max } => (min + max) / 2,
            ProcessingPlan::Exponential { mean, .. } => mean,
        }
    }
}

/// What consumers do with each delivery, decided by a seeded hash of the
/// stream sequence and the delivery count, so every message's fate is known
/// before the run.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BehaviourPlan {
    pub seed: u64,
    /// Checked in order; a message falls in the first class its hash hits.
    /// Messages in no class are acked on their first delivery.
    pub classes: Vec<MessageClass>,
    pub processing: ProcessingPlan,
    /// Messages a consumer client works on at once.
    pub handlers: usize,
}

impl BehaviourPlan {
    /// Every message acked at once: the clean baseline.
    pub fn all_ack() -> Self {
        BehaviourPlan {
            seed: 0,
            classes: Vec::new(),
            processing: ProcessingPlan::Fixed(Duration::ZERO),
            handlers: 1,
        }
    }
}

/// A search for the maximum sustainable rate under an SLO.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchPlan {
    pub slo: Slo,
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
            super::format_duration(self.limit),
            self.on.histogram()
        )
    }
}

/// Which latency an SLO holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
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

/// How a dlq variant's source stream retains messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retention {
    /// Kept until a limit: the original stays after it is dead-lettered.
    Limits,
    /// Removed on ack or term, not on MaxDeliver: the handler deletes the
    /// original once the copy is persisted.
    Workqueue,
    /// Removed once every consumer acked: a second consumer acks everything,
    /// the original stays for the one that dead-letters it.
    Interest,
}

impl Retention {
    pub fn label(&self) -> &'static str {
        match self {
            Retention::Limits => "limits",
            Retention::Workqueue => "workqueue",
            Retention::Interest => "interest",
        }
    }
}

/// Which advisories the DLQ's advisory stream captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capture {
    /// The delivery article's `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>`: every
    /// stream's advisories in the account; the handler skips the others.
    Account,
    /// Only the advisories of the consumers jsbench dead-letters: leaves
    /// the account-wide subject free for a capture stream of someone else's.
    Stream,
}

/// How the handler reads an original by sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OriginalGet {
    /// `STREAM.MSG.GET`, answered by the stream leader.
    Raw,
    /// `DIRECT.GET` (the stream allows direct gets), answered by any replica.
    Direct,
}

/// The dead-letter handler: a durable consumer of the advisory stream.
#[derive(Debug, Clone)]
pub struct DlqHandlerPlan {
    /// The handler durable's AckWait: how long before an advisory a
    /// handler took and never answered (it was killed) comes back.
    pub ack_wait: Duration,
    /// The nak delay when the original cannot be read or the copy not stored.
    pub retry_delay: Duration,
    /// Advisories worked on at once.
    pub concurrency: usize,
    pub get: OriginalGet,
    /// Delete work-queue originals with a secure erase (overwrite the
    /// stored bytes) rather than a plain remove.
    pub erase: bool,
    /// Kill the handler after this many copies (persisted, not yet
    /// acknowledged) and start a new one; `None` never.
    pub restart_after: Option<u64>,
    /// The names of the headers that say where a copy came from.
    pub origin_headers: OriginHeaders,
    /// From the pipeline's start until the handler first reads: a handler
    /// behind, whose originals a stream limit may evict meanwhile.
    pub start_after: Duration,
}

/// The headers a dead-letter copy carries about its original. The delivery article's
/// pattern names the sequence `Nats-Dlq-Origin-Seq`; the rest follow it.
/// nats-server 2.15 stores `Nats-` headers it does not know as they are
/// (pinned in tests/server_behaviour.rs), so the default is the delivery article's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OriginHeaders {
    pub stream: String,
    pub consumer: String,
    pub seq: String,
    /// The subject the original was published to: where a redrive sends
    /// it back.
    pub subject: String,
    /// `max_deliveries` or `terminated`: which advisory dead-lettered it.
    pub reason: String,
}

impl Default for OriginHeaders {
    fn default() -> Self {
        OriginHeaders {
            stream: "Nats-Dlq-Origin-Stream".into(),
            consumer: "Nats-Dlq-Origin-Consumer".into(),
            seq: "Nats-Dlq-Origin-Seq".into(),
            subject: "Nats-Dlq-Origin-Subject".into(),
            reason: "Nats-Dlq-Reason".into(),
        }
    }
}

/// Publish-control headers: instructions to the stream a message is
/// published to, as nats-server 2.15 interprets them (a DLQ copy drops
/// them; an origin header may not be one). Matched without regard to case
/// (a proxy or a client may have changed it; the cost of dropping a look-alike user
/// header is smaller than that of a copy the DLQ stream refuses).
const CONTROL: &[&str] = &[
    "Nats-Msg-Id",
    "Nats-TTL",
    "Nats-Rollup",
    "Nats-Incr",
    "Nats-Schedule",
    "Nats-Required-Api-Level",
];
/// Families of publish-control headers.
const CONTROL_PREFIXES: &[&str] = &["Nats-Expected-", "Nats-Batch-", "Nats-Schedule-"];

/// Whether a header instructs the stream on publish and must not be copied.
pub fn is_publish_control(name: &str) -> bool {
    CONTROL.iter().any(|c| c.eq_ignore_ascii_case(name))
        || CONTROL_PREFIXES.iter().any(|p| {
            name.len() > p.len() && name.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes())
        })
}

impl OriginHeaders {
    /// Every name, in a fixed order.
    pub fn all(&self) -> [&str; 5] {
        [
            &self.stream,
            &self.consumer,
            &self.seq,
            &self.subject,
            &self.reason,
        ]
    }
}

/// What the restart scenario does to its node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL, and started again on its store after `down_for`.
    #[default]
    Kill,
    /// Every route to and from the node closed (and refused) for
    /// `down_for`: the node is cut off from the cluster, its clients not.
    Cut,
    /// Every route to and from the node held with nothing passing for
    /// `down_for`, then let go: a stalled network.
    Pause,
}

impl FaultKind {
    pub fn is_route(self) -> bool {
        self != FaultKind::Kill
    }
}

/// Where the work in a client's hands is when it crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashPoint {
    /// Deliveries the client has pulled but not started: handlers finish
    /// (and ack) what they hold, the rest goes down with the connection.
    BeforeProcessing,
    /// Handlers are stopped mid-work: nothing in hand is acked.
    DuringProcessing,
    /// Handlers finish their work but the client dies before acking it:
    /// that work will run twice (the restarts article's fourth case).
    AfterProcessing,
    /// Not a crash: a graceful stop. The client stops pulling, finishes
    /// and acks what its handlers hold and what it has already received,
    /// then closes its connection.
    Drain,
}

/// Which server a restart kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultNode {
    /// The server (node 0 of a cluster).
    Server,
    /// The node leading the variant's stream.
    Leader,
    /// A node holding a replica of the variant's stream that does not lead
    /// it: the quorum survives, no election is due.
    Follower,
}
