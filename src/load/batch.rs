//! An open-loop publisher of atomic batches (ADR-50, nats-server 2.12+).
//!
//! Only the commit asks for a reply: the server answers nothing else of an
//! atomic batch that jsbench needs (a refused batch is refused at its
//! commit too, pinned in tests/server_behaviour.rs), and a reply per
//! message would cost what the batch exists to save. Commits are answered
//! asynchronously, up to `window` outstanding, below the server's limit of
//! 50 batches in flight per stream.
//!
//! Paced, batch `b` leaves at its first message's intended time
//! `t0 + b·size/rate`, so the rate stays in messages per second whatever
//! the batch size, and the commit latency is taken from that instant: a
//! sender that falls behind is charged for it, whether it waited for its
//! own sending or for a commit slot (coordinated omission corrected). At
//! max rate there is no schedule to fall behind: a batch leaves once a
//! commit slot is free, and its intended time is its first message's send,
//! read after that wait, as the windowed and fast-batch publishers time a
//! send at max; a reply is then timed when the sender next polls for it,
//! up to one batch's sending late.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::profile::MsgId;
use crate::record::clock;
use crate::record::histogram::Recorder;
use crate::streams::batches::{BATCH_COMMIT, BATCH_ID, BATCH_SEQUENCE, CommittedBatch};

/// The server's largest atomic batch (its default `max_msgs`).
pub const MAX_ATOMIC_BATCH: usize = 1000;

#[derive(Debug, Clone)]
pub struct BatchConfig {
    /// Every message of every batch goes to this subject.
    pub subject: String,
    pub size: usize,
    /// Messages per second; `None` sends batches back to back.
    pub rate: Option<u64>,
    /// Start of the schedule and of the measurement, and the end of sending,
    /// ns on [`crate::record::clock`].
    pub t0_ns: u64,
    pub record_from_ns: u64,
    pub end_ns: u64,
    pub message_size: usize,
    /// `Unique` gives every message a Nats-Msg-Id of its own.
    pub msg_id: MsgId,
    /// Commits awaiting their PubAck before the sender waits.
    pub window: usize,
    pub ack_timeout: Duration,
}

/// A batch the server refused at its commit, or whose commit went
/// unanswered.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedBatch {
    pub batch: u64,
    /// The server's `err_code`; `None` when no answer came.
    pub code: Option<u64>,
    pub detail: String,
}

#[derive(Debug, Default)]
pub struct BatchReport {
    /// From each batch's first intended send (paced, its place in the
    /// schedule; at max rate, its send once a commit slot was free) to its
    /// commit's PubAck; batches intended before the warm-up ended are left
    /// out.
    pub commit_latency: Recorder,
    pub committed: Vec<CommittedBatch>,
    pub failed: Vec<FailedBatch>,
    pub batches_sent: u64,
    pub messages_sent: u64,
    /// Messages of committed batches intended after the warm-up, and when
    /// the last of their PubAcks came.
    pub measured_messages: u64,
    pub last_measured_ack_ns: u64,
    pub interrupted: bool,
}

impl BatchReport {
    /// Batches whose commit got no answer: their fate is unknown.
    pub fn unanswered(&self) -> Vec<u64> {
        self.failed
            .iter()
            .filter(|f| f.code.is_none())
            .map(|f| f.batch)
            .collect()
    }
}

/// `messages` acknowledged a second, from the end of the warm-up to the
/// later of the last measured ack and the end of sending: a paced batch
/// stands for the messages of the interval it opens, so a last batch
/// acknowledged early must not lift the rate above the target, and a
/// server that falls behind lowers it.
pub fn stored_rate(messages: u64, last_ack_ns: u64, record_from_ns: u64, end_ns: u64) -> f64 {
    let span = last_ack_ns.max(end_ns).saturating_sub(record_from_ns);
    if span == 0 {
        0.0
    } else {
        messages as f64 * 1e9 / span as f64
    }
}

/// When message `n` is intended: `t0 + n/rate` paced, now at max rate.
pub fn intended_ns(t0_ns: u64, n: u64, rate: Option<u64>) -> u64 {
    match rate {
        Some(rate) => t0_ns + (u128::from(n) * 1_000_000_000 / u128::from(rate.max(1))) as u64,
        None => clock::now_ns(),
    }
}

/// The parts of a commit's reply jsbench reads.
#[derive(Deserialize)]
struct Reply {
    #[serde(default)]
    seq: u64,
    batch: Option<String>,
    count: Option<u64>,
    error: Option<ApiError>,
}

/// The server's error in a reply, as atomic and fast batches both read it.
#[derive(Deserialize)]
pub(crate) struct ApiError {
    #[serde(default)]
    pub(crate) err_code: u64,
    #[serde(default)]
    pub(crate) description: String,
}

/// What a commit's future yields: the batch, its first message's intended
/// time, and the reply's payload or why none came (the batch is recorded
/// as failed with it).
type Answer = (u64, u64, Result<Bytes>);

