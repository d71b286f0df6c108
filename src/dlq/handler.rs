//! The dead-letter handler: a durable consumer of the advisory stream that
//! turns each advisory about a watched consumer into a copy in the DLQ
//! stream, and answers the advisory only once that copy is persisted.
//!
//! Per advisory: parse it (malformed: term, it will never parse), skip it
//! if it is about a stream or consumer the pipeline does not watch (ack: the
//! capture stream collects the whole account's advisories), get the
//! original by stream sequence (gone: term with the reason; unreachable:
//! nak with a delay), publish the copy with the dedup id
//! `<stream>.<consumer>.<seq>` and await its PubAck (failed: nak with a
//! delay), delete the original when its stream is a work queue, then ack.
//! A handler killed anywhere before the ack has its advisory redelivered;
//! the next attempt republishes under the same id and the DLQ stream
//! stores the copy once.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use async_nats::Client;
use async_nats::jetstream::{
    self, AckKind, Message, consumer::PullConsumer, message::PublishMessage,
    message::StreamMessage, response::Response, stream::DeleteStatus, stream::Stream,
};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use super::PipelineSpec;
use super::copy::{self, Origin};
use crate::profile::OriginalGet;
use crate::record::clock;
use crate::streams::advisory::{Event, Kind, parse_event};

/// Advisories requested per pull, per advisory worked on at once: enough
/// to keep the handler busy, few enough that a killed handler strands few
/// (each waits out the handler durable's AckWait before it comes back).
const PREFETCH: usize = 4;

/// What every incarnation of the handler shares, restarts included.
pub(super) struct Shared {
    pub spec: PipelineSpec,
    /// Copies published so far, across incarnations: counts towards the
    /// planned kill.
    copies: AtomicU64,
    killed: AtomicBool,
    /// (watched index, sequence) of every message whose advisory was
    /// answered after its copy persisted.
    done: Mutex<HashSet<(usize, u64)>>,
}

impl Shared {
    pub fn new(spec: PipelineSpec) -> Self {
        Shared {
            spec,
            copies: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            done: Mutex::new(HashSet::new()),
        }
    }

    /// The watched consumer an advisory is about, if it is one of ours and
    /// of a kind this pipeline dead-letters.
    fn position(&self, e: &Event) -> Option<usize> {
        if e.kind == Kind::Terminated && !self.spec.terminated {
            return None;
        }
        self.spec
            .watched
            .iter()
            .position(|w| w.stream == e.stream && w.consumer == e.consumer)
    }

    pub fn is_done(&self, key: &(usize, u64)) -> bool {
        self.done.lock().expect("not poisoned").contains(key)
    }
}

/// One advisory delivery and what the handler made of it.
#[derive(Debug, Clone, Default)]
pub struct Attempt {
    pub incarnation: u32,
    /// Index into the watched list; `None` for foreign or malformed advisories.
    pub watched: Option<usize>,
    pub kind: Option<Kind>,
    pub seq: u64,
    /// The advisory's delivery count on the handler durable (2 or more
    /// after a kill or a nak).
    pub delivery: u64,
    pub received_ns: u64,
    /// The advisory's own time stamp: when the server gave up on the
    /// message (its final ack deadline expired, or the term arrived).
    pub server_ns: Option<u64>,
    /// When the DLQ's PubAck arrived.
    pub persisted_ns: Option<u64>,
    /// When the answer (ack, nak, term) was sent; the receipt time when the
    /// handler was killed before answering.
    pub answered_ns: u64,
    pub outcome: Outcome,
    /// The answer could not be sent (the advisory will come back).
    pub answer_error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Outcome {
    /// The copy is persisted (`duplicate`: the DLQ stream already had it)
    /// and, on a work queue, the original deleted (`deleted`: by this
    /// attempt; false when it was already gone).
    Copied { duplicate: bool, deleted: bool },
    /// Killed as planned: the copy persisted, the original not deleted,
    /// the advisory not answered.
    Killed { duplicate: bool },
    /// About a stream or consumer this pipeline does not watch: acked.
    #[default]
    Foreign,
    /// Not an advisory this handler understands: termed with the reason.
    Malformed(String),
    /// No message at that sequence any more: termed with the reason,
    /// nothing to copy.
    OriginalGone(String),
    /// A step failed (get, publish, delete): nak'ed with the retry delay.
    Retried(String),
}

/// What one incarnation of the handler did.
#[derive(Debug, Default)]
pub struct HandlerReport {
    pub incarnation: u32,
    pub attempts: Vec<Attempt>,
    /// Time with at least one advisory in hand.
    pub busy: Duration,
    pub stream_errors: u64,
    pub first_error: Option<String>,
    /// Whether it ended in the planned kill.
    pub killed: bool,
}

/// Reads the advisory stream through the handler durable until `stop`, or
/// until the planned kill.
pub(super) async fn run(
    client: Client,
    js_prefix: &str,
    shared: &Shared,
    incarnation: u32,
    stop: CancellationToken,
) -> Result<HandlerReport> {
    let js = jetstream::with_prefix(client.clone(), js_prefix);
    let spec = &shared.spec;
    let consumer: PullConsumer = js
        .get_consumer_from_stream(&spec.handler_durable, &spec.advisory_stream)
        .await
        .with_context(|| format!("binding to the handler durable {}", spec.handler_durable))?;
    let mut streams = Vec::new();
    for w in &spec.watched {
        streams.push(
            js.get_stream_no_info(&w.stream)
                .await
                .with_context(|| format!("opening stream {}", w.stream))?,
        );
    }
    let concurrency = spec.handler.concurrency.max(1);
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(concurrency * PREFETCH)
        .heartbeat(Duration::from_secs(5))
        .expires(Duration::from_secs(30))
        .messages()
        .await
        .context("reading the advisory stream")?;

    let mut report = HandlerReport {
        incarnation,
        ..HandlerReport::default()
    };
    let mut busy_since = 0u64;
    let mut running: FuturesUnordered<_> = FuturesUnordered::new();
    loop {
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            Some(done) = running.next(), if !running.is_empty() => {
                let attempt: Attempt = done;
                if running.is_empty() {
                    report.busy += Duration::from_nanos(clock::now_ns() - busy_since);
                }
                let killed = matches!(attempt.outcome, Outcome::Killed { .. });
                report.attempts.push(attempt);
                if killed {
                    report.killed = true;
                    break;
                }
                continue;
            }
            next = messages.next(), if running.len() < concurrency => next,
        };
        match next {
            Some(Ok(message)) => {
                if running.is_empty() {
                    busy_since = clock::now_ns();
                }
                running.push(work(message, &js, &streams, shared, incarnation));
            }
            Some(Err(e)) => {
                report.stream_errors += 1;
                report
                    .first_error
                    .get_or_insert_with(|| format!("advisory stream: {e}"));
            }
            None => break,
        }
    }
    if report.killed {
        // A crash: whatever else is in hand is dropped unanswered, and the
        // connection closes when the client's last handle goes.
        return Ok(report);
    }
    // Stopped: finish what is in hand, so no advisory is left half done.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(attempt) = running.next().await {
            report.attempts.push(attempt);
        }
    })
    .await;
    let _ = client.flush().await;
    Ok(report)
}

