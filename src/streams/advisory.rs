//! JetStream advisories about a consumer's messages, watched while a
//! scenario runs: MAX_DELIVERIES (a message ran out of deliveries),
//! MSG_TERMINATED (a consumer termed it, with the reason it gave) and
//! MSG_NAKED (a consumer nak'ed a delivery). Advisories are transient: only a
//! subscriber that is listening when one fires sees it, so the watch starts
//! before any load. [`parse_event`] reads every field the dead-letter
//! handler needs from one captured in a stream.

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::{Client, Subscriber};
use futures::StreamExt;
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::record::clock;

/// One advisory, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advisory {
    pub stream_seq: u64,
    /// Deliveries so far (MAX_DELIVERIES only).
    pub deliveries: u64,
    pub received_ns: u64,
    /// The server's own time stamp of the advisory, ns since the epoch.
    pub server_ns: Option<u64>,
    /// The reason a term gave (MSG_TERMINATED only; empty when none).
    pub reason: String,
}

#[derive(Debug, Clone, Default)]
pub struct Advisories {
    pub max_deliveries: Vec<Advisory>,
    pub terminated: Vec<Advisory>,
    /// One per nak'ed delivery.
    pub naked: Vec<Advisory>,
    /// Advisories that did not parse.
    pub malformed: u64,
}

#[derive(Deserialize)]
struct Wire {
    stream_seq: u64,
    #[serde(default)]
    deliveries: u64,
    timestamp: Option<String>,
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    stream: String,
    #[serde(default)]
    consumer: String,
    #[serde(default)]
    reason: String,
}

/// Which advisory an [`Event`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    MaxDeliveries,
    Terminated,
    Naked,
}

impl Kind {
    /// The `type` field nats-server 2.15 sends.
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::MaxDeliveries => "io.nats.jetstream.advisory.v1.max_deliver",
            Kind::Terminated => "io.nats.jetstream.advisory.v1.terminated",
            Kind::Naked => "io.nats.jetstream.advisory.v1.nak",
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Kind::MaxDeliveries => "max_deliveries",
            Kind::Terminated => "terminated",
            Kind::Naked => "naked",
        }
    }

    /// The event's token in the advisory subject.
    pub fn event(&self) -> &'static str {
        match self {
            Kind::MaxDeliveries => "MAX_DELIVERIES",
            Kind::Terminated => "MSG_TERMINATED",
            Kind::Naked => "MSG_NAKED",
        }
    }
}

/// An advisory with the stream and consumer it is about: what a handler
/// reading a capture stream (which collects every stream's advisories)
/// needs to decide whether it is its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    pub stream: String,
    pub consumer: String,
    pub advisory: Advisory,
}

/// Parses a MAX_DELIVERIES or MSG_TERMINATED advisory; the error says what
/// is wrong with it, for the handler's term reason.
pub fn parse_event(payload: &[u8]) -> Result<Event, String> {
    let wire: Wire =
        serde_json::from_slice(payload).map_err(|e| format!("not an advisory: {e}"))?;
    let kind = [Kind::MaxDeliveries, Kind::Terminated]
        .into_iter()
        .find(|k| k.type_name() == wire.kind)
        .ok_or_else(|| format!("unexpected advisory type {:?}", wire.kind))?;
    if wire.stream.is_empty() || wire.consumer.is_empty() || wire.stream_seq == 0 {
        return Err("advisory without stream, consumer or stream_seq".into());
    }
    let advisory = from_wire(&wire);
    Ok(Event {
        kind,
        stream: wire.stream,
        consumer: wire.consumer,
        advisory,
    })
}

pub struct AdvisoryWatch {
    stop: CancellationToken,
    task: JoinHandle<Advisories>,
}

impl AdvisoryWatch {
    /// Subscribes to the three advisories of `stream`/`consumer`.
    pub async fn start(client: &Client, stream: &str, consumer: &str) -> Result<AdvisoryWatch> {
        let mut subscribers = Vec::new();
        for kind in [Kind::MaxDeliveries, Kind::Terminated, Kind::Naked] {
            let event = kind.event();
            let subscriber = client
                .subscribe(format!(
                    "$JS.EVENT.ADVISORY.CONSUMER.{event}.{stream}.{consumer}"
                ))
                .await
                .with_context(|| format!("subscribing to {event} advisories"))?;
            subscribers.push((kind, subscriber));
        }
        client
            .flush()
            .await
            .context("flushing advisory subscriptions")?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(watch(subscribers, stop.clone()));
        Ok(AdvisoryWatch { stop, task })
    }

    /// Stops after a grace period for advisories still in flight.
    pub async fn finish(self, grace: Duration) -> Advisories {
        tokio::time::sleep(grace).await;
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

async fn watch(subscribers: Vec<(Kind, Subscriber)>, stop: CancellationToken) -> Advisories {
    let mut all = futures::stream::select_all(
        subscribers
            .into_iter()
            .map(|(kind, s)| s.map(move |m| (kind, m))),
    );
    let mut out = Advisories::default();
    loop {
        let (kind, message) = tokio::select! {
            _ = stop.cancelled() => break,
            Some(next) = all.next() => next,
            else => break,
        };
        match parse(&message.payload) {
            Some(mut advisory) => {
                advisory.received_ns = clock::now_ns();
                match kind {
                    Kind::MaxDeliveries => out.max_deliveries.push(advisory),
                    Kind::Terminated => out.terminated.push(advisory),
                    Kind::Naked => out.naked.push(advisory),
                }
            }
            None => out.malformed += 1,
        }
    }
    out
}

pub fn parse(payload: &[u8]) -> Option<Advisory> {
    let wire: Wire = serde_json::from_slice(payload).ok()?;
    Some(from_wire(&wire))
}

fn from_wire(wire: &Wire) -> Advisory {
    let server_ns = wire
        .timestamp
        .as_deref()
        .and_then(crate::record::clock::parse_server_time)
        .map(|ns| ns as u64);
    Advisory {
        stream_seq: wire.stream_seq,
        deliveries: wire.deliveries,
        received_ns: 0,
        server_ns,
        reason: wire.reason.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_fields_2_15_sends() {
        let a = parse(
            br#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","id":"x","timestamp":"2026-11-30T10:00:00.5Z","stream":"S","consumer":"C","stream_seq":42,"deliveries":5}"#,
        )
        .unwrap();
        assert_eq!(a.stream_seq, 42);
        assert_eq!(a.deliveries, 5);
        assert_eq!(a.server_ns, Some(1_796_032_800_500_000_000));
        assert!(parse(b"not json").is_none());
    }

    #[test]
    fn events_name_their_stream_consumer_and_kind() {
        let e = parse_event(
            br#"{"type":"io.nats.jetstream.advisory.v1.terminated","id":"x","timestamp":"2026-11-30T10:00:00Z","stream":"S","consumer":"C","consumer_seq":3,"stream_seq":7,"deliveries":1,"reason":"bad"}"#,
        )
        .unwrap();
        assert_eq!(e.kind, Kind::Terminated);
        assert_eq!((e.stream.as_str(), e.consumer.as_str()), ("S", "C"));
        assert_eq!(e.advisory.stream_seq, 7);
        for bad in [
            &b"{"[..],
            br#"{"type":"io.nats.jetstream.advisory.v1.nak","stream":"S","consumer":"C","stream_seq":1}"#,
            br#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","consumer":"C","stream_seq":1}"#,
            br#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S","consumer":"C","stream_seq":0}"#,
        ] {
            assert!(parse_event(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
