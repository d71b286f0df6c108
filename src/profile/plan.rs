//! The validated plan a profile turns into: typed, with every default filled
//! in, so scenarios never re-check what validation already guaranteed.

use std::time::Duration;

use serde::Serialize;

#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// The file or bundled name it came from.
    pub source: String,
    /// The text as read, kept in the results so a run can be reproduced.
    pub text: String,
    pub server: ServerPlan,
    /// `[connection]`: the server the profile is meant for, if it names one.
    pub connection: Option<ConnectionPlan>,
    pub scenarios: Vec<ScenarioPlan>,
}

impl Profile {
    /// How long the measured phases take (warm-up included), without set-up
    /// and drain; what `jsbench profiles` shows.
    pub fn estimated_duration(&self) -> Duration {
        self.scenarios
            .iter()
            .map(ScenarioPlan::estimated_duration)
            .sum()
    }
}

/// How jsbench provisions its streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ServerPlan {
    pub storage: Storage,
    pub replicas: usize,
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

#[derive(Debug, Clone)]
pub enum ScenarioPlan {
    Latency(LatencyPlan),
    Publish(PublishScenarioPlan),
}

impl ScenarioPlan {
    pub fn common(&self) -> &CommonPlan {
        match self {
            ScenarioPlan::Latency(p) => &p.common,
            ScenarioPlan::Publish(p) => &p.common,
        }
    }

    pub(crate) fn common_mut(&mut self) -> &mut CommonPlan {
        match self {
            ScenarioPlan::Latency(p) => &mut p.common,
            ScenarioPlan::Publish(p) => &mut p.common,
        }
    }

    pub fn name(&self) -> &str {
        self.common().name.as_deref().unwrap_or(self.common().kind)
    }

    pub fn kind(&self) -> &'static str {
        self.common().kind
    }

    /// Timed phases only (warm-up included); set-up, drain and read-back
    /// come on top.
    pub fn estimated_duration(&self) -> Duration {
        let c = self.common();
        let variants = match self {
            ScenarioPlan::Latency(p) => p.rates.len(),
            ScenarioPlan::Publish(p) => p.variant_count(),
        };
        (c.duration + c.warmup) * variants as u32
    }
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
#[derive(Debug, Clone)]
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
        }
    }
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
#[derive(Debug, Clone, Copy, PartialEq)]
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

/// Reference publishers run beside jsbench's own, to show that jsbench is
/// not the bottleneck it measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reference {
    /// The shortest async-nats loop: `publish` and await the PubAck futures,
    /// same window, size and ids.
    Minimal,
    /// Core NATS publish without JetStream: the client's raw ceiling.
    Core,
}

/// The `publish` scenario: publishers only, every variant of rate and
/// Nats-Msg-Id mode, duplicates injected on demand.
#[derive(Debug, Clone)]
pub struct PublishScenarioPlan {
    pub common: CommonPlan,
    pub rates: Vec<Rate>,
    pub rate_per: RatePer,
    /// One variant each, back to back, so the price of dedup is measured in one run.
    pub msg_ids: Vec<MsgId>,
    /// `msg_id` is replaced per variant.
    pub publish: PublishPlan,
    pub reference: Vec<Reference>,
    /// Read the stream back after each variant and check every stored message.
    pub verify_stored: bool,
}

impl PublishScenarioPlan {
    pub fn variant_count(&self) -> usize {
        let own = self.rates.len() * self.msg_ids.len();
        // References run at the "max" rate only.
        let max_rates = self.rates.iter().filter(|r| **r == Rate::Max).count();
        let minimal = if self.reference.contains(&Reference::Minimal) {
            max_rates * self.msg_ids.len()
        } else {
            0
        };
        let core = if self.reference.contains(&Reference::Core) {
            max_rates
        } else {
            0
        };
        own + minimal + core
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsumerKind {
    /// A durable pull consumer read continuously (`consume`).
    Pull,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckPolicy {
    Explicit,
}

/// How the durable consumer is configured and read.
#[derive(Debug, Clone)]
pub struct ConsumerPlan {
    pub kind: ConsumerKind,
    pub ack: AckPolicy,
    /// Clients bound to the one durable.
    pub consumers: usize,
    /// Messages per pull request.
    pub batch: usize,
    pub max_ack_pending: i64,
    pub ack_wait: Duration,
}

/// The `latency` scenario: fixed-rate publishers and a durable pull consumer,
/// one variant per rate.
#[derive(Debug, Clone)]
pub struct LatencyPlan {
    pub common: CommonPlan,
    /// Total msg/s across publishers; one variant each.
    pub rates: Vec<u64>,
    pub publish: PublishPlan,
    pub consumer: ConsumerPlan,
}
