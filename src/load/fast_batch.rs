//! An open-loop publisher of fast-ingest batches (ADR-50's later
//! revisions, nats-server 2.14+, JetStream API level 4).
//!
//! # The protocol, as nats-server 2.15.1 speaks it
//!
//! Pinned in tests/server_behaviour.rs; read in the server's
//! `stream.go` (`getFastBatch`, `processJetStreamFastBatchMsg`) and
//! `jetstream_batching.go`.
//!
//! - The stream allows it with `allow_batched: true` (error 10205
//!   otherwise). No header carries the control state: each message's
//!   reply subject does, `<prefix>.<id>.<flow>.<gap>.<seq>.<op>.$FI`,
//!   where `id` is the batch id (at most 64 characters, 10207), `flow` the
//!   most messages the client allows between acks, `gap` `fail` or `ok`,
//!   `seq` the batch sequence from 1, and `op` 0 start (seq 1 only),
//!   1 append, 2 commit storing this message, 3 commit storing nothing
//!   (seq = last + 1), 4 ping (seq = highest sent; resends the last flow
//!   ack and reports a gap). A malformed subject gets 10206, a message of
//!   a batch the server does not know 10208. The client subscribes to
//!   `<prefix>.>` and every answer comes on the subject of the message
//!   that caused it.
//! - The start is answered with a flow ack `{"type":"ack","seq":0,
//!   "msgs":N}`: the client must wait for it. A start refused before the
//!   message is looked at (10205, 10206, 10211) gets a PubAck-shaped error
//!   instead; one refused by the message's checks (10077, a full stream
//!   with discard new) gets the flow ack first and the error after it.
//!   N is `min(500, flow)` for the stream's only open batch and 1 for any
//!   other, ramped by doubling towards `500 / open batches` and halved
//!   when more publishers arrive. Thereafter the server sends
//!   `{"type":"ack","seq":S,"msgs":N}` each time N more messages are
//!   persisted: with gap `fail`, every message up to S is stored.
//! - A gap (a sequence skipped) is reported at once as
//!   `{"type":"gap","last_seq":E,"seq":S}` (sequences E..S never
//!   arrived). With `fail` it ends the batch: its PubAck comes at once,
//!   counting up to the last sequence before the gap, and later messages
//!   get 10208. With `ok` the batch goes on. A message refused by a
//!   per-message check gets `{"type":"err","seq":S,"error":{...}}`.
//! - The commit's PubAck is `{"stream":..,"seq":L,"batch":id,"count":C}`:
//!   L the stream sequence of the batch's last stored message, C the
//!   batch sequence reached. Only the commit gets one.
//! - Limits: 1,000 open batches per stream and 50,000 per server (10211,
//!   both settable under `jetstream { limits { batch {...} } }`); a batch
//!   idle for 10 s is dropped without a word. There is no size limit.
//!
//! # How jsbench drives it
//!
//! One connection, one batch open at a time: batch `b` (its id is `b`)
//! holds `size` messages, the last committing it (op 2); the next batch
//! starts at once, while the previous commit's PubAck is on its way.
//! After each message the sender waits while `acked + N·outstanding ≤
//! sent` (ADR-50's rule, `outstanding` the profile's setting, N the
//! server's latest flow), pinging after a third of the ack timeout without
//! an answer and giving the batch up after the whole of it. Paced, message
//! `i` is intended at `t0 + i/rate`; ack latency runs from the intended
//! send of the message a flow ack names to its arrival, commit latency
//! from the batch's first intended send to its PubAck, so a sender held
//! back by the flow is charged for it. At max rate the intended time is
//! the send. Every payload carries the stamp whose message number the
//! audit ([`crate::streams::fast_batches`]) finds in the stream.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_nats::{Client, Subscriber};
use futures::{FutureExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::load::Composer;
use crate::load::batch::ApiError;
use crate::record::clock;
use crate::record::histogram::Recorder;
use crate::record::stamp::STAMP_LEN;
use crate::streams::fast_batches::FastBatchOutcome;

/// What the server does with a batch that skips a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GapMode {
    /// The gap ends the batch; what was acked is stored without holes.
    Fail,
    /// The gap is reported and the batch goes on.
    Ok,
}

