//! Consumption: durable pull consumers that time every delivery, act on it
//! as the behaviour plan says (ack, nak, nak with delay, term, ignore,
//! in-progress), mark the ledger, and optionally log every delivery for
//! redelivery analysis.
//!
//! The loop receives, decides and records; the answer to a delivery
//! (processing time, then the ack or nak) is a future of its own, awaited in
//! place with one handler, or run beside others with several. Bookkeeping
//! stays in the loop, on task-local recorders: nothing is locked, and with
//! no processing time an answer is a queued publish, not a round trip.

mod answer;
pub mod behaviour;
pub mod core;
pub mod direct;
pub mod events;
pub mod fates;
pub mod group;
pub mod reference;
mod source;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::Client;
use async_nats::jetstream::{self, Message};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use crate::profile::{AckPolicy, Action, BehaviourPlan, ConsumerClient, ConsumerPlan, CrashPoint};
use crate::record::clock;
use crate::record::histogram::Recorder;
use crate::record::ledger::{Event, LedgerShard, SeqSet};
use crate::record::stamp::Stamp;
use crate::record::timeline::Timeline;
use answer::{Answer, Effect, Job, Reply, respond};
pub use answer::{TERM_REASON, term_with_reason};
use behaviour::Outcome;
pub use events::DeliveryEvent;
use source::Source;

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub index: usize,
    pub stream: String,
    pub durable: String,
    pub plan: ConsumerPlan,
    pub behaviour: Arc<BehaviourPlan>,
    /// Deliveries of messages intended before this time are not recorded.
    pub record_from_ns: u64,
    pub timeline_origin_ns: u64,
    /// Sizes the ledger up front so the hot path never grows it.
    pub expected_messages: u64,
    /// Keep a [`DeliveryEvent`] per delivery.
    pub log_events: bool,
    /// Split each first delivery's latency at the server's stored time
    /// stamp: sent to stamped (ingest), stamped to received (delivery).
    pub hops: bool,
    /// JetStream API prefix (`$JS.API`, or a domain's `$JS.<domain>.API`).
    pub js_api_prefix: String,
    /// Makes this client crash on demand (the resume scenario).
    pub crash: Option<Crash>,
    /// Keep a copy of every message the behaviour plans to dead-letter
    /// (exhausted or termed), as first seen (the dlq scenario's audit).
    pub keep_doomed: bool,
    /// A dependency outage: deliveries received inside it get its answer
    /// instead of the behaviour plan's.
    pub outage: Option<Outage>,
    /// An idempotent consumer's dedup store: the KV bucket in which a
    /// message's key is created as its work's effect is applied.
    pub dedup: Option<String>,
}

/// When the handlers' dependency is down, ns on [`crate::record::clock`], and
/// what they answer meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    pub start_ns: u64,
    pub end_ns: u64,
    pub answer: Action,
}

impl ConsumerConfig {
    /// A plain consumer acking everything at once, with nothing planned
    /// around it: the one benches and tests drive the delivery path with.
    pub fn acking_all(stream: &str, expected_messages: u64, timeline_origin_ns: u64) -> Self {
        ConsumerConfig {
            index: 0,
            stream: stream.into(),
            durable: "D".into(),
            plan: ConsumerPlan::simple(),
            behaviour: Arc::new(BehaviourPlan::all_ack()),
            record_from_ns: 0,
            timeline_origin_ns,
            expected_messages,
            log_events: false,
            hops: false,
            js_api_prefix: "$JS.API".into(),
            crash: None,
            keep_doomed: false,
            outage: None,
            dedup: None,
        }
    }

    /// What to do with a delivery received at `now_ns`.
    #[inline]
    fn action(&self, seq: u64, delivery: u32, now_ns: u64) -> Action {
        match self.outage {
            Some(o) if (o.start_ns..o.end_ns).contains(&now_ns) => o.answer,
            _ => self.behaviour.action(seq, delivery),
        }
    }
}

/// A crash on demand: cancelled when the client must die.
#[derive(Debug, Clone)]
pub struct Crash {
    pub at: CancellationToken,
    pub point: CrashPoint,
}

/// What a crashed client left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CrashReport {
    /// When it crashed, ns on [`crate::record::clock`].
    pub at_ns: u64,
    /// Deliveries its handlers held (working or waiting to ack) at the crash.
    pub in_hand: u64,
    /// Sequences whose work was done but never acked.
    pub processed_unacked: Vec<u64>,
    /// A graceful drain: deliveries the client had received and not yet
    /// started, finished after the stop.
    #[serde(default)]
    pub drained: u64,
    /// When the client was done and closed, ns on [`crate::record::clock`].
    #[serde(default)]
    pub stopped_ns: u64,
}

