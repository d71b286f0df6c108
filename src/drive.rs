//! The shared mechanics of a publish (and consume) variant: connect, start
//! consumers, run open-loop publishers, drain, stop, merge.
//!
//! Scenarios provision their stream (and durable), call [`drive`] and then
//! measure and verify from the [`DriveOutcome`]; none of them repeats this.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use async_nats::jetstream;
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::consume::{self, ConsumerConfig, ConsumerProgress, ConsumerReport};
use crate::cpu;
use crate::histogram::Recorder;
use crate::ledger::{LedgerCounts, LedgerShard};
use crate::load::{AckReport, Publisher, PublisherConfig, RetryPlan, SendReport};
use crate::profile::{ConsumerPlan, PublishPlan, late_retry_margin};
use crate::scenario::RunContext;
use crate::schedule::Schedule;
use crate::timeline::Timeline;

/// One variant's load.
#[derive(Debug, Clone)]
pub struct DriveSpec {
    /// Shown on the progress bar.
    pub label: String,
    /// The stream's subjects, published to round-robin by message number.
    pub subjects: Vec<String>,
    pub stream: String,
    pub publish: PublishPlan,
    /// The durable to read, and how; `None` publishes only.
    pub consumer: Option<(String, ConsumerPlan)>,
    /// Total msg/s; `None` publishes as fast as the server accepts.
    pub rate: Option<u64>,
    pub warmup: Duration,
    pub duration: Duration,
    pub drain_timeout: Duration,
    pub msg_id_prefix: String,
    /// Seeds sizes and retry choices.
    pub seed: u64,
}

impl DriveSpec {
    /// Messages a paced variant publishes, warm-up included; 0 when unpaced.
    pub fn messages(&self) -> u64 {
        match self.rate {
            Some(rate) => ((rate as f64) * (self.warmup + self.duration).as_secs_f64())
                .round()
                .max(1.0) as u64,
            None => 0,
        }
    }
}

/// Server-side view of the durable at the end of the drain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerState {
    pub num_pending: u64,
    pub num_ack_pending: usize,
    pub num_redelivered: usize,
}

/// Everything measured while driving one variant, merged across tasks.
#[derive(Debug)]
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
    /// CPU jsbench used from the start of publishing to the last PubAck.
    pub client_cpu: Duration,
    /// CPU the server used over the same span, when it can be measured.
    pub server_cpu: Option<Duration>,
    pub interrupted: bool,
    /// Errors the tasks reported; each makes the variant suspect.
    pub errors: Vec<String>,
}

impl DriveOutcome {
    pub fn sent(&self) -> u64 {
        self.sends.iter().map(|s| s.sent).sum()
    }

    pub fn sent_bytes(&self) -> u64 {
        self.sends.iter().map(|s| s.bytes).sum()
    }

    /// A sum over the PubAck readers.
    pub fn acks_sum(&self, field: impl Fn(&AckReport) -> u64) -> u64 {
        self.acks.iter().map(field).sum()
    }

    /// A sum over the senders.
    pub fn sends_sum(&self, field: impl Fn(&SendReport) -> u64) -> u64 {
        self.sends.iter().map(field).sum()
    }

    /// The publishing span: first intended send to last actual send.
    pub fn publish_span(&self) -> Duration {
        let last = self.sends.iter().map(|s| s.last_sent_ns).max().unwrap_or(0);
        Duration::from_nanos(last.saturating_sub(self.t0_ns))
    }

