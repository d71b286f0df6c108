//! The durable consumer: how it is configured and read, and
//! `[scenario.consumer]` as a profile writes it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::keys::{OneOrMany, has_repeats, indexed, items, picks, range_each};
use super::problems::Problems;
use crate::units::{Bytes, Dur};

/// How the durable consumer is configured and read.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

    /// Checks a typed plan against the bounds a profile's consumer keys
    /// are held to (clients, pending acks, AckWait): a worker runs only
    /// what a profile could ask.
    pub fn check(&self, prefix: &str, problems: &mut Problems) {
        let key = |k: &str| format!("{prefix}.{k}");
        problems.range(
            &key("consumers"),
            self.consumers,
            1,
            MAX_CONSUMER_CLIENTS,
            " clients",
        );
        problems.range(
            &key("max_ack_pending"),
            self.max_ack_pending,
            1,
            MAX_ACK_PENDING,
            "",
        );
        problems.seconds(&key("ack_wait"), self.ack_wait, 0.001, 86_400.0);
    }
}

/// Measured in the ack profile (docs/self-benchmarks.md, "A consumer at
/// the server's limit").
pub const DEFAULT_PULLS_AHEAD: usize = 2;

/// The most consumer clients of one durable.
pub const MAX_CONSUMER_CLIENTS: usize = 256;

/// The highest `max_ack_pending`.
pub const MAX_ACK_PENDING: i64 = 10_000_000;

fn default_pulls_ahead() -> usize {
    DEFAULT_PULLS_AHEAD
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

pub fn kind_name(kind: ConsumerKind) -> &'static str {
    match kind {
        ConsumerKind::Pull => "pull",
        ConsumerKind::Fetch => "fetch",
        ConsumerKind::Push => "push",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckPolicy {
    /// No acks: the server forgets a message once delivered.
    None,
    /// An ack covers every earlier message; jsbench acks every `ack_every`-th.
    All,
    /// Every message is acked (or nak'ed, termed, ...) on its own.
    Explicit,
}

/// What a push consumer adds to the durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushPlan {
    /// The clients share deliveries as a queue group (`deliver_group`).
    pub queue: bool,
    /// The server waits for the client's answer to its flow-control
    /// messages before sending more.
    pub flow_control: bool,
    /// The server's delivery rate cap, in bits per second.
    pub rate_limit: Option<u64>,
}

/// The client a durable consumer reads with (`[scenario.consumer] client`),
/// the publishers' three choices: `auto` takes the direct one ([`crate::wire`],
/// acks written in place) where the consumer's plan allows it, for pull
/// consumers that ack every delivery at once; async-nats elsewhere.
pub type ConsumerClient = super::client::PublishClient;

/// What one pull request asks beyond its batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    fn lens(&self) -> [usize; 6] {
        [
            self.kind.len(),
            self.batch.len(),
            self.max_bytes.len(),
            self.expires.len(),
            self.max_waiting.len(),
            self.idle_heartbeat.len(),
        ]
    }

    pub fn combinations(&self) -> usize {
        self.lens().iter().map(|&n| n.max(1)).product()
    }

    /// Every combination applied to `base`, with the suffix that names it;
    /// one unnamed copy of `base` when nothing is swept.
    pub fn apply(&self, base: &ConsumerPlan) -> Vec<(Option<String>, ConsumerPlan)> {
        let d = crate::units::format_duration;
        let one = |at: Vec<usize>| {
            let (mut plan, mut parts) = (base.clone(), Vec::new());
            if let Some(&v) = self.kind.get(at[0]) {
                plan.kind = v;
                parts.push(kind_name(v).to_string());
            }
            if let Some(&v) = self.batch.get(at[1]) {
                plan.batch = v;
                parts.push(format!("batch-{v}"));
            }
            if let Some(&v) = self.max_bytes.get(at[2]) {
                plan.pull.max_bytes = Some(v);
                parts.push(format!("max_bytes-{v}"));
            }
            if let Some(&v) = self.expires.get(at[3]) {
                plan.pull.expires = Some(v);
                parts.push(format!("expires-{}", d(v)));
            }
            if let Some(&v) = self.max_waiting.get(at[4]) {
                plan.max_waiting = Some(v);
                parts.push(format!("max_waiting-{v}"));
            }
            if let Some(&v) = self.idle_heartbeat.get(at[5]) {
                plan.pull.idle_heartbeat = Some(v);
                parts.push(format!("heartbeat-{}", d(v)));
            }
            plan.sweep = PullSweep::default();
            ((!parts.is_empty()).then(|| parts.join(".")), plan)
        };
        picks(&self.lens()).into_iter().map(one).collect()
    }
}

