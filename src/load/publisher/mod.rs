//! An open-loop JetStream publisher with a window of outstanding PubAcks.
//!
//! This is the Go client's `PublishAsync` design, built on async-nats' core
//! publish: every message carries a reply subject `<inbox>.<n>`, one
//! wildcard subscription per publisher receives the PubAcks, and a reader
//! task matches them to send times by `n`. Compared with awaiting a
//! `PublishAckFuture` per message this avoids a oneshot channel, an inbox
//! string and a multiplexer entry per message, and it time-stamps each PubAck
//! the moment it arrives rather than when a busy sender gets round to it.
//!
//! Sending runs on a dedicated OS thread so that the pacer can sleep with
//! microsecond precision (see [`crate::schedule::Pacer`]); the PubAck reader
//! runs on the main runtime. The two share only atomics: the number of
//! responses (which opens the window) and a ring of send records.
//!
//! Each send is a new message or, when the plan injects duplicates, a retry
//! of an earlier message with the same Nats-Msg-Id, as a publisher that lost
//! a PubAck would send it: inside the stream's duplicate window (the server
//! must flag it) or after the window has passed (the server must store it
//! again). Which sends are retries is decided by a seeded hash of the send
//! number, so every run of a profile retries the same sends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::{Client, HeaderMap, HeaderValue, Subject, Subscriber};
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::sizes::message_size;
use crate::clock;
use crate::connect::ConnectSettings;
use crate::histogram::Recorder;
use crate::ledger::{Event, LedgerShard};
use crate::profile::{MsgId, SizePlan};
use crate::random;
use crate::schedule::{Pacer, Schedule};
use crate::stamp::{STAMP_LEN, Stamp};
use crate::timeline::Timeline;

#[derive(Debug, Clone)]
pub struct PublisherConfig {
    pub index: u16,
    /// Messages go round-robin (by message number) to these subjects.
    pub subjects: Vec<String>,
    pub message_size: SizePlan,
    pub schedule: Schedule,
    /// Outstanding PubAcks allowed before the publisher waits.
    pub window: usize,
    pub msg_id: MsgId,
    /// Prefix of Nats-Msg-Id values; unique per publisher and run.
    pub msg_id_prefix: String,
    pub headers: Vec<(String, String)>,
    pub retries: RetryPlan,
    /// Seeds sizes and retry choices.
    pub seed: u64,
    /// Messages intended before this time (the warm-up) are sent and
    /// accounted for, but not recorded in histograms.
    pub record_from_ns: u64,
    pub pub_ack_timeout: Duration,
    pub timeline_origin_ns: u64,
    /// Resend a message whose PubAck has not come within this time, with
    /// the same Nats-Msg-Id (as a publisher that lost its PubAck to a
    /// server crash would); `None` never resends.
    pub resend_after: Option<Duration>,
}

/// Which sends retry an earlier message.
#[derive(Debug, Clone, Copy, Default)]
pub struct RetryPlan {
    /// Fraction of sends retrying a recent message inside the duplicate window.
    pub in_window: f64,
    /// Fraction of sends retrying a message whose duplicate window has passed.
    pub late: f64,
    /// The stream's duplicate window.
    pub window: Duration,
    /// How long past the window a late retry waits.
    pub late_margin: Duration,
}

/// Counters the progress display reads while the publisher runs. Each is
/// written by one task only.
#[derive(Debug, Default)]
pub struct PublisherProgress {
    pub sent: AtomicU64,
    /// PubAck responses received, successes and errors alike.
    pub responses: AtomicU64,
}

/// What the sending thread measured.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SendReport {
    pub sent: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Sends that retried an earlier message inside its duplicate window.
    pub retries: u64,
    /// Sends that retried an earlier message after its window had passed.
    pub late_retries: u64,
    /// Message numbers retried late (each must be stored once more).
    pub late_retried: Vec<u64>,
    /// Messages sent again because their PubAck was overdue.
    pub resends: u64,
    pub first_error: Option<String>,
    /// Set when PubAcks stopped arriving and the window never reopened.
    pub stalled: Option<String>,
    pub interrupted: bool,
    /// Actual send time minus intended send time: the generator's own lag.
    pub send_lag: Recorder,
    pub timeline: Timeline,
    pub first_sent_ns: u64,
    pub last_sent_ns: u64,
    pub last_intended_ns: u64,
}

/// What the PubAck reader measured.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AckReport {
    pub responses: u64,
    /// New messages stored.
    pub acked: u64,
    /// In-window retries the server flagged duplicate (as it must).
    pub duplicates: u64,
    /// Late retries the server stored again (as it must).
    pub late_stored: u64,
    /// In-window retries the server stored: dedup failed.
    pub retries_stored: u64,
    /// Late retries the server still flagged duplicate: the window outlived its setting.
    pub late_flagged: u64,
    /// New messages the server flagged duplicate: an id collision.
    pub unexpected_duplicates: u64,
    /// Resends of overdue messages the server stored: the original was lost.
    pub resent_stored: u64,
    /// Resends the server flagged duplicate: an earlier copy was stored
    /// first (its PubAck was lost, or the client held it in its reconnect
    /// buffer and sent it ahead of the resend).
    pub resent_duplicates: u64,
    /// PubAcks that came after their send had been given up and resent.
    pub late_responses: u64,
    /// Sends the server refused as unavailable (then resent).
    pub unavailable: u64,
    pub first_unavailable: Option<String>,
    /// The longest time without a PubAck while sends were outstanding, and
    /// when it ended (ns on [`crate::clock`]).
    pub max_gap_ns: u64,
    pub max_gap_end_ns: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Sent but never answered within the PubAck timeout.
    pub missing: u64,
    /// PubAck latency from the intended send time.
    pub from_intended: Recorder,
    /// PubAck latency from the actual send time.
    pub from_sent: Recorder,
    pub ledger: LedgerShard,
    /// Per message number, how many times a PubAck confirmed it stored
    /// (once, or twice after a late retry): what a read-back must find.
    pub stored_by_message: Vec<u8>,
}