/// Handles one advisory delivery from receipt to answer.
async fn work(
    message: Message,
    js: &jetstream::Context,
    streams: &[Stream<()>],
    shared: &Shared,
    incarnation: u32,
) -> Attempt {
    let received_ns = clock::now_ns();
    let mut attempt = Attempt {
        incarnation,
        delivery: message.info().map_or(1, |i| i.delivered.max(1) as u64),
        received_ns,
        answered_ns: received_ns,
        ..Attempt::default()
    };
    match parse_event(&message.payload) {
        Err(reason) => attempt.outcome = Outcome::Malformed(reason),
        Ok(event) => {
            attempt.kind = Some(event.kind);
            attempt.seq = event.advisory.stream_seq;
            attempt.server_ns = event.advisory.server_ns;
            attempt.watched = shared.position(&event);
            if let Some(w) = attempt.watched {
                (attempt.outcome, attempt.persisted_ns) =
                    dead_letter(js, &streams[w], shared, w, &event).await;
            }
        }
    }
    // The answer follows from the outcome; a killed handler sends none.
    let sent = match &attempt.outcome {
        Outcome::Killed { .. } => return attempt,
        Outcome::Copied { .. } | Outcome::Foreign => message.ack().await,
        Outcome::Retried(_) => {
            let delay = shared.spec.handler.retry_delay;
            message.ack_with(AckKind::Nak(Some(delay))).await
        }
        Outcome::Malformed(reason) | Outcome::OriginalGone(reason) => {
            crate::consume::term_with_reason(&message, reason, false).await
        }
    };
    attempt.answered_ns = clock::now_ns();
    match sent {
        Ok(()) => {
            // Copied, or termed because its original is gone: nothing
            // more to do for that message either way.
            let finished = matches!(
                attempt.outcome,
                Outcome::Copied { .. } | Outcome::OriginalGone(_)
            );
            if let (Some(w), true) = (attempt.watched, finished) {
                shared
                    .done
                    .lock()
                    .expect("not poisoned")
                    .insert((w, attempt.seq));
            }
        }
        Err(e) => attempt.answer_error = Some(e.to_string()),
    }
    attempt
}

