//! Replay consumers: a fresh consumer with a deliver and a replay policy,
//! read until the last message its policy selects has arrived, with every
//! delivery logged.
//!
//! The log keeps, per delivery, the stream sequence, the server's timestamp
//! (what original pacing reproduces), the receive time and the server's
//! pending count, so the scenario can check the replayed set against the
//! recording and measure pacing afterwards. Per delivery the loop reads the
//! clock once, parses the reply subject once and appends 40 bytes to a log
//! sized up front; a durable's ack is a queued publish, not a round trip.
//!
//! Reading stops `settle` after the target sequence arrived (long enough to
//! catch a delivery that should not have come), after `idle` without any
//! delivery, or on Ctrl-C.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use async_nats::Client;
use async_nats::jetstream::consumer::{self, DeliverPolicy, ReplayPolicy, pull, push};
use async_nats::jetstream::{self, Message};
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::recording::origin;
use crate::profile::{REPLAY_MAX_ACK_PENDING, ReplayPace, ReplayReader};
use crate::record::clock;
use crate::record::stamp::Stamp;
use crate::record::timeline::Timeline;

/// Messages per pull request of a durable replay.
const PULL_BATCH: usize = 500;

/// How long the server may take, once the client is done, to show a
/// durable with nothing pending (fire-and-forget acks land later).
const SETTLE_SERVER: Duration = Duration::from_secs(3);

/// One replay to read.
#[derive(Debug, Clone)]
pub struct ReplaySpec {
    pub reader: ReplayReader,
    pub stream: String,
    /// The durable's name, or the ordered consumer's.
    pub name: String,
    pub deliver: DeliverPolicy,
    pub pace: ReplayPace,
    /// A filter subject (`last_per_subject` needs one).
    pub filter: Option<String>,
    /// Read until a message with at least this sequence arrived: 0 when
    /// nothing is expected, `u64::MAX` while not yet known (a publisher is
    /// still appending); the scenario sends the final value when it knows it.
    pub until_seq: watch::Receiver<u64>,
    /// How long to keep reading after the target arrived.
    pub settle: Duration,
    /// Give up after this long without a delivery.
    pub idle: Duration,
    /// Deliveries expected, to size the log.
    pub capacity: usize,
}

/// One delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub seq: u64,
    /// The server's timestamp of the message, ns since the epoch.
    pub published_ns: u64,
    /// When jsbench received it, ns on [`crate::record::clock`].
    pub received_ns: u64,
    /// Messages the server still had pending for the consumer after this one.
    pub pending: u64,
    /// The stamp's origin; `u64::MAX` without a stamp.
    pub origin: u64,
}

/// How reading ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum End {
    /// The target arrived and the settle time passed.
    Reached,
    /// No delivery for `idle` before the target arrived.
    Stalled,
    Interrupted,
    /// The consumer's message stream ended (what a log says until
    /// reading ends otherwise).
    #[default]
    Closed,
}

/// Everything one replay delivered.
#[derive(Debug, Clone, Default)]
pub struct ReplayLog {
    /// When the consumer was asked for, ns on [`crate::record::clock`]: catching
    /// up includes creating the consumer.
    pub requested_ns: u64,
    pub deliveries: Vec<Delivery>,
    pub bytes: u64,
    /// Deliveries without a jsbench stamp.
    pub malformed: u64,
    /// Deliveries the server marked as a redelivery.
    pub redelivered: u64,
    /// Errors the consumer's stream reported and survived (first few).
    pub errors: Vec<String>,
    pub end: End,
    /// A durable's `num_pending` and `num_ack_pending` once reading ended.
    pub server_state: Option<(u64, usize)>,
    /// Deliveries per second since `requested_ns`.
    pub timeline: Timeline,
}

/// The consumer's deliveries, its errors named by the reader.
type Source = BoxStream<'static, Result<Message, String>>;

/// Creates the consumer and reads it as `spec` says. `client` is the
/// connection `js` runs on (the ordered consumer's inbox lives there).
pub async fn replay(
    client: &Client,
    js: &jetstream::Context,
    spec: ReplaySpec,
    stop: CancellationToken,
) -> Result<ReplayLog> {
    open(client, js, spec).await?.read(stop).await
}

/// A replay consumer created and subscribed, not read yet: a `new`
/// consumer must exist before the messages it is to deliver are published.
pub struct Opened {
    client: Client,
    stream: jetstream::stream::Stream,
    spec: ReplaySpec,
    source: Source,
    durable: Option<consumer::PullConsumer>,
    requested_ns: u64,
}

