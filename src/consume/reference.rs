//! Reference consume loops, read beside jsbench's consumer on a fresh
//! durable over the same pre-filled stream and timed by the same rule
//! (first delivery to last, every delivery counted): what jsbench's
//! consumer reaches against them says whether its recording, not the
//! server, sets its rate.
//!
//! - [`idiomatic`]: `consumer.messages()` with async-nats' defaults and
//!   `message.ack().await` per message, the loop its documentation shows.
//! - [`raw`]: no client library machinery: pull requests published to
//!   `<api>.CONSUMER.MSG.NEXT.<stream>.<durable>` with the replies on one
//!   inbox, acks as `+ACK` published to each message's reply subject. The
//!   next request goes out when half of what was asked for has arrived
//!   (the threshold async-nats' own consume uses), so the server never
//!   waits on the client's round trip and the loop stays one request
//!   ahead, not a window of them: the simple loop a user writes.
//!
//! Each reads until it has seen every message of the stream once, stops
//! when asked, or gives up when nothing arrives for `idle`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::{self, consumer::PullConsumer};
use async_nats::{Client, StatusCode};
use bytes::Bytes;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::record::clock;
use crate::record::ledger::SeqSet;

/// What a reference loop reads and how.
#[derive(Debug, Clone)]
pub struct ReferenceConfig {
    pub stream: String,
    pub durable: String,
    /// JetStream API prefix (`$JS.API`, or a domain's `$JS.<domain>.API`).
    pub js_api_prefix: String,
    /// Messages the stream holds: the loop ends once it has seen them all.
    pub messages: u64,
    /// Messages per pull request (the raw loop; `messages()` keeps its
    /// default).
    pub batch: usize,
    /// How long without a delivery before the loop gives up.
    pub idle: Duration,
    /// Stop after this many deliveries: a reference that loses messages,
    /// for the tests that show its invariant fails.
    pub read_at_most: Option<u64>,
}

/// What a reference loop saw, counted as jsbench's consumer counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReferenceReport {
    /// Deliveries, redeliveries included: the count the rate is over.
    pub received: u64,
    /// Distinct stream sequences seen.
    pub seen: u64,
    /// Deliveries of a sequence already seen.
    pub duplicates: u64,
    /// Deliveries the server marked as a redelivery (count > 1).
    pub redelivered: u64,
    pub acked: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// First and last delivery, ns on [`crate::record::clock`].
    pub first_ns: u64,
    pub last_ns: u64,
    /// Status messages of the raw loop: pull requests that expired or
    /// were ended by the server, idle heartbeats.
    pub statuses: u64,
}

/// The counting both loops share; the seen set is sized for the stream
/// (a fresh one, sequences from 1) up front so the hot path never grows it.
struct Tally {
    report: ReferenceReport,
    seen: SeqSet,
    want: u64,
    limit: u64,
    progress: Arc<AtomicU64>,
    /// Ends the loop: cancelled with `stop`, or by the watchdog.
    own: CancellationToken,
    idle: Duration,
}

impl Tally {
    fn new(config: &ReferenceConfig, own: CancellationToken) -> Tally {
        Tally {
            report: ReferenceReport::default(),
            seen: SeqSet::default(),
            want: config.messages,
            limit: config.read_at_most.unwrap_or(u64::MAX),
            progress: Arc::default(),
            own,
            idle: config.idle,
        }
    }

    /// Counting from nothing, the watchdog started.
    fn start(config: &ReferenceConfig, stop: &CancellationToken) -> Tally {
        let tally = Tally::new(config, stop.child_token());
        watchdog(tally.progress.clone(), tally.idle, tally.own.clone());
        tally
    }

