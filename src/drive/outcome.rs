//! What driving a variant measured, merged across its tasks (and its
//! processes): what scenarios measure and verify from.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::consume::{ConsumerReport, CrashReport, DeliveryEvent, LateFirst};
use crate::load::{AckReport, SendReport};
use crate::record::histogram::Recorder;
use crate::record::ledger::{LedgerCounts, LedgerShard, SeqSet};
use crate::record::timeline::Timeline;
use crate::streams::readback::{Eviction, Reconciliation, evictions};
use async_nats::jetstream;

/// One stream of a load of several: its publishers' outcome, what it
/// holds against their PubAcks, and its durables.
#[derive(Debug)]
pub struct StreamPart {
    pub name: String,
    pub outcome: DriveOutcome,
    /// PubAcks against what the stream holds, when it was read back.
    pub stored: Option<Reconciliation>,
    /// Why it could not be read back, when it was asked to be.
    pub read_error: Option<String>,
    pub durables: Vec<DurablePart>,
}

/// One durable of a load of several: its clients' deliveries against the
/// messages of its stream its filter selects, its losses attributed.
#[derive(Debug)]
pub struct DurablePart {
    pub name: String,
    pub filters: Vec<String>,
    pub outcome: DriveOutcome,
    /// The client's error, when it failed.
    pub error: Option<String>,
    /// Whether its due is known: everything its stream stored, or what its
    /// filter selects of the stream read back.
    pub due_known: bool,
}

impl DriveOutcome {
    /// Every durable of a load of several, with its stream.
    pub fn durables(&self) -> impl Iterator<Item = (&StreamPart, &DurablePart)> {
        self.parts
            .iter()
            .flat_map(|s| s.durables.iter().map(move |d| (s, d)))
    }
}

/// What the kill and the restart looked like.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultOutcome {
    pub node: String,
    pub kind: crate::profile::FaultKind,
    /// When the fault began: the kill, or the routes cut or paused.
    pub killed_ns: u64,
    /// When it ended: the node accepted connections again, or its routes
    /// were let through again.
    pub restarted_ns: u64,
    pub leader_before: Option<String>,
    /// The stream's leader once a new one was elected (cluster).
    pub leader_after: Option<String>,
    /// From the kill until the stream had a leader again (cluster).
    pub election_gap: Option<Duration>,
}

/// What the consumer pause looked like.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PauseOutcome {
    /// When jsbench asked, and when the server answered, ns on
    /// [`crate::record::clock`]: no delivery may leave the server after the answer.
    pub requested_ns: u64,
    pub answered_ns: u64,
    /// When the pause was to end (the server resumes on its own then).
    pub planned_end_ns: u64,
    /// The server's answer: paused, and for how long.
    pub paused: bool,
    pub remaining: Option<Duration>,
}

/// What the crash and the rebind looked like.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashOutcome {
    pub report: CrashReport,
    /// The server's ack pending once the crashed client was gone: what
    /// must be redelivered.
    pub ack_pending_after: Option<u64>,
    /// When the new client bound, ns on [`crate::record::clock`].
    pub rebound_ns: u64,
}

/// CPU from the end of the warm-up to the end of the drain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuAfterWarmup {
    pub client: crate::system::cpu::ClientCpu,
    pub server: Option<Duration>,
}

/// Consumer info at one moment of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerSample {
    pub at_ns: u64,
    pub num_pending: u64,
    pub num_ack_pending: u64,
    pub num_redelivered: u64,
    /// Deliveries the clients hold unanswered (the client's own view of
    /// ack pending, without what async-nats has buffered).
    pub client_in_flight: u64,
}

/// Server-side view of the durable at the end of the drain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerState {
    pub num_pending: u64,
    pub num_ack_pending: usize,
    pub num_redelivered: usize,
    /// The last stream sequence the server delivered: every sequence up to
    /// it has gone out at least once (a durable delivers in stream order).
    pub delivered_stream_seq: u64,
}