/// What a send was, recorded for the PubAck reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum SendKind {
    New = 0,
    Retry = 1,
    LateRetry = 2,
    /// Sent again because its PubAck was overdue.
    Resend = 3,
}

struct Slot {
    send: AtomicU64,
    /// Set by the first of: its PubAck arriving, or the sender giving up
    /// on it to resend. Whoever sets it first owns the outcome.
    answered: AtomicBool,
    /// The server answered "unavailable": resend soon rather than wait.
    unavailable: AtomicBool,
    kind: AtomicU8,
    /// The message number the send carried (differs from `send` for retries).
    message: AtomicU64,
    intended: AtomicU64,
    sent: AtomicU64,
}

struct Shared {
    slots: Box<[Slot]>,
    mask: u64,
    progress: Arc<PublisherProgress>,
    /// Reader to sender: a response arrived, the window may be open.
    window_open: Notify,
    /// Messages intended before this are not recorded; set by `go`.
    record_from_ns: AtomicU64,
    /// Sends the sender gave up on (and resent); with `responses`, what the
    /// reader waits for.
    abandoned: AtomicU64,
    /// Messages sent, once the sender is done; `u64::MAX` until then.
    finished: AtomicU64,
    finished_notify: Notify,
}

impl Shared {
    fn slot(&self, send: u64) -> &Slot {
        &self.slots[(send & self.mask) as usize]
    }
}

/// A running publisher: its sending thread and its PubAck reader.
pub struct Publisher {
    /// `None` from the thread when it never started sending.
    thread: std::thread::JoinHandle<Option<(SendReport, Option<AckReport>)>>,
    /// The reader, when it runs on the main runtime.
    reader: Option<tokio::task::JoinHandle<AckReport>>,
    /// Starts the schedule; taken by `go`.
    go: Option<tokio::sync::oneshot::Sender<Timing>>,
    shared: Arc<Shared>,
    pub progress: Arc<PublisherProgress>,
}

/// When a started publisher's schedule runs, decided once every publisher
/// is connected so that slow connects never eat into the schedule.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub t0_ns: u64,
    pub record_from_ns: u64,
    /// End of an unpaced run (ignored for paced runs and fills).
    pub end_ns: u64,
}

/// Where a publisher's connection and PubAck reader run relative to its
/// sending thread. Each cross-thread wake-up costs tens of microseconds on
/// the machines measured, so a publisher that only ever waits for PubAcks
/// keeps them on its own thread; one that sleeps with PubAcks outstanding
/// cannot, or they would be time-stamped late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Paced with a window: connection and reader on the main runtime, so
    /// PubAcks are read while the sender sleeps.
    Apart,
    /// Unpaced: the reader on the sender's thread, the connection's socket
    /// I/O on the main runtime, in parallel with sending.
    ReaderOnThread,
    /// Sync: connection, reader and sender on one thread, as the shortest
    /// loop would have them; apart, sync throughput measured 20-27% lower.
    AllOnThread,
}

impl Placement {
    fn of(config: &PublisherConfig) -> Placement {
        if config.window == 1 {
            Placement::AllOnThread
        } else if config.schedule.total_rate.is_none() {
            Placement::ReaderOnThread
        } else {
            Placement::Apart
        }
    }
}

/// Subscribes for this publisher's PubAcks: `<inbox>.*`.
async fn subscribe_acks(client: &Client) -> Result<(String, Subscriber)> {
    let inbox = client.new_inbox();
    let subscription = client
        .subscribe(format!("{inbox}.*"))
        .await
        .context("subscribing for PubAcks")?;
    // Make sure the server knows the subscription before the first publish
    // asks it to reply there.
    client
        .flush()
        .await
        .context("flushing the PubAck subscription")?;
    Ok((inbox, subscription))
}