/// Creates the consumer `spec` describes and subscribes to its deliveries.
pub async fn open(client: &Client, js: &jetstream::Context, spec: ReplaySpec) -> Result<Opened> {
    let stream = js
        .get_stream(&spec.stream)
        .await
        .with_context(|| format!("opening stream {}", spec.stream))?;
    let requested_ns = clock::now_ns();
    let replay_policy = match spec.pace {
        ReplayPace::Instant => ReplayPolicy::Instant,
        ReplayPace::Original => ReplayPolicy::Original,
    };
    let (source, durable) = match spec.reader {
        ReplayReader::Ordered => {
            let consumer = stream
                .create_consumer(push::OrderedConfig {
                    deliver_subject: client.new_inbox(),
                    name: Some(spec.name.clone()),
                    filter_subject: spec.filter.clone().unwrap_or_default(),
                    deliver_policy: spec.deliver,
                    replay_policy,
                    ..Default::default()
                })
                .await
                .with_context(|| format!("creating ordered consumer {}", spec.name))?;
            let messages = consumer
                .messages()
                .await
                .with_context(|| format!("reading ordered consumer {}", spec.name))?;
            let named = messages.map(|r| r.map_err(|e| format!("ordered: {e}")));
            (named.boxed(), None)
        }
        ReplayReader::Pull => {
            let consumer: consumer::PullConsumer = stream
                .create_consumer(pull::Config {
                    durable_name: Some(spec.name.clone()),
                    filter_subject: spec.filter.clone().unwrap_or_default(),
                    deliver_policy: spec.deliver,
                    replay_policy,
                    ack_policy: consumer::AckPolicy::Explicit,
                    max_ack_pending: REPLAY_MAX_ACK_PENDING,
                    ..Default::default()
                })
                .await
                .with_context(|| format!("creating durable consumer {}", spec.name))?;
            let messages = consumer
                .stream()
                .max_messages_per_batch(PULL_BATCH)
                .heartbeat(Duration::from_secs(5))
                .expires(Duration::from_secs(30))
                .messages()
                .await
                .with_context(|| format!("reading durable consumer {}", spec.name))?;
            let named = messages.map(|r| r.map_err(|e| format!("pull: {e}")));
            (named.boxed(), Some(consumer))
        }
    };
    Ok(Opened {
        client: client.clone(),
        stream,
        spec,
        source,
        durable,
        requested_ns,
    })
}

impl Opened {
    /// Reads until the target arrived (and `settle` passed), `idle` without
    /// a delivery, or `stop`; then deletes the consumer, even after an error.
    pub async fn read(self, stop: CancellationToken) -> Result<ReplayLog> {
        let Opened {
            client,
            stream,
            mut spec,
            mut source,
            durable,
            requested_ns,
        } = self;
        let mut log = read_log(&mut spec, &mut source, requested_ns, stop).await;
        drop(source);
        let _ = client.flush().await;
        if let (Ok(log), Some(mut durable)) = (&mut log, durable) {
            log.server_state = settled(&mut durable).await;
        }
        // The consumer is done, whatever the read's fate. The recorded
        // stream outlives it (every replay of the scenario reads it), so
        // without this each replay's durable would stay on it to the end.
        // A failed delete only leaves it to the stream's deletion, which
        // the scenario's scope makes whatever happens (or, ordered, to its
        // inactivity threshold): no later replay reads it, each has its own.
        let _ = stream.delete_consumer(&spec.name).await;
        log
    }
}

async fn read_log(
    spec: &mut ReplaySpec,
    source: &mut Source,
    requested_ns: u64,
    stop: CancellationToken,
) -> Result<ReplayLog> {
    let mut log = ReplayLog {
        requested_ns,
        deliveries: Vec::with_capacity(spec.capacity),
        timeline: Timeline::per_second(requested_ns),
        ..ReplayLog::default()
    };
    let ack = spec.reader == ReplayReader::Pull;
    let mut highest = 0u64;
    let mut reached: Option<Instant> = None;
    // The last delivery's receive time: the idle deadline runs from it.
    let mut last_ns = requested_ns;
    loop {
        let target = *spec.until_seq.borrow_and_update();
        if reached.is_none() && (target == 0 || (highest >= target && target != u64::MAX)) {
            reached = Some(Instant::now());
        }
        let deadline = match reached {
            Some(at) => at + spec.settle,
            None => clock::instant_at(last_ns) + spec.idle,
        };
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => {
                log.end = End::Interrupted;
                break;
            }
            // A new target: check it against what has arrived already.
            Ok(()) = spec.until_seq.changed() => continue,
            next = tokio::time::timeout_at(deadline.into(), source.next()) => next,
        };
        let message = match next {
            Err(_) => {
                log.end = if reached.is_some() {
                    End::Reached
                } else {
                    End::Stalled
                };
                break;
            }
            Ok(None) => {
                log.end = End::Closed;
                break;
            }
            Ok(Some(Err(e))) => {
                if log.errors.len() < 5 {
                    log.errors.push(e);
                }
                continue;
            }
            Ok(Some(Ok(message))) => message,
        };
        let received_ns = clock::now_ns();
        last_ns = received_ns;
        let info = match message.info() {
            Ok(info) => info,
            Err(e) => {
                log.malformed += 1;
                if log.errors.len() < 5 {
                    log.errors.push(format!("a delivery without metadata: {e}"));
                }
                continue;
            }
        };
        let stamp = Stamp::read(&message.payload);
        if stamp.is_none() {
            log.malformed += 1;
        }
        if info.delivered > 1 {
            log.redelivered += 1;
        }
        highest = highest.max(info.stream_sequence);
        log.deliveries.push(Delivery {
            seq: info.stream_sequence,
            published_ns: info.published.unix_timestamp_nanos().max(0) as u64,
            received_ns,
            pending: info.pending,
            origin: stamp.as_ref().map_or(u64::MAX, origin),
        });
        log.bytes += message.payload.len() as u64;
        log.timeline.mark(received_ns);
        if ack && let Err(e) = message.ack().await {
            return Err(anyhow!("acking sequence {}: {e}", info.stream_sequence));
        }
    }
    Ok(log)
}

/// The durable's pending counts once nothing is pending, or after
/// [`SETTLE_SERVER`].
async fn settled(durable: &mut consumer::PullConsumer) -> Option<(u64, usize)> {
    let until = Instant::now() + SETTLE_SERVER;
    loop {
        let state = durable
            .get_info()
            .await
            .ok()
            .map(|i| (i.num_pending, i.num_ack_pending));
        if state.is_some_and(|s| s == (0, 0)) || Instant::now() >= until {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