    /// The report, with why the loop ended early as its error; the acks
    /// queued reach the server before the durable is judged.
    async fn finish(
        mut self,
        client: &Client,
        stop: &CancellationToken,
    ) -> Result<ReferenceReport> {
        if self.own.is_cancelled() && !stop.is_cancelled() && !self.done() {
            let (idle, seen, want) = (self.idle, self.report.seen, self.want);
            self.error(format!(
                "nothing delivered for {idle:?} with {seen} of {want} messages seen"
            ));
        }
        self.own.cancel();
        client.flush().await.context("flushing the acks")?;
        Ok(self.report)
    }

    #[inline]
    fn delivery(&mut self, seq: u64, delivered: u64, now: u64) {
        let r = &mut self.report;
        r.received += 1;
        if r.first_ns == 0 {
            r.first_ns = now;
        }
        r.last_ns = now;
        if delivered > 1 {
            r.redelivered += 1;
        }
        if self.seen.insert_new(seq) {
            r.seen += 1;
        } else {
            r.duplicates += 1;
        }
        self.progress.store(r.received, Ordering::Relaxed);
    }

    fn error(&mut self, e: impl std::fmt::Display) {
        self.report.errors += 1;
        self.report.first_error.get_or_insert_with(|| e.to_string());
    }

    fn done(&self) -> bool {
        self.report.seen >= self.want || self.report.received >= self.limit
    }
}

/// Cancels `stop` once nothing has arrived for `idle`: a message the
/// server never delivers ends the loop instead of hanging it.
fn watchdog(progress: Arc<AtomicU64>, idle: Duration, stop: CancellationToken) {
    tokio::spawn(async move {
        let tick = (idle / 4).max(Duration::from_millis(50));
        let mut last = (
            progress.load(Ordering::Relaxed),
            tokio::time::Instant::now(),
        );
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(tick) => {}
            }
            let now = progress.load(Ordering::Relaxed);
            if now != last.0 {
                last = (now, tokio::time::Instant::now());
            } else if last.1.elapsed() >= idle {
                stop.cancel();
                return;
            }
        }
    });
}

/// `consumer.messages()` and `ack().await` per message.
pub async fn idiomatic(
    client: Client,
    config: ReferenceConfig,
    stop: CancellationToken,
) -> Result<ReferenceReport> {
    let js = jetstream::with_prefix(client.clone(), &config.js_api_prefix);
    let consumer: PullConsumer = js
        .get_consumer_from_stream(&config.durable, &config.stream)
        .await
        .with_context(|| format!("binding to durable consumer {}", config.durable))?;
    let mut messages = consumer
        .messages()
        .await
        .context("starting consumer.messages()")?;
    let mut tally = Tally::start(&config, &stop);
    while !tally.done() {
        let next = tokio::select! {
            biased;
            _ = tally.own.cancelled() => break,
            next = messages.next() => next,
        };
        let message = match next {
            Some(Ok(message)) => message,
            Some(Err(e)) => {
                tally.error(format!("messages: {e}"));
                continue;
            }
            None => break,
        };
        let now = clock::now_ns();
        match message.info() {
            Ok(info) => tally.delivery(info.stream_sequence, info.delivered.max(1) as u64, now),
            Err(e) => {
                tally.error(format!("unreadable reply subject: {e}"));
                continue;
            }
        }
        match message.ack().await {
            Ok(()) => tally.report.acked += 1,
            Err(e) => tally.error(format!("ack: {e}")),
        }
    }
    tally.finish(&client, &stop).await
}

/// How long one raw pull request waits on the server.
const RAW_EXPIRES: Duration = Duration::from_secs(10);

