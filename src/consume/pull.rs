//! A client reading a durable pull consumer continuously, with explicit acks.
//!
//! Per message the hot path reads the clock, decodes the stamp, parses the
//! reply subject once (`info()`), records into task-local histograms and
//! ledger, and acks (fire-and-forget: the ack is queued on the connection,
//! never awaited as a round trip). Nothing is locked or formatted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::Client;
use async_nats::jetstream::{self, consumer::PullConsumer};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::histogram::Recorder;
use crate::ledger::{Event, LedgerShard};
use crate::stamp::Stamp;
use crate::timeline::Timeline;

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub index: usize,
    pub stream: String,
    pub durable: String,
    /// Messages per pull request.
    pub batch: usize,
    /// Deliveries of messages intended before this time are not recorded.
    pub record_from_ns: u64,
    pub timeline_origin_ns: u64,
    /// Sizes the ledger up front so the hot path never grows it.
    pub expected_messages: u64,
    /// JetStream API prefix (`$JS.API`, or a domain's `$JS.<domain>.API`).
    pub js_api_prefix: String,
}

/// Counters the run loop reads while consumers run; each is written by its
/// own consumer only.
#[derive(Debug, Default)]
pub struct ConsumerProgress {
    pub received: AtomicU64,
    /// Deliveries with delivery count 1: distinct messages seen.
    pub first_deliveries: AtomicU64,
}

#[derive(Debug, Clone)]
pub struct ConsumerReport {
    pub received: u64,
    pub redeliveries: u64,
    /// Payloads without a jsbench stamp.
    pub malformed: u64,
    /// Errors the message stream reported (missed heartbeats, pull errors).
    pub stream_errors: u64,
    pub ack_errors: u64,
    pub first_error: Option<String>,
    /// Receive time minus intended send time (first deliveries).
    pub e2e_intended: Recorder,
    /// Receive time minus actual send time (first deliveries).
    pub e2e_sent: Recorder,
    pub ledger: LedgerShard,
    pub timeline: Timeline,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// Reads the durable until `stop` is cancelled.
pub async fn run(
    client: Client,
    config: ConsumerConfig,
    progress: Arc<ConsumerProgress>,
    stop: CancellationToken,
) -> Result<ConsumerReport> {
    let js = jetstream::with_prefix(client.clone(), &config.js_api_prefix);
    let consumer: PullConsumer = js
        .get_consumer_from_stream(&config.durable, &config.stream)
        .await
        .with_context(|| format!("binding to durable consumer {}", config.durable))?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(config.batch)
        .heartbeat(Duration::from_secs(5))
        .expires(Duration::from_secs(30))
        .messages()
        .await
        .with_context(|| format!("starting to consume {}", config.durable))?;

    let mut report = ConsumerReport {
        received: 0,
        redeliveries: 0,
        malformed: 0,
        stream_errors: 0,
        ack_errors: 0,
        first_error: None,
        e2e_intended: Recorder::new(),
        e2e_sent: Recorder::new(),
        ledger: LedgerShard::with_capacity(
            config.expected_messages,
            &[Event::Delivered, Event::Acked],
        ),
        timeline: Timeline::per_second(config.timeline_origin_ns),
        first_ns: 0,
        last_ns: 0,
    };

    let mut first_deliveries = 0u64;
    loop {
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            next = messages.next() => next,
        };
        let message = match next {
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                report.stream_errors += 1;
                report
                    .first_error
                    .get_or_insert_with(|| format!("consume: {e}"));
                continue;
            }
            None => break,
        };
        let now = clock::now_ns();
        let info = match message.info() {
            Ok(info) => info,
            Err(e) => {
                report.malformed += 1;
                report
                    .first_error
                    .get_or_insert_with(|| format!("unreadable reply subject: {e}"));
                continue;
            }
        };
        let seq = info.stream_sequence;
        let first = info.delivered <= 1;
        report.ledger.mark(seq, Event::Delivered);
        report.received += 1;
        if report.first_ns == 0 {
            report.first_ns = now;
        }
        report.last_ns = now;
        report.timeline.mark(now);
        if first {
            first_deliveries += 1;
            progress
                .first_deliveries
                .store(first_deliveries, Ordering::Relaxed);
        } else {
            report.redeliveries += 1;
        }
        progress.received.store(report.received, Ordering::Relaxed);

        match Stamp::read(&message.payload) {
            Some(stamp) if first && stamp.intended_ns >= config.record_from_ns => {
                report.e2e_intended.record_between(stamp.intended_ns, now);
                report.e2e_sent.record_between(stamp.sent_ns, now);
            }
            Some(_) => {}
            None => report.malformed += 1,
        }

        match message.ack().await {
            Ok(()) => report.ledger.mark(seq, Event::Acked),
            Err(e) => {
                report.ack_errors += 1;
                report
                    .first_error
                    .get_or_insert_with(|| format!("ack: {e}"));
            }
        }
    }
    // Queued acks reach the server before the report is handed over.
    let _ = client.flush().await;
    Ok(report)
}