impl Publisher {
    /// Connects (as `role`), subscribes for PubAcks and starts sending on
    /// the schedule.
    pub async fn start(
        connect: &ConnectSettings,
        role: &str,
        config: PublisherConfig,
        stop: CancellationToken,
    ) -> Result<Publisher> {
        let placement = Placement::of(&config);
        // Resending needs every send of the last `resend_after` still in
        // the ring, so its answer can be told from a late one.
        let in_resend_span = match (config.resend_after, config.schedule.total_rate) {
            (Some(after), Some(rate)) => {
                (after.as_secs_f64() * rate as f64 / config.schedule.stride as f64) as usize
            }
            _ => 0,
        };
        let slots = (2 * (config.window + in_resend_span))
            .clamp(2, 1 << 22)
            .next_power_of_two();
        let progress = Arc::new(PublisherProgress::default());
        let shared = Arc::new(Shared {
            slots: (0..slots)
                .map(|_| Slot {
                    send: AtomicU64::new(u64::MAX),
                    answered: AtomicBool::new(true),
                    unavailable: AtomicBool::new(false),
                    kind: AtomicU8::new(SendKind::New as u8),
                    message: AtomicU64::new(0),
                    intended: AtomicU64::new(0),
                    sent: AtomicU64::new(0),
                })
                .collect(),
            mask: slots as u64 - 1,
            progress: progress.clone(),
            window_open: Notify::new(),
            record_from_ns: AtomicU64::new(u64::MAX),
            abandoned: AtomicU64::new(0),
            finished: AtomicU64::new(u64::MAX),
            finished_notify: Notify::new(),
        });

        // Connect here unless the connection belongs on the thread.
        let mut ready = None;
        let mut reader = None;
        if placement != Placement::AllOnThread {
            let client = connect.connect(role).await?;
            let (inbox, subscription) = subscribe_acks(&client).await?;
            let local = if placement == Placement::Apart {
                reader = Some(tokio::spawn(read_acks(
                    subscription,
                    shared.clone(),
                    config.clone(),
                )));
                None
            } else {
                Some(subscription)
            };
            ready = Some((client, inbox, local));
        }

        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<Result<()>>();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<Timing>();
        let thread_shared = shared.clone();
        let (connect, role) = (connect.clone(), role.to_string());
        let thread = std::thread::Builder::new()
            .name(format!("jsb-pub-{}", config.index))
            .spawn(move || {
                Pacer::tighten_timer_slack();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime builds");
                let shared = thread_shared;
                runtime.block_on(async move {
                    let (client, inbox, local) = match ready {
                        Some(ready) => ready,
                        None => {
                            let setup = async {
                                let client = connect.connect(&role).await?;
                                let (inbox, subscription) = subscribe_acks(&client).await?;
                                Ok::<_, anyhow::Error>((client, inbox, Some(subscription)))
                            };
                            match setup.await {
                                Ok(ready) => ready,
                                Err(e) => {
                                    let _ = started_tx.send(Err(e));
                                    return None;
                                }
                            }
                        }
                    };
                    let _ = started_tx.send(Ok(()));
                    let Ok(timing) = go_rx.await else {
                        return None;
                    };
                    let mut config = config;
                    config.schedule.t0_ns = timing.t0_ns;
                    if config.schedule.total_rate.is_none() && config.schedule.total_messages == 0 {
                        config.schedule.end_ns = timing.end_ns;
                    }
                    config.record_from_ns = timing.record_from_ns;
                    config.timeline_origin_ns = timing.t0_ns;
                    let reader =
                        local.map(|s| tokio::spawn(read_acks(s, shared.clone(), config.clone())));
                    let sends = send_all(client, config, inbox, shared, stop).await;
                    let acks = match reader {
                        Some(reader) => reader.await.ok(),
                        None => None,
                    };
                    Some((sends, acks))
                })
            })
            .context("starting a publisher thread")?;
        match started_rx.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => return Err(anyhow!("a publisher thread ended before it started")),
        }
        Ok(Publisher {
            thread,
            reader,
            go: Some(go_tx),
            shared,
            progress,
        })
    }

    /// Starts the schedule at `timing`.
    pub fn go(&mut self, timing: Timing) {
        self.shared
            .record_from_ns
            .store(timing.record_from_ns, Ordering::Release);
        if let Some(go) = self.go.take() {
            let _ = go.send(timing);
        }
    }

    /// Waits for the schedule to end and the last PubAck (or its timeout).
    pub async fn finish(self) -> Result<(SendReport, AckReport)> {
        let thread = self.thread;
        let (sends, local_acks) = tokio::task::spawn_blocking(move || thread.join())
            .await
            .context("joining a publisher thread")?
            .map_err(|_| anyhow!("a publisher thread panicked"))?
            .ok_or_else(|| anyhow!("a publisher thread never started"))?;
        let acks = match (self.reader, local_acks) {
            (Some(reader), _) => reader.await.context("joining a PubAck reader")?,
            (None, Some(acks)) => acks,
            (None, None) => return Err(anyhow!("a PubAck reader panicked")),
        };
        Ok((sends, acks))
    }
}

/// Chooses, per send, a new message or a retry of an earlier one.
struct RetryChooser {
    plan: RetryPlan,
    seed: u64,
    publisher: u64,
    /// The last 64 new messages `(sent_ns, message)`, candidates for
    /// in-window retries; `recent_count` counts every one ever recorded.
    recent: [(u64, u64); 64],
    recent_count: u64,
    /// New messages not yet old enough for a late retry, oldest first.
    maturing: VecDeque<(u64, u64)>,
    /// The newest message whose window has passed, not retried yet.
    late_candidate: Option<u64>,
}

impl RetryChooser {
    fn new(plan: RetryPlan, seed: u64, publisher: u16) -> Self {
        RetryChooser {
            plan,
            seed,
            publisher: u64::from(publisher),
            recent: [(0, 0); 64],
            recent_count: 0,
            maturing: VecDeque::new(),
            late_candidate: None,
        }
    }

