//! One delivery's work and its answer, as a handler runs them: the
//! processing time, the effect (through the dedup store for an idempotent
//! consumer), then the ack, nak, term or nothing the plan says.
//!
//! Apart from the run loop because this is what runs beside others when a
//! client has several handlers: it touches no recorder and locks nothing,
//! and hands back an [`Answer`] the loop records on its own task.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, Message};

use crate::profile::Action;
use crate::record::clock;
use crate::record::stamp::Stamp;

use super::ConsumerConfig;

/// What applying a delivery's work did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Effect {
    Applied,
    /// The dedup store already held the key: the work was done before.
    Suppressed,
    StoreFailed,
}

/// One delivery's answer, produced by the handler and recorded by the loop.
pub(super) struct Answer {
    pub(super) seq: u64,
    pub(super) delivery: u32,
    pub(super) published_ns: u64,
    pub(super) received_ns: u64,
    pub(super) answered_ns: u64,
    pub(super) action: Action,
    /// Whether the answer reached the server (or needed sending at all).
    pub(super) reply: Reply,
    pub(super) ack_rtt_ns: Option<u64>,
    /// What the work did, for deliveries whose work completed; with the
    /// dedup store's round trip.
    pub(super) effect: Option<(Effect, Option<u64>)>,
}

/// Whether a delivery's answer reached the server, and if not why: the
/// run loop counts every unsent answer as an ack error, but a crash keeps
/// the ones left unsent on purpose apart (their work was done).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// Sent, or none was needed (an ignored delivery).
    Sent,
    /// Left unanswered: the client crashed after the work, before the ack.
    Unacked,
    /// Left unanswered, so the server redelivers it: the work failed for
    /// want of its dedup store.
    StoreFailed,
    /// The ack, nak, term or progress did not reach the server.
    Failed(String),
}

impl Reply {
    /// Why the answer was not sent, as the report's first error says it;
    /// `None` when it was.
    pub(super) fn error(&self) -> Option<&str> {
        match self {
            Reply::Sent => None,
            Reply::Unacked => Some("crashed after processing, before the ack"),
            Reply::StoreFailed => Some("the dedup store failed: left for redelivery"),
            Reply::Failed(e) => Some(e),
        }
    }

    fn sent_or(result: Result<(), impl std::fmt::Display>, what: &str) -> Reply {
        match result {
            Ok(()) => Reply::Sent,
            Err(e) => Reply::Failed(format!("{what}: {e}")),
        }
    }
}

/// The key an idempotent consumer dedups by: the Nats-Msg-Id when the
/// publisher set one, else the business key the payload's stamp carries
/// (publisher and message number), which a republished copy keeps too.
fn business_key(message: &Message, seq: u64) -> String {
    let id = message
        .headers
        .as_ref()
        .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID));
    if let Some(id) = id {
        return id.as_str().to_string();
    }
    match Stamp::read(&message.payload) {
        Some(s) => format!("p{}-{}", s.publisher, s.publisher_seq),
        None => format!("seq-{seq}"),
    }
}

/// What a handler does with one delivery.
pub(super) struct Job {
    seq: u64,
    delivery: u32,
    published_ns: u64,
    received_ns: u64,
    action: Action,
    processing: Duration,
    double_ack: bool,
    /// When set after the work is done, the client is crashing: no answer.
    skip_ack: Option<Arc<AtomicBool>>,
    /// The dedup store and the message's key in it (idempotent consumers).
    dedup: Option<(Arc<jetstream::kv::Store>, String)>,
}

impl Job {
    /// The job of a delivery received at `now`: the behaviour plan's (or
    /// the outage's) answer, its processing time, its dedup key.
    pub(super) fn new(
        config: &ConsumerConfig,
        message: &Message,
        (seq, delivery, published_ns, now): (u64, u32, u64, u64),
        (dedup, skip_ack): (&Option<Arc<jetstream::kv::Store>>, &Arc<AtomicBool>),
    ) -> Job {
        Job {
            seq,
            delivery,
            published_ns,
            received_ns: now,
            action: config.action(seq, delivery, now),
            processing: config.behaviour.processing_time(seq, delivery),
            double_ack: config.plan.double_ack,
            skip_ack: config.crash.is_some().then(|| skip_ack.clone()),
            dedup: dedup
                .as_ref()
                .map(|s| (s.clone(), business_key(message, seq))),
        }
    }
}