impl GapMode {
    pub fn label(self) -> &'static str {
        match self {
            GapMode::Fail => "fail",
            GapMode::Ok => "ok",
        }
    }
}

/// Acks outstanding the ADR allows a client to choose (1 to 3).
pub const MAX_OUTSTANDING: u16 = 3;

#[derive(Debug, Clone)]
pub struct FastConfig {
    pub subject: String,
    /// Messages per batch, the last one committing it; at least 2.
    pub size: u64,
    /// The most messages the client allows between flow acks.
    pub flow: u16,
    /// Flow acks outstanding before the sender waits.
    pub outstanding: u16,
    pub gap: GapMode,
    /// Messages per second; `None` sends as fast as the flow allows.
    pub rate: Option<u64>,
    /// Start of the schedule, end of the warm-up, end of sending: ns on
    /// [`crate::record::clock`].
    pub t0_ns: u64,
    pub record_from_ns: u64,
    pub end_ns: u64,
    pub message_size: usize,
    /// `Some(prefix)`: every message carries the Nats-Msg-Id
    /// `<prefix><message number>`.
    pub msg_id_prefix: Option<String>,
    pub ack_timeout: Duration,
}

#[derive(Debug, Default)]
pub struct FastReport {
    /// Intended send of the message a flow ack or a PubAck names to the
    /// ack's arrival.
    pub ack_latency: Recorder,
    /// A batch's first intended send to its commit's PubAck.
    pub commit_latency: Recorder,
    /// How late each message after the warm-up left against its intended
    /// time (paced: the sender held back by the flow shows here).
    pub send_lag: Recorder,
    pub batches: Vec<FastBatchOutcome>,
    pub messages_sent: u64,
    /// Flow acks naming a message (a batch's start is answered by one
    /// naming none, not counted).
    pub flow_acks: u64,
    /// The server's flow (`msgs`) as first granted, lowest and highest seen.
    pub flow_first: u16,
    pub flow_min: u16,
    pub flow_max: u16,
    /// Times the sender stopped for outstanding acks, and pings sent.
    pub waits: u64,
    pub pings: u64,
    pub gaps: u64,
    pub errors: u64,
    /// Answers jsbench could not place (unknown batch, unreadable).
    pub strays: Vec<String>,
    /// Messages acknowledged by their batch's PubAck that were intended
    /// after the warm-up, and when the last of those PubAcks came.
    pub measured_messages: u64,
    pub last_measured_ack_ns: u64,
    /// CPU this whole process used from the first message intended after
    /// the warm-up to the last PubAck, and the messages sent in that span.
    pub client_cpu: Option<(Duration, u64)>,
    /// Why sending stopped before the end, if it did.
    pub stopped: Option<String>,
    pub interrupted: bool,
}

impl FastReport {
    /// Batches without a PubAck, refused or unanswered.
    pub fn failed(&self) -> impl Iterator<Item = &FastBatchOutcome> {
        self.batches.iter().filter(|b| b.commit.is_none())
    }
}

/// The parts of an answer jsbench reads: a flow ack, gap or error notice
/// (`type`), or a PubAck (no `type`, maybe an `error`).
#[derive(Deserialize)]
struct Answer {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    seq: u64,
    msgs: Option<u16>,
    last_seq: Option<u64>,
    count: Option<u64>,
    error: Option<ApiError>,
}

