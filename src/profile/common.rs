//! Sections and checks that several scenario kinds share.

use std::time::Duration;

use serde::Deserialize;

use super::arrival::ArrivalSpec;
use super::shared::SharedSection;
use super::{
    AckPolicy, ArrivalPlan, CommonPlan, ConsumerClient, ConsumerKind, ConsumerPlan, Dur, MsgId,
    Problems, PublishMode, PublishPlan, PullSweep, PullTuning, PushPlan, SYNC_HELP, ServerPlan,
    SizePlan, Storage, SyncSetting,
};
use crate::record::stamp::STAMP_LEN;

/// `[server]`: how streams are stored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    #[serde(default = "default_storage")]
    storage: Storage,
    #[serde(default = "one")]
    replicas: usize,
    sync: Option<OneOrMany<String>>,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            storage: default_storage(),
            replicas: 1,
            sync: None,
        }
    }
}

fn default_storage() -> Storage {
    Storage::File
}

pub(crate) fn one() -> usize {
    1
}

impl ServerSection {
    /// `[server] sync`, every value read; a list runs every scenario once
    /// per value, the embedded server restarted between them.
    pub fn syncs(&self, problems: &mut Problems) -> Vec<SyncSetting> {
        let given = items(&self.sync);
        if self.sync.is_some() && given.is_empty() {
            problems.push("server.sync", format!("lists no setting; use {SYNC_HELP}"));
        }
        let syncs: Vec<SyncSetting> = given
            .iter()
            .enumerate()
            .filter_map(|(i, text)| {
                let key = if given.len() > 1 {
                    format!("server.sync[{i}]")
                } else {
                    "server.sync".to_string()
                };
                SyncSetting::parse(text)
                    .map_err(|e| problems.push(key, e.to_string()))
                    .ok()
            })
            .collect();
        if has_repeats(&syncs) {
            problems.push(
                "server.sync",
                "lists a setting twice; each value is one set of variants",
            );
        }
        syncs
    }

    pub fn validate(&self, problems: &mut Problems) -> ServerPlan {
        if ![1, 3, 5].contains(&self.replicas) {
            problems.push(
                "server.replicas",
                format!(
                    "{} is not allowed; JetStream replicas are 1, 3 or 5",
                    self.replicas
                ),
            );
        }
        ServerPlan {
            storage: self.storage,
            replicas: self.replicas,
            sync: items(&self.sync)
                .first()
                .and_then(|t| SyncSetting::parse(t).ok()),
        }
    }
}

/// Largest payload accepted: the server's default max_payload.
pub const MAX_MESSAGE_SIZE: usize = 1024 * 1024;

/// Upper bound on outstanding PubAcks per publisher: their replies queue in
/// one async-nats subscription, whose capacity is 65,536.
pub const MAX_PUB_ACK_WINDOW: usize = 50_000;

/// Whether a list names one value twice (a rate, a policy): a variant
/// would run twice under one name.
pub fn has_repeats<T: PartialEq>(items: &[T]) -> bool {
    items
        .iter()
        .enumerate()
        .any(|(i, a)| items[..i].contains(a))
}

/// A scenario's offered load in total msg/s: required, 1 to 1,000,000;
/// `example` is a sensible value for the kind, shown when it is missing.
pub fn required_rate(
    rate: Option<u64>,
    prefix: &str,
    example: u64,
    problems: &mut Problems,
) -> u64 {
    let key = format!("{prefix}.rate");
    match rate {
        None => {
            problems.push(
                key,
                format!("missing; the offered load in total msg/s, e.g. rate = {example}"),
            );
            0
        }
        Some(rate) => {
            problems.range(&key, rate, 1, 1_000_000, " msg/s");
            rate
        }
    }
}

/// `rate` and `arrival` of a paced scenario together: a steady or Poisson
/// arrival at the required `rate`, or a shape that sets its own (steps,
/// ramp, bursts, gaps), which then stands for the rate: the variant runs at
/// the shape's mean.
pub fn paced_rate(
    rate: Option<u64>,
    arrival: &ArrivalSpec,
    common: &CommonPlan,
    prefix: &str,
    example: u64,
    problems: &mut Problems,
) -> (u64, ArrivalPlan) {
    let arrival = arrival.validate(&format!("{prefix}.arrival"), problems);
    if arrival.uses_rate() {
        return (required_rate(rate, prefix, example, problems), arrival);
    }
    let rate = shaped_rate(&arrival, rate.is_some(), "rate", common, prefix, problems);
    (rate, arrival)
}