/// Everything measured while driving one variant, merged across tasks.
#[derive(Debug, Default)]
pub struct DriveOutcome {
    pub t0_ns: u64,
    pub record_from_ns: u64,
    pub sends: Vec<SendReport>,
    pub acks: Vec<AckReport>,
    pub consumers: Vec<ConsumerReport>,
    pub send_lag: Recorder,
    pub pub_ack_intended: Recorder,
    pub pub_ack_sent: Recorder,
    pub e2e_intended: Recorder,
    pub e2e_sent: Recorder,
    pub ledger: LedgerShard,
    pub counts: LedgerCounts,
    pub published_timeline: Timeline,
    pub delivered_timeline: Timeline,
    /// Whether every persisted message was delivered before the drain timeout
    /// (always true without consumers).
    pub drained: bool,
    /// Time from the last publish to the end of the drain.
    pub drain_time: Duration,
    pub server_state: Option<ConsumerState>,
    /// Consumer info sampled over the run (when asked for).
    pub samples: Vec<ConsumerSample>,
    /// Every delivery, ordered by sequence and delivery (when asked for).
    pub events: Vec<DeliveryEvent>,
    /// Double-ack round trips.
    pub ack_rtt: Recorder,
    /// End-to-end latencies taken at a later delivery, because no client
    /// saw the message's first (it went to a client that crashed, or was
    /// lost with a server): the slowest messages of a fault, counted once.
    pub late_first_latencies: u64,
    /// The planned crash, when there was one.
    pub crash: Option<CrashOutcome>,
    /// The planned server kill, when there was one.
    pub fault: Option<FaultOutcome>,
    /// The planned consumer pause, when there was one.
    pub pause: Option<PauseOutcome>,
    /// CPU jsbench used from the publishers' connect to the end of the
    /// drain (every process's, in a run with workers): everything a
    /// message cost this side, its delivery and ack included.
    pub client_cpu: crate::system::cpu::ClientCpu,
    /// CPU the server used over the same span, when it can be measured.
    pub server_cpu: Option<Duration>,
    /// Both sides' CPU from the end of the warm-up to the end of the
    /// drain: what the sends a rate counts cost. `None` in a run with
    /// workers (their CPU is known over the whole span only) or one that
    /// ended within its warm-up.
    pub cpu_after_warmup: Option<CpuAfterWarmup>,
    /// The sampled messages' trace events (`trace_every`); `None` when
    /// nothing was traced.
    pub trace: Option<super::trace::TraceOutcome>,
    pub interrupted: bool,
    /// Errors the tasks reported; each makes the variant suspect.
    pub errors: Vec<String>,
    /// Why the clients missed the messages in `counts.client_dropped`: the
    /// first consumer error, or that the server delivered them and no
    /// client saw them.
    pub client_drop_cause: Option<String>,
    /// What the stream removed by its own limits, when it has any that
    /// evict ([`crate::streams::readback::evictions`]).
    pub eviction: Option<Eviction>,
    /// A load of several streams or durables: one part per stream (its
    /// publishers, its durables), beside the whole above, which then holds
    /// every publisher with the streams' counts summed (their sequences
    /// repeat, so their ledgers are never merged into one). Empty for one
    /// stream read by at most one durable.
    pub parts: Vec<StreamPart>,
    /// How long binding every durable took before the clock started, for
    /// a load whose readers share connections.
    pub bind_time: Option<Duration>,
    /// The servers' monitoring endpoints over the variant, when known.
    pub telemetry: Option<crate::server::telemetry::Telemetry>,
    /// This process's resident memory: sampled while the publishers ran,
    /// its peak from the variant's start to the end of collect.
    pub memory: crate::system::cpu::MemoryTrace,
}

impl DriveOutcome {
    /// An outcome with nothing in it, for the checks' unit tests to fill
    /// with what a real server cannot be made to produce.
    #[cfg(test)]
    pub(crate) fn empty() -> Self {
        merge(Vec::new(), Vec::new(), Vec::new(), 0, 0)
    }

    /// An empty outcome whose durable ended with nothing pending, the
    /// server having delivered up to `delivered_stream_seq`.
    #[cfg(test)]
    pub(crate) fn settled(delivered_stream_seq: u64) -> Self {
        let mut o = Self::empty();
        o.server_state = Some(ConsumerState {
            delivered_stream_seq,
            ..Default::default()
        });
        o
    }

