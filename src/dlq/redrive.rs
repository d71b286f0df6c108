//! Redrive: once the defect is fixed, the dead letters go back onto their
//! original subjects (the delivery article's "replay the affected messages back onto
//! their original subject"), and the now-healthy consumer processes them.
//!
//! Each copy keeps the original's payload and headers without the origin
//! headers, under a Nats-Msg-Id derived from its origin
//! (`redrive.<stream>.<consumer>.<seq>`): a redrive run twice, or resumed
//! after a crash, stores each message once while the source stream's
//! duplicate window lasts.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::HeaderMap;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::{self, consumer::PullConsumer, message::PublishMessage};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::audit::DeadLetter;
use super::copy::{OriginHeaders, without};
use crate::record::clock;
use crate::record::histogram::Recorder;

/// PubAcks a redrive waits for at once.
const WINDOW: usize = 256;

/// One redrive pass: every letter published back.
#[derive(Debug, Default)]
pub struct Pass {
    pub letters: u64,
    /// Stored anew, and answered as duplicates of an earlier redrive.
    pub stored: u64,
    pub duplicates: u64,
    /// Letters that could not be sent back (no origin subject, a publish
    /// the server refused), a few described.
    pub failed: u64,
    pub errors: Vec<String>,
    /// From each send to its PubAck.
    pub pub_ack: Recorder,
    /// From the first send to the last PubAck.
    pub span: Duration,
    /// When each redriven message was sent, by its Nats-Msg-Id.
    pub sent_ns: BTreeMap<String, u64>,
}

impl Pass {
    /// Messages stored a second.
    pub fn rate(&self) -> f64 {
        self.stored as f64 / self.span.as_secs_f64().max(1e-9)
    }

    fn fail(&mut self, why: String) {
        self.failed += 1;
        if self.errors.len() < 3 {
            self.errors.push(why);
        }
    }
}

/// What the healthy consumer received of a redrive.
#[derive(Debug, Default)]
pub struct Received {
    /// Deliveries by Nats-Msg-Id (a redriven id received twice counts 2).
    pub deliveries: BTreeMap<String, u64>,
    /// Deliveries of messages that were not redriven.
    pub others: u64,
    /// Redriven messages whose payload differs from their dead letter's.
    pub altered: u64,
    /// From each redriven message's send to its first receipt.
    pub e2e: Recorder,
    pub errors: Vec<String>,
}

/// The Nats-Msg-Id of a letter's redrive, and the subject it goes back
/// to; `None` when the letter does not say where it came from.
fn origin(letter: &DeadLetter, names: &OriginHeaders) -> Option<(String, String)> {
    let header = |name: &str| letter.headers.get(name).map(|v| v.as_str().to_string());
    let id = format!(
        "redrive.{}.{}.{}",
        header(&names.stream)?,
        header(&names.consumer)?,
        header(&names.seq)?
    );
    Some((id, header(&names.subject)?))
}

/// The letter's headers for its redrive: the original's (the origin
/// headers and the DLQ's dedup id dropped) and the redrive's own id.
fn redrive_headers(letter: &DeadLetter, names: &OriginHeaders, id: &str) -> HeaderMap {
    let mut out = without(&letter.headers, |name| {
        names.all().contains(&name) || name.eq_ignore_ascii_case("Nats-Msg-Id")
    });
    out.insert(NATS_MESSAGE_ID, id);
    out
}

/// Publishes every letter back onto its original subject, `WINDOW`
/// PubAcks in flight.
pub async fn publish(
    js: &jetstream::Context,
    letters: &[DeadLetter],
    names: &OriginHeaders,
) -> Pass {
    let mut pass = Pass {
        letters: letters.len() as u64,
        ..Pass::default()
    };
    let first = clock::now_ns();
    let mut in_flight = FuturesUnordered::new();
    for letter in letters {
        let Some((id, subject)) = origin(letter, names) else {
            pass.fail(format!(
                "DLQ sequence {} does not name its origin",
                letter.dlq_seq
            ));
            continue;
        };
        let message = PublishMessage::build()
            .payload(letter.payload.clone())
            .headers(redrive_headers(letter, names, &id));
        let sent = clock::now_ns();
        match js.send_publish(subject, message).await {
            Ok(ack) => in_flight.push(async move { (sent, ack.await) }),
            Err(e) => pass.fail(format!("publishing {id}: {e}")),
        }
        pass.sent_ns.insert(id, sent);
        while in_flight.len() >= WINDOW {
            answer(&mut pass, in_flight.next().await);
        }
    }
    while !in_flight.is_empty() {
        answer(&mut pass, in_flight.next().await);
    }
    pass.span = Duration::from_nanos(clock::now_ns() - first);
    pass
}

