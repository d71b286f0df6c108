//! Reference publishers, run beside jsbench's publisher with the same
//! connection count, window, size and ids, and timed by the same rule
//! (first send to last send: the PubAcks still out when the last send
//! leaves are awaited outside the span, as jsbench's are):
//!
//! - [`raw`]: jsbench's own path without its measurement: the same thread
//!   placement, the same reply subjects to one wildcard inbox, the same
//!   window, and no stamps kept, no ledger, no histograms. What jsbench's
//!   publisher reaches against it is what its recording costs, and whether
//!   the load generator, not the server, sets the limit.
//! - [`idiomatic`]: the loop a user of async-nats writes (`send_publish`,
//!   await the PubAck futures, a `format!`-built id), on the main runtime:
//!   what jsbench gains over the obvious client code.
//! - [`core`]: core NATS publish to no stream: the client's ceiling with
//!   no persistence at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_nats::jetstream::{self, message::PublishMessage};
use async_nats::{Client, HeaderMap, Subject};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{IdBuilder, MessageBuilder};
use crate::profile::MsgId;
use crate::record::stamp::Stamp;

#[derive(Debug, Clone, Default)]
pub struct ReferenceReport {
    pub sent: u64,
    /// PubAcks received (JetStream references only).
    pub acked: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// From the first send to the last: `sent` sends span `sent - 1`
    /// intervals of it.
    pub span: Duration,
}

impl ReferenceReport {
    fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        self.first_error.get_or_insert(e.to_string());
    }

    /// A PubAck's future come back: acked, or an error.
    fn answered<T, E: std::fmt::Display>(&mut self, result: Result<T, E>) {
        match result {
            Ok(_) => self.acked += 1,
            Err(e) => self.error(e),
        }
    }
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
pub async fn idiomatic(
    client: Client,
    config: ReferenceConfig,
    stop: CancellationToken,
) -> Result<ReferenceReport> {
    // The context's in-flight limit must exceed the window, or publish
    // blocks forever once it is reached (NOTES-async-nats.md).
    let js = jetstream::ContextBuilder::new()
        .max_ack_inflight(config.window + 1)
        .build(client.clone());
    let payload = Bytes::from(vec![b'.'; config.size]);
    let mut report = ReferenceReport::default();
    let mut inflight = FuturesUnordered::new();
    let started = Instant::now();
    let mut last_send = started;
    let mut n = 0u64;
    while started.elapsed() < config.duration && !stop.is_cancelled() {
        while inflight.len() < config.window {
            let mut message = PublishMessage::build().payload(payload.clone());
            if config.msg_id == MsgId::Unique {
                message = message.message_id(format!("{}{n}", config.id_prefix));
            }
            n += 1;
            match js.send_publish(config.subject.clone(), message).await {
                Ok(ack) => {
                    last_send = Instant::now();
                    inflight.push(ack.into_future());
                    report.sent += 1;
                }
                Err(e) => {
                    report.error(e);
                    break;
                }
            }
        }
        match inflight.next().await {
            Some(result) => report.answered(result),
            None => break,
        }
    }
    report.span = last_send.duration_since(started);
    while let Some(result) = inflight.next().await {
        report.answered(result);
    }
    Ok(report)
}

/// jsbench's publishing path without its measurement, on a thread of its
/// own as jsbench's publisher at `max` runs: publishes with a reply to
/// `<inbox>.<n>` (the same [`MessageBuilder`]), a reader on the same thread
/// counting PubAcks into the window, until `duration` has passed.
pub async fn raw(
    client: Client,
    config: ReferenceConfig,
    stop: CancellationToken,
) -> Result<ReferenceReport> {
    let (inbox, subscription) = super::publisher::subscribe_acks(&client).await?;
    let thread = std::thread::Builder::new()
        .name("jsb-raw-ref".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime builds");
            runtime.block_on(raw_loop(client, subscription, inbox, config, stop))
        })
        .context("starting the raw reference's thread")?;
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .context("joining the raw reference's thread")?
        .map_err(|_| anyhow::anyhow!("the raw reference's thread panicked"))
}

async fn raw_loop(
    client: Client,
    mut subscription: async_nats::Subscriber,
    inbox: String,
    config: ReferenceConfig,
    stop: CancellationToken,
) -> ReferenceReport {
    let answered = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let room = Arc::new(Notify::new());
    let reader = {
        let (answered, errors, room) = (answered.clone(), errors.clone(), room.clone());
        tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                // A PubAck is `{"stream":..,"seq":..}`; an error names one.
                if message.payload.windows(7).any(|w| w == b"\"error\"") {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                answered.fetch_add(1, Ordering::Release);
                room.notify_one();
            }
        })
    };
    let subject = Subject::from(config.subject.as_str());
    let mut builder = MessageBuilder::new(&inbox);
    let mut ids = IdBuilder::new(&config.id_prefix);
    let mut report = ReferenceReport::default();
    let started = Instant::now();
    let mut last_send = started;
    while started.elapsed() < config.duration && !stop.is_cancelled() {
        while report.sent - answered.load(Ordering::Acquire) >= config.window as u64 {
            room.notified().await;
        }
        let (payload, reply) = builder.build(Stamp::default(), report.sent, config.size);
        let result = if config.msg_id == MsgId::Unique {
            let mut headers = HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, ids.value(report.sent));
            client
                .publish_with_reply_and_headers(subject.clone(), reply, headers, payload)
                .await
        } else {
            client
                .publish_with_reply(subject.clone(), reply, payload)
                .await
        };
        if let Err(e) = result {
            report.error(e);
            break;
        }
        last_send = Instant::now();
        report.sent += 1;
    }
    report.span = last_send.duration_since(started);
    let _ = client.flush().await;
    // The PubAcks still out: awaited outside the span, as jsbench's are.
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        while answered.load(Ordering::Acquire) < report.sent {
            room.notified().await;
        }
    })
    .await;
    reader.abort();
    let answered = answered.load(Ordering::Acquire);
    report.errors += errors.load(Ordering::Relaxed);
    report.acked = answered.saturating_sub(errors.load(Ordering::Relaxed));
    if drained.is_err() {
        report
            .first_error
            .get_or_insert(format!("{} PubAcks never came", report.sent - answered));
    }
    report
}

/// Core NATS publish to a subject no stream captures, until `duration` has
/// passed: the client's ceiling, with no persistence and no acks.
pub async fn core(
    client: Client,
    config: ReferenceConfig,
    stop: CancellationToken,
) -> Result<ReferenceReport> {
    let payload = Bytes::from(vec![b'.'; config.size]);
    let mut report = ReferenceReport::default();
    let started = Instant::now();
    let mut last_send = started;
    while started.elapsed() < config.duration && !stop.is_cancelled() {
        // Check the clock every 256 messages: a publish is cheaper than a
        // clock read here.
        for _ in 0..256 {
            if let Err(e) = client
                .publish(config.subject.clone(), payload.clone())
                .await
            {
                report.error(e);
                break;
            }
            report.sent += 1;
        }
        last_send = Instant::now();
    }
    report.span = last_send.duration_since(started);
    client.flush().await?;
    Ok(report)
}