/// Publishes fast batches from `t0_ns` until `end_ns` (or `stop`), ends
/// the open batch without storing more, and waits for every PubAck.
pub async fn publish_fast(
    client: &Client,
    config: &FastConfig,
    stop: &CancellationToken,
) -> Result<FastReport> {
    if config.size < 2 || !(1..=MAX_OUTSTANDING).contains(&config.outstanding) || config.flow == 0 {
        bail!(
            "a fast batch needs a size of at least 2, a flow of 1 to 65535 and 1 to {MAX_OUTSTANDING} \
             acks outstanding, not {}, {} and {}",
            config.size,
            config.flow,
            config.outstanding
        );
    }
    if config.message_size < STAMP_LEN {
        bail!(
            "fast batch messages carry a {STAMP_LEN}-byte stamp the audit reads back; {} bytes is too small",
            config.message_size
        );
    }
    let inbox = client.new_inbox();
    let replies = client
        .subscribe(format!("{inbox}.>"))
        .await
        .context("subscribing to the fast batch control inbox")?;
    let mut f = Fast::new(client.clone(), config, inbox, replies)?;
    tokio::time::sleep_until(clock::instant_at(config.t0_ns).into()).await;
    loop {
        if stop.is_cancelled() {
            f.report.interrupted = true;
            break;
        }
        let n = f.report.messages_sent;
        let intended = crate::load::batch::intended_ns(config.t0_ns, n, config.rate);
        if intended >= config.end_ns || f.report.stopped.is_some() {
            break;
        }
        if config.rate.is_some() {
            f.answer_until(intended).await;
            if f.report.stopped.is_some() {
                break;
            }
        }
        f.send_next(intended).await?;
    }
    f.finish().await?;
    f.report.send_lag = f.composer.take_send_lag();
    if let Some(from) = f.first_measured {
        let used = crate::system::cpu::own_cpu_time().saturating_sub(f.cpu_from);
        f.report.client_cpu = Some((used, f.report.messages_sent - from));
    }
    Ok(f.report)
}

/// The sender's state between messages.
struct Fast<'a> {
    client: Client,
    config: &'a FastConfig,
    inbox: String,
    replies: Subscriber,
    composer: Composer,
    /// Batch sequence last sent in the open batch; 0 when none is open.
    seq: u64,
    /// The open batch's highest flow-acked sequence and current flow.
    acked: u64,
    flow: u16,
    /// The first message intended after the warm-up.
    first_measured: Option<u64>,
    cpu_from: Duration,
    /// Every message goes to this subject (a clone shares its bytes).
    subject: async_nats::Subject,
    /// Whether the open batch's first flow ack has come.
    granted: bool,
    /// Intended send times by message number modulo the ring's length.
    intended: Vec<u64>,
    report: FastReport,
}

const START: &str = ".0.$FI";
const APPEND: &str = ".1.$FI";
const COMMIT: &str = ".2.$FI";
const COMMIT_EOB: &str = ".3.$FI";
const PING: &str = ".4.$FI";

impl<'a> Fast<'a> {
    fn new(
        client: Client,
        config: &'a FastConfig,
        inbox: String,
        replies: Subscriber,
    ) -> Result<Self> {
        let composer = Composer::new(
            &inbox,
            config.msg_id_prefix.as_deref(),
            &[],
            0,
            config.record_from_ns,
            Recorder::new(),
        )?;
        // The sender never lets more than flow·outstanding messages of the
        // open batch go unacked (the server grants no more than the flow
        // asked for); twice that covers the batch settling behind it. An
        // ack for a slot reused since is not timed (`record_ack`).
        let ring = (usize::from(config.flow) * usize::from(config.outstanding) * 2 + 16)
            .next_power_of_two()
            .min(1 << 20);
        Ok(Fast {
            client,
            config,
            inbox,
            replies,
            composer,
            seq: 0,
            acked: 0,
            flow: 1,
            granted: false,
            first_measured: None,
            cpu_from: Duration::ZERO,
            subject: async_nats::Subject::from(config.subject.as_str()),
            intended: vec![0; ring],
            report: FastReport {
                batches: Vec::with_capacity(1024),
                ..Default::default()
            },
        })
    }

    /// `<inbox>.<batch>.<flow>.<gap>`: the reply prefix of batch `batch`.
    fn prefix(&self, batch: u64) -> String {
        let c = self.config;
        format!("{}.{batch}.{}.{}", self.inbox, c.flow, c.gap.label())
    }

