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
//! responses (which opens the window) and a ring of send times.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::{Client, HeaderMap, HeaderValue, Subject, Subscriber};
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::histogram::Recorder;
use crate::ledger::{Event, LedgerShard};
use crate::profile::MsgId;
use crate::schedule::{Pacer, Schedule};
use crate::stamp::{STAMP_LEN, Stamp};
use crate::timeline::Timeline;

#[derive(Debug, Clone)]
pub struct PublisherConfig {
    pub index: u16,
    pub subject: String,
    pub message_size: usize,
    pub schedule: Schedule,
    /// Outstanding PubAcks allowed before the publisher waits.
    pub window: usize,
    pub msg_id: MsgId,
    /// Prefix of Nats-Msg-Id values; unique per publisher and run.
    pub msg_id_prefix: String,
    /// Messages intended before this time (the warm-up) are sent and
    /// accounted for, but not recorded in histograms.
    pub record_from_ns: u64,
    pub pub_ack_timeout: Duration,
    pub timeline_origin_ns: u64,
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
#[derive(Debug, Clone)]
pub struct SendReport {
    pub sent: u64,
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
#[derive(Debug, Clone)]
pub struct AckReport {
    pub responses: u64,
    pub acked: u64,
    pub duplicates: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Sent but never answered within the PubAck timeout.
    pub missing: u64,
    /// PubAck latency from the intended send time.
    pub from_intended: Recorder,
    /// PubAck latency from the actual send time.
    pub from_sent: Recorder,
    pub ledger: LedgerShard,
}

struct Slot {
    seq: AtomicU64,
    intended: AtomicU64,
    sent: AtomicU64,
}

struct Shared {
    slots: Box<[Slot]>,
    mask: u64,
    progress: Arc<PublisherProgress>,
    /// Reader to sender: a response arrived, the window may be open.
    window_open: Notify,
    /// Messages sent, once the sender is done; `u64::MAX` until then.
    finished: AtomicU64,
    finished_notify: Notify,
}

impl Shared {
    fn slot(&self, seq: u64) -> &Slot {
        &self.slots[(seq & self.mask) as usize]
    }
}

/// A running publisher: its sending thread and its PubAck reader.
pub struct Publisher {
    thread: std::thread::JoinHandle<SendReport>,
    reader: tokio::task::JoinHandle<AckReport>,
    pub progress: Arc<PublisherProgress>,
}

impl Publisher {
    /// Subscribes for PubAcks and starts sending on the schedule.
    pub async fn start(
        client: Client,
        config: PublisherConfig,
        stop: CancellationToken,
    ) -> Result<Publisher> {
        let inbox = client.new_inbox();
        let subscription = client
            .subscribe(format!("{inbox}.*"))
            .await
            .context("subscribing for PubAcks")?;
        // Make sure the server knows the subscription before the first
        // publish asks it to reply there.
        client
            .flush()
            .await
            .context("flushing the PubAck subscription")?;

        let slots = (config.window * 2).next_power_of_two();
        let progress = Arc::new(PublisherProgress::default());
        let shared = Arc::new(Shared {
            slots: (0..slots)
                .map(|_| Slot {
                    seq: AtomicU64::new(u64::MAX),
                    intended: AtomicU64::new(0),
                    sent: AtomicU64::new(0),
                })
                .collect(),
            mask: slots as u64 - 1,
            progress: progress.clone(),
            window_open: Notify::new(),
            finished: AtomicU64::new(u64::MAX),
            finished_notify: Notify::new(),
        });

        let reader = tokio::spawn(read_acks(subscription, shared.clone(), config.clone()));
        let sender_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("jsb-pub-{}", config.index))
            .spawn(move || {
                Pacer::tighten_timer_slack();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime builds");
                runtime.block_on(send_all(client, config, inbox, shared, sender_stop))
            })
            .context("starting a publisher thread")?;
        Ok(Publisher {
            thread,
            reader,
            progress,
        })
    }

