//! How messages are published: the plan, and the publish keys as the
//! kinds that offer them read them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::arrival::ArrivalPlan;
pub use super::client::PublishClient;
use super::problems::Problems;
use super::shared::SharedSection;
use crate::record::stamp::STAMP_LEN;

/// How messages are published.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

    /// Checks a typed plan against the bounds [`publish_plan`] holds a
    /// profile to (publishers, window, PubAck timeout, size, subjects,
    /// headers, duplicates): a worker runs only what a profile could ask.
    pub fn check(&self, prefix: &str, problems: &mut Problems) {
        let path = |key: &str| format!("{prefix}.{key}");
        problems.range(&path("publishers"), self.publishers, 1, MAX_PUBLISHERS, "");
        problems.range(
            &path("pub_ack_window"),
            self.pub_ack_window,
            1,
            MAX_PUB_ACK_WINDOW,
            " outstanding PubAcks per publisher",
        );
        let (min, max) = PUB_ACK_TIMEOUT_SECONDS;
        problems.seconds(&path("pub_ack_timeout"), self.pub_ack_timeout, min, max);
        self.message_size.check(&path("message_size"), problems);
        problems.range(
            &path("subjects"),
            self.subjects,
            1,
            MAX_SUBJECTS,
            " subjects",
        );
        for (name, value) in &self.headers {
            check_header(name, value, &path(&format!("headers.{name}")), problems);
        }
        problems.fraction(&path("duplicates"), self.duplicates, 0.5, "sends");
        problems.fraction(&path("late_duplicates"), self.late_duplicates, 0.5, "sends");
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PublishMode {
    /// Await each PubAck before the next publish.
    Sync,
    /// Keep up to `pub_ack_window` PubAcks outstanding.
    Async,
}

/// Whether and how publishes carry a Nats-Msg-Id header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MsgId {
    /// No header: the cheapest publish.
    #[default]
    None,
    /// A distinct id per message: pays for dedup, never triggers it.
    Unique,
}

/// How much later than the duplicate window a late retry is sent: the
/// window runs from when the server stored the original, a little after it
/// was sent. Measured: a 500 ms window expired after about 512 ms.
pub fn late_retry_margin(window: Duration) -> Duration {
    (window / 5).max(Duration::from_millis(250))
}

