//! The direct consumer: a pull consumer read on its own [`crate::wire`]
//! connection, for the variants where the client's own cost is what
//! limits the figures.
//!
//! async-nats builds a `Message` per delivery (subject, reply, headers
//! allocated), hands it through a channel to the consumer's task, and sends
//! each ack through another channel to its connection task, which wakes to
//! write it: about 2-3 µs of client CPU a delivery (NOTES-async-nats.md).
//! Here one read brings many deliveries; each is parsed in place, gets the
//! same bookkeeping as the async-nats loop's ([`super::note_arrival`],
//! [`super::record_answer`]) and its `+ACK` appended to one buffer, and
//! everything the read produced leaves in one write from this task.
//!
//! It does the job only where every delivery is answered with the ack
//! policy's ack at once ([`unsuited`] says where not); everything else
//! stays on async-nats. It does not reconnect: a lost connection ends it
//! with an error naming it, and acks not yet written are not counted.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, anyhow};
use tokio_util::sync::CancellationToken;

use super::reference::ends_consumer;
use super::{
    Answer, Arrival, ConsumerConfig, ConsumerProgress, ConsumerReport, Effect, Finished, Reply,
    SeenMessage, note_arrival, record_answer,
};
use crate::connect::ConnectSettings;
use crate::profile::{AckPolicy, Action, ConsumerClient, ConsumerKind, ProcessingPlan};
use crate::record::clock;
use crate::record::ledger::Event;
use crate::wire::jetstream::{ack_tokens_of, next_subject};
use crate::wire::{self, Frame, Msg, frame};

/// The subscription id of the inbox every pull request is answered on.
const SID: u64 = 1;

/// What the variant does around its consumers that a connection without
/// reconnects cannot live through.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hazards {
    /// The variant kills, restarts or cuts off a server.
    pub server_fault: bool,
    /// A client of the variant crashes as planned (and one replaces it).
    pub crash: bool,
}

/// Why the direct client cannot read for `config` (`None`: it can): it
/// answers every delivery with the ack policy's ack at once, on a pull
/// consumer, over plain TCP, on a server nobody faults.
pub fn unsuited(
    config: &ConsumerConfig,
    settings: &ConnectSettings,
    hazards: Hazards,
) -> Option<&'static str> {
    let plan = &config.plan;
    let behaviour = &config.behaviour;
    let acks_at_once = behaviour.processing == ProcessingPlan::Fixed(Duration::ZERO)
        && behaviour
            .classes
            .iter()
            .all(|c| c.then == Action::Ack && c.script.iter().all(|a| *a == Action::Ack));
    if plan.kind != ConsumerKind::Pull {
        Some("it reads pull consumers only (kind = \"pull\")")
    } else if plan.double_ack {
        Some("it does not confirm acks: double acks stay with async-nats")
    } else if plan.pull.max_bytes.is_some() {
        Some("it counts messages, not bytes: max_bytes stays with async-nats")
    } else if !acks_at_once {
        Some("the behaviour plan holds, naks, terms or ignores deliveries")
    } else if config.crash.is_some() || hazards.crash {
        Some("a planned client crash needs async-nats")
    } else if config.outage.is_some() {
        Some("a dependency outage answers with other than acks")
    } else if config.dedup.is_some() {
        Some("an idempotent consumer's dedup store needs async-nats")
    } else if settings.tls.required {
        Some("it speaks plain TCP and these settings require TLS")
    } else if hazards.server_fault {
        Some("it does not reconnect, and this variant restarts or cuts the server")
    } else {
        None
    }
}

/// Whether the direct client reads for `config`: `auto` where it can,
/// never with `async-nats`, and an error naming the key where `direct` was
/// asked and cannot apply.
pub fn chosen(
    config: &ConsumerConfig,
    settings: &ConnectSettings,
    hazards: Hazards,
) -> Result<bool> {
    let reason = unsuited(config, settings, hazards);
    match config.plan.client {
        ConsumerClient::AsyncNats => Ok(false),
        ConsumerClient::Auto => Ok(reason.is_none()),
        ConsumerClient::Direct => match reason {
            None => Ok(true),
            Some(why) => Err(anyhow!(
                "scenario.consumer.client = \"direct\" cannot apply to durable {}: {why}",
                config.durable
            )),
        },
    }
}