    /// What send `k` at `now_ns` carries: `(kind, message number)`.
    #[inline]
    fn choose(&mut self, k: u64, now_ns: u64) -> (SendKind, u64) {
        if self.plan.in_window == 0.0 && self.plan.late == 0.0 {
            return (SendKind::New, k);
        }
        let u = random::unit(self.seed, self.publisher, k);
        if u < self.plan.late {
            let late_after = (self.plan.window + self.plan.late_margin).as_nanos() as u64;
            while let Some(&(sent, m)) = self.maturing.front() {
                if now_ns.saturating_sub(sent) < late_after {
                    break;
                }
                self.late_candidate = Some(m);
                self.maturing.pop_front();
            }
            if let Some(m) = self.late_candidate.take() {
                return (SendKind::LateRetry, m);
            }
        } else if u < self.plan.late + self.plan.in_window && self.recent_count > 0 {
            // A recent message, sent well inside the window.
            let fresh_after = now_ns.saturating_sub(self.plan.window.as_nanos() as u64 / 2);
            let pick = random::below(self.seed ^ 1, self.publisher, k, self.recent_count.min(64));
            let (sent, m) = self.recent[pick as usize];
            if sent >= fresh_after {
                return (SendKind::Retry, m);
            }
        }
        (SendKind::New, k)
    }

    /// Records a new message as a candidate for later retries.
    #[inline]
    fn sent_new(&mut self, k: u64, sent_ns: u64) {
        if self.plan.in_window > 0.0 {
            self.recent[(self.recent_count % 64) as usize] = (sent_ns, k);
            self.recent_count += 1;
        }
        if self.plan.late > 0.0 {
            self.maturing.push_back((sent_ns, k));
        }
    }
}

async fn send_all(
    client: Client,
    config: PublisherConfig,
    inbox: String,
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> SendReport {
    let schedule = config.schedule;
    let pacer = Pacer::new(schedule.interval());
    let subjects: Vec<Subject> = config
        .subjects
        .iter()
        .map(|s| Subject::from(s.as_str()))
        .collect();
    let mut builder = MessageBuilder::new(&inbox);
    let mut ids = IdBuilder::new(&config.msg_id_prefix);
    let extra_headers: Vec<(async_nats::header::HeaderName, HeaderValue)> = config
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.parse().expect("header names are validated"),
                HeaderValue::from(v.as_str()),
            )
        })
        .collect();
    let mut chooser = RetryChooser::new(config.retries, config.seed, config.index);
    let mut report = SendReport {
        sent: 0,
        bytes: 0,
        retries: 0,
        late_retries: 0,
        late_retried: Vec::new(),
        resends: 0,
        first_error: None,
        stalled: None,
        interrupted: false,
        send_lag: Recorder::new(),
        timeline: Timeline::per_second(config.timeline_origin_ns),
        first_sent_ns: 0,
        last_sent_ns: 0,
        last_intended_ns: 0,
    };

    let count = schedule.count();
    let resend_after = config.resend_after.map(|d| d.as_nanos() as u64);
    let mut j = 0u64; // schedule position: the message number of new messages
    let mut k = 0u64; // send number: slot and reply token
    // (message, its first intended send): a resend keeps the original's
    // intended time, so its latency includes the outage it waited out.
    let mut resends: VecDeque<(u64, u64)> = VecDeque::new();
    let mut oldest = 0u64;
    let mut abandoned = 0u64;
    let mut schedule_done = false;
    let mut progress_at = (clock::now_ns(), 0u64);
    'sending: loop {
        if stop.is_cancelled() {
            report.interrupted = true;
            break;
        }
        if let Some(after) = resend_after {
            scan_overdue(&shared, &mut oldest, k, after, &mut resends, &mut abandoned);
        }
        schedule_done |= j >= count;
        if schedule_done && resends.is_empty() {
            // Everything scheduled is sent; without resends that is the end,
            // with them, every send must first be answered or resent.
            let responses = shared.progress.responses.load(Ordering::Acquire);
            if resend_after.is_none() || responses + abandoned >= k {
                break;
            }
            if let Err(stall) = note_progress(
                &mut progress_at,
                responses,
                config.pub_ack_timeout,
                k - responses - abandoned,
            ) {
                report.stalled = Some(stall);
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }

        // Wait for room in the window, giving up on overdue sends meanwhile.
        loop {
            let responses = shared.progress.responses.load(Ordering::Acquire);
            let outstanding = k.saturating_sub(responses + abandoned);
            if outstanding < config.window as u64 {
                break;
            }
            if let Err(stall) = note_progress(
                &mut progress_at,
                responses,
                config.pub_ack_timeout,
                outstanding,
            ) {
                report.stalled = Some(stall);
                break 'sending;
            }
            let wait = resend_after.map_or(config.pub_ack_timeout, |a| {
                Duration::from_nanos(a / 4).max(Duration::from_millis(1))
            });
            // notify_one stores a permit when nobody waits, so a response
            // that lands between the load above and this wait is not missed.
            if tokio::time::timeout(wait, shared.window_open.notified())
                .await
                .is_err()
                && let Some(after) = resend_after
            {
                scan_overdue(&shared, &mut oldest, k, after, &mut resends, &mut abandoned);
            }
        }

        let (kind, m, intended, sent) = match resends.pop_front() {
            Some((m, intended)) => (SendKind::Resend, m, intended, clock::now_ns()),
            None => {
                let intended = match schedule.intended_ns(j) {
                    Some(t) => {
                        pacer.wait_until(t);
                        t
                    }
                    None => clock::now_ns(),
                };
                let sent = clock::now_ns();
                if schedule.ended(sent) {
                    schedule_done = true;
                    continue;
                }
                let (kind, m) = chooser.choose(j, sent);
                j += 1;
                (kind, m, intended, sent)
            }
        };
        let slot = shared.slot(k);
        slot.answered.store(false, Ordering::Relaxed);
        slot.unavailable.store(false, Ordering::Relaxed);
        slot.kind.store(kind as u8, Ordering::Relaxed);
        slot.message.store(m, Ordering::Relaxed);
        slot.intended.store(intended, Ordering::Relaxed);
        slot.sent.store(sent, Ordering::Relaxed);
        slot.send.store(k, Ordering::Release);

        let size = message_size(&config.message_size, config.seed, config.index, m);
        let (payload, reply) = builder.build(
            Stamp {
                intended_ns: intended,
                sent_ns: sent,
                publisher: config.index,
                publisher_seq: m,
            },
            k,
            size,
        );
        k += 1;
        let subject = subjects[(m % subjects.len() as u64) as usize].clone();
        let result = if config.msg_id == MsgId::None && extra_headers.is_empty() {
            client.publish_with_reply(subject, reply, payload).await
        } else {
            let mut headers = HeaderMap::new();
            if config.msg_id == MsgId::Unique {
                headers.insert(async_nats::header::NATS_MESSAGE_ID, ids.value(m));
            }
            for (name, value) in &extra_headers {
                headers.insert(name.clone(), value.clone());
            }
            client
                .publish_with_reply_and_headers(subject, reply, headers, payload)
                .await
        };
        if let Err(e) = result {
            report.first_error = Some(format!("publish failed: {e}"));
            break;
        }
        match kind {
            SendKind::New => chooser.sent_new(m, sent),
            SendKind::Retry => report.retries += 1,
            SendKind::LateRetry => {
                report.late_retries += 1;
                report.late_retried.push(m);
            }
            SendKind::Resend => report.resends += 1,
        }
        if report.sent == 0 {
            report.first_sent_ns = sent;
        }
        report.sent += 1;
        report.bytes += size as u64;
        // The schedule's span and lag: resends are outside the schedule.
        if kind != SendKind::Resend {
            report.last_sent_ns = sent;
            report.last_intended_ns = intended;
        }
        shared.progress.sent.store(report.sent, Ordering::Relaxed);
        if intended >= config.record_from_ns && kind != SendKind::Resend {
            report.send_lag.record_between(intended, sent);
        }
        report.timeline.mark(sent);
    }
    // Hand the buffered publishes to the server before saying we are done.
    let _ = client.flush().await;
    shared.finished.store(report.sent, Ordering::Release);
    shared.finished_notify.notify_one();
    report
}

