//! The keys many scenario kinds share, read in one place: the timing, and
//! the paced load most scenarios drive (a rate or an arrival shape,
//! publishers, message size and ids, the durable, its clients' behaviour).
//!
//! A kind names the shared keys it offers ([`Offer`]); [`split`] reads
//! those here and hands the rest of the table to the kind's own section.
//! serde's `flatten` would read both at once but does not combine with
//! `deny_unknown_fields`, so the split checks unknown keys itself: a key is
//! unknown when neither the offer nor the kind's section has it, and the
//! error lists every key the kind accepts.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::arrival::ArrivalPlan;
use super::arrival::ArrivalSpec;
use super::arrival_times::arrival_count;
use super::behaviour::BehaviourPlan;
use super::behaviour::BehaviourSection;
use super::consumer::{ConsumerPlan, ConsumerSection, require_explicit_ack};
use super::keys::{Keys, NAME_RULE, OneOrMany, has_repeats, is_safe_name};
use super::kinds::{CommonPlan, Section};
use super::problems::{Problems, read_at};
use super::publish::{
    MAX_MESSAGE_SIZE, MsgId, PublishClient, PublishMode, PublishPlan, SizeSpec, publish_plan,
};
use super::server::Storage;
use crate::units::{Dur, format_duration};

/// How long a drain waits for the last deliveries, when the profile does
/// not say.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The bounds of `duration`, `warmup` and `drain_timeout`, in seconds:
/// a profile's, and a drive a worker is handed.
pub const DURATION_SECONDS: (f64, f64) = (0.1, 86_400.0);
pub const WARMUP_SECONDS: (f64, f64) = (0.0, 3_600.0);
pub const DRAIN_SECONDS: (f64, f64) = (0.1, 3_600.0);

/// Every shared key, as a profile writes it; a kind reads the ones it
/// offers. The publish keys are read by [`super::publish::publish_plan`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SharedSection {
    name: Option<String>,
    duration: Option<Dur>,
    warmup: Option<Dur>,
    drain_timeout: Option<Dur>,
    rate: Option<u64>,
    #[serde(default)]
    arrival: ArrivalSpec,
    pub(super) publishers: Option<usize>,
    pub(super) message_size: Option<SizeSpec>,
    /// One mode, or a list where the kind runs each ([`Shared::msg_ids`]).
    msg_id: Option<OneOrMany<MsgId>>,
    pub(super) headers: Option<BTreeMap<String, String>>,
    pub(super) pub_ack_window: Option<usize>,
    pub(super) pub_ack_timeout: Option<Dur>,
    pub(super) wake_every: Option<String>,
    #[serde(default)]
    consumer: ConsumerSection,
    #[serde(default)]
    behaviour: BehaviourSection,
    pub(super) client: Option<PublishClient>,
    pub(super) mode: Option<PublishMode>,
    pub(super) subjects: Option<usize>,
    pub(super) duplicates: Option<f64>,
    pub(super) late_duplicates: Option<f64>,
    pub(super) duplicate_window: Option<Dur>,
}

/// The timing keys.
const TIMING_KEYS: &[&str] = &["name", "duration", "warmup", "drain_timeout"];

/// The keys of the paced load beyond the timing: `rate` (or an `arrival`
/// shape that sets it), publishers and message size, the durable's
/// `consumer` table and its clients' `behaviour`.
const PACED_KEYS: &[&str] = &[
    "rate",
    "arrival",
    "publishers",
    "message_size",
    "consumer",
    "behaviour",
    "client",
];

/// The shared keys a kind accepts.
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    /// The timing keys, the paced load's beyond them, the kind's extras.
    keys: [&'static [&'static str]; 3],
    less: &'static [&'static str],
}

impl Offer {
    /// The paced load.
    pub const PACED: Offer = Offer {
        keys: [TIMING_KEYS, PACED_KEYS, &[]],
        less: &[],
    };

    /// The timing keys alone: `name`, `duration`, `warmup`, `drain_timeout`.
    pub const TIMING: Offer = Offer {
        keys: [TIMING_KEYS, &[], &[]],
        less: &[],
    };