/// Counters the run loop reads while consumers run; each is written by its
/// own consumer only.
#[derive(Debug, Default)]
pub struct ConsumerProgress {
    pub received: AtomicU64,
    /// Messages whose story this consumer ended: acked, termed, or failed
    /// on their last allowed delivery.
    pub finished: AtomicU64,
    /// Deliveries answered (or let go); `received - answered` is the work
    /// in the client's hands.
    pub answered: AtomicU64,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ConsumerReport {
    pub received: u64,
    pub redeliveries: u64,
    /// Payloads without a jsbench stamp, or deliveries without metadata.
    pub malformed: u64,
    /// Errors the message source reported (missed heartbeats, failed pulls).
    pub stream_errors: u64,
    pub ack_errors: u64,
    pub first_error: Option<String>,
    /// Receive time minus intended send time, at delivery 1.
    pub e2e_intended: Recorder,
    /// Receive time minus actual send time, at delivery 1.
    pub e2e_sent: Recorder,
    /// With `hops`, at delivery 1: the server's stored time stamp minus the
    /// actual send time (ingest), and the receive time minus that stamp
    /// (delivery). Their sum per message is `e2e_sent`'s value.
    #[serde(default)]
    pub ingest: Recorder,
    #[serde(default)]
    pub deliver: Recorder,
    /// Sequences this client saw at their first delivery.
    pub first_deliveries: SeqSet,
    /// This client's first sight of a sequence at a later delivery: the
    /// first delivery went to a client that never saw it (a crash, a
    /// restart). Recorded in the latency histograms when the shards merge
    /// and no client saw delivery 1, so the slowest messages count once.
    pub late_firsts: Vec<LateFirst>,
    /// With `keep_doomed`: the messages planned to be dead-lettered, as
    /// this client first saw them.
    #[serde(default)]
    pub doomed: Vec<SeenMessage>,
    /// Round trip of a double ack (ack confirmed by the server).
    pub ack_rtt: Recorder,
    pub ledger: LedgerShard,
    pub timeline: Timeline,
    pub first_ns: u64,
    pub last_ns: u64,
    pub events: Vec<DeliveryEvent>,
    /// Set when this client crashed on demand.
    pub crashed: Option<CrashReport>,
    /// The longest time between two deliveries, and when it ended: an
    /// outage as this client saw it.
    pub max_gap_ns: u64,
    pub max_gap_end_ns: u64,
    /// What the work of each delivery did (logged deliveries, or an
    /// idempotent consumer's).
    #[serde(default)]
    pub effects: Effects,
    /// The client that read: "async-nats", or "direct" ([`direct`]).
    #[serde(default = "async_nats_label")]
    pub client: String,
}

fn async_nats_label() -> String {
    ConsumerClient::AsyncNats.name().into()
}

/// The effects of the work handlers did: applied (a sequence once per
/// application), or suppressed by the dedup store as already applied.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Effects {
    pub applied: Vec<u64>,
    pub suppressed: u64,
    /// Dedup store requests that failed: the delivery was left unanswered.
    pub store_errors: u64,
    /// Round trip of the dedup store's create, per checked delivery.
    pub check: Recorder,
}

impl Effects {
    /// Sequences whose work was applied more than once.
    pub fn applied_twice(&self) -> u64 {
        let mut seqs = self.applied.clone();
        seqs.sort_unstable();
        seqs.chunk_by(|a, b| a == b).filter(|c| c.len() > 1).count() as u64
    }

    pub fn merge(&mut self, other: &Effects) {
        self.applied.extend_from_slice(&other.applied);
        self.suppressed += other.suppressed;
        self.store_errors += other.store_errors;
        self.check.merge(&other.check);
    }
}

impl ConsumerReport {
    /// A delivery at `now`: the count, the first and last, the longest
    /// gap between two, the per-second timeline.
    #[inline]
    pub(crate) fn note_delivery(&mut self, now: u64) {
        self.received += 1;
        if self.first_ns == 0 {
            self.first_ns = now;
        } else if now - self.last_ns > self.max_gap_ns {
            self.max_gap_ns = now - self.last_ns;
            self.max_gap_end_ns = now;
        }
        self.last_ns = now;
        self.timeline.mark(now);
    }