/// Builds payloads and reply subjects out of one reusable arena: a 64 KiB
/// buffer that many messages are split off, so there is one allocation per
/// few hundred messages instead of two per message.
pub struct MessageBuilder {
    arena: BytesMut,
    reply_prefix: Vec<u8>,
}

impl MessageBuilder {
    /// `inbox` is the publisher's PubAck inbox; replies go to `<inbox>.<n>`.
    pub fn new(inbox: &str) -> Self {
        MessageBuilder {
            arena: BytesMut::with_capacity(64 * 1024),
            reply_prefix: format!("{inbox}.").into_bytes(),
        }
    }

    /// The payload of `size` bytes (stamp, then filler) and the reply
    /// subject for send number `send`.
    #[inline]
    pub fn build(&mut self, stamp: Stamp, send: u64, size: usize) -> (Bytes, Subject) {
        let mut digits = [0u8; 20];
        self.arena
            .reserve(size + self.reply_prefix.len() + digits.len());
        let mut head = [0u8; STAMP_LEN];
        stamp.write(&mut head);
        self.arena.extend_from_slice(&head);
        self.arena.put_bytes(b'.', size.saturating_sub(STAMP_LEN));
        let payload = self.arena.split().freeze();
        self.arena.extend_from_slice(&self.reply_prefix);
        self.arena.extend_from_slice(decimal(send, &mut digits));
        let reply = Subject::try_from(self.arena.split().freeze()).expect("ASCII reply subject");
        (payload, reply)
    }
}

/// Builds Nats-Msg-Id values `<prefix><message number>` without `format!`.
pub struct IdBuilder {
    text: String,
    prefix_len: usize,
}

impl IdBuilder {
    pub fn new(prefix: &str) -> Self {
        let mut text = String::with_capacity(prefix.len() + 20);
        text.push_str(prefix);
        IdBuilder {
            text,
            prefix_len: prefix.len(),
        }
    }

    #[inline]
    pub fn value(&mut self, message: u64) -> HeaderValue {
        let mut digits = [0u8; 20];
        self.text.truncate(self.prefix_len);
        self.text
            .push_str(std::str::from_utf8(decimal(message, &mut digits)).expect("digits"));
        HeaderValue::from(self.text.as_str())
    }
}