    /// Splits the persisted messages no client saw between the server and
    /// the clients ([`attribute`]), asking the stream which it still holds.
    pub async fn attribute_losses(&mut self, js: &jetstream::Context, stream: &str) {
        let failure = self
            .consumers
            .iter()
            .find_map(|c| c.first_error.clone())
            .or_else(|| {
                self.errors
                    .iter()
                    .find(|e| e.starts_with("consumer"))
                    .cloned()
            });
        let info = match js.get_stream(stream).await {
            Ok(mut handle) => handle.info().await.ok().cloned(),
            Err(_) => None,
        };
        let held = held_sequences(js, stream, &self.ledger, self.server_state).await;
        self.eviction = info.as_ref().and_then(|i| evictions(i, &self.ledger));
        // A work-queue or interest stream (one durable) removes what was
        // acknowledged or terminated.
        if info.is_some_and(|i| i.config.retention != jetstream::stream::RetentionPolicy::Limits) {
            self.counts.removed_by_ack = self.counts.acked + self.counts.termed;
        }
        let evicted_below = evicted_below(self.eviction.as_ref());
        if let Some(a) = attribute(
            &self.ledger,
            self.server_state,
            failure,
            &held,
            evicted_below,
        ) {
            self.counts.lost = a.lost;
            self.counts.client_dropped = a.client_dropped;
            self.counts.unattributed = a.unattributed;
            self.client_drop_cause = a.cause;
        }
        self.counts.evicted = evicted_count(self.eviction.as_ref());
    }

    /// About when a stream's evictions began, in seconds after t0: when
    /// the message after the last one it could hold was published
    /// (message `held + 1` of the published timeline; exact for max_msgs,
    /// an estimate for max_bytes).
    pub fn eviction_began_s(&self) -> Option<f64> {
        let e = self.eviction.as_ref().filter(|e| e.evicted > 0)?;
        let t = &self.published_timeline;
        let mut total = 0;
        for (i, &n) in t.counts.iter().enumerate() {
            if total + n > e.held {
                let within = (e.held - total) as f64 / n as f64;
                return Some((i as f64 + within) * t.bucket_ns as f64 / 1e9);
            }
            total += n;
        }
        None
    }

    pub fn sent(&self) -> u64 {
        self.sends.iter().map(|s| s.sent).sum()
    }

    /// A sum over the PubAck readers.
    pub fn acks_sum(&self, field: impl Fn(&AckReport) -> u64) -> u64 {
        self.acks.iter().map(field).sum()
    }

    /// A sum over the senders.
    pub fn sends_sum(&self, field: impl Fn(&SendReport) -> u64) -> u64 {
        self.sends.iter().map(field).sum()
    }

    /// The publishers' CPU: their sending threads and the publish
    /// runtime's connection I/O and PubAck readers.
    pub fn publisher_cpu(&self) -> Duration {
        self.sends.iter().map(|s| s.thread_cpu).sum::<Duration>() + self.client_cpu.publish_io
    }

    /// The sends a rate counts ([`SendReport::measured`]): scheduled,
    /// intended from the end of the warm-up.
    pub fn measured_sends(&self) -> u64 {
        self.sends_sum(|s| s.measured)
    }

    /// The sends of the PubAck windows' first bursts at `max` with no
    /// warm-up, which no rate counts ([`SendReport::burst`]).
    pub fn burst_sends(&self) -> u64 {
        self.sends_sum(|s| s.burst)
    }

    /// The publishing span: from the first send a rate counts to the last
    /// scheduled send, over every publisher. The warm-up, the PubAck
    /// window's first burst at `max` (in the warm-up, or left out by the
    /// sender when there is none) and the lead-in before t0 are in neither
    /// the span nor the count; resends are outside both.
    pub fn publish_span(&self) -> Duration {
        let (first, last) = self.publish_window();
        Duration::from_nanos(last.saturating_sub(first))
    }

    /// The publishing span's ends, ns on [`crate::record::clock`]; (0, 0)
    /// when nothing was counted.
    pub fn publish_window(&self) -> (u64, u64) {
        let measured = || self.sends.iter().filter(|s| s.measured > 0);
        let first = measured().map(|s| s.first_measured_ns).min().unwrap_or(0);
        let last = measured().map(|s| s.last_sent_ns).max().unwrap_or(0);
        (first, last)
    }

    /// Achieved publish rate over the publishing span: `n` sends span
    /// `n - 1` intervals.
    pub fn publish_rate(&self) -> f64 {
        rate(self.measured_sends(), self.publish_span())
    }