/// Reads the durable until `stop` is cancelled, on a connection of its own.
pub async fn run(
    settings: ConnectSettings,
    config: ConsumerConfig,
    progress: Arc<ConsumerProgress>,
    stop: CancellationToken,
) -> Result<ConsumerReport> {
    run_with(settings, config, progress, stop, Sabotage::default()).await
}

/// A fault made on purpose, for the tests that must see what the direct
/// client loses reported as its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sabotage {
    /// Acks written at most; the deliveries after go unanswered.
    pub acks_at_most: Option<u64>,
}

/// [`run`] with a [`Sabotage`].
pub async fn run_with(
    settings: ConnectSettings,
    config: ConsumerConfig,
    progress: Arc<ConsumerProgress>,
    stop: CancellationToken,
    sabotage: Sabotage,
) -> Result<ConsumerReport> {
    let role = format!("consumer-{} direct", config.index);
    let wire::Connection {
        mut reader,
        mut writer,
        ..
    } = wire::connect(&settings, &role).await?;
    let inbox = format!(
        "{}.{}",
        settings.inbox_prefix.as_deref().unwrap_or("_INBOX"),
        unique_token()
    );
    let mut state = Direct::new(config, progress, inbox.as_bytes());
    state.acks_left = sabotage.acks_at_most.unwrap_or(u64::MAX);
    frame::put_sub(writer.buf(), &state.inbox, SID);
    state.top_up(writer.buf());
    let beat = state.heartbeat;
    let watchdog = tokio::time::sleep(beat);
    tokio::pin!(watchdog);
    let lost = loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break None,
            read = reader.fill() => if let Err(e) = read {
                break Some(e);
            },
            _ = &mut watchdog => {
                state.watch(clock::now_ns(), writer.buf());
                watchdog.as_mut().reset(tokio::time::Instant::now() + beat);
            }
        }
        let out = writer.buf();
        let drained = drain_frames(&mut reader, &mut state, out, &settings);
        if let Err(e) = drained {
            break Some(e);
        }
        state.top_up(writer.buf());
        let answered_ns = clock::now_ns();
        if let Err(e) = writer.flush().await {
            break Some(e);
        }
        state.flushed(answered_ns);
        if state.fatal.is_some() {
            break None;
        }
    };
    finish(&mut state, &mut writer, lost).await;
    Ok(state.report)
}

/// Every whole frame one read brought, handled in order.
fn drain_frames(
    reader: &mut wire::Reader,
    state: &mut Direct,
    out: &mut Vec<u8>,
    settings: &ConnectSettings,
) -> Result<()> {
    while let Some(frame) = reader.try_next()? {
        if let Frame::Err(text) = &frame {
            settings.note_refusal(text);
        }
        state.on_frame(frame, out, clock::now_ns());
    }
    Ok(())
}

/// The end: an ack = "all" tail covered, acks written; a lost connection
/// recorded as this client's error.
async fn finish(state: &mut Direct, writer: &mut wire::Writer, mut lost: Option<anyhow::Error>) {
    if lost.is_none() {
        state.cover_tail(writer.buf());
        let answered_ns = clock::now_ns();
        match writer.flush().await {
            Ok(()) => state.flushed(answered_ns),
            Err(e) => lost = Some(e),
        }
    }
    if let Some(e) = lost {
        state.report.stream_errors += 1;
        state.error(format!(
            "the direct consumer's connection failed ({} acks not written): {e:#}",
            state.unflushed.len()
        ));
    }
}