/// The rate of a shape that sets its own: its mean over warm-up and
/// duration. A rate given beside it (`rate_key`: `rate` or `rates`) is
/// refused.
pub fn shaped_rate(
    arrival: &ArrivalPlan,
    rate_given: bool,
    rate_key: &str,
    common: &CommonPlan,
    prefix: &str,
    problems: &mut Problems,
) -> u64 {
    if rate_given {
        problems.push(
            format!("{prefix}.{rate_key}"),
            format!(
                "arrival = \"{}\" sets its own rate; remove {rate_key} (or use a steady or poisson arrival)",
                arrival.name()
            ),
        );
    }
    if problems.is_empty() {
        shape_mean_rate(arrival, common.duration + common.warmup)
    } else {
        1
    }
}

/// The mean msg/s of a shape that sets its own rate, over `span`.
pub fn shape_mean_rate(arrival: &ArrivalPlan, span: Duration) -> u64 {
    let planned = super::arrival_count(arrival, None, span);
    ((planned as f64 / span.as_secs_f64().max(1e-9)).round() as u64).max(1)
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
    let publishers = k.publishers.unwrap_or(1);
    problems.range(&path("publishers"), publishers, 1, 1024, "");

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
    problems.range(
        &path("pub_ack_window"),
        pub_ack_window,
        1,
        MAX_PUB_ACK_WINDOW,
        " outstanding PubAcks per publisher",
    );
    let pub_ack_timeout = k.pub_ack_timeout.map_or(pub_ack_timeout, |d| d.0);
    problems.range(
        &path("pub_ack_timeout"),
        pub_ack_timeout.as_secs_f64(),
        0.01,
        600.0,
        " seconds",
    );

    let message_size = k
        .message_size
        .take()
        .unwrap_or(SizeSpec::Fixed(128))
        .validate(&path("message_size"), problems);
    let subjects = k.subjects.unwrap_or(1);
    problems.range(&path("subjects"), subjects, 1, 10_000, " subjects");

    let headers: Vec<(String, String)> = k.headers.take().unwrap_or_default().into_iter().collect();
    for (name, value) in &headers {
        let key = path(&format!("headers.{name}"));
        if name.is_empty()
            || name
                .chars()
                .any(|c| c == ':' || c.is_whitespace() || c.is_control())
        {
            problems.push(
                &key,
                "a header name cannot be empty or contain ':' or whitespace",
            );
        } else if name.to_ascii_lowercase().starts_with("nats-") {
            problems.push(
                &key,
                "Nats-* headers control JetStream and are reserved; use msg_id for Nats-Msg-Id",
            );
        }
        if value.contains(['\r', '\n']) {
            problems.push(&key, "a header value cannot contain a line break");
        }
    }

    let duplicates = k.duplicates.unwrap_or(0.0);
    let late_duplicates = k.late_duplicates.unwrap_or(0.0);
    problems.range(
        &path("duplicates"),
        duplicates,
        0.0,
        0.5,
        " (a fraction of sends)",
    );
    problems.range(
        &path("late_duplicates"),
        late_duplicates,
        0.0,
        0.5,
        " (a fraction of sends)",
    );
    if duplicates + late_duplicates > 0.5 {
        problems.push(
            path("late_duplicates"),
            "duplicates + late_duplicates may be at most 0.5: most sends must be new messages",
        );
    }
    let duplicate_window = k
        .duplicate_window
        .map(|d| d.0)
        .unwrap_or(Duration::from_secs(120));
    problems.range(
        &path("duplicate_window"),
        duplicate_window.as_secs_f64(),
        0.1,
        86_400.0,
        " seconds",
    );
    let wake_every = parse_wake_every(k.wake_every.as_deref(), &path("wake_every"), problems);
    PublishPlan {
        publishers,
        mode,
        pub_ack_window,
        pub_ack_timeout,
        message_size,
        subjects,
        headers,
        msg_id,
        duplicates,
        late_duplicates,
        duplicate_window,
        resend_after: None,
        arrival: super::ArrivalPlan::Steady,
        wake_every,
        trace_every: 0,
        client: k.client.unwrap_or_default(),
    }
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
        let bounded = |problems: &mut Problems, key: &str, v: usize| {
            problems.range(key, v, STAMP_LEN, MAX_MESSAGE_SIZE, SIZE_HELP);
        };
        match self {
            SizeSpec::Fixed(n) => {
                bounded(problems, path, n);
                SizePlan::Fixed(n)
            }
            SizeSpec::Distribution(t) => {
                let min = t.min.unwrap_or(STAMP_LEN);
                let max = t.max.unwrap_or(MAX_MESSAGE_SIZE);
                bounded(problems, &format!("{path}.min"), min);
                bounded(problems, &format!("{path}.max"), max);
                if min > max {
                    problems.push(
                        format!("{path}.min"),
                        format!("{min} is larger than max = {max}"),
                    );
                }
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

/// A key that takes one value or a list of them (`msg_id = "none"` or
/// `msg_id = ["none", "unique"]`).
#[derive(Debug, Clone, PartialEq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read through a Value rather than an untagged enum, whose errors
        // say only that nothing matched; this keeps the element's message.
        let value = toml::Value::deserialize(d)?;
        let result = match value {
            toml::Value::Array(items) => items
                .into_iter()
                .map(T::deserialize)
                .collect::<Result<Vec<T>, _>>(),
            one => T::deserialize(one).map(|t| vec![t]),
        };
        result.map(OneOrMany).map_err(serde::de::Error::custom)
    }
}

/// The values of an optional list key, none when it is absent.
fn items<T>(list: &Option<OneOrMany<T>>) -> &[T] {
    list.as_ref().map_or(&[], |l| l.0.as_slice())
}

/// `key[i]` for an element of a list, `key` for a single value.
fn indexed(key: String, i: usize, len: usize) -> String {
    if len > 1 { format!("{key}[{i}]") } else { key }
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
    max_bytes: Option<OneOrMany<super::Bytes>>,
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
        for (name, given) in [
            ("queue", self.queue.is_some()),
            ("flow_control", self.flow_control.is_some()),
            ("rate_limit", self.rate_limit.is_some()),
        ] {
            if given && !push {
                problems.push(key(name), "applies to kind = \"push\"");
            }
        }
        if only_push {
            for (name, given) in [
                ("batch", self.batch.is_some()),
                ("max_bytes", self.max_bytes.is_some()),
                ("expires", self.expires.is_some()),
                ("max_waiting", self.max_waiting.is_some()),
            ] {
                if given {
                    problems.push(
                        key(name),
                        "applies to pull requests; a push consumer is sent to without asking",
                    );
                }
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
        let batches = items(&self.batch);
        for (i, &b) in batches.iter().enumerate() {
            problems.range(
                &indexed(key("batch"), i, batches.len()),
                b,
                1,
                10_000,
                " messages per pull",
            );
        }
        let sizes = items(&self.max_bytes);
        for (i, b) in sizes.iter().enumerate() {
            problems.range(
                &indexed(key("max_bytes"), i, sizes.len()),
                b.0,
                1,
                1 << 30,
                " bytes per pull",
            );
        }
        let waits = items(&self.max_waiting);
        for (i, &w) in waits.iter().enumerate() {
            problems.range(
                &indexed(key("max_waiting"), i, waits.len()),
                w,
                1,
                100_000,
                " pull requests",
            );
        }
        let expiries = items(&self.expires);
        for (i, d) in expiries.iter().enumerate() {
            if d.0 < Duration::from_millis(10) || d.0 > Duration::from_secs(3600) {
                problems.push(
                    indexed(key("expires"), i, expiries.len()),
                    "must be between 10ms and 1h",
                );
            }
        }
        let beats = items(&self.idle_heartbeat);
        for (i, d) in beats.iter().enumerate() {
            if d.0 < Duration::from_millis(100) || d.0 > Duration::from_secs(60) {
                problems.push(
                    indexed(key("idle_heartbeat"), i, beats.len()),
                    "must be between 100ms and 1m",
                );
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
            pulls_ahead: self.pulls_ahead.unwrap_or(super::DEFAULT_PULLS_AHEAD),
        };
        problems.range(&key("consumers"), plan.consumers, 1, 256, " clients");
        self.validate_client(&plan, &key, problems);
        self.validate_pull(&plan, &key, problems);
        self.validate_push(&plan, &key, problems);
        problems.range(
            &key("max_ack_pending"),
            plan.max_ack_pending,
            1,
            10_000_000,
            "",
        );
        problems.range(
            &key("ack_wait"),
            plan.ack_wait.as_secs_f64(),
            0.001,
            86_400.0,
            " seconds",
        );
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

/// Refuses `client = "direct"` where the direct client cannot do the job
/// (`why`: a fault it would not reconnect through, batches it does not
/// send), naming the key; `auto` keeps async-nats there by itself.
pub fn refuse_direct(publish: &PublishPlan, why: &str, prefix: &str, problems: &mut Problems) {
    if publish.client == super::PublishClient::Direct {
        problems.push(
            format!("{prefix}.client"),
            format!("\"direct\" cannot publish here: {why}; use \"auto\" or \"async-nats\""),
        );
    }
}