/// Payload sizes, drawn per message from a seeded generator so every run of
/// a profile sends the same sizes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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

    /// Checks a size (a distribution's `min` and `max`, in order) against
    /// the bounds of what a message can be: a profile's `message_size` and
    /// a size a worker is handed alike.
    pub fn check(&self, path: &str, problems: &mut Problems) {
        let size = |problems: &mut Problems, key: &str, n: usize| {
            problems.range(key, n, STAMP_LEN, MAX_MESSAGE_SIZE, SIZE_HELP)
        };
        match *self {
            SizePlan::Fixed(n) => size(problems, path, n),
            SizePlan::Uniform { min, max } | SizePlan::Exponential { min, max, .. } => {
                size(problems, &format!("{path}.min"), min);
                size(problems, &format!("{path}.max"), max);
                if min > max {
                    let why = format!("{min} is larger than max = {max}");
                    problems.push(format!("{path}.min"), why);
                }
            }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RatePer {
    Total,
    Publisher,
}

/// Reference publishers run beside jsbench's own, to show what it costs
/// and that it is not the bottleneck it measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// Largest payload accepted: the server's default max_payload.
pub const MAX_MESSAGE_SIZE: usize = 1024 * 1024;

/// The most publishers a scenario (or a drive handed to a worker) runs.
pub const MAX_PUBLISHERS: usize = 1024;

/// The most subjects messages fan out over.
pub const MAX_SUBJECTS: usize = 10_000;

/// The bounds of `pub_ack_timeout`, in seconds.
pub const PUB_ACK_TIMEOUT_SECONDS: (f64, f64) = (0.01, 600.0);

/// Upper bound on outstanding PubAcks per publisher: their replies queue in
/// one async-nats subscription, whose capacity is 65,536.
pub const MAX_PUB_ACK_WINDOW: usize = 50_000;

/// Longest `wake_every` a profile may ask for: every message may wait this
/// long for its wake-up, which latency from the intended time then shows.
const MAX_WAKE_EVERY: Duration = Duration::from_millis(100);

/// `wake_every = "auto"` (by rate, the default), `"0s"` (wake for every
/// message) or a duration such as `"200us"`: how often a paced publisher
/// wakes to send every message that is due.
fn parse_wake_every(text: Option<&str>, key: &str, problems: &mut Problems) -> Option<Duration> {
    let text = text?.trim();
    if text == "auto" {
        return None;
    }
    match crate::units::parse_duration(text) {
        Ok(d) if d <= MAX_WAKE_EVERY => Some(d),
        Ok(d) => {
            problems.push(
                key,
                format!(
                    "{d:?} is out of range; allowed 0s..={MAX_WAKE_EVERY:?}, or \"auto\" \
                     (every message may wait this long for its wake-up)"
                ),
            );
            None
        }
        Err(e) => {
            problems.push(
                key,
                format!("{e}; or \"auto\" to wake by the rate (docs/pacing.md)"),
            );
            None
        }
    }
}

/// The publish keys of a scenario table (`None` where the kind does not
/// offer one or the profile omits it), checked; `msg_id` and the PubAck
/// timeout's default are the kind's.
pub(super) fn publish_plan(
    k: &mut SharedSection,
    msg_id: MsgId,
    pub_ack_timeout: Duration,
    prefix: &str,
    problems: &mut Problems,
) -> PublishPlan {
    let path = |key: &str| format!("{prefix}.{key}");
    let mode = k.mode.unwrap_or(PublishMode::Async);
    let pub_ack_window = match (mode, k.pub_ack_window) {
        (PublishMode::Sync, Some(w)) if w != 1 => {
            problems.push(
                path("pub_ack_window"),
                format!(
                    "{w} conflicts with mode = \"sync\", which awaits every PubAck (a window of 1)"
                ),
            );
            1
        }
        (PublishMode::Sync, _) => 1,
        (PublishMode::Async, w) => w.unwrap_or(1024),
    };
    let message_size = k
        .message_size
        .take()
        .unwrap_or(SizeSpec::Fixed(128))
        .validate(&path("message_size"), problems);
    let duplicate_window = k
        .duplicate_window
        .map(|d| d.0)
        .unwrap_or(Duration::from_secs(120));
    let pub_ack_timeout = k.pub_ack_timeout.map_or(pub_ack_timeout, |d| d.0);
    let publishers = k.publishers.unwrap_or(1);
    let plan = PublishPlan {
        mode,
        message_size,
        subjects: k.subjects.unwrap_or(1),
        headers: k.headers.take().unwrap_or_default().into_iter().collect(),
        duplicates: k.duplicates.unwrap_or(0.0),
        late_duplicates: k.late_duplicates.unwrap_or(0.0),
        duplicate_window,
        wake_every: parse_wake_every(k.wake_every.as_deref(), &path("wake_every"), problems),
        client: k.client.unwrap_or_default(),
        ..PublishPlan::simple(publishers, 0, msg_id, pub_ack_window, pub_ack_timeout)
    };
    // The bounds a worker's plan is held to are the profile's.
    plan.check(prefix, problems);
    if plan.duplicates + plan.late_duplicates > 0.5 {
        problems.push(
            path("late_duplicates"),
            "duplicates + late_duplicates may be at most 0.5: most sends must be new messages",
        );
    }
    problems.seconds(&path("duplicate_window"), duplicate_window, 0.1, 86_400.0);
    plan
}

/// `message_size = 128` or `message_size = { distribution = "uniform", min = 64, max = 4096 }`.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeSpec {
    Fixed(usize),
    Distribution(SizeTable),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeTable {
    distribution: SizeKind,
    min: Option<usize>,
    max: Option<usize>,
    mean: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum SizeKind {
    Fixed,
    Uniform,
    Exponential,
}

impl<'de> Deserialize<'de> for SizeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = SizeSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a size in bytes, or a table such as { distribution = \"uniform\", min = 64, max = 4096 }",
                )
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SizeSpec, E> {
                usize::try_from(v)
                    .map(SizeSpec::Fixed)
                    .map_err(|_| E::custom(format!("{v} is not a size in bytes")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SizeSpec, E> {
                Ok(SizeSpec::Fixed(v as usize))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<SizeSpec, A::Error> {
                SizeTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(SizeSpec::Distribution)
            }
        }
        d.deserialize_any(Visitor)
    }
}

const SIZE_HELP: &str = " bytes (the first 24 carry jsbench's timestamps)";

impl SizeSpec {
    fn validate(self, path: &str, problems: &mut Problems) -> SizePlan {
        match self {
            SizeSpec::Fixed(n) => SizePlan::Fixed(n),
            SizeSpec::Distribution(t) => {
                let min = t.min.unwrap_or(STAMP_LEN);
                let max = t.max.unwrap_or(MAX_MESSAGE_SIZE);
                match t.distribution {
                    SizeKind::Fixed => {
                        problems.push(
                            format!("{path}.distribution"),
                            "for a fixed size write message_size = <bytes>",
                        );
                        SizePlan::Fixed(min)
                    }
                    SizeKind::Uniform => {
                        if t.mean.is_some() {
                            problems.push(
                                format!("{path}.mean"),
                                "a uniform size takes min and max only",
                            );
                        }
                        if t.min.is_none() || t.max.is_none() {
                            problems.push(path, "a uniform size needs min and max");
                        }
                        SizePlan::Uniform { min, max }
                    }
                    SizeKind::Exponential => {
                        let mean = t.mean.unwrap_or(0);
                        if t.mean.is_none() {
                            problems
                                .push(format!("{path}.mean"), "an exponential size needs a mean");
                        } else if mean < min || mean > max {
                            problems.push(
                                format!("{path}.mean"),
                                format!("{mean} is outside min..=max ({min}..={max})"),
                            );
                        }
                        SizePlan::Exponential { mean, min, max }
                    }
                }
            }
        }
    }
}

/// Checks one extra header: a name the wire accepts and that is not
/// JetStream's, a value on one line.
fn check_header(name: &str, value: &str, key: &str, problems: &mut Problems) {
    if name.is_empty()
        || name
            .chars()
            .any(|c| c == ':' || c.is_whitespace() || c.is_control())
    {
        problems.push(
            key,
            "a header name cannot be empty or contain ':' or whitespace",
        );
    } else if name.to_ascii_lowercase().starts_with("nats-") {
        problems.push(
            key,
            "Nats-* headers control JetStream and are reserved; use msg_id for Nats-Msg-Id",
        );
    }
    if value.contains(['\r', '\n']) {
        problems.push(key, "a header value cannot contain a line break");
    }
}

/// Refuses `client = "direct"` where the direct client cannot do the job
/// (`why`: a fault it would not reconnect through, batches it does not
/// send), naming the key; `auto` keeps async-nats there by itself.
pub fn refuse_direct(publish: &PublishPlan, why: &str, prefix: &str, problems: &mut Problems) {
    if publish.client == PublishClient::Direct {
        problems.push(
            format!("{prefix}.client"),
            format!("\"direct\" cannot publish here: {why}; use \"auto\" or \"async-nats\""),
        );
    }
}