/// A token no other inbox of this process or another has.
fn unique_token() -> String {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "jsbd{}{}{}",
        std::process::id(),
        clock::now_ns() % 1_000_000_007,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// An ack appended since the last write: recorded once it is written.
#[derive(Debug, Clone, Copy)]
struct Unflushed {
    seq: u64,
    delivery: u32,
    published_ns: u64,
    received_ns: u64,
    /// An ack = "all" ack covering earlier deliveries (ledger only), or an
    /// explicit one (a whole answer).
    covering: bool,
}

/// The frame-driven state: what one read's frames do, apart from the
/// socket so a test can feed it frames.
pub struct Direct {
    config: ConsumerConfig,
    report: ConsumerReport,
    finished: Finished,
    inbox: Vec<u8>,
    pull_subject: Vec<u8>,
    /// One pull request's JSON, built once.
    request: Vec<u8>,
    /// Messages the requests in flight may still bring.
    owed: u64,
    /// A request goes out while fewer than this many are owed.
    low_water: u64,
    heartbeat: Duration,
    /// Any frame from the server since the watchdog last looked.
    heard: bool,
    /// Watchdog looks without a frame.
    silent: u32,
    unflushed: Vec<Unflushed>,
    /// With ack = "all": the latest delivery no ack has covered yet.
    tail: Vec<u8>,
    tail_arrival: Option<Unflushed>,
    /// Set by a status that ends the consumer (its durable deleted, a
    /// request the server will always refuse).
    fatal: Option<String>,
    /// Explicit acks still to write ([`Sabotage`]; unbounded otherwise).
    acks_left: u64,
}

impl Direct {
    pub fn new(config: ConsumerConfig, progress: Arc<ConsumerProgress>, inbox: &[u8]) -> Direct {
        let mut report = ConsumerReport::empty(&config);
        report.client = ConsumerClient::Direct.name().into();
        let plan = &config.plan;
        let heartbeat = plan.pull.idle_heartbeat.unwrap_or(super::source::HEARTBEAT);
        let expires = plan.pull.expires.unwrap_or(super::source::PULL_EXPIRES);
        let request = format!(
            "{{\"batch\":{},\"expires\":{},\"idle_heartbeat\":{}}}",
            plan.batch,
            expires.as_nanos(),
            heartbeat.as_nanos()
        )
        .into_bytes();
        let pull_subject = next_subject(&config.js_api_prefix, &config.stream, &config.durable);
        let batch = plan.batch as u64;
        let ahead = plan.pulls_ahead.max(1) as u64;
        Direct {
            low_water: (ahead * batch - batch / 2).max(1),
            config,
            report,
            finished: Finished::new(progress),
            inbox: inbox.to_vec(),
            pull_subject: pull_subject.into_bytes(),
            request,
            owed: 0,
            heartbeat,
            heard: false,
            silent: 0,
            unflushed: Vec::with_capacity(4096),
            tail: Vec::new(),
            tail_arrival: None,
            fatal: None,
            acks_left: u64::MAX,
        }
    }

    pub fn report(&self) -> &ConsumerReport {
        &self.report
    }

    /// Appends pull requests until enough messages are owed.
    pub fn top_up(&mut self, out: &mut Vec<u8>) {
        if self.fatal.is_some() {
            return;
        }
        while self.owed < self.low_water {
            frame::put_pub(out, &self.pull_subject, &self.inbox, &self.request);
            self.owed += self.config.plan.batch as u64;
        }
    }

    /// The watchdog's look, once per heartbeat: two without a frame mean
    /// the requests are gone (their server restarted, a new leader), so
    /// they are counted released and new ones go out.
    pub fn watch(&mut self, _now: u64, out: &mut Vec<u8>) {
        if std::mem::take(&mut self.heard) {
            self.silent = 0;
            return;
        }
        self.silent += 1;
        if self.silent >= 2 {
            self.silent = 0;
            self.report.stream_errors += 1;
            self.error("direct consumer: missed idle heartbeats; pull requests re-issued".into());
            self.owed = 0;
            self.top_up(out);
        }
    }

    /// One frame from the server; what it calls for is appended to `out`.
    pub fn on_frame(&mut self, frame: Frame<'_>, out: &mut Vec<u8>, now: u64) {
        self.heard = true;
        match frame {
            Frame::Msg(m) => match m.status() {
                None => self.on_delivery(&m, out, now),
                Some((code, text)) => self.on_status(code, text, &m),
            },
            Frame::Ping => out.extend_from_slice(b"PONG\r\n"),
            Frame::Err(text) => {
                self.report.stream_errors += 1;
                self.error(format!("the server answered -ERR '{text}'"));
            }
            Frame::Pong | Frame::Ok | Frame::Info(_) => {}
        }
    }

    fn error(&mut self, text: String) {
        self.report.first_error.get_or_insert(text);
    }

    /// A pull request's status: a heartbeat, a request ended (what it still
    /// owed released), or the end of this consumer.
    fn on_status(&mut self, code: u16, text: &[u8], m: &Msg<'_>) {
        let text = String::from_utf8_lossy(text);
        let fatal = ends_consumer(&text);
        match code {
            100 => {}
            404 | 408 | 409 if !fatal => {
                let left = m
                    .header(b"Nats-Pending-Messages")
                    .and_then(frame::parse_u64)
                    .unwrap_or(self.config.plan.batch as u64);
                self.owed = self.owed.saturating_sub(left);
            }
            _ => {
                self.report.stream_errors += 1;
                let why = format!(
                    "direct consumer of {}: pull answered {code} {text}",
                    self.config.durable
                );
                self.error(why.clone());
                self.fatal = Some(why);
            }
        }
    }

    /// A delivery: its bookkeeping, then its ack appended as the policy
    /// says.
    #[inline]
    fn on_delivery(&mut self, m: &Msg<'_>, out: &mut Vec<u8>, now: u64) {
        self.owed = self.owed.saturating_sub(1);
        let Some(tokens) = ack_tokens_of(m.reply) else {
            self.report.malformed += 1;
            let reply = String::from_utf8_lossy(m.reply).into_owned();
            self.error(format!("unreadable reply subject: {reply:?}"));
            return;
        };
        let config = &self.config;
        let arrival = Arrival {
            seq: tokens.stream_seq,
            delivery: tokens.delivered.max(1) as u32,
            published_ns: if config.log_events || config.hops {
                tokens.timestamp_ns
            } else {
                0
            },
            payload: m.payload,
        };
        let sent = Unflushed {
            seq: arrival.seq,
            delivery: arrival.delivery,
            published_ns: arrival.published_ns,
            received_ns: now,
            covering: false,
        };
        note_arrival(config, &mut self.report, arrival, now, || seen(m, sent.seq));
        self.finished
            .progress
            .received
            .store(self.report.received, Ordering::Relaxed);
        match self.config.plan.ack {
            AckPolicy::Explicit if self.acks_left > 0 => {
                self.acks_left -= 1;
                frame::put_pub(out, m.reply, b"", b"+ACK");
                self.unflushed.push(sent);
            }
            AckPolicy::Explicit => {}
            AckPolicy::All => {
                if self
                    .report
                    .received
                    .is_multiple_of(self.config.plan.ack_every as u64)
                {
                    frame::put_pub(out, m.reply, b"", b"+ACK");
                    self.unflushed.push(Unflushed {
                        covering: true,
                        ..sent
                    });
                    self.tail_arrival = None;
                } else {
                    self.tail.clear();
                    self.tail.extend_from_slice(m.reply);
                    self.tail_arrival = Some(sent);
                }
                self.finished.end_unanswered();
            }
            AckPolicy::None => self.finished.end_unanswered(),
        }
    }

    /// With ack = "all": the ack that covers the last deliveries.
    pub fn cover_tail(&mut self, out: &mut Vec<u8>) {
        if let Some(sent) = self.tail_arrival.take() {
            frame::put_pub(out, &self.tail, b"", b"+ACK");
            self.unflushed.push(Unflushed {
                covering: true,
                ..sent
            });
        }
    }

    /// The acks appended since the last write are written: each is
    /// recorded as the async-nats loop records a sent ack.
    pub fn flushed(&mut self, answered_ns: u64) {
        for i in 0..self.unflushed.len() {
            let sent = self.unflushed[i];
            if sent.covering {
                self.report.ledger.mark(sent.seq, Event::Acked);
                continue;
            }
            self.finished.answered += 1;
            let answer = Answer {
                seq: sent.seq,
                delivery: sent.delivery,
                published_ns: sent.published_ns,
                received_ns: sent.received_ns,
                answered_ns,
                action: Action::Ack,
                reply: Reply::Sent,
                ack_rtt_ns: None,
                effect: Some((Effect::Applied, None)),
            };
            record_answer(&self.config, &mut self.report, &mut self.finished, answer);
        }
        let finished = &self.finished;
        finished
            .progress
            .answered
            .store(finished.answered, Ordering::Relaxed);
        self.unflushed.clear();
    }
}

/// A doomed delivery's copy (the dlq audit's), as the async-nats loop
/// keeps it.
fn seen(m: &Msg<'_>, seq: u64) -> SeenMessage {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut headers: Vec<(String, String)> =
        m.header_lines().map(|(n, v)| (text(n), text(v))).collect();
    headers.sort();
    SeenMessage {
        seq,
        subject: text(m.subject),
        payload: m.payload.to_vec(),
        headers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{BehaviourPlan, ConsumerPlan, MessageClass};
    use crate::record::stamp::{STAMP_LEN, Stamp};

    fn config(ack: AckPolicy) -> ConsumerConfig {
        let mut plan = ConsumerPlan::simple();
        plan.ack = ack;
        plan.batch = 10;
        plan.pulls_ahead = 1;
        ConsumerConfig {
            plan,
            log_events: true,
            ..ConsumerConfig::acking_all("S", 16, 0)
        }
    }

    fn direct(ack: AckPolicy) -> (Direct, Arc<ConsumerProgress>) {
        let progress = Arc::new(ConsumerProgress::default());
        (
            Direct::new(config(ack), progress.clone(), b"_INBOX.t"),
            progress,
        )
    }

    /// A delivery of stream sequence `seq` as the server frames it.
    fn delivery(seq: u64, delivered: u64) -> Vec<u8> {
        let mut payload = vec![0u8; STAMP_LEN + 4];
        Stamp {
            intended_ns: 1,
            sent_ns: 2,
            publisher: 0,
            publisher_seq: seq,
        }
        .write(&mut payload);
        let reply = format!("$JS.ACK.S.D.{delivered}.{seq}.{seq}.1700000000000000000.0");
        let mut out = format!("MSG s.0 1 {reply} {}\r\n", payload.len()).into_bytes();
        out.extend_from_slice(&payload);
        out.extend_from_slice(b"\r\n");
        out
    }

    fn status(code: u16, text: &str, headers: &str) -> Vec<u8> {
        let block = format!("NATS/1.0 {code} {text}\r\n{headers}\r\n");
        format!(
            "HMSG _INBOX.t 1 {} {}\r\n{block}\r\n",
            block.len(),
            block.len()
        )
        .into_bytes()
    }

    /// Feeds every frame of `bytes`; returns what the consumer wrote.
    fn feed(d: &mut Direct, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(head) = frame::parse(&bytes[at..]).unwrap() {
            let whole = &bytes[at..at + head.len];
            d.on_frame(frame::lend(whole, head), &mut out, 100);
            at += head.len;
        }
        assert_eq!(at, bytes.len(), "every frame whole");
        out
    }

    fn text(out: &[u8]) -> String {
        String::from_utf8_lossy(out).into_owned()
    }

    #[test]
    fn each_delivery_is_acked_in_one_buffer_and_counted_once_written() {
        let (mut d, progress) = direct(AckPolicy::Explicit);
        let mut out = Vec::new();
        d.top_up(&mut out);
        // One request ahead at half the batch: 10 owed, 1 request.
        assert_eq!(d.owed, 10);
        assert_eq!(
            text(&out),
            "PUB $JS.API.CONSUMER.MSG.NEXT.S.D _INBOX.t 62\r\n\
             {\"batch\":10,\"expires\":10000000000,\"idle_heartbeat\":1000000000}\r\n"
        );
        let bytes = [delivery(1, 1), delivery(2, 1), delivery(3, 2)].concat();
        let out = feed(&mut d, &bytes);
        assert_eq!(
            text(&out),
            "PUB $JS.ACK.S.D.1.1.1.1700000000000000000.0 4\r\n+ACK\r\n\
             PUB $JS.ACK.S.D.1.2.2.1700000000000000000.0 4\r\n+ACK\r\n\
             PUB $JS.ACK.S.D.2.3.3.1700000000000000000.0 4\r\n+ACK\r\n"
        );
        assert_eq!(d.owed, 7);
        let r = d.report();
        assert_eq!((r.received, r.redeliveries, r.malformed), (3, 1, 0));
        assert_eq!(r.ledger.count(2, Event::Delivered), 1);
        // Not written yet: not acked, still in the client's hands.
        assert_eq!(r.ledger.count(2, Event::Acked), 0);
        assert_eq!(progress.answered.load(Ordering::Relaxed), 0);
        d.flushed(500);
        let r = d.report();
        assert_eq!(r.ledger.count(2, Event::Acked), 1);
        assert_eq!(progress.answered.load(Ordering::Relaxed), 3);
        assert_eq!(progress.finished.load(Ordering::Relaxed), 3);
        assert_eq!(r.events.len(), 3);
        assert_eq!(r.events[0].answered_ns, 500);
        assert_eq!(r.events[0].published_ns, 1_700_000_000_000_000_000);
        assert_eq!(r.client, "direct");
        // Below half the batch owed: the next request goes out.
        let mut out = Vec::new();
        d.top_up(&mut out);
        assert!(out.is_empty(), "7 owed of 10: no request yet");
        feed(
            &mut d,
            &[delivery(4, 1), delivery(5, 1), delivery(6, 1)].concat(),
        );
        d.top_up(&mut out);
        assert_eq!(d.owed, 14);
        assert_eq!(text(&out).matches("MSG.NEXT").count(), 1);
    }

    #[test]
    fn ack_all_acks_every_kth_and_covers_the_tail_at_the_end() {
        let (mut d, progress) = direct(AckPolicy::All);
        d.config.plan.ack_every = 2;
        let bytes: Vec<u8> = (1..=5).flat_map(|s| delivery(s, 1)).collect();
        let mut out = feed(&mut d, &bytes);
        assert_eq!(text(&out).matches("+ACK").count(), 2);
        assert!(text(&out).contains("$JS.ACK.S.D.1.4.4."));
        d.cover_tail(&mut out);
        assert_eq!(text(&out).matches("+ACK").count(), 3);
        assert!(text(&out).ends_with("$JS.ACK.S.D.1.5.5.1700000000000000000.0 4\r\n+ACK\r\n"));
        d.flushed(1);
        assert_eq!(d.report().ledger.count(5, Event::Acked), 1);
        assert_eq!(d.report().ledger.count(3, Event::Acked), 0);
        assert_eq!(progress.finished.load(Ordering::Relaxed), 5);
        // Covered once: a second end writes nothing more.
        let mut more = Vec::new();
        d.cover_tail(&mut more);
        assert!(more.is_empty());
    }

    #[test]
    fn ack_none_writes_nothing_and_ends_each_message() {
        let (mut d, progress) = direct(AckPolicy::None);
        let out = feed(&mut d, &[delivery(1, 1), delivery(2, 1)].concat());
        assert!(out.is_empty());
        d.flushed(1);
        assert_eq!(progress.finished.load(Ordering::Relaxed), 2);
        assert_eq!(d.report().ledger.count(1, Event::Acked), 0);
    }

    #[test]
    fn statuses_release_what_their_request_owed_and_pings_are_answered() {
        let (mut d, _) = direct(AckPolicy::Explicit);
        d.config.plan.pulls_ahead = 3;
        d.low_water = 25;
        let mut out = Vec::new();
        d.top_up(&mut out);
        assert_eq!(d.owed, 30, "three requests of 10");
        let out = feed(&mut d, &status(100, "Idle Heartbeat", ""));
        assert!(out.is_empty());
        assert_eq!(d.owed, 30);
        feed(
            &mut d,
            &status(
                408,
                "Request Timeout",
                "Nats-Pending-Messages: 7\r\nNats-Pending-Bytes: 0\r\n",
            ),
        );
        assert_eq!(d.owed, 23);
        // Without the count: the whole batch.
        feed(&mut d, &status(409, "Leadership Change", ""));
        assert_eq!(d.owed, 13);
        feed(&mut d, &status(404, "No Messages", ""));
        assert_eq!(d.owed, 3);
        assert_eq!(feed(&mut d, b"PING\r\n"), b"PONG\r\n");
        assert!(d.fatal.is_none());
        assert_eq!(d.report().stream_errors, 0);
    }

    #[test]
    fn a_deleted_consumer_or_a_refused_request_ends_it_with_the_reason() {
        for (code, why) in [
            (409, "Consumer Deleted"),
            (409, "Exceeded MaxRequestBatch of 5"),
            (503, ""),
        ] {
            let (mut d, _) = direct(AckPolicy::Explicit);
            feed(&mut d, &status(code, why, ""));
            let fatal = d.fatal.clone().expect("fatal");
            assert!(fatal.contains(&format!("{code} {why}")), "{fatal}");
            assert!(fatal.contains("direct consumer of D"), "{fatal}");
            let mut out = Vec::new();
            d.top_up(&mut out);
            assert!(out.is_empty(), "no more requests after {fatal}");
            assert_eq!(d.report().first_error.as_deref(), Some(fatal.as_str()));
        }
        let (mut d, _) = direct(AckPolicy::Explicit);
        feed(
            &mut d,
            b"-ERR 'Permissions Violation for Subscription to \"x\"'\r\n",
        );
        assert_eq!(d.report().stream_errors, 1);
        assert!(
            d.report()
                .first_error
                .as_deref()
                .unwrap()
                .contains("Permissions Violation")
        );
    }

    #[test]
    fn two_silent_heartbeats_reissue_the_requests() {
        let (mut d, _) = direct(AckPolicy::Explicit);
        let mut out = Vec::new();
        d.top_up(&mut out);
        feed(&mut d, &status(100, "Idle Heartbeat", ""));
        let mut out = Vec::new();
        d.watch(0, &mut out);
        d.watch(0, &mut out);
        assert!(out.is_empty(), "one silent look is not yet a loss");
        d.watch(0, &mut out);
        assert_eq!(text(&out).matches("MSG.NEXT").count(), 1);
        assert_eq!(d.owed, 10);
        assert_eq!(d.report().stream_errors, 1);
    }

    #[test]
    fn a_reply_that_is_not_an_ack_subject_is_malformed() {
        let (mut d, _) = direct(AckPolicy::Explicit);
        let out = feed(&mut d, b"MSG s 1 _INBOX.x 2\r\nhi\r\n");
        assert!(out.is_empty());
        assert_eq!(d.report().malformed, 1);
        assert_eq!(d.report().received, 0);
    }

    #[test]
    fn direct_is_chosen_only_where_it_can_do_the_job() {
        let settings =
            ConnectSettings::new("nats://127.0.0.1:4222", Duration::from_secs(1)).unwrap();
        let calm = Hazards::default();
        let mut c = config(AckPolicy::Explicit);
        assert!(chosen(&c, &settings, calm).unwrap());
        c.plan.client = ConsumerClient::AsyncNats;
        assert!(!chosen(&c, &settings, calm).unwrap());
        c.plan.client = ConsumerClient::Auto;
        let faulted = Hazards {
            server_fault: true,
            crash: false,
        };
        assert!(!chosen(&c, &settings, faulted).unwrap());
        let mut behaviour = BehaviourPlan::all_ack();
        behaviour.classes.push(MessageClass {
            name: "nak".into(),
            fraction: 0.1,
            script: vec![Action::Nak],
            then: Action::Ack,
        });
        c.behaviour = Arc::new(behaviour);
        assert!(!chosen(&c, &settings, calm).unwrap());
        c.plan.client = ConsumerClient::Direct;
        let e = chosen(&c, &settings, calm).unwrap_err().to_string();
        assert!(e.contains("scenario.consumer.client = \"direct\""), "{e}");
        assert!(e.contains("naks"), "{e}");
        let tls = ConnectSettings::new("tls://127.0.0.1:4222", Duration::from_secs(1)).unwrap();
        let c = config(AckPolicy::Explicit);
        assert!(!chosen(&c, &tls, calm).unwrap());
    }
}