/// The dead-letter steps for an advisory about a watched consumer: what
/// came of them, and when the copy's PubAck arrived.
async fn dead_letter(
    js: &jetstream::Context,
    stream: &Stream<()>,
    shared: &Shared,
    w: usize,
    event: &Event,
) -> (Outcome, Option<u64>) {
    let (watched, plan) = (&shared.spec.watched[w], &shared.spec.handler);
    let seq = event.advisory.stream_seq;
    let origin = Origin {
        stream: &watched.stream,
        consumer: &watched.consumer,
        seq,
        kind: event.kind,
    };
    let original = match get(stream, seq, plan.get).await {
        Ok(m) => m,
        Err(Get::Gone) => {
            let why = format!("original {}/{seq} is gone", watched.stream);
            return (Outcome::OriginalGone(why), None);
        }
        Err(Get::Failed(e)) => return (Outcome::Retried(format!("get: {e}")), None),
    };
    let headers = copy::dead_letter_headers(
        &original.headers,
        original.subject.as_str(),
        &origin,
        &plan.origin_headers,
    );
    let publish = PublishMessage::build()
        .payload(original.payload.clone())
        .headers(headers);
    let subject = origin.subject(&shared.spec.dlq_prefix);
    let ack = async { js.send_publish(subject, publish).await?.await };
    let duplicate = match ack.await {
        Ok(ack) => ack.duplicate,
        Err(e) => return (Outcome::Retried(format!("publish: {e}")), None),
    };
    let persisted_ns = Some(clock::now_ns());
    let copies = shared.copies.fetch_add(1, Ordering::Relaxed) + 1;
    if plan.restart_after == Some(copies) && !shared.killed.swap(true, Ordering::Relaxed) {
        return (Outcome::Killed { duplicate }, persisted_ns);
    }
    let mut deleted = false;
    if watched.delete_original {
        match delete(js, &watched.stream, seq, plan.erase).await {
            Ok(true) => deleted = true,
            // An earlier attempt deleted it and died before its ack.
            Ok(false) => {}
            Err(e) => return (Outcome::Retried(format!("delete: {e}")), None),
        }
    }
    (Outcome::Copied { duplicate, deleted }, persisted_ns)
}

enum Get {
    /// No message at that sequence: deleted, aged out, or never stored.
    Gone,
    Failed(String),
}

/// The original as stored: a direct get's own headers are removed.
async fn get(stream: &Stream<()>, seq: u64, how: OriginalGet) -> Result<StreamMessage, Get> {
    match how {
        OriginalGet::Raw => stream.get_raw_message(seq).await.map_err(|e| {
            if e.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound {
                Get::Gone
            } else {
                Get::Failed(e.to_string())
            }
        }),
        OriginalGet::Direct => match stream.direct_get(seq).await {
            Ok(mut m) => {
                m.headers = copy::strip_direct_get(&m.headers);
                Ok(m)
            }
            Err(e) if e.kind() == jetstream::stream::DirectGetErrorKind::NotFound => Err(Get::Gone),
            Err(e) => Err(Get::Failed(e.to_string())),
        },
    }
}

/// Deletes `seq` from `stream`; `Ok(false)` when it was already gone.
///
/// async-nats' `delete_message` asks for a secure erase (it sends no
/// `no_erase`), which overwrites the stored message; the delivery article's
/// `DeleteMsg` (nats.go) removes it. With `erase = false` this is the
/// seed's delete, with `erase = true` the secure one.
async fn delete(
    js: &jetstream::Context,
    stream: &str,
    seq: u64,
    erase: bool,
) -> Result<bool, String> {
    let response: Response<DeleteStatus> = js
        .request(
            format!("STREAM.MSG.DELETE.{stream}"),
            &serde_json::json!({ "seq": seq, "no_erase": !erase }),
        )
        .await
        .map_err(|e| e.to_string())?;
    match response {
        Response::Ok(status) => Ok(status.success),
        Response::Err { error }
            if error.error_code() == jetstream::ErrorCode::NO_MESSAGE_FOUND
                || error.error_code() == jetstream::ErrorCode::SEQUENCE_NOT_FOUND =>
        {
            Ok(false)
        }
        Response::Err { error } => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::Watched;
    use crate::streams::advisory::Advisory;

    fn shared(terminated: bool) -> Shared {
        let watched = vec![
            Watched {
                stream: "SRC".into(),
                consumer: "a".into(),
                delete_original: false,
            },
            Watched {
                stream: "WQ".into(),
                consumer: "b".into(),
                delete_original: true,
            },
        ];
        Shared::new(PipelineSpec::for_tests(watched, terminated))
    }

    fn event(kind: Kind, stream: &str, consumer: &str) -> Event {
        Event {
            kind,
            stream: stream.into(),
            consumer: consumer.into(),
            advisory: Advisory {
                stream_seq: 9,
                deliveries: 3,
                received_ns: 0,
                server_ns: None,
                reason: String::new(),
            },
        }
    }

    #[test]
    fn only_watched_consumers_advisories_are_dead_lettered() {
        let s = shared(false);
        assert_eq!(s.position(&event(Kind::MaxDeliveries, "SRC", "a")), Some(0));
        assert_eq!(s.position(&event(Kind::MaxDeliveries, "WQ", "b")), Some(1));
        // Another consumer of a watched stream, a stream of someone else's,
        // and the handler's own durable on the advisory stream: skipped.
        assert_eq!(s.position(&event(Kind::MaxDeliveries, "SRC", "b")), None);
        assert_eq!(s.position(&event(Kind::MaxDeliveries, "ORDERS", "a")), None);
        assert_eq!(s.position(&event(Kind::Terminated, "ADV", "handler")), None);
        // Terms are dead-lettered only when asked for.
        assert_eq!(s.position(&event(Kind::Terminated, "SRC", "a")), None);
        assert_eq!(
            shared(true).position(&event(Kind::Terminated, "SRC", "a")),
            Some(0)
        );
    }
}
