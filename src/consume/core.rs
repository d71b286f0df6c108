//! The core-NATS baseline's reader: a plain subscription to a subject no
//! stream captures, so the same stamps on the same schedule measure the
//! transport alone, and what JetStream adds shows beside it in one run.
//!
//! The subscriber answers each message on its reply subject with a
//! PubAck-shaped `{"stream":"core","seq":N}`, `N` its own receive count:
//! the publisher's window, its missing-answer timeout and its ledger then
//! work unchanged, and a message core NATS dropped (at most once) shows as
//! a publish nobody answered. The "PubAck" latency of a core variant is
//! that round trip: publisher to subscriber and back.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use async_nats::Client;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{ConsumerConfig, ConsumerProgress, ConsumerReport};
use crate::record::clock;
use crate::record::ledger::Event;
use crate::record::stamp::Stamp;

/// Reads `subject` until `stop` is cancelled.
pub async fn run(
    client: Client,
    subject: String,
    config: ConsumerConfig,
    progress: Arc<ConsumerProgress>,
    stop: CancellationToken,
) -> Result<ConsumerReport> {
    let mut subscription = client
        .subscribe(subject.clone())
        .await
        .with_context(|| format!("subscribing to {subject}"))?;
    client
        .flush()
        .await
        .context("flushing the core subscription")?;
    let mut report = ConsumerReport::empty(&config);
    let mut seq = 0u64;
    loop {
        let message = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            m = subscription.next() => m,
        };
        let Some(message) = message else { break };
        let now = clock::now_ns();
        let Some(stamp) = Stamp::read(&message.payload) else {
            report.malformed += 1;
            continue;
        };
        seq += 1;
        if let Some(reply) = message.reply {
            let answer = format!("{{\"stream\":\"core\",\"seq\":{seq}}}");
            if let Err(e) = client.publish(reply, answer.into()).await {
                report.ack_errors += 1;
                report.error(|| format!("answering a core message: {e}"));
            }
        }
        report.ledger.mark(seq, Event::Delivered);
        report.ledger.mark(seq, Event::Acked);
        report.first_deliveries.insert(seq);
        report.note_delivery(now);
        if stamp.intended_ns >= config.record_from_ns {
            crate::system::live::record_e2e(now.saturating_sub(stamp.intended_ns));
            report.e2e_intended.record_between(stamp.intended_ns, now);
            report.e2e_sent.record_between(stamp.sent_ns, now);
        }
        progress.received.store(report.received, Ordering::Relaxed);
        progress.answered.store(report.received, Ordering::Relaxed);
        progress.finished.store(report.received, Ordering::Relaxed);
    }
    let _ = client.flush().await;
    Ok(report)
}