    fn open_batch(&self) -> Option<u64> {
        (self.seq > 0).then(|| self.report.batches.len() as u64 - 1)
    }

    /// Sends the next message: the start of a new batch (waiting for the
    /// server's first flow ack), an append, or the commit; then waits while
    /// too many acks are outstanding.
    async fn send_next(&mut self, intended: u64) -> Result<()> {
        let n = self.report.messages_sent;
        let ring = self.intended.len();
        self.intended[n as usize % ring] = intended;
        if self.first_measured.is_none() && intended >= self.config.record_from_ns {
            self.first_measured = Some(n);
            self.cpu_from = crate::system::cpu::own_cpu_time();
        }
        if self.seq == 0 {
            let batch = self.report.batches.len() as u64;
            self.report.batches.push(FastBatchOutcome {
                batch,
                first_message: n,
                first_intended_ns: intended,
                ..Default::default()
            });
            let prefix = self.prefix(batch);
            self.composer.set_reply(&prefix, START);
            self.send(intended, n).await?;
            self.composer.set_reply(&prefix, APPEND);
            return self.await_start(batch).await;
        }
        let committing = self.seq + 1 == self.config.size;
        if committing {
            let prefix = self.prefix(self.open_batch().unwrap_or_default());
            self.composer.set_reply(&prefix, COMMIT);
        }
        self.send(intended, n).await?;
        if committing {
            self.seq = 0;
            return Ok(());
        }
        self.await_flow().await;
        Ok(())
    }

    async fn send(&mut self, intended: u64, n: u64) -> Result<()> {
        let sent = clock::now_ns();
        self.seq += 1;
        let out =
            self.composer
                .compose(intended, sent, n, self.seq, self.config.message_size, true);
        out.publish(&self.client, self.subject.clone())
            .await
            .with_context(|| format!("sending message {n}"))?;
        self.report.messages_sent += 1;
        if let Some(b) = self.report.batches.last_mut() {
            b.sent += 1;
        }
        Ok(())
    }

    /// The ADR's rule: a client waits for the first flow ack of a batch
    /// before sending on, to learn the flow the server grants it.
    async fn await_start(&mut self, batch: u64) -> Result<()> {
        self.acked = 0;
        self.granted = false;
        let settled = |f: &Self| f.granted || f.report.batches[batch as usize].failure.is_some();
        if !self.wait_for(settled).await {
            self.give_up(batch, "no answer to the batch's first message");
            self.report.stopped = Some(format!("batch {batch}'s first message got no answer"));
        }
        Ok(())
    }

    /// Waits while `acked + flow·outstanding ≤ sent` in the open batch.
    async fn await_flow(&mut self) {
        let must_wait = |f: &Self| {
            f.seq > 0 && f.acked + u64::from(f.flow) * u64::from(f.config.outstanding) <= f.seq
        };
        self.answer_ready();
        if !must_wait(self) {
            return;
        }
        self.report.waits += 1;
        if !self.wait_for(|f| !must_wait(f)).await
            && let Some(batch) = self.open_batch()
        {
            self.give_up(batch, "no flow ack within the ack timeout");
        }
    }

    /// Answers until `done` holds, pinging the open batch after each third
    /// of the ack timeout without one; false when the whole timeout passed.
    async fn wait_for(&mut self, done: impl Fn(&Self) -> bool) -> bool {
        let slice = self.config.ack_timeout / 3;
        let deadline = clock::now_ns() + self.config.ack_timeout.as_nanos() as u64;
        while !done(self) {
            if clock::now_ns() >= deadline {
                return false;
            }
            match tokio::time::timeout(slice, self.replies.next()).await {
                Ok(Some(message)) => self.answer(&message),
                Ok(None) => return false,
                Err(_) => self.ping().await,
            }
        }
        true
    }

