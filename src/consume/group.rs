//! A pull client in a priority group (ADR-42): it speaks the pull protocol
//! itself on `<api>.CONSUMER.MSG.NEXT.<stream>.<consumer>`, so every field
//! the server reads (group, min_pending, min_ack_pending, priority, the pin
//! id) is in jsbench's hands and every status the server answers (423 for
//! a stale pin) is seen rather than retried away by a library.
//!
//! A reader task stamps each reply as it arrives and hands it to the
//! client's loop, which processes, acks and asks again; the stamp is when
//! the server's choice reached the client, not when the client got round
//! to it. A client can be killed: it stops pulling and acking at once and
//! drops its subscription, as a process that died would, leaving what it
//! held unacked for AckWait to return; what it had already sent is
//! flushed first, so its record is what the server received.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::{Client, HeaderMap, StatusCode};

use crate::wire::jetstream::{AckTokens, ack_tokens};
use futures::StreamExt;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::record::clock;
use crate::record::ledger::{Event, LedgerShard};
use crate::record::stamp::Stamp;

/// The header carrying the pin in pinned-client mode, on deliveries and
/// on pull requests (as the request's `id`).
pub const PIN_HEADER: &str = "Nats-Pin-Id";

/// One client's part in a group.
#[derive(Debug, Clone)]
pub struct GroupClientConfig {
    pub index: usize,
    /// Where pulls go: `<api>.CONSUMER.MSG.NEXT.<stream>.<consumer>`.
    pub subject: String,
    pub group: String,
    pub batch: usize,
    pub expires: Duration,
    /// Overflow thresholds; 0 leaves one out.
    pub min_pending: u64,
    pub min_ack_pending: u64,
    /// Prioritized level, 0 the highest.
    pub priority: u8,
    /// Held per message before it is acked.
    pub processing: Duration,
    /// Send back the pin this client was given (pinned-client mode).
    pub pinned: bool,
}

/// One delivery as this client saw it. `pin` indexes [`GroupReport::pins`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupDelivery {
    pub client: usize,
    pub received_ns: u64,
    pub stream_seq: u64,
    /// The consumer sequence: the server's order of deliveries.
    pub consumer_seq: u64,
    /// The delivery count of the message.
    pub delivered: u64,
    /// Messages the consumer still had to deliver after this one.
    pub pending: u64,
    pub pin: Option<u16>,
    /// The publisher's intended send time (from the payload's stamp).
    pub intended_ns: u64,
    pub acked: bool,
}

/// How a pull request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PullEnd {
    /// Its whole batch came; the consumer sequence of the last message.
    Filled { last_consumer_seq: u64 },
    /// It expired or was released (408, 404, 409) at this time.
    Released { at_ns: u64 },
    /// 423: the pin it carried is no longer the group's.
    WrongPin { at_ns: u64 },
    /// The client was stopped or killed with it open.
    Abandoned { at_ns: u64 },
}

/// One pull request this client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullRecord {
    pub client: usize,
    pub sent_ns: u64,
    pub end: PullEnd,
}

/// What one client did over its life.
#[derive(Debug, Clone, Default)]
pub struct GroupReport {
    pub deliveries: Vec<GroupDelivery>,
    pub pulls: Vec<PullRecord>,
    /// Distinct pin ids this client was handed, in order.
    pub pins: Vec<String>,
    /// 423 answers: a pull that carried a pin the server no longer held.
    pub wrong_pin: u64,
    /// The first other status, for the error.
    pub first_status: Option<String>,
    pub ledger: LedgerShard,
}

/// Counters the scenario reads while the client runs (which client holds
/// the pin, whether the drain is done). Each is written by the client only.
#[derive(Debug, Default)]
pub struct GroupProgress {
    pub acked: AtomicU64,
    pub last_received_ns: AtomicU64,
}

/// A running client.
pub struct GroupClient {
    pub progress: Arc<GroupProgress>,
    kill: CancellationToken,
    task: tokio::task::JoinHandle<Result<GroupReport>>,
}