    /// Keeps the first error: `text` is made only while none is kept.
    pub(crate) fn error(&mut self, text: impl FnOnce() -> String) {
        self.first_error.get_or_insert_with(text);
    }

    /// Nothing received yet; the ledger sized for the expected messages so
    /// the hot path never grows it.
    pub fn empty(config: &ConsumerConfig) -> Self {
        ConsumerReport {
            e2e_intended: Recorder::with_start_intervals(),
            e2e_sent: Recorder::with_intervals(),
            timeline: Timeline::per_second(config.timeline_origin_ns),
            client: async_nats_label(),
            ..ConsumerReport::default()
        }
    }
}

/// Headers as sorted (name, value) pairs: two maps compare equal when they
/// hold the same values under the same names, whatever the order.
pub fn header_pairs(headers: &async_nats::HeaderMap) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = headers
        .iter()
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |v| (name.to_string(), v.as_str().to_string()))
        })
        .collect();
    out.sort();
    out
}

/// A message as a consumer saw it at its first sight: what an audit of
/// its dead-letter copy compares with when the original is gone (a work
/// queue deletes it once copied).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SeenMessage {
    pub seq: u64,
    pub subject: String,
    pub payload: Vec<u8>,
    /// Sorted name-value pairs.
    pub headers: Vec<(String, String)>,
}

/// A sequence first seen by a client at a delivery after the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LateFirst {
    pub seq: u64,
    pub intended_ns: u64,
    pub sent_ns: u64,
    pub received_ns: u64,
}

/// Reads the durable until `stop` is cancelled.
pub async fn run(
    client: Client,
    config: ConsumerConfig,
    progress: Arc<ConsumerProgress>,
    stop: CancellationToken,
) -> Result<ConsumerReport> {
    let bound = bind(&client, &config).await?;
    run_bound(client, bound, config, progress, stop).await
}

/// A client bound to its durable and asking for messages, not yet reading
/// them.
pub struct Bound(Source);

/// Binds a client to the durable `config` names: a run that starts many
/// durables binds them all before its clock starts, since binding a
/// thousand at once takes the server seconds.
pub async fn bind(client: &Client, config: &ConsumerConfig) -> Result<Bound> {
    let js = jetstream::with_prefix(client.clone(), &config.js_api_prefix);
    Source::open(&js, &config.stream, &config.durable, &config.plan)
        .await
        .map(Bound)
        .with_context(|| format!("reading durable consumer {}", config.durable))
}

/// Reads the durable a client is bound to until `stop` is cancelled.
pub async fn run_bound(
    client: Client,
    bound: Bound,
    config: ConsumerConfig,
    progress: Arc<ConsumerProgress>,
    stop: CancellationToken,
) -> Result<ConsumerReport> {
    let Bound(mut source) = bound;
    let mut report = ConsumerReport::empty(&config);
    let mut finished = Finished::new(progress.clone());
    let handlers = config.behaviour.handlers.max(1);
    let mut running = FuturesUnordered::new();
    // With `ack = "all"`: the latest delivery not yet covered by an ack.
    let mut unacked_tail: Option<Message> = None;
    // Set when crashing after processing: handlers finish but do not ack.
    let skip_ack = Arc::new(AtomicBool::new(false));
    let dedup = match &config.dedup {
        Some(bucket) => Some(Arc::new(
            jetstream::with_prefix(client.clone(), &config.js_api_prefix)
                .get_key_value(bucket)
                .await
                .with_context(|| format!("opening the dedup store {bucket}"))?,
        )),
        None => None,
    };
    let crashed = async {
        match &config.crash {
            Some(c) => c.at.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(crashed);

    loop {
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = &mut crashed => {
                let point = config.crash.as_ref().map(|c| c.point);
                let left = crash(point, &config, &mut report, (&mut source, &mut running), respond, (&dedup, &skip_ack), &mut finished).await;
                if point == Some(CrashPoint::Drain) {
                    let _ = client.flush().await;
                }
                report.crashed = Some(left);
                return Ok(report);
            }
            Some(answer) = running.next(), if !running.is_empty() => {
                finished.answered(&config, &mut report, answer);
                continue;
            }
            next = source.next(), if running.len() < handlers => next,
        };
        let message = match next {
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                report.stream_errors += 1;
                report.first_error.get_or_insert_with(|| e.to_string());
                continue;
            }
            None => break,
        };
        let now = clock::now_ns();
        let Some((seq, delivery, published_ns)) = receive(&config, &mut report, &message, now)
        else {
            continue;
        };
        progress.received.store(report.received, Ordering::Relaxed);

        match config.plan.ack {
            AckPolicy::Explicit => {
                let job = Job::new(
                    &config,
                    &message,
                    (seq, delivery, published_ns, now),
                    (&dedup, &skip_ack),
                );
                if handlers == 1 {
                    let answer = respond(message, job).await;
                    finished.answered(&config, &mut report, answer);
                } else {
                    running.push(respond(message, job));
                }
            }
            AckPolicy::All => {
                // An ack covers every earlier delivery: ack every k-th.
                if report.received.is_multiple_of(config.plan.ack_every as u64) {
                    if ack_covering(&config, &mut report, &message).await.is_ok() {
                        unacked_tail = None;
                    }
                } else {
                    unacked_tail = Some(message);
                }
                finished.end_unanswered();
            }
            AckPolicy::None => finished.end_unanswered(),
        }
    }

    // Answer what is in hand, so an interrupted run leaves no work half done.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(answer) = running.next().await {
            finished.answered(&config, &mut report, answer);
        }
    })
    .await;
    if let Some(tail) = unacked_tail.take() {
        let _ = ack_covering(&config, &mut report, &tail).await;
    }
    // Queued acks reach the server before the report is handed over.
    let _ = client.flush().await;
    Ok(report)
}