    /// Payload bytes a second over the publishing span, of the sends the
    /// rate counts.
    pub fn publish_throughput(&self) -> f64 {
        self.sends_sum(|s| s.measured_bytes) as f64 / self.publish_span().as_secs_f64().max(1e-9)
    }

    /// The rate PubAcks confirmed the sends a rate counts, from the first
    /// such PubAck to the last: what the server took, beside what was sent.
    pub fn acked_rate(&self) -> f64 {
        let acked = || self.acks.iter().filter(|a| a.measured_acked > 0);
        let first = acked().map(|a| a.first_measured_ack_ns).min().unwrap_or(0);
        let last = acked().map(|a| a.last_measured_ack_ns).max().unwrap_or(0);
        rate(
            self.acks_sum(|a| a.measured_acked),
            Duration::from_nanos(last.saturating_sub(first)),
        )
    }

    /// Achieved delivery rate across consumers, first to last delivery.
    pub fn consume_rate(&self) -> f64 {
        let first = self
            .consumers
            .iter()
            .filter(|c| c.first_ns > 0)
            .map(|c| c.first_ns)
            .min();
        let last = self.consumers.iter().map(|c| c.last_ns).max();
        match (first, last) {
            (Some(f), Some(l)) => rate(
                self.consumers.iter().map(|c| c.received).sum(),
                Duration::from_nanos(l - f),
            ),
            _ => 0.0,
        }
    }

    /// Consumer info samples as series: `num_pending`, `num_ack_pending`,
    /// `num_redelivered` and `client_in_flight`, one value per interval.
    pub fn sample_timelines(&self, every: Duration) -> Vec<(String, Timeline)> {
        let bucket_ns = every.as_nanos().max(1) as u64;
        let series = |name: &str, value: fn(&ConsumerSample) -> u64| {
            let mut t = Timeline {
                origin_ns: self.t0_ns,
                bucket_ns,
                counts: Vec::new(),
            };
            for s in &self.samples {
                let i = (s.at_ns.saturating_sub(self.t0_ns) / bucket_ns) as usize;
                if t.counts.len() <= i {
                    t.counts.resize(i + 1, 0);
                }
                t.counts[i] = value(s);
            }
            (name.to_string(), t)
        };
        vec![
            series("num_pending", |s| s.num_pending),
            series("num_ack_pending", |s| s.num_ack_pending),
            series("num_redelivered", |s| s.num_redelivered),
            series("client_in_flight", |s| s.client_in_flight),
        ]
    }

    /// How far the last message was sent behind its intended time.
    pub fn final_lag(&self) -> Duration {
        let lag = self
            .sends
            .iter()
            .map(|s| s.last_sent_ns.saturating_sub(s.last_intended_ns))
            .max()
            .unwrap_or(0);
        Duration::from_nanos(lag)
    }
}

/// Events per second: `count` events from the first to the last span
/// `count - 1` intervals (1,000 messages at 1,000/s take 999 ms).
pub fn rate(count: u64, span: Duration) -> f64 {
    if span.is_zero() || count < 2 {
        0.0
    } else {
        (count - 1) as f64 / span.as_secs_f64()
    }
}

/// Who lost the persisted messages no client saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribution {
    /// The server's: never delivered while the clients kept asking.
    pub lost: u64,
    /// The clients': delivered by the server and never seen, or still held
    /// by the server for clients that had stopped asking.
    pub client_dropped: u64,
    /// Never seen, and neither the lookups nor the stream's state can
    /// tell whether the stream still holds them: nobody's loss proven.
    pub unattributed: u64,
    pub cause: Option<String>,
}

/// What the stream says of the never-seen sequences the server says it
/// delivered: the first [`HELD_LOOKUPS`] asked for one by one (there are
/// none in a healthy run), the rest judged from the stream's state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holding {
    /// Every never-seen sequence up to this one was asked for.
    pub asked_through: u64,
    /// Those of them the stream returned.
    pub held: SeqSet,
    /// The stream's first and last sequence and how many between them are
    /// deleted, when it answered.
    pub span: Option<StreamSpan>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSpan {
    pub first: u64,
    pub last: u64,
    pub deleted: u64,
}