/// `[scenario.consumer]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerSection {
    kind: Option<OneOrMany<ConsumerKind>>,
    queue: Option<bool>,
    flow_control: Option<bool>,
    rate_limit: Option<u64>,
    ack: Option<AckPolicy>,
    ack_every: Option<usize>,
    double_ack: Option<bool>,
    consumers: Option<usize>,
    batch: Option<OneOrMany<usize>>,
    max_bytes: Option<OneOrMany<Bytes>>,
    expires: Option<OneOrMany<Dur>>,
    max_waiting: Option<OneOrMany<i64>>,
    idle_heartbeat: Option<OneOrMany<Dur>>,
    max_ack_pending: Option<i64>,
    ack_wait: Option<Dur>,
    backoff: Option<Vec<Dur>>,
    max_deliver: Option<i64>,
    filter_subject: Option<String>,
    pedantic: Option<bool>,
    client: Option<ConsumerClient>,
    pulls_ahead: Option<usize>,
}

impl ConsumerSection {
    /// The push keys, and the pull-only keys a push-only consumer refuses.
    fn validate_push(
        &self,
        plan: &ConsumerPlan,
        key: &dyn Fn(&str) -> String,
        problems: &mut Problems,
    ) {
        let kinds = items(&self.kind);
        let push = kinds.contains(&ConsumerKind::Push);
        let only_push = push && kinds.iter().all(|k| *k == ConsumerKind::Push);
        // The push keys, refused without a push kind, and the pull-only
        // keys, refused when every kind is push.
        for (name, given, pull) in [
            ("queue", self.queue.is_some(), false),
            ("flow_control", self.flow_control.is_some(), false),
            ("rate_limit", self.rate_limit.is_some(), false),
            ("batch", self.batch.is_some(), true),
            ("max_bytes", self.max_bytes.is_some(), true),
            ("expires", self.expires.is_some(), true),
            ("max_waiting", self.max_waiting.is_some(), true),
        ] {
            if given && pull && only_push {
                problems.push(
                    key(name),
                    "applies to pull requests; a push consumer is sent to without asking",
                );
            } else if given && !pull && !push {
                problems.push(key(name), "applies to kind = \"push\"");
            }
        }
        if push && plan.consumers > 1 && !plan.push.queue {
            problems.push(
                key("queue"),
                "several clients on one push durable need queue = true, or each gets every message",
            );
        }
        if let Some(rate) = self.rate_limit {
            problems.range(
                &key("rate_limit"),
                rate,
                1_000,
                100_000_000_000,
                " bits per second",
            );
        }
        if has_repeats(kinds) {
            problems.push(key("kind"), "lists a kind twice");
        }
    }