    /// Answers whatever arrives until `until_ns` (a paced message's
    /// intended time).
    async fn answer_until(&mut self, until_ns: u64) {
        let due = tokio::time::sleep_until(clock::instant_at(until_ns).into());
        tokio::pin!(due);
        loop {
            tokio::select! {
                _ = &mut due => return,
                Some(message) = self.replies.next() => self.answer(&message),
            }
        }
    }

    fn answer_ready(&mut self) {
        while let Some(Some(message)) = self.replies.next().now_or_never() {
            self.answer(&message);
        }
    }

    /// Asks the server to resend its last flow ack for the open batch.
    async fn ping(&mut self) {
        let Some(batch) = self.open_batch() else {
            return;
        };
        let reply = format!("{}.{}{PING}", self.prefix(batch), self.seq);
        self.report.pings += 1;
        let subject = self.config.subject.clone();
        // A lost ping is retried after the next slice; the timeout decides.
        let _ = self
            .client
            .publish_with_reply(subject, reply, "".into())
            .await;
    }

    /// Marks `batch` as given up, and stops sending it.
    fn give_up(&mut self, batch: u64, why: &str) {
        let b = &mut self.report.batches[batch as usize];
        if !b.settled() {
            b.failure = Some((None, why.to_string()));
        }
        self.close(batch);
    }

    /// Stops sending `batch` if it is the open one.
    fn close(&mut self, batch: u64) {
        if self.open_batch() == Some(batch) {
            self.seq = 0;
        }
    }

    /// Books one answer by the batch and sequence its subject names.
    fn answer(&mut self, message: &async_nats::Message) {
        let now = clock::now_ns();
        let Some((batch, seq)) = self.place(message.subject.as_str()) else {
            return self.stray(format!("an answer on {}", message.subject));
        };
        let answer: Answer = match serde_json::from_slice(&message.payload) {
            Ok(a) => a,
            Err(e) => {
                let text = String::from_utf8_lossy(&message.payload);
                return self.stray(format!("an unreadable answer ({e}): {text}"));
            }
        };
        match answer.kind.as_deref() {
            Some("ack") => self.flow_ack(batch, answer.seq, answer.msgs.unwrap_or(1), now),
            Some("gap") => {
                self.report.gaps += 1;
                let from = answer.last_seq.unwrap_or(answer.seq);
                self.report.batches[batch as usize]
                    .gaps
                    .push((from, answer.seq));
                self.stop_on_failure(batch);
            }
            Some("err") => {
                self.report.errors += 1;
                let code = answer.error.map_or(0, |e| e.err_code);
                self.report.batches[batch as usize]
                    .errors
                    .push((answer.seq, code));
                self.stop_on_failure(batch);
            }
            Some(other) => self.stray(format!("an answer of type {other:?}")),
            None => self.pub_ack(batch, seq, answer, now),
        }
    }

    /// `(batch, batch sequence)` from `<inbox>.<batch>.<flow>.<gap>.<seq>.<op>.$FI`.
    fn place(&self, subject: &str) -> Option<(u64, u64)> {
        let rest = subject
            .strip_prefix(self.inbox.as_str())?
            .strip_prefix('.')?;
        let mut tokens = rest.split('.');
        let batch: u64 = tokens.next()?.parse().ok()?;
        let seq = tokens.nth(2)?.parse().ok()?;
        ((batch as usize) < self.report.batches.len()).then_some((batch, seq))
    }

    fn stray(&mut self, what: String) {
        if self.report.strays.len() < 16 {
            self.report.strays.push(what);
        }
    }

    /// With gap `fail` a gap or an error ends the batch at the server: stop
    /// sending it and let its PubAck settle it.
    fn stop_on_failure(&mut self, batch: u64) {
        if self.config.gap == GapMode::Fail {
            self.close(batch);
        }
    }