    /// Waits for the schedule to end and the last PubAck (or its timeout).
    pub async fn finish(self) -> Result<(SendReport, AckReport)> {
        let thread = self.thread;
        let sends = tokio::task::spawn_blocking(move || thread.join())
            .await
            .context("joining a publisher thread")?
            .map_err(|_| anyhow!("a publisher thread panicked"))?;
        let acks = self.reader.await.context("joining a PubAck reader")?;
        Ok((sends, acks))
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
    let subject = Subject::from(config.subject.as_str());
    let mut builder = MessageBuilder::new(&inbox, config.message_size);
    let mut msg_id = String::with_capacity(config.msg_id_prefix.len() + 20);
    let mut id_digits = [0u8; 20];
    let mut report = SendReport {
        sent: 0,
        first_error: None,
        stalled: None,
        interrupted: false,
        send_lag: Recorder::new(),
        timeline: Timeline::per_second(config.timeline_origin_ns),
        first_sent_ns: 0,
        last_sent_ns: 0,
        last_intended_ns: 0,
    };

    for k in 0..schedule.count() {
        if stop.is_cancelled() {
            report.interrupted = true;
            break;
        }
        if let Err(stall) = wait_for_window(&shared, k, config.window, config.pub_ack_timeout).await
        {
            report.stalled = Some(stall);
            break;
        }
        let intended = match schedule.intended_ns(k) {
            Some(t) => {
                pacer.wait_until(t);
                t
            }
            None => clock::now_ns(),
        };
        let sent = clock::now_ns();
        let slot = shared.slot(k);
        slot.intended.store(intended, Ordering::Relaxed);
        slot.sent.store(sent, Ordering::Relaxed);
        slot.seq.store(k, Ordering::Release);

        let (payload, reply) = builder.build(Stamp {
            intended_ns: intended,
            sent_ns: sent,
            publisher: config.index,
            publisher_seq: k,
        });
        let result = match config.msg_id {
            MsgId::None => {
                client
                    .publish_with_reply(subject.clone(), reply, payload)
                    .await
            }
            MsgId::Unique => {
                msg_id.clear();
                msg_id.push_str(&config.msg_id_prefix);
                msg_id.push_str(std::str::from_utf8(decimal(k, &mut id_digits)).expect("digits"));
                let mut headers = HeaderMap::new();
                headers.insert(
                    async_nats::header::NATS_MESSAGE_ID,
                    HeaderValue::from(msg_id.as_str()),
                );
                client
                    .publish_with_reply_and_headers(subject.clone(), reply, headers, payload)
                    .await
            }
        };
        if let Err(e) = result {
            report.first_error = Some(format!("publish failed: {e}"));
            break;
        }
        if report.sent == 0 {
            report.first_sent_ns = sent;
        }
        report.sent += 1;
        report.last_sent_ns = sent;
        report.last_intended_ns = intended;
        shared.progress.sent.store(report.sent, Ordering::Relaxed);
        if intended >= config.record_from_ns {
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
    message_size: usize,
}

impl MessageBuilder {
    /// `inbox` is the publisher's PubAck inbox; replies go to `<inbox>.<n>`.
    pub fn new(inbox: &str, message_size: usize) -> Self {
        MessageBuilder {
            arena: BytesMut::with_capacity(64 * 1024),
            reply_prefix: format!("{inbox}.").into_bytes(),
            message_size,
        }
    }

    /// The payload (stamp, then filler) and the reply subject for one message.
    #[inline]
    pub fn build(&mut self, stamp: Stamp) -> (Bytes, Subject) {
        let mut digits = [0u8; 20];
        self.arena
            .reserve(self.message_size + self.reply_prefix.len() + digits.len());
        let mut head = [0u8; STAMP_LEN];
        stamp.write(&mut head);
        self.arena.extend_from_slice(&head);
        self.arena.put_bytes(b'.', self.message_size - STAMP_LEN);
        let payload = self.arena.split().freeze();
        self.arena.extend_from_slice(&self.reply_prefix);
        self.arena
            .extend_from_slice(decimal(stamp.publisher_seq, &mut digits));
        let reply = Subject::try_from(self.arena.split().freeze()).expect("ASCII reply subject");
        (payload, reply)
    }
}

/// Waits until fewer than `window` PubAcks are outstanding. Fails when no
/// response arrives for `timeout` while the window is full.
async fn wait_for_window(
    shared: &Shared,
    sent: u64,
    window: usize,
    timeout: Duration,
) -> Result<(), String> {
    loop {
        let responses = shared.progress.responses.load(Ordering::Acquire);
        if sent - responses < window as u64 {
            return Ok(());
        }
        // notify_one stores a permit when nobody waits, so a response that
        // lands between the load above and this wait is not missed.
        if tokio::time::timeout(timeout, shared.window_open.notified())
            .await
            .is_err()
            && shared.progress.responses.load(Ordering::Acquire) == responses
        {
            return Err(format!(
                "no PubAck arrived for {timeout:?} with {} outstanding",
                sent - responses
            ));
        }
    }
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
    Stored { seq: u64, duplicate: bool },
    Failed(String),
}

fn classify(message: &async_nats::Message) -> Response {
    if let Some(status) = message.status {
        if status == async_nats::StatusCode::NO_RESPONDERS {
            return Response::Failed(
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
        Ok(PubAckWire { error: Some(e), .. }) => Response::Failed(format!(
            "JetStream error {} ({}): {}",
            e.code, e.err_code, e.description
        )),
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
        errors: 0,
        first_error: None,
        missing: 0,
        from_intended: Recorder::new(),
        from_sent: Recorder::new(),
        ledger: LedgerShard::with_capacity(
            config.schedule.total_messages,
            &[Event::Persisted, Event::Duplicate],
        ),
    };
    loop {
        let finished = shared.finished.load(Ordering::Acquire);
        if finished != u64::MAX && report.responses >= finished {
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
                    report.missing = finished - report.responses;
                    break;
                }
            }
        };
        let Some(message) = next else {
            report
                .first_error
                .get_or_insert_with(|| "the PubAck subscription closed".into());
            if finished != u64::MAX {
                report.missing = finished.saturating_sub(report.responses);
            }
            break;
        };
        let now = clock::now_ns();
        let token = message.subject.rsplit('.').next().unwrap_or("");
        let k: Option<u64> = token.parse().ok();
        match classify(&message) {
            Response::Stored { seq, duplicate } => {
                if duplicate {
                    report.duplicates += 1;
                    report.ledger.mark(seq, Event::Duplicate);
                } else {
                    report.acked += 1;
                    report.ledger.mark(seq, Event::Persisted);
                }
                if let Some(k) = k {
                    let slot = shared.slot(k);
                    if slot.seq.load(Ordering::Acquire) == k {
                        let intended = slot.intended.load(Ordering::Relaxed);
                        let sent = slot.sent.load(Ordering::Relaxed);
                        if intended >= config.record_from_ns {
                            report.from_intended.record_between(intended, now);
                            report.from_sent.record_between(sent, now);
                        }
                    }
                }
            }
            Response::Failed(text) => {
                report.errors += 1;
                report.first_error.get_or_insert(text);
            }
        }
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
        let mut builder = MessageBuilder::new("_INBOX.abc", 40);
        let stamp = Stamp {
            intended_ns: 1,
            sent_ns: 2,
            publisher: 3,
            publisher_seq: 1234,
        };
        let (payload, reply) = builder.build(stamp);
        assert_eq!(payload.len(), 40);
        assert_eq!(Stamp::read(&payload), Some(stamp));
        assert_eq!(reply.as_str(), "_INBOX.abc.1234");
        let (second, _) = builder.build(stamp);
        assert_eq!(payload, second, "earlier messages are not overwritten");
    }

    #[test]
    fn decimal_digits() {
        let mut buf = [0u8; 20];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(1_234_567, &mut buf), b"1234567");
        assert_eq!(decimal(u64::MAX, &mut buf), b"18446744073709551615");
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
        match classify(&message("garbage")) {
            Response::Failed(text) => assert!(text.contains("unreadable"), "{text}"),
            _ => panic!("garbage"),
        }
    }
}