    /// The pull keys, each value of a list checked on its own.
    fn validate_pull(
        &self,
        plan: &ConsumerPlan,
        key: &dyn Fn(&str) -> String,
        problems: &mut Problems,
    ) {
        let batch = items(&self.batch);
        range_each(
            problems,
            key("batch"),
            batch,
            (1, 10_000),
            " messages per pull",
        );
        let sizes: Vec<u64> = items(&self.max_bytes).iter().map(|b| b.0).collect();
        range_each(
            problems,
            key("max_bytes"),
            &sizes,
            (1, 1 << 30),
            " bytes per pull",
        );
        let waits = items(&self.max_waiting);
        range_each(
            problems,
            key("max_waiting"),
            waits,
            (1, 100_000),
            " pull requests",
        );
        let (expiries, beats) = (items(&self.expires), items(&self.idle_heartbeat));
        let (millis, secs) = (Duration::from_millis, Duration::from_secs);
        for (name, list, min, max, allowed) in [
            (
                "expires",
                expiries,
                millis(10),
                secs(3600),
                "must be between 10ms and 1h",
            ),
            (
                "idle_heartbeat",
                beats,
                millis(100),
                secs(60),
                "must be between 100ms and 1m",
            ),
        ] {
            for (i, d) in list.iter().enumerate() {
                if d.0 < min || d.0 > max {
                    problems.push(indexed(key(name), i, list.len()), allowed);
                }
            }
        }
        if !beats.is_empty() && plan.kind == ConsumerKind::Fetch {
            problems.push(
                key("idle_heartbeat"),
                "applies to kind = \"pull\" (a continuous consume); a fetch waits for its expiry",
            );
        }
        // nats-server refuses a pull request whose heartbeat is more than
        // half its expiry.
        let longest_beat = beats.iter().map(|d| d.0).max();
        let shortest_expiry = expiries.iter().map(|d| d.0).min();
        if let (Some(beat), Some(expiry)) = (longest_beat, shortest_expiry)
            && beat * 2 > expiry
        {
            problems.push(
                key("idle_heartbeat"),
                "must be at most half of expires (the server refuses the pull request otherwise)",
            );
        }
        let swept = plan.sweep.combinations();
        if swept > 64 {
            problems.push(
                key("batch"),
                format!("the pull keys' lists make {swept} combinations; at most 64"),
            );
        }
    }

    /// `client = "direct"` where the plan itself rules it out; what only a
    /// scenario knows (its behaviour, faults, TLS) is checked when the
    /// consumer starts ([`crate::consume::direct::unsuited`]).
    fn validate_client(
        &self,
        plan: &ConsumerPlan,
        key: &dyn Fn(&str) -> String,
        problems: &mut Problems,
    ) {
        if let Some(n) = self.pulls_ahead {
            problems.range(&key("pulls_ahead"), n, 1, 16, " pull requests");
            if plan.client == ConsumerClient::AsyncNats {
                problems.push(
                    key("pulls_ahead"),
                    "applies to the direct client; async-nats keeps its own requests",
                );
            }
        }
        if plan.client != ConsumerClient::Direct {
            return;
        }
        let kinds = items(&self.kind);
        let reason = if kinds.iter().any(|k| *k != ConsumerKind::Pull)
            || (kinds.is_empty() && plan.kind != ConsumerKind::Pull)
        {
            Some("the direct client reads pull consumers only (kind = \"pull\")")
        } else if plan.double_ack {
            Some("the direct client does not confirm acks: double_ack stays with async-nats")
        } else if self.max_bytes.is_some() {
            Some("the direct client counts messages, not bytes: max_bytes stays with async-nats")
        } else {
            None
        };
        if let Some(reason) = reason {
            problems.push(key("client"), format!("\"direct\" cannot apply: {reason}"));
        }
    }

