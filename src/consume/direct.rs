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

use super::group::ack_tokens_of;
use super::{
    Answer, Arrival, ConsumerConfig, ConsumerProgress, ConsumerReport, Effect, Finished,
    SeenMessage, note_arrival, record_answer,
};
use crate::connect::ConnectSettings;
use crate::profile::{AckPolicy, Action, ConsumerClient, ConsumerKind, ProcessingPlan};
use crate::record::clock;
use crate::record::ledger::Event;
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
    Ok(state.into_report())
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
async fn finish(state: &mut Direct, writer: &mut wire::Writer, lost: Option<anyhow::Error>) {
    let mut lost = lost;
    if lost.is_none() {
        state.cover_tail(writer.buf());
        let answered_ns = clock::now_ns();
        match writer.flush().await {
            Ok(()) => state.flushed(answered_ns),
            Err(e) => lost = Some(e),
        }
    }
    if let Some(e) = lost {
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
    progress: Arc<ConsumerProgress>,
    report: ConsumerReport,
    finished: Finished,
    answered: u64,
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
}

impl Direct {
    pub fn new(config: ConsumerConfig, progress: Arc<ConsumerProgress>, inbox: &[u8]) -> Direct {
        let mut report = ConsumerReport::empty(&config);
        report.client = ConsumerClient::Direct.label().into();
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
        let pull_subject = format!(
            "{}.CONSUMER.MSG.NEXT.{}.{}",
            config.js_api_prefix, config.stream, config.durable
        )
        .into_bytes();
        let batch = plan.batch as u64;
        let ahead = plan.pulls_ahead.max(1) as u64;
        Direct {
            low_water: (ahead * batch - batch / 2).max(1),
            config,
            progress,
            report,
            finished: Finished::default(),
            answered: 0,
            inbox: inbox.to_vec(),
            pull_subject,
            request,
            owed: 0,
            heartbeat,
            heard: false,
            silent: 0,
            unflushed: Vec::with_capacity(4096),
            tail: Vec::new(),
            tail_arrival: None,
            fatal: None,
        }
    }

    /// Messages the pull requests in flight may still bring.
    pub fn owed(&self) -> u64 {
        self.owed
    }

    pub fn report(&self) -> &ConsumerReport {
        &self.report
    }

    pub fn into_report(self) -> ConsumerReport {
        self.report
    }

    /// Why the consumer ended on its own, if it did.
    pub fn fatal(&self) -> Option<&str> {
        self.fatal.as_deref()
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
            self.report.first_error.get_or_insert_with(|| {
                "direct consumer: missed idle heartbeats; pull requests re-issued".into()
            });
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
        let fatal = text == "Consumer Deleted"
            || text == "Consumer is push based"
            || text.starts_with("Exceeded MaxRequest");
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
            published_ns: if config.log_events {
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
        self.progress
            .received
            .store(self.report.received, Ordering::Relaxed);
        match self.config.plan.ack {
            AckPolicy::Explicit => {
                frame::put_pub(out, m.reply, b"", b"+ACK");
                self.unflushed.push(sent);
            }
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
                self.end_unanswered();
            }
            AckPolicy::None => self.end_unanswered(),
        }
    }

    /// A delivery that needs no answer of its own ends its message.
    fn end_unanswered(&mut self) {
        self.finished.count += 1;
        self.answered += 1;
        self.progress
            .finished
            .store(self.finished.count, Ordering::Relaxed);
        self.progress
            .answered
            .store(self.answered, Ordering::Relaxed);
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
            self.answered += 1;
            let answer = Answer {
                seq: sent.seq,
                delivery: sent.delivery,
                published_ns: sent.published_ns,
                received_ns: sent.received_ns,
                answered_ns,
                action: Action::Ack,
                result: Ok(()),
                ack_rtt_ns: None,
                effect: Some((Effect::Applied, None)),
            };
            record_answer(
                &self.config,
                &mut self.report,
                &mut self.finished,
                &self.progress,
                answer,
            );
        }
        self.progress
            .answered
            .store(self.answered, Ordering::Relaxed);
        self.unflushed.clear();
    }
}

/// A doomed delivery's copy (the dlq audit's), as the async-nats loop
/// keeps it.
fn seen(m: &Msg<'_>, seq: u64) -> SeenMessage {
    let mut headers: Vec<(String, String)> = m
        .headers
        .split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            let value = String::from_utf8_lossy(&line[colon + 1..]);
            Some((
                String::from_utf8_lossy(&line[..colon]).into_owned(),
                value.trim_start().to_string(),
            ))
        })
        .collect();
    headers.sort();
    SeenMessage {
        seq,
        subject: String::from_utf8_lossy(m.subject).into_owned(),
        payload: m.payload.to_vec(),
        headers,
    }
}
