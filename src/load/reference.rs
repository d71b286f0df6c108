//! Reference publishers: the shortest loops a user of async-nats would
//! write, run beside jsbench's publisher with the same connection count,
//! window, size and ids. In `max` mode they show whether jsbench's own
//! publisher, not the server, sets the limit.

use std::time::{Duration, Instant};

use anyhow::Result;
use async_nats::Client;
use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use crate::profile::MsgId;

#[derive(Debug, Clone, Default)]
pub struct ReferenceReport {
    pub sent: u64,
    /// PubAcks received (JetStream reference only).
    pub acked: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
}

/// What a reference loop publishes, and for how long.
#[derive(Debug, Clone)]
pub struct ReferenceConfig {
    pub subject: String,
    pub size: usize,
    /// Outstanding PubAcks (JetStream reference).
    pub window: usize,
    pub msg_id: MsgId,
    pub id_prefix: String,
    pub duration: Duration,
}

/// `js.send_publish()` and await the `PublishAckFuture`s, keeping at most
/// `window` outstanding, until `duration` has passed.
pub async fn minimal_jetstream(
    client: Client,
    config: ReferenceConfig,
    stop: CancellationToken,
) -> Result<ReferenceReport> {
    let ReferenceConfig {
        subject,
        size,
        window,
        msg_id,
        id_prefix,
        duration,
    } = config;
    // The context's in-flight limit must exceed the window, or publish
    // blocks forever once it is reached (NOTES-async-nats.md).
    let js = jetstream::ContextBuilder::new()
        .max_ack_inflight(window + 1)
        .build(client.clone());
    let payload = Bytes::from(vec![b'.'; size]);
    let mut report = ReferenceReport::default();
    let mut inflight = FuturesUnordered::new();
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < duration && !stop.is_cancelled() {
        while inflight.len() < window {
            let mut message = PublishMessage::build().payload(payload.clone());
            if msg_id == MsgId::Unique {
                message = message.message_id(format!("{id_prefix}{n}"));
            }
            n += 1;
            match js.send_publish(subject.clone(), message).await {
                Ok(ack) => {
                    inflight.push(ack.into_future());
                    report.sent += 1;
                }
                Err(e) => {
                    report.errors += 1;
                    report.first_error.get_or_insert(e.to_string());
                    break;
                }
            }
        }
        match inflight.next().await {
            Some(Ok(_)) => report.acked += 1,
            Some(Err(e)) => {
                report.errors += 1;
                report.first_error.get_or_insert(e.to_string());
            }
            None => break,
        }
    }
    while let Some(result) = inflight.next().await {
        match result {
            Ok(_) => report.acked += 1,
            Err(e) => {
                report.errors += 1;
                report.first_error.get_or_insert(e.to_string());
            }
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Core NATS publish to a subject no stream captures, until `duration` has
/// passed: the client's raw ceiling, with no persistence and no acks.
pub async fn core(
    client: Client,
    config: ReferenceConfig,
    stop: CancellationToken,
) -> Result<ReferenceReport> {
    let ReferenceConfig {
        subject,
        size,
        duration,
        ..
    } = config;
    let payload = Bytes::from(vec![b'.'; size]);
    let mut report = ReferenceReport::default();
    let started = Instant::now();
    while started.elapsed() < duration && !stop.is_cancelled() {
        // Check the clock every 256 messages: a publish is cheaper than a
        // clock read here.
        for _ in 0..256 {
            if let Err(e) = client.publish(subject.clone(), payload.clone()).await {
                report.errors += 1;
                report.first_error.get_or_insert(e.to_string());
                break;
            }
            report.sent += 1;
        }
    }
    client.flush().await?;
    report.elapsed = started.elapsed();
    Ok(report)
}