impl Holding {
    /// Whether the stream holds `seq`; `None` when nothing can tell: past
    /// the lookups, a sequence inside a stream with deletions in it.
    pub fn holds(&self, seq: u64) -> Option<bool> {
        if seq <= self.asked_through {
            return Some(self.held.contains(seq));
        }
        let span = self.span?;
        if seq < span.first || seq > span.last {
            Some(false)
        } else {
            (span.deleted == 0).then_some(true)
        }
    }
}

/// Asks the stream which never-seen sequences the server delivered it
/// still holds: delivered and waiting, not gone ([`Holding`]).
pub async fn held_sequences(
    js: &jetstream::Context,
    stream: &str,
    ledger: &LedgerShard,
    state: Option<ConsumerState>,
) -> Holding {
    let mut holding = Holding::default();
    let Some(state) = state else {
        return holding;
    };
    let Ok(mut handle) = js.get_stream(stream).await else {
        return holding;
    };
    holding.span = handle.info().await.ok().map(|i| StreamSpan {
        first: i.state.first_sequence,
        last: i.state.last_sequence,
        deleted: i.state.deleted_count.unwrap_or(0),
    });
    let asked = ledger.lost_sequences(HELD_LOOKUPS);
    holding.asked_through = match asked.last() {
        Some(&last) if asked.len() == HELD_LOOKUPS => last,
        _ => u64::MAX,
    };
    for seq in asked
        .into_iter()
        .filter(|&seq| seq <= state.delivered_stream_seq)
    {
        if handle.get_raw_message(seq).await.is_ok() {
            holding.held.insert(seq);
        }
    }
    holding
}

/// What the stream removed by its own limits, from its info now: below the
/// first sequence a stream with limits still holds, a message is gone by
/// policy. `None` without limits, or when the server does not answer.
pub async fn stream_eviction(
    js: &jetstream::Context,
    stream: &str,
    ledger: &LedgerShard,
) -> Option<Eviction> {
    let mut handle = js.get_stream(stream).await.ok()?;
    let info = handle.info().await.ok()?;
    evictions(info, ledger)
}

/// The sequence below which [`attribute`] counts a never-seen message as
/// evicted: only when the stream's limits explain its evictions (else
/// they are losses).
pub fn evicted_below(eviction: Option<&Eviction>) -> u64 {
    eviction
        .filter(|e| e.explained())
        .map_or(0, |e| e.first_kept)
}

/// The evictions the ledger counts, on the same condition.
pub fn evicted_count(eviction: Option<&Eviction>) -> u64 {
    eviction.filter(|e| e.explained()).map_or(0, |e| e.evicted)
}

/// How many never-seen sequences are looked up in the stream at most.
pub const HELD_LOOKUPS: usize = 10_000;

/// Splits the persisted, never-seen sequences of `ledger` between the
/// server and the clients, given the durable's `state` and what the stream
/// still holds (from [`held_sequences`]):
///
/// - up to the durable's last delivered sequence, a message the stream
///   still holds went out and no client saw it: the clients dropped it; one
///   the stream no longer holds is gone without a client having seen it (a
///   delete, a purge, a limit): the server's loss; one nothing can tell
///   of is unattributed, never lost;
/// - beyond it the server still had it to deliver: abandoned by the clients
///   when one of them failed (`client_failure`: it stopped pulling, lost its
///   stream), else the server's loss;
/// - below `evicted_below` (the first sequence a stream whose limits
///   explain its evictions still holds; 0 for none) it was evicted, by
///   the stream's policy: neither's loss.
///
/// `None` without the durable's state: nothing can be attributed.
pub fn attribute(
    ledger: &LedgerShard,
    state: Option<ConsumerState>,
    client_failure: Option<String>,
    holding: &Holding,
    evicted_below: u64,
) -> Option<Attribution> {
    let state = state?;
    let (mut undelivered, mut delivered_by_server, mut still_to_deliver) = (0u64, 0u64, 0u64);
    let mut unattributed = 0u64;
    for seq in ledger.undelivered().filter(|&seq| seq >= evicted_below) {
        undelivered += 1;
        if seq > state.delivered_stream_seq {
            still_to_deliver += 1;
        } else {
            match holding.holds(seq) {
                Some(true) => delivered_by_server += 1,
                Some(false) => {}
                None => unattributed += 1,
            }
        }
    }
    let abandoned = if client_failure.is_some() {
        still_to_deliver
    } else {
        0
    };
    let client_dropped = delivered_by_server + abandoned;
    let mut cause = Vec::new();
    if delivered_by_server > 0 {
        cause.push(format!(
            "{delivered_by_server} delivered by the server (up to stream sequence {}), still in the stream, never seen by a client",
            state.delivered_stream_seq
        ));
    }
    if abandoned > 0 {
        cause.push(format!(
            "{abandoned} still held by the server when a client stopped"
        ));
    }
    if client_dropped > 0
        && let Some(e) = &client_failure
    {
        cause.push(format!("client error: {e}"));
    }
    Some(Attribution {
        lost: undelivered - client_dropped - unattributed,
        client_dropped,
        unattributed,
        cause: (!cause.is_empty()).then(|| cause.join("; ")),
    })
}