    /// These shared keys besides.
    pub const fn and(self, extra: &'static [&'static str]) -> Offer {
        let keys = [self.keys[0], self.keys[1], extra];
        Offer { keys, ..self }
    }

    /// Without these.
    pub const fn less(self, less: &'static [&'static str]) -> Offer {
        Offer { less, ..self }
    }

    fn keys(&self) -> Vec<&'static str> {
        self.keys
            .iter()
            .flat_map(|k| k.iter())
            .copied()
            .filter(|k| !self.less.contains(k))
            .collect()
    }

    pub fn accepts(&self, key: &str) -> bool {
        self.keys().contains(&key)
    }
}

/// The shared keys of one scenario table, read; what the kind's reader
/// turns into its plan's shared parts.
pub struct Shared {
    section: SharedSection,
    prefix: String,
    offer: Offer,
}

/// What a paced kind asks of its shared load beyond the keys.
#[derive(Debug, Clone, Copy)]
pub struct Paced {
    /// Names the kind in its checks' messages.
    pub kind: &'static str,
    /// A sensible `rate` for the kind, shown when it is missing.
    pub example_rate: u64,
    /// The Nats-Msg-Id mode when the kind does not offer `msg_id` or the
    /// profile omits it.
    pub msg_id: MsgId,
    /// The PubAck timeout when the profile omits it; `None`: the default.
    pub pub_ack_timeout: Option<Duration>,
}

impl Paced {
    /// A kind that publishes without ids, with the default PubAck timeout.
    pub const fn of(kind: &'static str, example_rate: u64) -> Paced {
        Paced {
            kind,
            example_rate,
            msg_id: MsgId::None,
            pub_ack_timeout: None,
        }
    }
}

/// The load most scenarios drive, read from the shared keys: messages
/// published at `rate` (or in the arrival shape `publish.arrival`, whose
/// mean `rate` then is) into the variant's stream, read by one explicit-ack
/// durable whose clients follow `behaviour`.
#[derive(Debug, Clone)]
pub struct PacedLoad {
    /// Total msg/s.
    pub rate: u64,
    pub publish: PublishPlan,
    pub consumer: ConsumerPlan,
    /// All acked, for a kind that offers no `behaviour`.
    pub behaviour: BehaviourPlan,
}