/// Dies as `point` says: what handlers hold is finished and acked, dropped
/// mid-work, or finished without its ack. Or stops gracefully (a drain):
/// the client stops reading, works on and acks what it had already
/// received beside what its handlers held (`start` begins a job), and
/// closes; what the server sends it after the stop is left to its ack
/// deadline. The caller then returns, and the connection goes down with
/// the last clone of the client.
async fn crash<F: std::future::Future<Output = Answer>>(
    point: Option<CrashPoint>,
    config: &ConsumerConfig,
    report: &mut ConsumerReport,
    (source, running): (&mut Source, &mut FuturesUnordered<F>),
    start: fn(Message, Job) -> F,
    (dedup, skip_ack): (&Option<Arc<jetstream::kv::Store>>, &Arc<AtomicBool>),
    finished: &mut Finished,
) -> CrashReport {
    let mut crash = CrashReport {
        at_ns: clock::now_ns(),
        in_hand: running.len() as u64,
        ..CrashReport::default()
    };
    match point.unwrap_or(CrashPoint::DuringProcessing) {
        CrashPoint::DuringProcessing => {}
        CrashPoint::BeforeProcessing | CrashPoint::AfterProcessing => {
            if point == Some(CrashPoint::AfterProcessing) {
                skip_ack.store(true, Ordering::Release);
            }
            while let Some(a) = running.next().await {
                if a.reply == Reply::Unacked {
                    crash.processed_unacked.push(a.seq);
                    // The work was done: its effect counts.
                    if let Some((effect, check)) = a.effect {
                        note_effect(config, report, a.seq, effect, check);
                    }
                    continue;
                }
                finished.answered(config, report, a);
            }
        }
        CrashPoint::Drain => {
            // Already received: ready without a wait.
            let mut received = Vec::new();
            while let Some(Some(Ok(m))) = futures::FutureExt::now_or_never(source.next()) {
                received.push(m);
            }
            for message in received {
                let now = clock::now_ns();
                let Some((seq, delivery, published_ns)) = receive(config, report, &message, now)
                else {
                    continue;
                };
                crash.drained += 1;
                let job = Job::new(
                    config,
                    &message,
                    (seq, delivery, published_ns, now),
                    (dedup, skip_ack),
                );
                running.push(start(message, job));
            }
            while let Some(a) = running.next().await {
                finished.answered(config, report, a);
            }
        }
    }
    crash.stopped_ns = clock::now_ns();
    crash
}

