//! Per-hop latency from NATS message tracing (ADR-41, nats-server 2.11+):
//! the collector of the trace events a sample of messages brings.
//!
//! A publisher puts `Nats-Trace-Dest: _jsb.trace.<token>.<publisher>.<sent
//! ns>` on every `trace_every`th message ([`crate::load::Composer`]). The
//! message is stored and delivered as usual, and each server it crosses
//! publishes one JSON event to that subject: the server's `in` (its client
//! read loop took the message), on the stream's leader `js` (taken where
//! the stored time stamp is on one server; after the raft commit on a
//! cluster), and `eg` for what it forwarded. A server reached over a route
//! says so with `Nats-Trace-Hop` in the request's headers. The send time
//! is in the subject, so nothing is shared with the sender; several
//! servers' events for one message are joined by their subject.
//!
//! The hops, each on this process's clock ([`clock::from_wall`]):
//! - client to ingress: the first server's `in` minus the send;
//! - route (a cluster, when the stream's leader is not the server the
//!   client published to): the leader's `in` minus the first server's;
//! - ingress to stored: the leader's `js` minus its `in`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::record::clock;
use crate::record::histogram::Recorder;
use crate::streams::provision::sanitize;

/// Where every trace subject of jsbench starts.
const ROOT: &str = "_jsb.trace";

/// After the drain, how long the events of the last traced messages may
/// take: each server sends its event as soon as it is done with the
/// message, so they trail the deliveries by little.
pub const GRACE: Duration = Duration::from_secs(1);

/// Publisher `publisher`'s trace subjects up to the send time.
pub fn subject_prefix(msg_id_prefix: &str, publisher: usize) -> String {
    format!("{ROOT}.{}.{publisher}.", sanitize(msg_id_prefix))
}

/// What tracing a variant's sample found.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct TraceOutcome {
    /// Sends that carried `Nats-Trace-Dest` (from the publishers).
    pub traced: u64,
    /// Traced messages with an `in` on the first server and a `js` event.
    pub complete: u64,
    /// Traced messages some of whose events never came (`traced -
    /// complete`, never below zero).
    pub incomplete: u64,
    /// Event messages that did not parse, or whose subject carried no
    /// send time.
    pub malformed: u64,
    /// The first malformed one, for the report.
    pub first_malformed: Option<String>,
    pub client_to_ingress: Recorder,
    /// Empty on one server.
    pub route: Recorder,
    pub ingress_to_stored: Recorder,
}

/// The parts of an ADR-41 `MsgTraceEvent` the hops need; the rest is
/// ignored.
#[derive(Deserialize)]
struct Event {
    server: Server,
    #[serde(default)]
    request: Request,
    #[serde(default)]
    events: Vec<Step>,
}

#[derive(Deserialize)]
struct Server {
    id: String,
}

#[derive(Deserialize, Default)]
struct Request {
    #[serde(default)]
    header: HashMap<String, Vec<String>>,
}

#[derive(Deserialize)]
struct Step {
    #[serde(rename = "type")]
    kind: String,
    ts: String,
}

/// One server's event, reduced to what joining needs (ns on this
/// process's clock).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    server: String,
    /// Reached over a route: it carries `Nats-Trace-Hop`.
    hop: bool,
    in_ns: Option<u64>,
    js_ns: Option<u64>,
}

/// One message's events so far.
#[derive(Default)]
struct Message {
    first: Option<Seen>,
    leader: Option<Seen>,
    done: bool,
}

/// The events of one variant's traced messages, joined and recorded.
#[derive(Default)]
struct Joiner {
    messages: HashMap<String, Message>,
    /// Messages sent before this (the warm-up) are counted, not recorded.
    record_from_ns: u64,
    out: TraceOutcome,
}

impl Joiner {
    /// One event message on `subject`, `payload` its JSON.
    fn add(&mut self, subject: &str, payload: &[u8]) {
        match read_event(subject, payload) {
            Ok((sent_ns, seen)) => self.join(subject, sent_ns, seen),
            Err(e) => {
                self.out.malformed += 1;
                self.out
                    .first_malformed
                    .get_or_insert_with(|| format!("{subject}: {e:#}"));
            }
        }
    }

    fn join(&mut self, subject: &str, sent_ns: u64, seen: Seen) {
        let m = self.messages.entry(subject.to_string()).or_default();
        if seen.js_ns.is_some() {
            m.leader = Some(seen.clone());
        }
        if !seen.hop {
            m.first = Some(seen);
        }
        let (Some(first), Some(leader), false) = (&m.first, &m.leader, m.done) else {
            return;
        };
        let (Some(first_in), Some(leader_in), Some(js)) = (first.in_ns, leader.in_ns, leader.js_ns)
        else {
            return;
        };
        m.done = true;
        self.out.complete += 1;
        if sent_ns < self.record_from_ns {
            return;
        }
        self.out.client_to_ingress.record_between(sent_ns, first_in);
        if leader.server != first.server {
            self.out.route.record_between(first_in, leader_in);
        }
        self.out.ingress_to_stored.record_between(leader_in, js);
    }
}

/// The send time from `subject` and the event's times on this clock.
fn read_event(subject: &str, payload: &[u8]) -> Result<(u64, Seen)> {
    let sent_ns = subject
        .rsplit_once('.')
        .and_then(|(_, ns)| ns.parse::<u64>().ok())
        .context("no send time at the subject's end")?;
    let event: Event = serde_json::from_slice(payload).context("not a trace event")?;
    let now = clock::now_ns();
    let mut seen = Seen {
        server: event.server.id,
        hop: event.request.header.contains_key("Nats-Trace-Hop"),
        in_ns: None,
        js_ns: None,
    };
    for step in &event.events {
        let slot = match step.kind.as_str() {
            "in" => &mut seen.in_ns,
            "js" => &mut seen.js_ns,
            _ => continue,
        };
        *slot = Some(clock::from_wall(wall_ns(&step.ts)?, now));
    }
    Ok((sent_ns, seen))
}