impl GroupClient {
    /// Subscribes and starts pulling; `stop` ends it cleanly.
    pub async fn start(
        client: Client,
        config: GroupClientConfig,
        stop: CancellationToken,
    ) -> Result<GroupClient> {
        let inbox = client.new_inbox();
        let mut subscription = client
            .subscribe(inbox.clone())
            .await
            .context("subscribing a group client's inbox")?;
        client
            .flush()
            .await
            .context("flushing a group client's subscription")?;
        let kill = CancellationToken::new();
        let (tx, rx) = mpsc::unbounded_channel();
        let reader_stop = kill.clone();
        tokio::spawn(async move {
            let forward = async {
                while let Some(m) = subscription.next().await {
                    if tx.send((clock::now_ns(), m)).is_err() {
                        break;
                    }
                }
            };
            reader_stop.run_until_cancelled(forward).await;
            // Dropping the subscription unsubscribes: the server sees the
            // client's interest gone, as after a process died.
        });
        let progress = Arc::new(GroupProgress::default());
        let looping = Loop {
            progress: progress.clone(),
            client,
            inbox,
            config,
            rx,
            report: GroupReport::default(),
            pin: None,
        };
        let task = tokio::spawn(looping.run(stop, kill.clone()));
        Ok(GroupClient {
            progress,
            kill,
            task,
        })
    }

    /// Kills it: no more pulls or acks from now.
    pub fn kill(&self) {
        self.kill.cancel();
    }

    pub async fn finish(self) -> Result<GroupReport> {
        self.task.await.context("joining a group client")?
    }
}

/// The JSON of a pull request (ADR-13, with ADR-42's priority fields).
#[derive(Serialize)]
struct PullRequest<'a> {
    batch: usize,
    expires: u64,
    group: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    min_pending: u64,
    #[serde(skip_serializing_if = "is_zero")]
    min_ack_pending: u64,
    #[serde(skip_serializing_if = "is_zero")]
    priority: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// What one reply to a pull was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Message(AckTokens),
    Heartbeat,
    Released,
    WrongPin,
    Other(String),
}

/// Sorts one reply: a message, or the status the server answered.
pub fn classify(m: &async_nats::Message) -> Reply {
    match m.status {
        None | Some(StatusCode::OK) => match m.reply.as_deref().and_then(ack_tokens) {
            Some(t) => Reply::Message(t),
            None => Reply::Other(format!("a delivery without a $JS.ACK reply: {:?}", m.reply)),
        },
        Some(StatusCode::IDLE_HEARTBEAT) => Reply::Heartbeat,
        Some(StatusCode::NOT_FOUND | StatusCode::TIMEOUT | StatusCode::REQUEST_TERMINATED) => {
            Reply::Released
        }
        Some(s) if s.as_u16() == 423 => Reply::WrongPin,
        Some(s) => Reply::Other(format!(
            "pull answered {s} {}",
            m.description.as_deref().unwrap_or("")
        )),
    }
}

fn pin_of(headers: Option<&HeaderMap>) -> Option<&str> {
    headers?.get(PIN_HEADER).map(|v| v.as_str())
}

struct Loop {
    progress: Arc<GroupProgress>,
    client: Client,
    inbox: String,
    config: GroupClientConfig,
    rx: mpsc::UnboundedReceiver<(u64, async_nats::Message)>,
    report: GroupReport,
    /// The pin this client holds, as the index into its report's pins.
    pin: Option<u16>,
}

impl Loop {
    async fn run(
        mut self,
        stop: CancellationToken,
        kill: CancellationToken,
    ) -> Result<GroupReport> {
        while !stop.is_cancelled() && !kill.is_cancelled() {
            let sent_ns = clock::now_ns();
            self.pull().await?;
            let end = self.wait(&stop, &kill).await?;
            self.report.pulls.push(PullRecord {
                client: self.config.index,
                sent_ns,
                end,
            });
        }
        if kill.is_cancelled() {
            // What the client recorded as sent (its last pull, its last
            // acks) reaches the server before it goes: otherwise a stall
            // of the connection's writer on a busy machine drops them, and
            // the record no longer says what the server saw. A real crash
            // may also lose what is still in the write buffer.
            self.client
                .flush()
                .await
                .context("flushing a killed group client's last writes")?;
            // What reached the client but was not yet taken up died with
            // it, unacked: counted, or its return would look unexplained.
            while let Ok((received_ns, m)) = self.rx.try_recv() {
                if let Reply::Message(t) = classify(&m) {
                    let d = self.record(received_ns, &m, t);
                    self.report.deliveries.push(d);
                }
            }
        }
        Ok(self.report)
    }

    async fn pull(&mut self) -> Result<()> {
        let c = &self.config;
        let id = match (c.pinned, self.pin) {
            (true, Some(i)) => Some(self.report.pins[i as usize].as_str()),
            _ => None,
        };
        let request = PullRequest {
            batch: c.batch,
            expires: c.expires.as_nanos() as u64,
            group: &c.group,
            min_pending: c.min_pending,
            min_ack_pending: c.min_ack_pending,
            priority: c.priority,
            id,
        };
        let body = serde_json::to_vec(&request).context("encoding a pull request")?;
        self.client
            .publish_with_reply(c.subject.clone(), self.inbox.clone(), body.into())
            .await
            .context("sending a pull request")
    }

