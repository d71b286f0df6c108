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
}

impl ScenarioPlan {
    pub fn common(&self) -> &CommonPlan {
        match self {
            ScenarioPlan::Latency(p) => &p.common,
        }
    }

    pub(crate) fn common_mut(&mut self) -> &mut CommonPlan {
        match self {
            ScenarioPlan::Latency(p) => &mut p.common,
        }
    }

    pub fn name(&self) -> &str {
        self.common().name.as_deref().unwrap_or(self.common().kind)
    }

    pub fn kind(&self) -> &'static str {
        self.common().kind
    }

    pub fn estimated_duration(&self) -> Duration {
        match self {
            ScenarioPlan::Latency(p) => {
                (p.common.duration + p.common.warmup) * p.rates.len() as u32
            }
        }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MsgId {
    /// No header: the cheapest publish.
    None,
    /// A distinct id per message: pays for dedup, never triggers it.
    Unique,
}

/// How messages are published.
#[derive(Debug, Clone)]
pub struct PublishPlan {
    pub publishers: usize,
    pub message_size: usize,
    pub msg_id: MsgId,
    /// Outstanding PubAcks each publisher allows before it waits.
    pub pub_ack_window: usize,
    /// How long a publisher waits for a PubAck before calling it missing.
    pub pub_ack_timeout: Duration,
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