/// An RFC 3339 time (Go's `time.Time` in JSON) as ns since the epoch.
fn wall_ns(ts: &str) -> Result<u64> {
    let ns = clock::parse_server_time(ts).with_context(|| format!("time {ts:?}"))?;
    u64::try_from(ns).with_context(|| format!("time {ts:?} before 1970"))
}

/// Subscribed to a variant's trace subjects, joining events as they come.
pub struct Collector {
    task: JoinHandle<TraceOutcome>,
    /// The traced sends once publishing is over: the task ends when all
    /// are complete, or `GRACE` later.
    traced: watch::Sender<Option<u64>>,
}

impl Collector {
    /// Subscribes before any traced message is sent (the subscription is
    /// flushed to the server), so no event is missed.
    pub async fn start(
        client: async_nats::Client,
        msg_id_prefix: &str,
        record_from_ns: u64,
    ) -> Result<Collector> {
        let subject = format!("{ROOT}.{}.>", sanitize(msg_id_prefix));
        let mut events = client
            .subscribe(subject.clone())
            .await
            .with_context(|| format!("subscribing to the trace events on {subject}"))?;
        client
            .flush()
            .await
            .context("flushing the trace subscription")?;
        let (traced, mut until) = watch::channel(None::<u64>);
        let task = tokio::spawn(async move {
            let _client = client;
            let mut joiner = Joiner {
                record_from_ns,
                ..Joiner::default()
            };
            let mut deadline = None;
            loop {
                if let Some(n) = *until.borrow_and_update() {
                    deadline.get_or_insert_with(|| tokio::time::Instant::now() + GRACE);
                    if joiner.out.complete >= n {
                        break;
                    }
                }
                let far = tokio::time::Instant::now() + Duration::from_secs(3600);
                tokio::select! {
                    event = events.next() => match event {
                        Some(m) => joiner.add(m.subject.as_str(), &m.payload),
                        None => break,
                    },
                    changed = until.changed() => if changed.is_err() { break },
                    _ = tokio::time::sleep_until(deadline.unwrap_or(far)) => break,
                }
            }
            joiner.out
        });
        Ok(Collector { task, traced })
    }

    /// Waits for the events of all `traced` sends, at most [`GRACE`], and
    /// returns what they measured.
    pub async fn finish(self, traced: u64) -> Result<TraceOutcome> {
        let _ = self.traced.send(Some(traced));
        let mut out = self.task.await.context("joining the trace collector")?;
        out.traced = traced;
        out.incomplete = traced.saturating_sub(out.complete);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(server: &str, hop: bool, steps: &[(&str, &str)]) -> Vec<u8> {
        let header = if hop {
            serde_json::json!({"Nats-Trace-Hop": ["1"]})
        } else {
            serde_json::json!({})
        };
        let events: Vec<_> = steps
            .iter()
            .map(|(k, ts)| serde_json::json!({"type": k, "ts": ts, "kind": 0, "extra": 1}))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "server": {"name": "n", "id": server},
            "request": {"header": header, "msgsize": 10},
            "hops": 1, "events": events, "unknown": true,
        }))
        .unwrap()
    }

    #[test]
    fn a_token_has_no_dots_or_wildcards() {
        assert_eq!(
            subject_prefix("AB12-lat.x-rate 5*>", 3),
            "_jsb.trace.AB12-lat_x-rate_5__.3."
        );
    }

    #[test]
    fn one_server_gives_ingress_and_stored_but_no_route() {
        let mut j = Joiner::default();
        let sent = wall_ns("2026-01-01T00:00:00.000010Z").unwrap();
        let sent = clock::from_wall(sent, clock::now_ns());
        let subject = format!("_jsb.trace.t.0.{sent}");
        j.add(
            &subject,
            &event(
                "S1",
                false,
                &[
                    ("in", "2026-01-01T00:00:00.000030Z"),
                    ("js", "2026-01-01T00:00:00.000045Z"),
                ],
            ),
        );
        assert_eq!(j.out.complete, 1);
        let us = |r: &Recorder| r.summary().p50_us.round();
        assert_eq!(us(&j.out.client_to_ingress), 20.0);
        assert_eq!(us(&j.out.ingress_to_stored), 15.0);
        assert_eq!(j.out.route.count(), 0);
    }

    #[test]
    fn a_cluster_joins_the_first_server_and_the_leader_by_subject() {
        let mut j = Joiner::default();
        let subject = "_jsb.trace.t.1.0";
        // The leader's event may come first.
        j.add(
            subject,
            &event(
                "S2",
                true,
                &[
                    ("in", "2026-01-01T00:00:00.000100Z"),
                    ("js", "2026-01-01T00:00:00.000400Z"),
                ],
            ),
        );
        assert_eq!(j.out.complete, 0);
        j.add(
            subject,
            &event(
                "S1",
                false,
                &[
                    ("in", "2026-01-01T00:00:00.000040Z"),
                    ("eg", "2026-01-01T00:00:00.000050Z"),
                ],
            ),
        );
        assert_eq!(j.out.complete, 1);
        let us = |r: &Recorder| r.summary().p50_us.round();
        assert_eq!(us(&j.out.route), 60.0);
        assert_eq!(us(&j.out.ingress_to_stored), 300.0);
        j.add("_jsb.trace.t.1.x", b"{}");
        j.add("_jsb.trace.t.1.5", b"not json");
        assert_eq!(j.out.malformed, 2);
        assert!(j.out.first_malformed.unwrap().contains("send time"));
    }
}