fn answer(
    pass: &mut Pass,
    next: Option<(
        u64,
        Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
    )>,
) {
    let Some((sent, ack)) = next else { return };
    match ack {
        Ok(ack) => {
            pass.pub_ack.record_between(sent, clock::now_ns());
            if ack.duplicate {
                pass.duplicates += 1;
            } else {
                pass.stored += 1;
            }
        }
        Err(e) => pass.fail(format!("PubAck: {e}")),
    }
}

/// Reads the durable `consumer` (healthy now: it acks everything) until
/// every message of `pass` arrived and nothing more came for `quiet`, or
/// until `deadline`.
pub async fn consume(
    consumer: &PullConsumer,
    pass: &Pass,
    letters: &[DeadLetter],
    names: &OriginHeaders,
    quiet: Duration,
    deadline: tokio::time::Instant,
) -> Result<Received> {
    let payloads: BTreeMap<String, &Bytes> = letters
        .iter()
        .filter_map(|l| origin(l, names).map(|(id, _)| (id, &l.payload)))
        .collect();
    let mut got = Received::default();
    let mut messages = consumer
        .messages()
        .await
        .context("reading the redriven messages")?;
    loop {
        let all_in = pass
            .sent_ns
            .keys()
            .all(|id| got.deliveries.contains_key(id));
        let wait = if all_in {
            quiet
        } else {
            Duration::from_secs(1)
        };
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        let message = match tokio::time::timeout(wait, messages.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(Some(Err(e))) => {
                got.errors.push(format!("reading: {e}"));
                continue;
            }
            Ok(None) => break,
            Err(_) if all_in => break,
            Err(_) => continue,
        };
        let received = clock::now_ns();
        let id = message
            .headers
            .as_ref()
            .and_then(|h| h.get(NATS_MESSAGE_ID))
            .map(|v| v.as_str().to_string());
        match id
            .as_ref()
            .and_then(|id| pass.sent_ns.get(id).map(|s| (id, s)))
        {
            Some((id, &sent)) => {
                let n = got.deliveries.entry(id.clone()).or_default();
                if *n == 0 {
                    got.e2e.record_between(sent, received);
                    if payloads.get(id).is_some_and(|p| **p != message.payload) {
                        got.altered += 1;
                    }
                }
                *n += 1;
            }
            None => got.others += 1,
        }
        if let Err(e) = message.ack().await {
            got.errors.push(format!("ack: {e}"));
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(headers: &[(&str, &str)]) -> DeadLetter {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(*n, *v);
        }
        DeadLetter {
            dlq_seq: 1,
            subject: "p.dlq.SRC.worker".into(),
            headers: map,
            payload: Bytes::from_static(b"x"),
        }
    }

    #[test]
    fn a_redrive_goes_back_to_the_origin_subject_under_an_id_of_its_origin() {
        let names = OriginHeaders::default();
        let l = letter(&[
            ("Nats-Dlq-Origin-Stream", "SRC"),
            ("Nats-Dlq-Origin-Consumer", "worker"),
            ("Nats-Dlq-Origin-Seq", "42"),
            ("Nats-Dlq-Origin-Subject", "orders.eu"),
            ("Nats-Dlq-Reason", "max_deliveries"),
            ("Nats-Msg-Id", "SRC.worker.42"),
            ("Order-Id", "o-9"),
        ]);
        let (id, subject) = origin(&l, &names).unwrap();
        assert_eq!(
            (id.as_str(), subject.as_str()),
            ("redrive.SRC.worker.42", "orders.eu")
        );
        let headers = redrive_headers(&l, &names, &id);
        assert_eq!(
            crate::consume::header_pairs(&headers),
            vec![
                ("Nats-Msg-Id".into(), "redrive.SRC.worker.42".into()),
                ("Order-Id".into(), "o-9".into()),
            ]
        );
        let nameless = letter(&[("Nats-Dlq-Origin-Seq", "42")]);
        assert!(origin(&nameless, &names).is_none());
    }
}