/// The outcome of the task reports, before the phases add what they saw.
/// The ledger's counts with what the publishers report beside it.
fn count(ledger: &LedgerShard, sends: &[SendReport], acks: &[AckReport]) -> LedgerCounts {
    let mut counts = ledger.counts();
    counts.published = sends.iter().map(|s| s.sent).sum();
    counts.publish_errors = acks.iter().map(|a| a.errors + a.missing).sum();
    counts.refused_by_limit = acks.iter().map(|a| a.refused_by_limit).sum();
    counts
}

/// The counts again, once the ledger has changed after the merge.
pub(super) fn recount(o: &DriveOutcome) -> LedgerCounts {
    count(&o.ledger, &o.sends, &o.acks)
}

pub(super) fn merge(
    sends: Vec<SendReport>,
    acks: Vec<AckReport>,
    consumers: Vec<ConsumerReport>,
    t0_ns: u64,
    record_from_ns: u64,
) -> DriveOutcome {
    let mut send_lag = Recorder::new();
    let mut published_timeline = Timeline::per_second(t0_ns);
    for s in &sends {
        send_lag.merge(&s.send_lag);
        published_timeline.merge(&s.timeline);
    }
    let mut pub_ack_intended = Recorder::new();
    let mut pub_ack_sent = Recorder::new();
    let mut ledger = LedgerShard::new();
    for a in &acks {
        pub_ack_intended.merge(&a.from_intended);
        pub_ack_sent.merge(&a.from_sent);
        ledger.merge(&a.ledger);
    }
    let mut e2e_intended = Recorder::new();
    let mut e2e_sent = Recorder::new();
    let mut ack_rtt = Recorder::new();
    let mut delivered_timeline = Timeline::per_second(t0_ns);
    let mut logs = Vec::new();
    for c in &consumers {
        e2e_intended.merge(&c.e2e_intended);
        e2e_sent.merge(&c.e2e_sent);
        ack_rtt.merge(&c.ack_rtt);
        ledger.merge(&c.ledger);
        delivered_timeline.merge(&c.timeline);
        logs.push(c.events.clone());
    }
    let late_first_latencies = record_late_firsts(&consumers, &mut e2e_intended, &mut e2e_sent);
    let counts = count(&ledger, &sends, &acks);
    DriveOutcome {
        t0_ns,
        record_from_ns,
        sends,
        acks,
        consumers,
        send_lag,
        pub_ack_intended,
        pub_ack_sent,
        e2e_intended,
        e2e_sent,
        ledger,
        counts,
        published_timeline,
        delivered_timeline,
        events: crate::consume::events::merge(logs),
        late_first_latencies,
        ack_rtt,
        ..DriveOutcome::default()
    }
}