    /// Waits out one request: its batch, its expiry, a refusal, or the end
    /// (stopped or killed with it open: abandoned).
    async fn wait(
        &mut self,
        stop: &CancellationToken,
        kill: &CancellationToken,
    ) -> Result<PullEnd> {
        let abandoned = || PullEnd::Abandoned {
            at_ns: clock::now_ns(),
        };
        let mut remaining = self.config.batch;
        // The server answers an expired request; this only guards a lost one.
        let deadline = tokio::time::Instant::now() + self.config.expires + Duration::from_secs(2);
        loop {
            let (received_ns, m) = tokio::select! {
                biased;
                _ = kill.cancelled() => return Ok(abandoned()),
                _ = stop.cancelled() => return Ok(abandoned()),
                _ = tokio::time::sleep_until(deadline) => {
                    return Ok(PullEnd::Released { at_ns: clock::now_ns() });
                }
                m = self.rx.recv() => match m {
                    Some(m) => m,
                    None => return Ok(abandoned()),
                },
            };
            match classify(&m) {
                Reply::Message(t) => {
                    self.deliver(received_ns, &m, t, kill).await?;
                    remaining -= 1;
                    if remaining == 0 {
                        return Ok(PullEnd::Filled {
                            last_consumer_seq: t.consumer_seq,
                        });
                    }
                }
                Reply::Heartbeat => {}
                Reply::Released => {
                    return Ok(PullEnd::Released { at_ns: received_ns });
                }
                Reply::WrongPin => {
                    self.report.wrong_pin += 1;
                    self.pin = None;
                    return Ok(PullEnd::WrongPin { at_ns: received_ns });
                }
                Reply::Other(s) => {
                    self.report.first_status.get_or_insert(s);
                    return Ok(PullEnd::Released { at_ns: received_ns });
                }
            }
        }
    }

    /// Records a delivery, holds it for the processing time, then acks it
    /// unless the client was killed meanwhile.
    async fn deliver(
        &mut self,
        received_ns: u64,
        m: &async_nats::Message,
        t: AckTokens,
        kill: &CancellationToken,
    ) -> Result<()> {
        let mut d = self.record(received_ns, m, t);
        if !self.config.processing.is_zero() {
            tokio::select! {
                _ = kill.cancelled() => {}
                _ = tokio::time::sleep(self.config.processing) => {}
            }
        }
        if !kill.is_cancelled()
            && let Some(reply) = m.reply.clone()
        {
            self.client
                .publish(reply, "+ACK".into())
                .await
                .context("acking a delivery")?;
            self.report.ledger.mark(t.stream_seq, Event::Acked);
            self.progress.acked.fetch_add(1, Ordering::Relaxed);
            d.acked = true;
        }
        self.report.deliveries.push(d);
        Ok(())
    }

    /// A delivery as received, not yet acked.
    fn record(&mut self, received_ns: u64, m: &async_nats::Message, t: AckTokens) -> GroupDelivery {
        let pin = pin_of(m.headers.as_ref()).map(|p| pin_index(&mut self.report.pins, p));
        if self.config.pinned && pin.is_some() {
            self.pin = pin;
        }
        self.report.ledger.mark(t.stream_seq, Event::Delivered);
        self.progress
            .last_received_ns
            .store(received_ns, Ordering::Relaxed);
        let intended_ns = Stamp::read(&m.payload).map_or(0, |s| s.intended_ns);
        GroupDelivery {
            client: self.config.index,
            received_ns,
            stream_seq: t.stream_seq,
            consumer_seq: t.consumer_seq,
            delivered: t.delivered,
            pending: t.pending,
            pin,
            intended_ns,
            acked: false,
        }
    }
}

/// The index of `pin` in `pins`, added at the end when new: a new pin
/// allocates once.
pub fn pin_index(pins: &mut Vec<String>, pin: &str) -> u16 {
    match pins.iter().position(|p| p == pin) {
        Some(i) => i as u16,
        None => {
            pins.push(pin.to_string());
            (pins.len() - 1) as u16
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_request_carries_only_the_fields_it_sets() {
        let r = PullRequest {
            batch: 5,
            expires: 1_000,
            group: "g",
            min_pending: 0,
            min_ack_pending: 3,
            priority: 0,
            id: Some("P"),
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"batch":5,"expires":1000,"group":"g","min_ack_pending":3,"id":"P"}"#
        );
    }
}