/// Gives up on sends whose PubAck is older than `after_ns`: each is marked
/// answered (unless its PubAck won the race) and its message queued to be
/// sent again with the same id.
fn scan_overdue(
    shared: &Shared,
    oldest: &mut u64,
    sent: u64,
    after_ns: u64,
    resends: &mut VecDeque<(u64, u64)>,
    abandoned: &mut u64,
) {
    let now = clock::now_ns();
    while *oldest < sent {
        let slot = shared.slot(*oldest);
        if slot.send.load(Ordering::Acquire) != *oldest || slot.answered.load(Ordering::Acquire) {
            *oldest += 1;
            continue;
        }
        let age = now.saturating_sub(slot.sent.load(Ordering::Relaxed));
        let due = if slot.unavailable.load(Ordering::Acquire) {
            UNAVAILABLE_PAUSE_NS.min(after_ns)
        } else {
            after_ns
        };
        if age < due {
            break;
        }
        if !slot.answered.swap(true, Ordering::AcqRel) {
            *abandoned += 1;
            shared.abandoned.store(*abandoned, Ordering::Release);
            resends.push_back((
                slot.message.load(Ordering::Relaxed),
                slot.intended.load(Ordering::Relaxed),
            ));
        }
        *oldest += 1;
    }
}

/// How long a send the server refused as unavailable waits before it is
/// sent again: a leader election takes seconds, and resending at once would
/// only spin.
const UNAVAILABLE_PAUSE_NS: u64 = 250_000_000;

/// Tracks when PubAcks last made progress; fails when none came for
/// `timeout` with `outstanding` sends waiting.
fn note_progress(
    progress_at: &mut (u64, u64),
    responses: u64,
    timeout: Duration,
    outstanding: u64,
) -> Result<(), String> {
    let now = clock::now_ns();
    if responses != progress_at.1 {
        *progress_at = (now, responses);
        return Ok(());
    }
    if now.saturating_sub(progress_at.0) > timeout.as_nanos() as u64 {
        return Err(format!(
            "no PubAck arrived for {timeout:?} with {outstanding} outstanding"
        ));
    }
    Ok(())
}

/// Writes `n` in decimal into `buf`, returning the digits.
#[inline]
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

#[derive(Deserialize)]
struct PubAckWire {
    #[serde(default)]
    seq: u64,
    #[serde(default)]
    duplicate: bool,
    error: Option<ApiErrorWire>,
}

#[derive(Deserialize)]
struct ApiErrorWire {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    err_code: u32,
    #[serde(default)]
    description: String,
}

enum Response {
    Stored {
        seq: u64,
        duplicate: bool,
    },
    /// Nothing could take the message right now (no responders while a
    /// stream elects a leader, JetStream 503): worth sending again.
    Unavailable(String),
    Failed(String),
}

/// nats-server's JSStreamStoreFailedF (a stream at its limits with discard
/// new), JSInsufficientResourcesErr (the server's JetStream storage is
/// full) and JSStorageResourcesExceededErr (the account's is).
const REFUSALS: [u32; 3] = [10077, 10023, 10047];

/// What to check when the server refuses to store, named in the error.
fn refusal_hint(err_code: u32) -> &'static str {
    match err_code {
        10077 => " (the stream is at its limits and discards new messages)",
        10023 => {
            " (the server's JetStream storage is full: its max_file_store or \
             max_memory_store, or the disk)"
        }
        10047 => " (the account's JetStream storage limit is reached)",
        _ => "",
    }
}

fn classify(message: &async_nats::Message) -> Response {
    if let Some(status) = message.status {
        if status == async_nats::StatusCode::NO_RESPONDERS {
            return Response::Unavailable(
                "no responders: no stream captures the subject (or JetStream is unavailable)"
                    .into(),
            );
        }
        if message.payload.is_empty() {
            return Response::Failed(format!(
                "status {status} {}",
                message.description.as_deref().unwrap_or("")
            ));
        }
    }
    match serde_json::from_slice::<PubAckWire>(&message.payload) {
        Ok(PubAckWire { error: Some(e), .. }) => {
            let text = format!(
                "JetStream error {} ({}): {}{}",
                e.code,
                e.err_code,
                e.description,
                refusal_hint(e.err_code)
            );
            // A 503 is also how a full stream or server answers; resending
            // that would only be refused again.
            if e.code == 503 && !REFUSALS.contains(&e.err_code) {
                Response::Unavailable(text)
            } else {
                Response::Failed(text)
            }
        }
        Ok(ack) if ack.seq > 0 => Response::Stored {
            seq: ack.seq,
            duplicate: ack.duplicate,
        },
        _ => Response::Failed(format!(
            "unreadable PubAck: {:?}",
            String::from_utf8_lossy(&message.payload)
        )),
    }
}