/// Publishes batches of `config.size` from `t0_ns` until `end_ns` (or
/// `stop`), then waits for every outstanding commit.
pub async fn publish_batches(
    client: &Client,
    config: &BatchConfig,
    stop: &CancellationToken,
) -> Result<BatchReport> {
    if config.size == 0 || config.size > MAX_ATOMIC_BATCH {
        bail!(
            "an atomic batch holds 1 to {MAX_ATOMIC_BATCH} messages, not {}",
            config.size
        );
    }
    let payload = Bytes::from(vec![b'x'; config.message_size]);
    let payload = &payload;
    send_all(config, stop, |batch| {
        send_batch(client, config, batch, payload)
    })
    .await
}

/// The sender's loop: paces batches, holds them while `window` commits are
/// outstanding, and books each commit's answer. `send` sends a batch and
/// returns its commit's reply to come: the server's, or a test's that
/// answers when it is told to.
async fn send_all<S, F, C>(
    config: &BatchConfig,
    stop: &CancellationToken,
    mut send: S,
) -> Result<BatchReport>
where
    S: FnMut(u64) -> F,
    F: Future<Output = Result<C>>,
    C: Future<Output = Result<Bytes>>,
{
    let mut report = BatchReport {
        committed: Vec::with_capacity(1024),
        ..Default::default()
    };
    let mut pending = FuturesUnordered::new();
    let window = config.window.max(1);
    // The schedule starts at t0 at max rate too: the warm-up is timed from it.
    tokio::time::sleep_until(clock::instant_at(config.t0_ns).into()).await;
    for batch in 0u64.. {
        if stop.is_cancelled() {
            report.interrupted = true;
            break;
        }
        // Paced, the batch is due at its place in the schedule, fixed
        // before any wait: a wait for a commit slot past it is the sender
        // falling behind, charged to the batch. At max rate there is no
        // schedule to fall behind: the batch is due when a slot frees, and
        // the wait for one is the closed loop itself, so its time is read
        // after that wait (the send).
        let first_message = batch * config.size as u64;
        let scheduled = config
            .rate
            .map(|rate| intended_ns(config.t0_ns, first_message, Some(rate)));
        if let Some(scheduled) = scheduled {
            if scheduled >= config.end_ns {
                break;
            }
            let due = tokio::time::sleep_until(clock::instant_at(scheduled).into());
            tokio::pin!(due);
            loop {
                tokio::select! {
                    _ = &mut due => break,
                    Some(answer) = pending.next(), if !pending.is_empty() => {
                        settle(config, &mut report, answer);
                    }
                }
            }
        }
        while pending.len() >= window {
            if let Some(answer) = pending.next().await {
                settle(config, &mut report, answer);
            }
        }
        let intended = scheduled.unwrap_or_else(clock::now_ns);
        if intended >= config.end_ns {
            break;
        }
        let commit = send(batch).await?;
        let timeout = config.ack_timeout;
        pending.push(async move {
            let reply = match tokio::time::timeout(timeout, commit).await {
                Ok(reply) => reply,
                Err(_) => Err(anyhow::anyhow!("no PubAck within {timeout:?}")),
            };
            (batch, intended, reply)
        });
        report.batches_sent += 1;
        report.messages_sent += config.size as u64;
        while let Some(Some(answer)) = pending.next().now_or_never() {
            settle(config, &mut report, answer);
        }
    }
    while let Some(answer) = pending.next().await {
        settle(config, &mut report, answer);
    }
    Ok(report)
}

/// Sends every message of `batch` but the last, and returns the commit's
/// request (sent when first polled), which yields the reply's payload.
async fn send_batch(
    client: &Client,
    config: &BatchConfig,
    batch: u64,
    payload: &Bytes,
) -> Result<impl Future<Output = Result<Bytes>> + use<>> {
    let id = batch.to_string();
    // A `Subject` clones by reference count; a `String` would allocate per message.
    let subject = async_nats::Subject::from(config.subject.as_str());
    for index in 1..config.size {
        client
            .publish_with_headers(
                subject.clone(),
                headers(config, &id, index),
                payload.clone(),
            )
            .await
            .with_context(|| format!("sending message {index} of batch {batch}"))?;
    }
    let mut last = headers(config, &id, config.size);
    last.insert(BATCH_COMMIT, "1");
    let (client, payload) = (client.clone(), payload.clone());
    Ok(async move {
        client
            .request_with_headers(subject, last, payload)
            .await
            .map(|reply| reply.payload)
            .context("the commit's request failed")
    })
}

fn headers(config: &BatchConfig, id: &str, index: usize) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(BATCH_ID, id);
    let index = index.to_string();
    h.insert(BATCH_SEQUENCE, index.as_str());
    if config.msg_id == MsgId::Unique {
        h.insert(
            async_nats::header::NATS_MESSAGE_ID,
            format!("{id}.{index}").as_str(),
        );
    }
    h
}