/// Bookkeeping on receipt: ledger, timeline, latency. Returns the stream
/// sequence, the delivery count and (when deliveries are logged) the time
/// the server stored the message; `None` for a delivery without metadata.
#[inline]
fn receive(
    config: &ConsumerConfig,
    report: &mut ConsumerReport,
    message: &Message,
    now: u64,
) -> Option<(u64, u32, u64)> {
    let info = match message.info() {
        Ok(info) => info,
        Err(e) => {
            report.malformed += 1;
            report.error(|| format!("unreadable reply subject: {e}"));
            return None;
        }
    };
    let seq = info.stream_sequence;
    let delivery = info.delivered.max(1) as u32;
    let published_ns = if config.log_events || config.hops {
        info.published.unix_timestamp_nanos().max(0) as u64
    } else {
        0
    };
    let arrival = Arrival {
        seq,
        delivery,
        published_ns,
        payload: &message.payload,
    };
    note_arrival(config, report, arrival, now, || SeenMessage {
        seq,
        subject: message.subject.to_string(),
        payload: message.payload.to_vec(),
        headers: message
            .headers
            .as_ref()
            .map(header_pairs)
            .unwrap_or_default(),
    });
    Some((seq, delivery, published_ns))
}

/// A delivery as its reply subject and payload describe it, whichever
/// client read it.
pub(crate) struct Arrival<'a> {
    pub seq: u64,
    /// 1 for a first delivery.
    pub delivery: u32,
    /// When the server stored it, on the server's wall clock (0 unless
    /// deliveries are logged or latency is split into hops).
    pub published_ns: u64,
    pub payload: &'a [u8],
}

/// The bookkeeping every delivery gets, the same for every client: the
/// ledger, the timeline, the latencies, a doomed message's copy
/// (`copy` makes it, called only for one).
#[inline]
pub(crate) fn note_arrival(
    config: &ConsumerConfig,
    report: &mut ConsumerReport,
    arrival: Arrival<'_>,
    now: u64,
    copy: impl FnOnce() -> SeenMessage,
) {
    let (seq, delivery) = (arrival.seq, arrival.delivery);
    let seen_here = report.ledger.count(seq, Event::Delivered) > 0;
    report.ledger.mark(seq, Event::Delivered);
    report.note_delivery(now);
    if delivery > 1 {
        report.redeliveries += 1;
    }
    if delivery == 1 {
        report.first_deliveries.insert(seq);
    }
    if config.keep_doomed && !seen_here && doomed(config, seq) {
        report.doomed.push(copy());
    }
    match Stamp::read(arrival.payload) {
        Some(stamp) if stamp.intended_ns >= config.record_from_ns => {
            if delivery == 1 {
                crate::system::live::record_e2e(now.saturating_sub(stamp.intended_ns));
                report.e2e_intended.record_between(stamp.intended_ns, now);
                report.e2e_sent.record_between(stamp.sent_ns, now);
                if config.hops && arrival.published_ns > 0 {
                    let stored = clock::from_wall(arrival.published_ns, now);
                    report.ingest.record_between(stamp.sent_ns, stored);
                    report.deliver.record_between(stored, now);
                }
            } else if !seen_here {
                report.late_firsts.push(LateFirst {
                    seq,
                    intended_ns: stamp.intended_ns,
                    sent_ns: stamp.sent_ns,
                    received_ns: now,
                });
            }
        }
        Some(_) => {}
        None => report.malformed += 1,
    }
}

/// Whether the behaviour plans `seq` to end dead-lettered: exhausted, or
/// termed.
fn doomed(config: &ConsumerConfig, seq: u64) -> bool {
    let fate = config.behaviour.fate(seq, config.plan.max_deliver);
    matches!(fate.outcome, Outcome::Exhausted | Outcome::Termed)
}

/// With `ack = "all"`: one ack for this delivery and every earlier one.
async fn ack_covering(
    config: &ConsumerConfig,
    report: &mut ConsumerReport,
    message: &Message,
) -> Result<(), ()> {
    let started = clock::now_ns();
    let result = if config.plan.double_ack {
        message.double_ack().await
    } else {
        message.ack().await
    };
    match result {
        Ok(()) => {
            if config.plan.double_ack {
                report.ack_rtt.record_between(started, clock::now_ns());
            }
            if let Ok(info) = message.info() {
                report.ledger.mark(info.stream_sequence, Event::Acked);
            }
            Ok(())
        }
        Err(e) => {
            report.ack_errors += 1;
            report.error(|| format!("ack: {e}"));
            Err(())
        }
    }
}

/// Messages this client has seen to their end, each once (a message acked
/// twice, a redelivery whose first ack was late, must not end the drain
/// while another is still unanswered), and deliveries answered; each count
/// published to `progress` as it moves.
#[derive(Default)]
struct Finished {
    progress: Arc<ConsumerProgress>,
    count: u64,
    ended: SeqSet,
    answered: u64,
}