    /// `ack_per_variant`: the scenario sets `ack` per variant itself (the
    /// ack scenario), so `ack_every` is allowed whatever `ack` says here.
    pub fn validate(
        &self,
        prefix: &str,
        ack_per_variant: bool,
        problems: &mut Problems,
    ) -> ConsumerPlan {
        let p = format!("{prefix}.consumer");
        let key = |k: &str| format!("{p}.{k}");
        let defaults = ConsumerPlan::simple();
        // A list sweeps; a single value is the plan's own.
        fn split<T: Clone>(v: &Option<OneOrMany<T>>) -> (Option<T>, Vec<T>) {
            match items(v) {
                [] => (None, Vec::new()),
                [one] => (Some(one.clone()), Vec::new()),
                many => (Some(many[0].clone()), many.to_vec()),
            }
        }
        let (kind, kinds) = split(&self.kind);
        let (batch, batches) = split(&self.batch);
        let (max_bytes, max_bytes_list) = split(&self.max_bytes);
        let (expires, expires_list) = split(&self.expires);
        let (max_waiting, max_waiting_list) = split(&self.max_waiting);
        let (heartbeat, heartbeat_list) = split(&self.idle_heartbeat);
        let sweep = PullSweep {
            kind: kinds,
            batch: batches,
            max_bytes: max_bytes_list.iter().map(|b| b.0 as usize).collect(),
            expires: expires_list.iter().map(|d| d.0).collect(),
            max_waiting: max_waiting_list,
            idle_heartbeat: heartbeat_list.iter().map(|d| d.0).collect(),
        };
        let plan = ConsumerPlan {
            kind: kind.unwrap_or(defaults.kind),
            ack: self.ack.unwrap_or(defaults.ack),
            ack_every: self.ack_every.unwrap_or(1),
            double_ack: self.double_ack.unwrap_or(false),
            consumers: self.consumers.unwrap_or(defaults.consumers),
            batch: batch.unwrap_or(defaults.batch),
            max_ack_pending: self.max_ack_pending.unwrap_or(defaults.max_ack_pending),
            ack_wait: self.ack_wait.map(|d| d.0).unwrap_or(defaults.ack_wait),
            backoff: self
                .backoff
                .as_ref()
                .map(|b| b.iter().map(|d| d.0).collect())
                .unwrap_or_default(),
            max_deliver: self.max_deliver.unwrap_or(-1),
            filter: self.filter_subject.clone(),
            pedantic: self.pedantic.unwrap_or(false),
            pull: PullTuning {
                max_bytes: max_bytes.map(|b| b.0 as usize),
                expires: expires.map(|d| d.0),
                idle_heartbeat: heartbeat.map(|d| d.0),
            },
            max_waiting,
            push: PushPlan {
                // Several clients on one push durable must share its
                // deliveries, or each would get (and ack) every message.
                queue: self
                    .queue
                    .unwrap_or(self.consumers.unwrap_or(defaults.consumers) > 1),
                flow_control: self.flow_control.unwrap_or(false),
                rate_limit: self.rate_limit,
            },
            sweep,
            client: self.client.unwrap_or_default(),
            pulls_ahead: self.pulls_ahead.unwrap_or(DEFAULT_PULLS_AHEAD),
        };
        plan.check(&p, problems);
        self.validate_client(&plan, &key, problems);
        self.validate_pull(&plan, &key, problems);
        self.validate_push(&plan, &key, problems);
        if let Some(every) = self.ack_every {
            if plan.ack != AckPolicy::All && !ack_per_variant {
                problems.push(key("ack_every"), "applies to ack = \"all\" only");
            }
            problems.range(&key("ack_every"), every, 1, 100_000, " messages");
        }
        if plan.double_ack && plan.ack == AckPolicy::None {
            problems.push(
                key("double_ack"),
                "needs acks: set ack = \"explicit\" or \"all\"",
            );
        }
        if plan.max_deliver == 0 || plan.max_deliver < -1 {
            problems.push(
                key("max_deliver"),
                format!(
                    "{} is not allowed; use -1 (unlimited) or at least 1",
                    plan.max_deliver
                ),
            );
        }
        for (i, d) in plan.backoff.iter().enumerate() {
            if d.is_zero() || *d > Duration::from_secs(86_400) {
                problems.push(format!("{p}.backoff[{i}]"), "must be between 1ns and 24h");
            }
        }
        if !plan.backoff.is_empty() {
            if plan.ack == AckPolicy::None {
                problems.push(
                    key("backoff"),
                    "redelivery needs acks: set ack = \"explicit\"",
                );
            }
            // Measured on 2.15.1: MaxDeliver equal to the number of BackOff
            // entries is accepted, fewer is refused.
            if plan.max_deliver < plan.backoff.len() as i64 {
                problems.push(
                    key("max_deliver"),
                    format!(
                        "a BackOff of {} entries needs max_deliver >= {} (the server requires it)",
                        plan.backoff.len(),
                        plan.backoff.len()
                    ),
                );
            }
        }
        if let Some(filter) = &plan.filter
            && (filter.is_empty()
                || filter.split('.').any(str::is_empty)
                || filter.contains(char::is_whitespace))
        {
            problems.push(
                key("filter_subject"),
                format!("{filter:?} is not a subject suffix like \"0\" or \"*\""),
            );
        }
        plan
    }
}

/// Scenarios that judge every message's fate (or its survival) need the
/// server to track each ack: anything but explicit acks hides redeliveries.
pub fn require_explicit_ack(
    consumer: &ConsumerPlan,
    kind: &str,
    prefix: &str,
    problems: &mut Problems,
) {
    if consumer.ack != AckPolicy::Explicit {
        problems.push(
            format!("{prefix}.consumer.ack"),
            format!("{kind} needs ack = \"explicit\""),
        );
    }
}