/// Pull requests and acks as core NATS publishes.
pub async fn raw(
    client: Client,
    config: ReferenceConfig,
    stop: CancellationToken,
) -> Result<ReferenceReport> {
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .context("subscribing to the pull requests' inbox")?;
    let next_subject = crate::wire::jetstream::next_subject(
        &config.js_api_prefix,
        &config.stream,
        &config.durable,
    );
    let request = pull_request(config.batch, RAW_EXPIRES);
    let batch = config.batch as u64;
    let ack = Bytes::from_static(b"+ACK");
    let mut tally = Tally::start(&config, &stop);
    // Messages asked for and neither delivered nor released by a status.
    let mut owed = 0u64;
    while !tally.done() {
        if owed <= batch / 2 {
            client
                .publish_with_reply(next_subject.clone(), inbox.clone(), request.clone())
                .await
                .context("sending a pull request")?;
            owed += batch;
        }
        let next = tokio::select! {
            biased;
            _ = tally.own.cancelled() => break,
            next = replies.next() => next,
        };
        let Some(message) = next else { break };
        match classify(&message) {
            Reply::Message { seq, delivered } => {
                tally.delivery(seq, delivered, clock::now_ns());
                owed = owed.saturating_sub(1);
                let reply = message.reply.expect("classified by its reply subject");
                match client.publish(reply, ack.clone()).await {
                    Ok(()) => tally.report.acked += 1,
                    Err(e) => tally.error(format!("ack: {e}")),
                }
            }
            Reply::Released(n) => {
                tally.report.statuses += 1;
                owed = owed.saturating_sub(n.unwrap_or(batch));
            }
            Reply::Heartbeat => tally.report.statuses += 1,
            Reply::Fatal(why) => {
                tally.error(why);
                break;
            }
            Reply::Unreadable(why) => tally.error(why),
        }
    }
    tally.finish(&client, &stop).await
}

/// A pull request's body: `batch` messages, waiting at most `expires`.
pub fn pull_request(batch: usize, expires: Duration) -> Bytes {
    Bytes::from(format!(
        "{{\"batch\":{batch},\"expires\":{}}}",
        expires.as_nanos()
    ))
}

/// What arrived on a pull request's inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A stream message: its sequence and delivery count.
    Message { seq: u64, delivered: u64 },
    /// A request ended (expired, no messages, or ended by the server)
    /// with this many of its messages undelivered; `None` when the status
    /// did not say, which releases a whole batch.
    Released(Option<u64>),
    /// An idle heartbeat: the request is alive.
    Heartbeat,
    /// The consumer cannot be read this way: asking again would fail again.
    Fatal(String),
    /// A message with neither a status nor a readable reply subject.
    Unreadable(String),
}

/// Sorts a reply of the raw loop's inbox by its status (ADR-13's pull
/// protocol: 404 no messages, 408 request expired, 409 ended by the
/// server, 100 heartbeat) or its `$JS.ACK` reply subject.
pub fn classify(message: &async_nats::Message) -> Reply {
    let pending = || {
        message
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Pending-Messages"))
            .and_then(|v| v.as_str().parse().ok())
    };
    let description = message.description.as_deref().unwrap_or("");
    match message.status {
        None | Some(StatusCode::OK) => match message.reply.as_deref().and_then(ack_info) {
            Some((seq, delivered)) => Reply::Message { seq, delivered },
            None => Reply::Unreadable(format!(
                "a delivery without a $JS.ACK reply subject: {:?}",
                message.reply
            )),
        },
        Some(StatusCode::IDLE_HEARTBEAT) => Reply::Heartbeat,
        Some(StatusCode::NOT_FOUND | StatusCode::TIMEOUT) => Reply::Released(pending()),
        Some(StatusCode::REQUEST_TERMINATED) => {
            if ends_consumer(description) {
                Reply::Fatal(format!("pull request refused: 409 {description}"))
            } else {
                // Exceeded MaxWaiting, a leadership change, a batch
                // completed by max_bytes: ask again.
                Reply::Released(pending())
            }
        }
        Some(status) => Reply::Fatal(format!("pull request failed: {status} {description}")),
    }
}

/// Whether a pull request's 409 says the consumer cannot be read this
/// way at all (deleted, a push consumer, a request over its limits), so
/// asking again would fail again.
pub fn ends_consumer(description: &str) -> bool {
    description == "Consumer Deleted"
        || description == "Consumer is push based"
        || description.starts_with("Exceeded MaxRequest")
}