impl Shared {
    fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.prefix)
    }

    /// `name`, `duration` (required), `warmup`, `drain_timeout`, checked.
    pub fn common(&mut self, kind: &'static str, problems: &mut Problems) -> CommonPlan {
        let mut common = self.counted(kind, DRAIN_TIMEOUT, problems);
        match self.section.duration {
            Some(d) => {
                common.duration = d.0;
                let (min, max) = DURATION_SECONDS;
                problems.seconds(&self.key("duration"), d.0, min, max);
            }
            None => problems.push(self.key("duration"), "missing; e.g. duration = \"10s\""),
        }
        common.warmup = self.section.warmup.map_or(Duration::ZERO, |d| d.0);
        let (min, max) = WARMUP_SECONDS;
        problems.seconds(&self.key("warmup"), common.warmup, min, max);
        common
    }

    /// `name` and `drain_timeout` (by default `drain`) of a kind that
    /// runs for a count of messages rather than for a time.
    pub fn counted(
        &mut self,
        kind: &'static str,
        drain: Duration,
        problems: &mut Problems,
    ) -> CommonPlan {
        let name = self.section.name.take();
        if let Some(name) = &name
            && !is_safe_name(name)
        {
            problems.push(self.key("name"), format!("{name:?} {NAME_RULE}"));
        }
        let drain_timeout = self.section.drain_timeout.map_or(drain, |d| d.0);
        let (min, max) = DRAIN_SECONDS;
        problems.seconds(&self.key("drain_timeout"), drain_timeout, min, max);
        CommonPlan {
            kind,
            name,
            duration: Duration::ZERO,
            warmup: Duration::ZERO,
            drain_timeout,
            stream: Default::default(),
        }
    }

    /// Whether the profile set `drain_timeout`: a kind that derives its
    /// own from its other keys keeps the profile's.
    pub fn drain_timeout_given(&self) -> bool {
        self.section.drain_timeout.is_some()
    }

    /// `arrival`, checked.
    pub fn arrival(&self, problems: &mut Problems) -> ArrivalPlan {
        self.section
            .arrival
            .validate(&self.key("arrival"), problems)
    }

    /// `rate` and `arrival` together: a steady or Poisson arrival at the
    /// required `rate` (1 to 1,000,000 msg/s in total; `example`, a
    /// sensible value for the kind, is shown when it is missing), or a
    /// shape that sets its own (steps, ramp, bursts, gaps), which then
    /// stands for the rate: the variant runs at the shape's mean.
    pub fn paced_rate(
        &self,
        common: &CommonPlan,
        example: u64,
        problems: &mut Problems,
    ) -> (u64, ArrivalPlan) {
        let (arrival, rate) = (self.arrival(problems), self.section.rate);
        if !arrival.uses_rate() {
            let rate = shaped_rate(
                &arrival,
                rate.is_some(),
                "rate",
                common,
                &self.prefix,
                problems,
            );
            return (rate, arrival);
        }
        let key = self.key("rate");
        let Some(rate) = rate else {
            let why = format!("missing; the offered load in total msg/s, e.g. rate = {example}");
            problems.push(key, why);
            return (0, arrival);
        };
        problems.range(&key, rate, 1, 1_000_000, " msg/s");
        (rate, arrival)
    }

    /// The publish keys offered (publishers, mode, message size, subjects,
    /// one `msg_id`, headers, duplicates, the PubAck window and timeout,
    /// wake_every, client), with `msg_id` and `pub_ack_timeout` defaulting
    /// as given; a steady arrival.
    pub fn publish(
        &mut self,
        msg_id: MsgId,
        pub_ack_timeout: Option<Duration>,
        problems: &mut Problems,
    ) -> PublishPlan {
        let msg_id = match self.section.msg_id.take().map(|l| l.0).as_deref() {
            None => msg_id,
            Some(&[one]) => one,
            Some(_) => {
                let why = "takes one mode here: \"none\" or \"unique\"";
                problems.push(self.key("msg_id"), why);
                msg_id
            }
        };
        let timeout = pub_ack_timeout.unwrap_or(Duration::from_secs(10));
        publish_plan(&mut self.section, msg_id, timeout, &self.prefix, problems)
    }

    /// `message_size` for a kind that sends one size only (128 bytes by
    /// default): a distribution is refused, naming the kind.
    pub fn fixed_size(&mut self, kind: &str, problems: &mut Problems) -> usize {
        let key = self.key("message_size");
        let size = match self.section.message_size.take() {
            None => 128,
            Some(SizeSpec::Fixed(n)) => n,
            Some(SizeSpec::Distribution(_)) => {
                problems.push(&key, format!("the {kind} scenario uses one fixed size"));
                128
            }
        };
        let (min, max) = (crate::record::stamp::STAMP_LEN, MAX_MESSAGE_SIZE);
        problems.range(&key, size, min, max, " bytes");
        size
    }

    /// `[scenario.consumer]`, checked (`ack_per_variant`: the kind sets
    /// `ack` per variant itself).
    pub fn consumer(&self, ack_per_variant: bool, problems: &mut Problems) -> ConsumerPlan {
        self.section
            .consumer
            .validate(&self.prefix, ack_per_variant, problems)
    }

    /// The paced load: the rate or arrival, the publishers, the durable
    /// (explicit acks: the kind judges every message's fate) and its
    /// clients' `[scenario.behaviour]`, checked against the durable (every
    /// message acked at once when the kind does not offer it).
    pub fn paced(&mut self, common: &CommonPlan, p: Paced, problems: &mut Problems) -> PacedLoad {
        let (rate, arrival) = self.paced_rate(common, p.example_rate, problems);
        let mut publish = self.publish(p.msg_id, p.pub_ack_timeout, problems);
        publish.arrival = arrival;
        let consumer = self.consumer(false, problems);
        require_explicit_ack(&consumer, p.kind, &self.prefix, problems);
        let behaviour = if self.offer.accepts("behaviour") {
            let section = &self.section.behaviour;
            section.validate(&self.prefix, &consumer, problems)
        } else {
            BehaviourPlan::all_ack()
        };
        PacedLoad {
            rate,
            publish,
            consumer,
            behaviour,
        }
    }

    // The publish scenario's keys: `msg_id` as a list, a variant per mode.

    /// `msg_id` for a kind that runs each mode it lists (`["none",
    /// "unique"]`, a variant each), `none` when absent: at least one, none
    /// twice. Read before [`Shared::publish`], which then publishes with
    /// the mode it is given.
    pub fn msg_ids(&mut self, problems: &mut Problems) -> Vec<MsgId> {
        let key = self.key("msg_id");
        let ids = self
            .section
            .msg_id
            .take()
            .map_or(vec![MsgId::None], |l| l.0);
        if ids.is_empty() {
            problems.push(&key, "lists no mode; use \"none\", \"unique\" or both");
        }
        if has_repeats(&ids) {
            problems.push(&key, "lists a mode twice; each mode is one variant");
        }
        ids
    }

    // Shared keys a kind defaults otherwise than the common readers do
    // (ttl, lag, replay): its default passed in, the key still read here.

    /// `rate` of a kind that paces at `default` msg/s unless told, at
    /// most `max`.
    pub fn rate_or(&self, default: u64, max: u64, problems: &mut Problems) -> u64 {
        let rate = self.section.rate.unwrap_or(default);
        problems.range(&self.key("rate"), rate, 1, max, " msg/s");
        rate
    }

    /// The publish keys offered, as [`Shared::publish`] reads them (no
    /// ids, the default PubAck timeout), with the kind's own defaults for
    /// `subjects` and the PubAck `window` (commonly 1 and 1024).
    pub fn publish_or(
        &mut self,
        subjects: usize,
        window: usize,
        problems: &mut Problems,
    ) -> PublishPlan {
        self.section.subjects.get_or_insert(subjects);
        self.section.pub_ack_window.get_or_insert(window);
        self.publish(MsgId::None, None, problems)
    }
}