    /// Achieved publish rate over the publishing span.
    pub fn publish_rate(&self) -> f64 {
        rate(self.sent(), self.publish_span())
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

fn rate(count: u64, span: Duration) -> f64 {
    if span.is_zero() {
        0.0
    } else {
        count as f64 / span.as_secs_f64()
    }
}

/// Lead time between scheduling t0 and the first intended send, so every
/// publisher thread is up before its first message is due.
const LEAD_IN: Duration = Duration::from_millis(200);

/// The drain allowed after a Ctrl-C: enough for in-flight messages.
const INTERRUPTED_DRAIN: Duration = Duration::from_secs(2);

pub async fn drive(ctx: &RunContext, spec: &DriveSpec) -> Result<DriveOutcome> {
    let publishers = spec.publish.publishers;
    let consumers = spec.consumer.as_ref().map_or(0, |(_, c)| c.consumers);
    let messages = spec.messages();

    let connections = join_all(
        (0..consumers)
            .map(|i| format!("consumer-{i}"))
            .chain((0..publishers).map(|i| format!("publisher-{i}")))
            .map(|role| async move { ctx.connect.connect(&role).await }),
    )
    .await
    .into_iter()
    .collect::<Result<Vec<_>>>()?;
    let (consumer_clients, publisher_clients) = connections.split_at(consumers);

    let t0_ns = clock::now_ns() + LEAD_IN.as_nanos() as u64;
    let record_from_ns = t0_ns + spec.warmup.as_nanos() as u64;
    let end_ns = record_from_ns + spec.duration.as_nanos() as u64;

    let consumer_stop = CancellationToken::new();
    let mut consumer_progress = Vec::new();
    let mut consumer_tasks = Vec::new();
    if let Some((durable, plan)) = &spec.consumer {
        for (i, client) in consumer_clients.iter().enumerate() {
            let progress = Arc::new(ConsumerProgress::default());
            consumer_progress.push(progress.clone());
            let config = ConsumerConfig {
                index: i,
                stream: spec.stream.clone(),
                durable: durable.clone(),
                batch: plan.batch,
                record_from_ns,
                timeline_origin_ns: t0_ns,
                expected_messages: messages,
                js_api_prefix: ctx.connect.js_api.prefix(),
            };
            consumer_tasks.push(tokio::spawn(consume::run(
                client.clone(),
                config,
                progress,
                consumer_stop.clone(),
            )));
        }
    }

    let retries = RetryPlan {
        in_window: spec.publish.duplicates,
        late: spec.publish.late_duplicates,
        window: spec.publish.duplicate_window,
        late_margin: late_retry_margin(spec.publish.duplicate_window),
    };
    let client_cpu_start = cpu::own_cpu_time();
    let server_cpu = ctx.server_cpu.start();
    let publish_stop = ctx.stop.child_token();
    let mut running = Vec::new();
    for (i, client) in publisher_clients.iter().enumerate() {
        let config = PublisherConfig {
            index: i as u16,
            subjects: spec.subjects.clone(),
            message_size: spec.publish.message_size,
            schedule: Schedule {
                t0_ns,
                total_rate: spec.rate,
                stride: publishers as u64,
                offset: i as u64,
                total_messages: messages,
                end_ns,
            },
            window: spec.publish.pub_ack_window,
            msg_id: spec.publish.msg_id,
            msg_id_prefix: format!("{}-{i}-", spec.msg_id_prefix),
            headers: spec.publish.headers.clone(),
            retries,
            seed: spec.seed,
            record_from_ns,
            pub_ack_timeout: spec.publish.pub_ack_timeout,
            timeline_origin_ns: t0_ns,
        };
        running.push(Publisher::start(client.clone(), config, publish_stop.clone()).await?);
    }

    // Publish phase: show progress until every publisher has finished.
    let bar = ctx
        .progress
        .variant(&spec.label, spec.warmup + spec.duration + LEAD_IN);
    let sent_counters: Vec<_> = running.iter().map(|p| p.progress.clone()).collect();
    let received = || -> u64 {
        consumer_progress
            .iter()
            .map(|p| p.received.load(Ordering::Relaxed))
            .sum()
    };
    let first_deliveries = || -> u64 {
        consumer_progress
            .iter()
            .map(|p| p.first_deliveries.load(Ordering::Relaxed))
            .sum()
    };
    let started = Instant::now();
    let finishing = join_all(running.into_iter().map(Publisher::finish));
    tokio::pin!(finishing);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut last = (Instant::now(), 0u64);
    let results = loop {
        tokio::select! {
            results = &mut finishing => break results,
            _ = tick.tick() => {
                let sent: u64 = sent_counters.iter().map(|p| p.sent.load(Ordering::Relaxed)).sum();
                let now = Instant::now();
                let rate = (sent - last.1) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-3);
                last = (now, sent);
                bar.update(started.elapsed(), sent, received(), rate);
                if consumer_tasks.iter().any(|t| t.is_finished()) {
                    // A consumer ended on its own: it failed. Stop publishing.
                    publish_stop.cancel();
                }
            }
        }
    };
    let client_cpu = cpu::own_cpu_time().saturating_sub(client_cpu_start);
    let server_cpu = server_cpu.stop();
    let mut sends = Vec::new();
    let mut acks = Vec::new();
    for result in results {
        let (s, a) = result?;
        sends.push(s);
        acks.push(a);
    }
    let publish_end = Instant::now();

    // Drain: wait until every stored message was delivered once. Interrupted
    // runs still drain briefly, so their ledger is not a list of "lost"
    // messages that were merely in flight.
    let stored: u64 = acks
        .iter()
        .map(|a| a.acked + a.late_stored + a.retries_stored)
        .sum();
    let mut drained = spec.consumer.is_none();
    let mut server_state = None;
    if let Some((durable, _)) = &spec.consumer {
        bar.phase("draining");
        let mut deadline = publish_end + spec.drain_timeout;
        loop {
            if ctx.stop.is_cancelled() {
                deadline = deadline.min(publish_end + INTERRUPTED_DRAIN);
            }
            if Instant::now() >= deadline {
                break;
            }
            if first_deliveries() >= stored {
                drained = true;
                break;
            }
            if consumer_tasks.iter().any(|t| t.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let js = ctx.provisioner.jetstream();
        server_state = if drained {
            settled_state(js, &spec.stream, durable).await
        } else {
            current_state(js, &spec.stream, durable).await
        };
    }
    let drain_time = publish_end.elapsed();

    consumer_stop.cancel();
    let mut consumer_reports = Vec::new();
    let mut errors = Vec::new();
    for (i, task) in consumer_tasks.into_iter().enumerate() {
        match task.await.context("joining a consumer task")? {
            Ok(report) => consumer_reports.push(report),
            Err(e) => errors.push(format!("consumer {i}: {e:#}")),
        }
    }
    bar.finish();

    for (i, s) in sends.iter().enumerate() {
        for e in [&s.first_error, &s.stalled].into_iter().flatten() {
            errors.push(format!("publisher {i}: {e}"));
        }
    }
    for (i, a) in acks.iter().enumerate() {
        if let Some(e) = &a.first_error {
            errors.push(format!("publisher {i} PubAcks: {e}"));
        }
    }
    for (i, c) in consumer_reports.iter().enumerate() {
        if let Some(e) = &c.first_error {
            errors.push(format!("consumer {i}: {e}"));
        }
    }
    if consumers > 0 && consumer_reports.is_empty() {
        return Err(anyhow!("every consumer failed: {}", errors.join("; ")));
    }

    let mut outcome = merge(sends, acks, consumer_reports, t0_ns, record_from_ns);
    outcome.drained = drained;
    outcome.drain_time = drain_time;
    outcome.server_state = server_state;
    outcome.client_cpu = client_cpu;
    outcome.server_cpu = server_cpu;
    outcome.interrupted = ctx.stop.is_cancelled();
    outcome.errors = errors;
    Ok(outcome)
}

fn merge(
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
    let mut delivered_timeline = Timeline::per_second(t0_ns);
    for c in &consumers {
        e2e_intended.merge(&c.e2e_intended);
        e2e_sent.merge(&c.e2e_sent);
        ledger.merge(&c.ledger);
        delivered_timeline.merge(&c.timeline);
    }
    let mut counts = ledger.counts();
    counts.published = sends.iter().map(|s| s.sent).sum();
    counts.publish_errors = acks.iter().map(|a| a.errors + a.missing).sum();
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
        drained: false,
        drain_time: Duration::ZERO,
        server_state: None,
        client_cpu: Duration::ZERO,
        server_cpu: None,
        interrupted: false,
        errors: Vec::new(),
    }
}

async fn current_state(
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
) -> Option<ConsumerState> {
    let stream = js.get_stream(stream).await.ok()?;
    let consumer: jetstream::consumer::PullConsumer = stream.get_consumer(durable).await.ok()?;
    let info = consumer.get_info().await.ok()?;
    Some(ConsumerState {
        num_pending: info.num_pending,
        num_ack_pending: info.num_ack_pending,
        num_redelivered: info.num_redelivered,
    })
}

/// Consumer info lags fire-and-forget acks: poll briefly until the server
/// has processed them all.
async fn settled_state(
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
) -> Option<ConsumerState> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let state = current_state(js, stream, durable).await;
        let settled = state.is_some_and(|s| s.num_pending == 0 && s.num_ack_pending == 0);
        if settled || Instant::now() > deadline {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