/// The stream sequence and delivery count of a `$JS.ACK` reply subject,
/// read by the one parser the priority-group client uses too.
pub fn ack_info(reply: &str) -> Option<(u64, u64)> {
    crate::wire::jetstream::ack_tokens(reply).map(|t| (t.stream_seq, t.delivered))
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::HeaderMap;

    fn status(code: u16, description: &str, pending: Option<&str>) -> async_nats::Message {
        let headers = pending.map(|p| {
            let mut h = HeaderMap::new();
            h.insert("Nats-Pending-Messages", p);
            h
        });
        async_nats::Message {
            subject: "_INBOX.x".into(),
            reply: None,
            payload: Bytes::new(),
            headers,
            status: Some(StatusCode::from_u16(code).unwrap()),
            description: Some(description.into()),
            length: 0,
        }
    }

    fn delivery(reply: &str) -> async_nats::Message {
        async_nats::Message {
            subject: "s.0".into(),
            reply: Some(reply.into()),
            payload: Bytes::from_static(b"x"),
            headers: None,
            status: None,
            description: None,
            length: 1,
        }
    }

    #[test]
    fn both_ack_subject_forms_read() {
        assert_eq!(
            ack_info("$JS.ACK.S.D.1.42.40.1700000000000000000.7"),
            Some((42, 1))
        );
        assert_eq!(
            ack_info("$JS.ACK.hub.ACCHASH.S.D.3.42.40.1700000000000000000.7.tok"),
            Some((42, 3))
        );
        assert_eq!(ack_info("$JS.ACK.S.D.x.42.40.1.7"), None);
        assert_eq!(ack_info("_INBOX.abc"), None);
    }

    #[test]
    fn statuses_release_ask_again_or_stop() {
        assert_eq!(
            classify(&delivery("$JS.ACK.S.D.2.9.9.1.0")),
            Reply::Message {
                seq: 9,
                delivered: 2
            }
        );
        assert!(matches!(
            classify(&delivery("_INBOX.x")),
            Reply::Unreadable(_)
        ));
        assert_eq!(
            classify(&status(100, "Idle Heartbeat", None)),
            Reply::Heartbeat
        );
        assert_eq!(
            classify(&status(408, "Request Timeout", Some("37"))),
            Reply::Released(Some(37))
        );
        assert_eq!(
            classify(&status(404, "No Messages", None)),
            Reply::Released(None)
        );
        assert_eq!(
            classify(&status(409, "Exceeded MaxWaiting", Some("500"))),
            Reply::Released(Some(500))
        );
        for fatal in ["Consumer Deleted", "Exceeded MaxRequestBatch of 100"] {
            assert!(
                matches!(classify(&status(409, fatal, None)), Reply::Fatal(_)),
                "{fatal}"
            );
        }
        assert!(matches!(
            classify(&status(503, "No Responders", None)),
            Reply::Fatal(_)
        ));
    }

    #[test]
    fn a_pull_request_asks_for_a_batch_with_an_expiry_in_ns() {
        let body = pull_request(500, Duration::from_secs(10));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["batch"], 500);
        assert_eq!(v["expires"], 10_000_000_000u64);
    }

    #[test]
    fn a_sequence_read_twice_is_a_duplicate() {
        let config = ReferenceConfig {
            stream: "S".into(),
            durable: "D".into(),
            js_api_prefix: "$JS.API".into(),
            messages: 3,
            batch: 2,
            idle: Duration::from_secs(1),
            read_at_most: None,
        };
        let mut t = Tally::new(&config, CancellationToken::new());
        t.delivery(1, 1, 10);
        t.delivery(2, 1, 20);
        t.delivery(2, 2, 30);
        assert!(!t.done(), "seq 3 not yet seen");
        t.delivery(3, 1, 40);
        assert!(t.done());
        let r = &t.report;
        assert_eq!(
            (r.received, r.seen, r.duplicates, r.redelivered),
            (4, 3, 1, 1)
        );
        assert_eq!((r.first_ns, r.last_ns), (10, 40));
    }
}