/// Takes the shared keys `offer` names out of a scenario table (its
/// `kind` and `stream` already taken) and reads them; the kind's own keys
/// are left to read one by one from the [`Keys`] returned, which refuse
/// whatever neither took. `None` when a shared value could not be read.
pub fn take(
    mut table: toml::Table,
    offer: Offer,
    prefix: &str,
    problems: &mut Problems,
) -> Option<(Shared, Keys)> {
    let offered = offer.keys();
    let mut shared = toml::Table::new();
    for key in &offered {
        if let Some(value) = table.remove(*key) {
            shared.insert(key.to_string(), value);
        }
    }
    let section = read_at::<SharedSection>(shared, prefix, problems)?;
    let keys = Keys::new(prefix, table, &offered);
    let shared = Shared {
        section,
        prefix: prefix.to_string(),
        offer,
    };
    Some((shared, keys))
}

/// A kind that kills the server needs its streams on file storage (the
/// profile's, or every one `[scenario.stream]` lists) to survive it;
/// `why` says so in the kind's words.
pub fn needs_file_storage(section: &Section<'_>, problems: &mut Problems, why: &str) {
    let listed = section.stream.map(|s| s.storage.as_slice()).unwrap_or(&[]);
    let (path, memory) = if listed.is_empty() {
        (
            "server.storage".to_string(),
            section.server.storage == Storage::Memory,
        )
    } else {
        (
            format!("{}.stream.storage", section.prefix),
            listed.contains(&Storage::Memory),
        )
    };
    if memory {
        problems.push(path, why);
    }
}

// Rules several kinds derive from their keys alike (redelivery,
// backpressure, resume, restart, outage, power, priority, dlq), each
// written once: the drain a kind's last deliveries need, a moment of the
// load, a list of variants.

impl Shared {
    /// Makes `drain_timeout` at least `floor` unless the profile set it: a
    /// kind whose last deliveries come later than the default drain waits
    /// (after an ack deadline, an outage's backlog) derives its own.
    pub fn drain_at_least(&self, common: &mut CommonPlan, floor: Duration) {
        if !self.drain_timeout_given() {
            common.drain_timeout = common.drain_timeout.max(floor);
        }
    }
}

impl PacedLoad {
    /// How long a message may take to run through every planned delivery
    /// (each ack deadline in turn, the handling four times over), with
    /// 10s to spare: a drain that waits for the last redelivery.
    pub fn every_delivery(&self) -> Duration {
        let c = &self.consumer;
        (1..=c.max_deliver.max(1) as u32)
            .map(|n| c.ack_deadline(n))
            .sum::<Duration>()
            + self.behaviour.processing.mean() * 4
            + Duration::from_secs(10)
    }
}

/// Why `at` (from the schedule's start, lasting `lasts`) is not inside
/// the load: it must come after the start and be over before warm-up +
/// duration is; `None` when it is.
pub fn outside_load(at: Duration, lasts: Duration, common: &CommonPlan) -> Option<String> {
    let span = common.warmup + common.duration;
    if !at.is_zero() && at + lasts < span {
        return None;
    }
    let f = format_duration;
    let what = if lasts.is_zero() {
        f(at)
    } else {
        format!("{} to {}", f(at), f(at + lasts))
    };
    Some(format!(
        "{what} must fall inside the load: after its start, before warm-up + duration ({}) is over",
        f(span)
    ))
}