impl Finished {
    fn new(progress: Arc<ConsumerProgress>) -> Finished {
        Finished {
            progress,
            ..Finished::default()
        }
    }

    /// A handler's answer: one more answered, then its bookkeeping.
    fn answered(&mut self, config: &ConsumerConfig, report: &mut ConsumerReport, answer: Answer) {
        self.answered += 1;
        self.progress
            .answered
            .store(self.answered, Ordering::Relaxed);
        record_answer(config, report, self, answer);
    }

    /// Without per-message acks nothing is redelivered: each delivery
    /// ends a message, and needs no answer of its own.
    fn end_unanswered(&mut self) {
        self.count += 1;
        self.answered += 1;
        self.progress.finished.store(self.count, Ordering::Relaxed);
        self.progress
            .answered
            .store(self.answered, Ordering::Relaxed);
    }
}

fn record_answer(
    config: &ConsumerConfig,
    report: &mut ConsumerReport,
    finished: &mut Finished,
    answer: Answer,
) {
    if let Some(e) = answer.reply.error() {
        report.ack_errors += 1;
        report.first_error.get_or_insert_with(|| e.to_string());
    }
    // The last allowed delivery failed: the server gives up on it.
    let last = config.plan.max_deliver > 0 && i64::from(answer.delivery) >= config.plan.max_deliver;
    let (event, ended) = match answer.action {
        Action::Ack | Action::InProgressThenAck { .. } => (Some(Event::Acked), true),
        Action::Term => (Some(Event::Termed), true),
        Action::Nak | Action::NakDelay(_) => (Some(Event::Naked), last),
        Action::Ignore => (None, last),
    };
    if let (Some(event), Reply::Sent) = (event, &answer.reply) {
        report.ledger.mark(answer.seq, event);
    }
    if ended && finished.ended.insert_new(answer.seq) {
        finished.count += 1;
        finished
            .progress
            .finished
            .store(finished.count, Ordering::Relaxed);
    }
    if let Some(rtt) = answer.ack_rtt_ns {
        report.ack_rtt.record(rtt);
    }
    if let Some((effect, check)) = answer.effect {
        note_effect(config, report, answer.seq, effect, check);
    }
    if config.log_events {
        report.events.push(DeliveryEvent {
            seq: answer.seq,
            delivery: answer.delivery,
            consumer: config.index as u16,
            published_ns: answer.published_ns,
            received_ns: answer.received_ns,
            answered_ns: answer.answered_ns,
        });
    }
}

/// Counts what a delivery's work did.
fn note_effect(
    config: &ConsumerConfig,
    report: &mut ConsumerReport,
    seq: u64,
    effect: Effect,
    check_ns: Option<u64>,
) {
    if let Some(ns) = check_ns {
        report.effects.check.record(ns);
    }
    match effect {
        Effect::Applied if config.log_events || config.dedup.is_some() => {
            report.effects.applied.push(seq)
        }
        Effect::Applied => {}
        Effect::Suppressed => report.effects.suppressed += 1,
        Effect::StoreFailed => report.effects.store_errors += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ConsumerConfig {
        ConsumerConfig::acking_all("S", 16, 0)
    }

    fn ack(seq: u64, delivery: u32) -> Answer {
        Answer {
            seq,
            delivery,
            published_ns: 0,
            received_ns: 0,
            answered_ns: 0,
            action: Action::Ack,
            reply: Reply::Sent,
            ack_rtt_ns: None,
            effect: None,
        }
    }

    #[test]
    fn a_message_acked_twice_ends_once() {
        let config = config();
        let mut report = ConsumerReport::empty(&config);
        let progress = Arc::new(ConsumerProgress::default());
        let mut finished = Finished::new(progress.clone());
        // Seq 1 acked at delivery 1 and again at its redelivery; seq 2 not
        // yet: one message has ended, not two, and the drain waits for 2.
        record_answer(&config, &mut report, &mut finished, ack(1, 1));
        record_answer(&config, &mut report, &mut finished, ack(1, 2));
        assert_eq!(finished.count, 1);
        assert_eq!(progress.finished.load(Ordering::Relaxed), 1);
        assert_eq!(
            report.ledger.count(1, Event::Acked),
            2,
            "both acks recorded"
        );
        record_answer(&config, &mut report, &mut finished, ack(2, 1));
        assert_eq!(progress.finished.load(Ordering::Relaxed), 2);
    }
}