    fn flow_ack(&mut self, batch: u64, seq: u64, msgs: u16, now: u64) {
        let r = &mut self.report;
        if r.flow_first == 0 {
            (r.flow_first, r.flow_min) = (msgs, msgs);
        }
        r.flow_min = r.flow_min.min(msgs);
        r.flow_max = r.flow_max.max(msgs);
        let b = &mut r.batches[batch as usize];
        b.acked_through = b.acked_through.max(seq);
        // Sequence 0 answers a batch's start: it names no message.
        if seq > 0 {
            r.flow_acks += 1;
            let n = b.first_message + seq - 1;
            self.record_ack(n, now);
        }
        if self.open_batch() == Some(batch) {
            self.acked = self.acked.max(seq);
            self.flow = msgs.max(1);
            self.granted = true;
        }
    }

    /// Ack latency of message `n`, from its intended send, when that was
    /// after the warm-up and its ring slot has not been reused since.
    fn record_ack(&mut self, n: u64, now: u64) {
        let ring = self.intended.len() as u64;
        if n + ring > self.report.messages_sent {
            let intended = self.intended[(n % ring) as usize];
            if intended >= self.config.record_from_ns {
                self.report.ack_latency.record_between(intended, now);
            }
        }
    }

    fn pub_ack(&mut self, batch: u64, seq: u64, answer: Answer, now: u64) {
        let config = self.config;
        let b = &mut self.report.batches[batch as usize];
        if let Some(e) = answer.error {
            if b.settled() {
                // A message sent after its batch ended (a gap-fail, a
                // refused start) finds no batch (10208): an error of that
                // message, not the batch's.
                b.errors.push((seq, e.err_code));
                self.report.errors += 1;
                return;
            }
            let why = format!(
                "refused with {} at batch sequence {seq}: {}",
                e.err_code, e.description
            );
            // The server answers a start with its flow ack before it checks
            // the message, so a refused first message shows here, maybe
            // after more were sent. A refusal stops the publisher: every
            // later batch would likely meet it too (a full stream, a
            // disabled feature, too many open batches).
            self.report.stopped = Some(format!("batch {batch} was {why}"));
            b.failure = Some((Some(e.err_code), why));
            return self.close(batch);
        }
        let count = answer.count.unwrap_or(0);
        b.commit = Some((answer.seq, count));
        let last = (count > 0).then(|| b.first_message + count - 1);
        b.acked_through = b.acked_through.max(count);
        if b.first_intended_ns >= config.record_from_ns {
            self.report
                .commit_latency
                .record_between(b.first_intended_ns, now);
        }
        // Messages of the batch intended after the warm-up.
        let measured = match self.first_measured {
            Some(from) => (b.first_message + count).saturating_sub(from.max(b.first_message)),
            None => 0,
        };
        if measured > 0 {
            self.report.measured_messages += measured;
            self.report.last_measured_ack_ns = self.report.last_measured_ack_ns.max(now);
        }
        if let Some(n) = last {
            // The PubAck acknowledges the batch's last message as a flow
            // ack would.
            self.record_ack(n, now);
        }
        self.close(batch);
    }

    /// Ends the open batch with a commit that stores nothing, then waits
    /// for every PubAck still due.
    async fn finish(&mut self) -> Result<()> {
        if let Some(batch) = self.open_batch() {
            let reply = format!("{}.{}{COMMIT_EOB}", self.prefix(batch), self.seq + 1);
            let subject = self.config.subject.clone();
            self.client
                .publish_with_reply(subject, reply, "".into())
                .await
                .context("sending the end-of-batch commit")?;
            self.seq = 0;
        }
        let due = |f: &Self| f.report.batches.iter().all(FastBatchOutcome::settled);
        if !self.wait_for(due).await {
            let batches = self.report.batches.iter();
            let open: Vec<u64> = batches.filter(|b| !b.settled()).map(|b| b.batch).collect();
            for batch in open {
                self.give_up(batch, "no PubAck within the ack timeout");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_mode_reads_and_labels_as_the_server_spells_it() {
        #[derive(Deserialize)]
        struct T {
            gap: GapMode,
        }
        let t: T = toml::from_str("gap = \"ok\"").unwrap();
        assert_eq!(t.gap.label(), "ok");
        assert!(toml::from_str::<T>("gap = \"maybe\"").is_err());
    }
}