/// A moment of the load from the schedule's start (`kill_after`), checked
/// to fall inside it; `None` when absent, a problem then when `missing`
/// says what the key looks like.
pub fn moment(
    k: &mut Keys,
    key: &str,
    common: &CommonPlan,
    missing: Option<&str>,
) -> Option<Duration> {
    if let Some(missing) = missing
        && !k.given(key)
    {
        k.problem(key, format!("missing; {missing}"));
    }
    let at = k.get::<Dur>(key).map(|d| d.0);
    if let Some(why) = at.and_then(|at| outside_load(at, Duration::ZERO, common)) {
        k.problem(key, why);
    }
    at
}

/// One value or a list of the kind's variants (`default` when absent),
/// each run once: at least one, none twice; `options` says what may be
/// listed.
pub fn variants<T>(k: &mut Keys, key: &str, default: Vec<T>, options: &str) -> Vec<T>
where
    T: DeserializeOwned + serde::Serialize + PartialEq,
{
    let values = k.get::<OneOrMany<T>>(key).map_or(default, |l| l.0);
    if values.is_empty() {
        k.problem(key, format!("empty; list {options}"));
    }
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            let v = toml::Value::try_from(v).map_or_else(|_| "a value".into(), |v| v.to_string());
            k.problem(
                key,
                format!("{v} is listed twice; each runs as a variant of its own"),
            );
        }
    }
    values
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
    if !problems.is_empty() {
        return 1;
    }
    let span = common.duration + common.warmup;
    let planned = arrival_count(arrival, None, span);
    ((planned as f64 / span.as_secs_f64().max(1e-9)).round() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_from(
        text: &str,
        offer: Offer,
        prefix: &str,
        problems: &mut Problems,
    ) -> Option<(Shared, Keys)> {
        take(text.parse().unwrap(), offer, prefix, problems)
    }

    #[test]
    fn offered_keys_are_read_here_and_the_rest_by_the_kind() {
        let mut problems = Problems::default();
        let (mut shared, mut own) = take_from(
            "rate = 300\nbaseline = false\n[consumer]\nack_wait = \"2s\"\n",
            Offer::PACED,
            "scenario[0]",
            &mut problems,
        )
        .expect("both parts read");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(own.get::<bool>("baseline"), Some(false));
        assert_eq!(shared.section.rate, Some(300));
        assert_eq!(
            shared.consumer(false, &mut problems).ack_wait,
            Duration::from_secs(2)
        );
        assert!(!shared.drain_timeout_given());
        let common = shared.common("t", &mut problems);
        assert!(!problems.is_empty(), "duration is missing: {problems:?}");
        assert_eq!(common.kind, "t");
        own.finish(&mut problems);
    }

    #[test]
    fn a_key_neither_part_takes_is_unknown_and_the_error_lists_both_parts() {
        let mut problems = Problems::default();
        let (_, mut own) = take_from(
            "rats = 3\nmsg_id = \"unique\"\n",
            Offer::PACED,
            "scenario[0]",
            &mut problems,
        )
        .expect("the shared part reads");
        own.get::<bool>("baseline");
        own.finish(&mut problems);
        let list = problems.list;
        assert_eq!(list.len(), 2, "{list:?}");
        assert_eq!(list[0].path, "scenario[0].msg_id", "not offered: {list:?}");
        assert_eq!(list[1].path, "scenario[0].rats");
        assert!(
            list[1]
                .message
                .starts_with("unknown field `rats`, expected one of")
        );
        assert!(list[1].message.contains("`rate`") && list[1].message.contains("`baseline`"));
        // Offered once asked for.
        let mut problems = Problems::default();
        let offer = Offer::PACED.and(&["msg_id"]).less(&["behaviour"]);
        assert!(offer.accepts("msg_id") && !offer.accepts("behaviour"));
        let (_, own) = take_from("msg_id = \"unique\"\n", offer, "s", &mut problems).unwrap();
        own.finish(&mut problems);
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn a_malformed_shared_value_keeps_its_full_path() {
        let mut problems = Problems::default();
        let read = take_from(
            "[consumer]\nack_wait = \"30 seconds\"\n",
            Offer::PACED,
            "scenario[2]",
            &mut problems,
        );
        assert!(read.is_none());
        assert_eq!(problems.list[0].path, "scenario[2].consumer.ack_wait");
    }
}