/// Adds to the latency histograms the first sight of every message whose
/// first delivery no client saw, once (the earliest sight); returns how
/// many.
fn record_late_firsts(
    consumers: &[ConsumerReport],
    e2e_intended: &mut Recorder,
    e2e_sent: &mut Recorder,
) -> u64 {
    let mut seen_first = SeqSet::default();
    for c in consumers {
        seen_first.merge(&c.first_deliveries);
    }
    let mut earliest: BTreeMap<u64, LateFirst> = BTreeMap::new();
    for l in consumers.iter().flat_map(|c| &c.late_firsts) {
        if seen_first.contains(l.seq) {
            continue;
        }
        let e = earliest.entry(l.seq).or_insert(*l);
        if l.received_ns < e.received_ns {
            *e = *l;
        }
    }
    for l in earliest.values() {
        e2e_intended.record_between(l.intended_ns, l.received_ns);
        e2e_sent.record_between(l.sent_ns, l.received_ns);
    }
    earliest.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(firsts: &[u64], late: &[(u64, u64)]) -> ConsumerReport {
        let mut r: ConsumerReport = serde_json::from_value(serde_json::json!({
            "received": 0, "redeliveries": 0, "malformed": 0, "stream_errors": 0,
            "ack_errors": 0, "first_error": null,
            "e2e_intended": Recorder::new(), "e2e_sent": Recorder::new(),
            "first_deliveries": SeqSet::default(), "late_firsts": [],
            "ack_rtt": Recorder::new(), "ledger": LedgerShard::new(),
            "timeline": Timeline::per_second(0), "first_ns": 0, "last_ns": 0,
            "events": [], "crashed": null, "max_gap_ns": 0, "max_gap_end_ns": 0,
        }))
        .unwrap();
        for &s in firsts {
            r.first_deliveries.insert(s);
        }
        for &(seq, at) in late {
            r.late_firsts.push(LateFirst {
                seq,
                intended_ns: 1_000_000,
                sent_ns: 1_000_000,
                received_ns: at,
            });
        }
        r
    }

    fn set(seqs: impl Iterator<Item = u64>) -> SeqSet {
        let mut set = SeqSet::default();
        seqs.for_each(|seq| set.insert(seq));
        set
    }

    /// Every never-seen sequence asked for, `held` found.
    fn asked(held: &[u64]) -> Holding {
        Holding {
            asked_through: u64::MAX,
            held: set(held.iter().copied()),
            span: None,
        }
    }

    #[test]
    fn what_no_client_saw_is_the_servers_loss_only_when_the_server_still_held_it() {
        let mut ledger = LedgerShard::new();
        for seq in 1..=10 {
            ledger.mark(seq, crate::record::ledger::Event::Persisted);
        }
        for seq in [1, 2, 3, 4, 5, 8] {
            ledger.mark(seq, crate::record::ledger::Event::Delivered);
        }
        // The server delivered up to 7: 6 and 7 went out and no client saw
        // them; 9 and 10 it still held.
        let state = ConsumerState {
            delivered_stream_seq: 7,
            ..ConsumerState::default()
        };
        // The stream still holds 6 and 7: they went out and waited.
        let held = asked(&[6, 7]);
        let healthy = attribute(&ledger, Some(state), None, &held, 0).unwrap();
        assert_eq!((healthy.lost, healthy.client_dropped), (2, 2));
        assert!(
            healthy
                .cause
                .as_deref()
                .unwrap()
                .contains("delivered by the server"),
            "{healthy:?}"
        );
        // A client that lost its stream abandoned what the server held too.
        let failed = attribute(
            &ledger,
            Some(state),
            Some("missed idle heartbeat".into()),
            &held,
            0,
        )
        .unwrap();
        assert_eq!((failed.lost, failed.client_dropped), (0, 4));
        assert!(failed.cause.unwrap().contains("missed idle heartbeat"));
        // Purged before anyone saw them: below the durable's last delivered
        // sequence, but gone from the stream: the server's loss.
        let purged = attribute(&ledger, Some(state), None, &asked(&[]), 0).unwrap();
        assert_eq!((purged.lost, purged.client_dropped), (4, 0));
        // Without the durable's state, nothing is attributed.
        assert_eq!(attribute(&ledger, None, None, &held, 0), None);
        // Evicted by the stream's limits below sequence 7: 6 is neither's
        // loss; 9 and 10, beyond the last delivery, are still the server's.
        let evicted = attribute(&ledger, Some(state), None, &asked(&[]), 7).unwrap();
        assert_eq!((evicted.lost, evicted.client_dropped), (3, 0));
    }

    /// A publisher at `max` over a 1 s warm-up and a 1 s window: 4,000
    /// sends in the warm-up (the PubAck window's first burst among them),
    /// 1,001 after it, and 50 resends of overdue PubAcks.
    fn max_rate_send(warmup_ns: u64) -> SendReport {
        serde_json::from_value(serde_json::json!({
            "sent": 4000 + 1001 + 50, "bytes": (4000 + 1001 + 50) * 100,
            "retries": 0, "late_retries": 0, "late_retried": [], "resends": 50,
            "first_error": null, "stalled": null, "interrupted": false,
            "send_lag": Recorder::new(), "timeline": Timeline::per_second(0),
            "first_sent_ns": 0, "last_sent_ns": 2 * warmup_ns, "last_intended_ns": 2 * warmup_ns,
            "measured": 1001, "measured_bytes": 1001 * 100, "first_measured_ns": warmup_ns,
        }))
        .unwrap()
    }

    #[test]
    fn a_rate_counts_the_sends_after_the_warm_up_and_no_resend() {
        let second = 1_000_000_000;
        let o = merge(
            vec![max_rate_send(second)],
            Vec::new(),
            Vec::new(),
            0,
            second,
        );
        assert!(
            (o.publish_rate() - 1000.0).abs() < 1e-6,
            "1,001 sends over the second after the warm-up: {}",
            o.publish_rate()
        );
        assert_eq!(o.publish_span(), Duration::from_secs(1));
    }

    #[test]
    fn never_seen_sequences_beyond_the_lookups_are_never_called_lost() {
        let mut ledger = LedgerShard::new();
        let never_seen = HELD_LOOKUPS as u64 + 2_000;
        for seq in 1..=never_seen {
            ledger.mark(seq, crate::record::ledger::Event::Persisted);
        }
        let state = ConsumerState {
            delivered_stream_seq: never_seen,
            ..ConsumerState::default()
        };
        // The server delivered all of them; the first HELD_LOOKUPS were
        // asked for one by one and found.
        let looked_up = Holding {
            asked_through: HELD_LOOKUPS as u64,
            held: set(1..=HELD_LOOKUPS as u64),
            span: None,
        };
        let judge = |span: Option<StreamSpan>| {
            let holding = Holding {
                span,
                ..looked_up.clone()
            };
            attribute(&ledger, Some(state), None, &holding, 0).unwrap()
        };
        // Without the stream's state the rest cannot be told: unattributed.
        let a = judge(None);
        assert_eq!((a.lost, a.unattributed), (0, 2_000), "{a:?}");
        // With it: nothing deleted inside the stream, so it holds them all.
        let whole = Some(StreamSpan {
            first: 1,
            last: never_seen,
            deleted: 0,
        });
        let a = judge(whole);
        assert_eq!(
            (a.lost, a.client_dropped, a.unattributed),
            (0, never_seen, 0)
        );
        // Purged below 11,000: those beyond the lookups are gone, the
        // server's loss; the rest held.
        let purged = Some(StreamSpan {
            first: 11_000,
            last: never_seen,
            deleted: 0,
        });
        let a = judge(purged);
        assert_eq!((a.lost, a.unattributed), (999, 0), "{a:?}");
        // Deletions inside the stream: what was not looked up cannot be told.
        let holed = Some(StreamSpan {
            first: 1,
            last: never_seen,
            deleted: 5,
        });
        let a = judge(holed);
        assert_eq!((a.lost, a.unattributed), (0, 2_000), "{a:?}");
    }

    #[test]
    fn n_events_span_n_minus_one_intervals() {
        // 1,000 messages at 1,000/s: the first at 0, the last at 999 ms.
        assert!((rate(1000, Duration::from_millis(999)) - 1000.0).abs() < 1e-9);
        assert_eq!(rate(1, Duration::from_secs(1)), 0.0);
        assert_eq!(rate(1000, Duration::ZERO), 0.0);
    }

    #[test]
    fn a_message_whose_first_delivery_nobody_saw_counts_once_from_its_earliest_sight() {
        // 7: delivery 1 seen by the crashed client, delivery 2 by the new
        // one: already counted. 9: delivery 1 died with the crashed client,
        // two clients saw later deliveries: counted once, the earlier.
        let crashed = report(&[7], &[]);
        let rebound = report(&[], &[(7, 90_000_000), (9, 50_000_000)]);
        let other = report(&[], &[(9, 30_000_000)]);
        let (mut intended, mut sent) = (Recorder::new(), Recorder::new());
        let n = record_late_firsts(&[crashed, rebound, other], &mut intended, &mut sent);
        assert_eq!(n, 1);
        assert_eq!(intended.summary().count, 1);
        let us = intended.summary().p50_us;
        assert!(
            (28_000.0..32_000.0).contains(&us),
            "29 ms from intended: {us}"
        );
    }
}
