//! JetStream advisories about a consumer's messages, watched while a
//! scenario runs: MAX_DELIVERIES (a message ran out of deliveries) and
//! MSG_TERMINATED (a consumer termed it). Advisories are transient: only a
//! subscriber that is listening when one fires sees it, so the watch starts
//! before any load.

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::{Client, Subscriber};
use futures::StreamExt;
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clock;

/// One advisory, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advisory {
    pub stream_seq: u64,
    /// Deliveries so far (MAX_DELIVERIES only).
    pub deliveries: u64,
    pub received_ns: u64,
    /// The server's own time stamp of the advisory, ns since the epoch.
    pub server_ns: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct Advisories {
    pub max_deliveries: Vec<Advisory>,
    pub terminated: Vec<Advisory>,
    /// Advisories that did not parse.
    pub malformed: u64,
}

#[derive(Deserialize)]
struct Wire {
    stream_seq: u64,
    #[serde(default)]
    deliveries: u64,
    #[serde(default)]
    timestamp: Option<String>,
}

pub struct AdvisoryWatch {
    stop: CancellationToken,
    task: JoinHandle<Advisories>,
}

impl AdvisoryWatch {
    /// Subscribes to both advisories of `stream`/`consumer`.
    pub async fn start(client: &Client, stream: &str, consumer: &str) -> Result<AdvisoryWatch> {
        let max = client
            .subscribe(format!(
                "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}"
            ))
            .await
            .context("subscribing to MAX_DELIVERIES advisories")?;
        let term = client
            .subscribe(format!(
                "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.{consumer}"
            ))
            .await
            .context("subscribing to MSG_TERMINATED advisories")?;
        client
            .flush()
            .await
            .context("flushing advisory subscriptions")?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(watch(max, term, stop.clone()));
        Ok(AdvisoryWatch { stop, task })
    }

    /// Stops after a grace period for advisories still in flight.
    pub async fn finish(self, grace: Duration) -> Advisories {
        tokio::time::sleep(grace).await;
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

async fn watch(mut max: Subscriber, mut term: Subscriber, stop: CancellationToken) -> Advisories {
    let mut out = Advisories::default();
    loop {
        let (message, is_max) = tokio::select! {
            _ = stop.cancelled() => break,
            Some(m) = max.next() => (m, true),
            Some(m) = term.next() => (m, false),
            else => break,
        };
        match parse(&message.payload) {
            Some(mut advisory) => {
                advisory.received_ns = clock::now_ns();
                if is_max {
                    out.max_deliveries.push(advisory);
                } else {
                    out.terminated.push(advisory);
                }
            }
            None => out.malformed += 1,
        }
    }
    out
}

pub fn parse(payload: &[u8]) -> Option<Advisory> {
    let wire: Wire = serde_json::from_slice(payload).ok()?;
    let server_ns = wire.timestamp.as_deref().and_then(|t| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
            .ok()
            .map(|t| t.unix_timestamp_nanos() as u64)
    });
    Some(Advisory {
        stream_seq: wire.stream_seq,
        deliveries: wire.deliveries,
        received_ns: 0,
        server_ns,
    })
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
}