async fn read_acks(
    mut subscription: Subscriber,
    shared: Arc<Shared>,
    config: PublisherConfig,
) -> AckReport {
    let mut report = AckReport {
        responses: 0,
        acked: 0,
        duplicates: 0,
        late_stored: 0,
        retries_stored: 0,
        late_flagged: 0,
        unexpected_duplicates: 0,
        resent_stored: 0,
        resent_duplicates: 0,
        late_responses: 0,
        unavailable: 0,
        first_unavailable: None,
        max_gap_ns: 0,
        max_gap_end_ns: 0,
        errors: 0,
        first_error: None,
        missing: 0,
        from_intended: Recorder::new(),
        from_sent: Recorder::new(),
        // Indexed by stream sequence, which all publishers share.
        ledger: LedgerShard::with_capacity(
            config.schedule.total_messages,
            &[Event::Persisted, Event::Duplicate],
        ),
        stored_by_message: Vec::with_capacity(
            config
                .schedule
                .total_messages
                .div_ceil(config.schedule.stride) as usize,
        ),
    };
    let mut last_response_ns = 0u64;
    loop {
        let finished = shared.finished.load(Ordering::Acquire);
        let settled = report.responses + shared.abandoned.load(Ordering::Acquire);
        if finished != u64::MAX && settled >= finished {
            break;
        }
        let next = if finished == u64::MAX {
            tokio::select! {
                message = subscription.next() => message,
                _ = shared.finished_notify.notified() => continue,
            }
        } else {
            match tokio::time::timeout(config.pub_ack_timeout, subscription.next()).await {
                Ok(message) => message,
                Err(_) => {
                    report.missing = finished.saturating_sub(settled);
                    break;
                }
            }
        };
        let Some(message) = next else {
            report
                .first_error
                .get_or_insert_with(|| "the PubAck subscription closed".into());
            if finished != u64::MAX {
                report.missing = finished.saturating_sub(settled);
            }
            break;
        };
        let now = clock::now_ns();
        let token = message.subject.rsplit('.').next().unwrap_or("");
        let slot = token.parse::<u64>().ok().and_then(|k| {
            let slot = shared.slot(k);
            (slot.send.load(Ordering::Acquire) == k).then_some(slot)
        });
        let response = classify(&message);
        if let (Response::Unavailable(text), Some(slot), Some(_)) =
            (&response, slot, config.resend_after)
        {
            // Not an answer: the sender resends it shortly.
            if !slot.answered.load(Ordering::Acquire) {
                slot.unavailable.store(true, Ordering::Release);
                report.unavailable += 1;
                report.first_unavailable.get_or_insert_with(|| text.clone());
                shared.window_open.notify_one();
                continue;
            }
        }
        // The first to mark a send answered owns it: a PubAck that arrives
        // after the sender gave up and resent is late, and counts only as
        // evidence of what the server stored.
        // Without a slot (it was reused) a PubAck can only be a late one
        // when sends are given up and resent; otherwise it is the only one.
        let first = match slot {
            Some(s) => !s.answered.swap(true, Ordering::AcqRel),
            None => config.resend_after.is_none(),
        };
        match response {
            Response::Stored { seq, duplicate } => {
                let kind = slot.map(|s| s.kind.load(Ordering::Relaxed));
                let is = |k: Option<u8>, kind: SendKind| k == Some(kind as u8);
                match (kind, duplicate) {
                    _ if !first => report.late_responses += 1,
                    (k, true) if is(k, SendKind::Retry) => report.duplicates += 1,
                    (k, true) if is(k, SendKind::LateRetry) => report.late_flagged += 1,
                    (k, true) if is(k, SendKind::Resend) => report.resent_duplicates += 1,
                    (_, true) => report.unexpected_duplicates += 1,
                    (k, false) if is(k, SendKind::Retry) => report.retries_stored += 1,
                    (k, false) if is(k, SendKind::LateRetry) => report.late_stored += 1,
                    (k, false) if is(k, SendKind::Resend) => report.resent_stored += 1,
                    (_, false) => report.acked += 1,
                }
                report.ledger.mark(
                    seq,
                    if duplicate {
                        Event::Duplicate
                    } else {
                        Event::Persisted
                    },
                );
                if let Some(slot) = slot {
                    if !duplicate {
                        let m = slot.message.load(Ordering::Relaxed) as usize;
                        let counts = &mut report.stored_by_message;
                        if m >= counts.len() {
                            counts.resize((m + 1).max(counts.len() * 2), 0);
                        }
                        counts[m] = counts[m].saturating_add(1);
                    }
                    let intended = slot.intended.load(Ordering::Relaxed);
                    let sent = slot.sent.load(Ordering::Relaxed);
                    if first && intended >= shared.record_from_ns.load(Ordering::Relaxed) {
                        report.from_intended.record_between(intended, now);
                        report.from_sent.record_between(sent, now);
                    }
                }
            }
            Response::Failed(text) | Response::Unavailable(text) => {
                if first {
                    report.errors += 1;
                    report.first_error.get_or_insert(text);
                } else {
                    report.late_responses += 1;
                }
            }
        }
        if !first {
            continue;
        }
        if last_response_ns > 0 && now - last_response_ns > report.max_gap_ns {
            report.max_gap_ns = now - last_response_ns;
            report.max_gap_end_ns = now;
        }
        last_response_ns = now;
        report.responses += 1;
        shared
            .progress
            .responses
            .store(report.responses, Ordering::Release);
        shared.window_open.notify_one();
    }
    let _ = subscription.unsubscribe().await;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_stamped_payloads_and_numbered_replies() {
        let mut builder = MessageBuilder::new("_INBOX.abc");
        let stamp = Stamp {
            intended_ns: 1,
            sent_ns: 2,
            publisher: 3,
            publisher_seq: 1234,
        };
        let (payload, reply) = builder.build(stamp, 99, 40);
        assert_eq!(payload.len(), 40);
        assert_eq!(Stamp::read(&payload), Some(stamp));
        assert_eq!(reply.as_str(), "_INBOX.abc.99");
        let (second, _) = builder.build(stamp, 100, 40);
        assert_eq!(payload, second, "earlier messages are not overwritten");
    }

    #[test]
    fn ids_are_prefix_and_message_number() {
        let mut ids = IdBuilder::new("run-lat-0-");
        assert_eq!(ids.value(7).as_str(), "run-lat-0-7");
        assert_eq!(ids.value(12345).as_str(), "run-lat-0-12345");
    }

    #[test]
    fn decimal_digits() {
        let mut buf = [0u8; 20];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(1_234_567, &mut buf), b"1234567");
        assert_eq!(decimal(u64::MAX, &mut buf), b"18446744073709551615");
    }

    #[test]
    fn retries_are_the_planned_fraction_of_recent_messages() {
        let plan = RetryPlan {
            in_window: 0.1,
            late: 0.0,
            window: Duration::from_secs(60),
            late_margin: Duration::from_secs(1),
        };
        let mut chooser = RetryChooser::new(plan, 42, 0);
        let mut retries = 0;
        let mut news = Vec::new();
        for k in 0..10_000u64 {
            let now = 1_000_000 + k * 1_000;
            match chooser.choose(k, now) {
                (SendKind::New, m) => {
                    assert_eq!(m, k);
                    chooser.sent_new(m, now);
                    news.push(m);
                }
                (SendKind::Retry, m) => {
                    retries += 1;
                    let newer = news.iter().rev().take_while(|&&n| n != m).count();
                    assert!(
                        m < k && newer < 64,
                        "one of the last 64 new messages: {m} at {k}"
                    );
                    assert!(news.contains(&m), "retries a new message");
                }
                (SendKind::LateRetry | SendKind::Resend, _) => panic!("no late retries planned"),
            }
        }
        assert!((900..1100).contains(&retries), "{retries}");
        // Deterministic: the same seed chooses the same sends.
        let mut again = RetryChooser::new(plan, 42, 0);
        let first: Vec<_> = (0..50).map(|k| again.choose(k, k).0).collect();
        let mut other = RetryChooser::new(plan, 42, 0);
        assert_eq!(
            first,
            (0..50).map(|k| other.choose(k, k).0).collect::<Vec<_>>()
        );
    }

    #[test]
    fn late_retries_wait_out_the_window_and_retry_each_message_once() {
        let plan = RetryPlan {
            in_window: 0.0,
            late: 0.2,
            window: Duration::from_millis(100),
            late_margin: Duration::from_millis(50),
        };
        let mut chooser = RetryChooser::new(plan, 7, 1);
        let mut retried = Vec::new();
        let mut sent_at = std::collections::HashMap::new();
        for k in 0..2_000u64 {
            let now = k * 1_000_000; // 1 ms apart
            match chooser.choose(k, now) {
                (SendKind::New, m) => {
                    chooser.sent_new(m, now);
                    sent_at.insert(m, now);
                }
                (SendKind::LateRetry, m) => {
                    assert!(
                        now - sent_at[&m] >= 150_000_000,
                        "waited out window + margin"
                    );
                    retried.push(m);
                }
                (SendKind::Retry | SendKind::Resend, _) => panic!("no in-window retries planned"),
            }
        }
        assert!(retried.len() > 100, "{}", retried.len());
        let mut unique = retried.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            retried.len(),
            "each message retried late once"
        );
    }

    fn message(payload: &'static str) -> async_nats::Message {
        async_nats::Message {
            subject: "_INBOX.x.7".into(),
            reply: None,
            payload: Bytes::from_static(payload.as_bytes()),
            headers: None,
            status: None,
            description: None,
            length: payload.len(),
        }
    }

    #[test]
    fn classifies_pub_acks() {
        match classify(&message(r#"{"stream":"S","seq":42}"#)) {
            Response::Stored {
                seq: 42,
                duplicate: false,
            } => {}
            _ => panic!("plain ack"),
        }
        match classify(&message(r#"{"stream":"S","seq":42,"duplicate":true}"#)) {
            Response::Stored {
                seq: 42,
                duplicate: true,
            } => {}
            _ => panic!("duplicate ack"),
        }
        match classify(&message(
            r#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}"#,
        )) {
            Response::Failed(text) => assert!(text.contains("maximum messages exceeded"), "{text}"),
            _ => panic!("error ack"),
        }
        match classify(&message(
            r#"{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}"#,
        )) {
            Response::Unavailable(text) => assert!(text.contains("temporarily"), "{text}"),
            _ => panic!("unavailable ack"),
        }
        match classify(&message(
            r#"{"error":{"code":503,"err_code":10023,"description":"insufficient resources"}}"#,
        )) {
            Response::Failed(text) => assert!(text.contains("storage is full"), "{text}"),
            _ => panic!("a full server refuses; resending would not help"),
        }
        match classify(&message("garbage")) {
            Response::Failed(text) => assert!(text.contains("unreadable"), "{text}"),
            _ => panic!("garbage"),
        }
    }
}