/// Works on a delivery for its processing time, then answers as planned.
pub(super) async fn respond(message: Message, job: Job) -> Answer {
    if !job.processing.is_zero() {
        tokio::time::sleep(job.processing).await;
    }
    // Work that succeeded has its effect now (held work, after its hold).
    let mut effect = None;
    if job.action == Action::Ack {
        effect = Some(apply(&job).await);
    }
    let mut a = if effect.is_some_and(|(e, _)| e == Effect::StoreFailed) {
        answer(&job, job.received_ns, Reply::StoreFailed, None)
    } else if job
        .skip_ack
        .as_ref()
        .is_some_and(|s| s.load(Ordering::Acquire))
    {
        answer(&job, job.received_ns, Reply::Unacked, None)
    } else {
        answer_as_planned(&message, &job, &mut effect).await
    };
    a.effect = effect;
    a
}

/// The effect of a delivery's work: applied, or with a dedup store, its
/// key created first and the work suppressed when it already was.
async fn apply(job: &Job) -> (Effect, Option<u64>) {
    let Some((store, key)) = &job.dedup else {
        return (Effect::Applied, None);
    };
    let started = clock::now_ns();
    let effect = match store.create(key, bytes::Bytes::new()).await {
        Ok(_) => Effect::Applied,
        Err(e) if e.kind() == jetstream::kv::CreateErrorKind::AlreadyExists => Effect::Suppressed,
        Err(_) => Effect::StoreFailed,
    };
    (effect, Some(clock::now_ns() - started))
}

/// Answers as the plan says, once the work is done.
async fn answer_as_planned(
    message: &Message,
    job: &Job,
    effect: &mut Option<(Effect, Option<u64>)>,
) -> Answer {
    let kind = match job.action {
        Action::Ack => Some(AckKind::Ack),
        Action::Nak => Some(AckKind::Nak(None)),
        Action::NakDelay(d) => Some(AckKind::Nak(Some(d))),
        Action::Term => {
            // With a reason, which the MSG_TERMINATED advisory carries.
            let started = clock::now_ns();
            let result = term_with_reason(message, TERM_REASON, job.double_ack).await;
            let rtt = (job.double_ack && result.is_ok()).then(|| clock::now_ns() - started);
            return answer(job, started, Reply::sent_or(result, "term"), rtt);
        }
        Action::Ignore => None,
        Action::InProgressThenAck { hold, every } => {
            let until = tokio::time::Instant::now() + hold;
            loop {
                let next = tokio::time::Instant::now() + every;
                if next >= until {
                    tokio::time::sleep_until(until).await;
                    break;
                }
                tokio::time::sleep_until(next).await;
                if let Err(e) = message.ack_with(AckKind::Progress).await {
                    let failed = Reply::Failed(format!("in progress: {e}"));
                    return answer(job, job.received_ns, failed, None);
                }
            }
            let applied = apply(job).await;
            *effect = Some(applied);
            if applied.0 == Effect::StoreFailed {
                return answer(job, job.received_ns, Reply::StoreFailed, None);
            }
            Some(AckKind::Ack)
        }
    };
    let Some(kind) = kind else {
        return answer(job, job.received_ns, Reply::Sent, None);
    };
    let started = clock::now_ns();
    if job.double_ack {
        let result = message.double_ack_with(kind).await;
        let done = clock::now_ns();
        let rtt = result.is_ok().then_some(done - started);
        answer(job, started, Reply::sent_or(result, "double ack"), rtt)
    } else {
        let result = message.ack_with(kind).await;
        answer(job, started, Reply::sent_or(result, "ack"), None)
    }
}

/// The reason jsbench's consumers give when a behaviour plan terms a
/// message; the MSG_TERMINATED advisory must carry it back.
pub const TERM_REASON: &str = "jsbench: planned term";

/// A term with its reason, which the server puts in the MSG_TERMINATED
/// advisory (async-nats' `AckKind::Term` carries none); `double` waits for
/// the server to confirm it, as a double ack does.
pub async fn term_with_reason(
    message: &Message,
    reason: &str,
    double: bool,
) -> Result<(), async_nats::Error> {
    let reply = message
        .reply
        .clone()
        .ok_or("the message has no reply subject")?;
    let payload = bytes::Bytes::from(format!("+TERM {reason}"));
    let client = message.context.client();
    if double {
        let confirm = client.request(reply, payload);
        tokio::time::timeout(Duration::from_secs(5), confirm)
            .await
            .map_err(|_| "the server did not confirm the term within 5 s")??;
    } else {
        client.publish(reply, payload).await?;
    }
    Ok(())
}

fn answer(job: &Job, answered_ns: u64, reply: Reply, ack_rtt_ns: Option<u64>) -> Answer {
    Answer {
        seq: job.seq,
        delivery: job.delivery,
        published_ns: job.published_ns,
        received_ns: job.received_ns,
        answered_ns,
        action: job.action,
        reply,
        ack_rtt_ns,
        effect: None,
    }
}