/// Books a commit's answer: committed (with its PubAck's sequence and
/// count), refused (with the server's code) or unanswered.
fn settle(config: &BatchConfig, report: &mut BatchReport, (batch, intended, reply): Answer) {
    let now = clock::now_ns();
    let failed = |code, detail| FailedBatch {
        batch,
        code,
        detail,
    };
    let payload = match reply {
        Ok(payload) => payload,
        Err(why) => return report.failed.push(failed(None, format!("{why:#}"))),
    };
    let reply: Reply = match serde_json::from_slice(&payload) {
        Ok(reply) => reply,
        Err(e) => {
            let text = String::from_utf8_lossy(&payload).into_owned();
            return report
                .failed
                .push(failed(None, format!("an unreadable PubAck ({e}): {text}")));
        }
    };
    if let Some(e) = reply.error {
        let detail = format!("refused with {}: {}", e.err_code, e.description);
        return report.failed.push(failed(Some(e.err_code), detail));
    }
    if reply.batch.as_deref().and_then(|b| b.parse().ok()) != Some(batch) {
        let detail = format!("the PubAck named batch {:?}", reply.batch);
        return report.failed.push(failed(None, detail));
    }
    let count = reply.count.unwrap_or(0);
    report.committed.push(CommittedBatch {
        batch,
        last_seq: reply.seq,
        count,
    });
    if intended >= config.record_from_ns {
        report.commit_latency.record_between(intended, now);
        report.measured_messages += count;
        report.last_measured_ack_ns = report.last_measured_ack_ns.max(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_rate_runs_to_the_later_of_the_last_commit_and_the_end() {
        // Sending ran from 1 s to 1.5 s; the last batch committed early.
        let rate = |last_ack_ns| stored_rate(500, last_ack_ns, 1_000_000_000, 1_500_000_000);
        assert_eq!(rate(1_425_000_000), 1000.0);
        // Committing lagged past the end: the rate falls with it.
        assert_eq!(rate(2_000_000_000), 500.0);
    }

    /// Batches of one at `rate` (`None`: max) with one commit outstanding
    /// for 500 ms; batch 0's commit takes 300 ms and every later one 10 ms,
    /// so the batches after it wait for the slot.
    async fn one_slow_commit(rate: Option<u64>) -> BatchReport {
        let t0 = clock::now_ns();
        let config = BatchConfig {
            subject: "b".into(),
            size: 1,
            rate,
            t0_ns: t0,
            record_from_ns: t0,
            end_ns: t0 + 500_000_000,
            message_size: 1,
            msg_id: MsgId::None,
            window: 1,
            ack_timeout: Duration::from_secs(5),
        };
        let stop = CancellationToken::new();
        send_all(&config, &stop, |batch| async move {
            let takes = if batch == 0 { 300 } else { 10 };
            Ok(async move {
                tokio::time::sleep(Duration::from_millis(takes)).await;
                Ok(Bytes::from(format!(
                    r#"{{"seq":{},"batch":"{batch}","count":1}}"#,
                    batch + 1
                )))
            })
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn at_max_rate_a_commit_is_timed_from_its_send_not_from_the_wait_for_a_slot() {
        let report = one_slow_commit(None).await;
        let commits = report.commit_latency.histogram();
        assert!(report.committed.len() >= 3, "{:?}", report.committed);
        assert_eq!(commits.len(), report.committed.len() as u64);
        // Batch 0's 300 ms are its own. Batch 1 waited those 300 ms for
        // the slot before it was sent: with no schedule to fall behind,
        // that wait is the closed loop, not batch 1's commit (timed from
        // before it, batch 1 read over 300 ms too).
        let slow = commits.count_between(250_000_000, u64::MAX);
        assert_eq!(slow, 1, "max {} ms", commits.max() / 1_000_000);
    }

    #[tokio::test]
    async fn paced_a_commit_is_charged_the_wait_for_a_slot_past_its_schedule() {
        // A batch every 50 ms: batch 1, due at 50 ms, waits for batch 0's
        // slot until 300 ms. It fell behind its schedule, and its commit
        // is timed from 50 ms: over 250 ms, as batch 0's.
        let report = one_slow_commit(Some(20)).await;
        let commits = report.commit_latency.histogram();
        let slow = commits.count_between(250_000_000, u64::MAX);
        assert!(
            slow >= 2,
            "{slow} over 250 ms, max {} ms",
            commits.max() / 1_000_000
        );
    }

    #[test]
    fn unanswered_batches_are_those_without_a_server_code() {
        let failed = |batch, code| FailedBatch {
            batch,
            code,
            detail: String::new(),
        };
        let report = BatchReport {
            failed: vec![failed(1, Some(10071)), failed(2, None)],
            ..Default::default()
        };
        assert_eq!(report.unanswered(), vec![2]);
    }
}
