//! The origins' load: `rate` msg/s round-robin over the origins' subjects
//! for `duration`, message `i` due at `t0 + i / rate` (open loop: a late
//! send is sent at once, never skipped), at most `window` PubAcks awaited
//! at once. What matters here is when each message was confirmed stored
//! (the PubAck's receipt, jsbench's clock), by origin and sequence.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, Result};
use async_nats::jetstream;
use bytes::{BufMut, BytesMut};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::record::clock;

/// What the publishing left: per origin, the PubAck's receipt by sequence.
#[derive(Debug, Default)]
pub struct Published {
    pub sent: u64,
    /// Per origin: stream sequence -> PubAck received ([`clock`], Unix ns).
    pub acked: Vec<HashMap<u64, u64>>,
    /// Publishes answered with an error or never answered.
    pub errors: u64,
    pub first_error: Option<String>,
    /// From the first send to the last PubAck, s.
    pub span_s: f64,
    /// The first send ([`clock`], Unix ns).
    pub started_ns: u64,
}

/// The load, as [`publish`] reads it.
pub struct Load<'a> {
    pub subjects: &'a [String],
    pub rate: u64,
    /// Warm-up and measured time: published alike.
    pub duration: Duration,
    pub message_size: usize,
    pub window: usize,
}

/// Publishes the load; stops early (keeping what it has) when `stop` is
/// cancelled.
pub async fn publish(
    js: &jetstream::Context,
    load: &Load<'_>,
    stop: &CancellationToken,
) -> Result<Published> {
    let total = (load.rate as f64 * load.duration.as_secs_f64()).round() as u64;
    let origins = load.subjects.len();
    let mut out = Published {
        acked: vec![HashMap::with_capacity(total as usize / origins + 1); origins],
        started_ns: clock::now_ns(),
        ..Published::default()
    };
    let start = Instant::now();
    let mut inflight = FuturesUnordered::new();
    let mut payload = BytesMut::with_capacity(load.message_size);
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / load.rate as f64);
        // Acks are read while the next send waits, so their receipt is
        // timed when they come, not when the window fills.
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some(done) = inflight.next(), if !inflight.is_empty() => out.take(done),
                _ = tokio::time::sleep_until(due), if inflight.len() < load.window => break,
            }
        }
        if stop.is_cancelled() {
            break;
        }
        let origin = (i % origins as u64) as usize;
        payload.clear();
        payload.put_u64_le(i);
        payload.resize(load.message_size, 0);
        let ack = js
            .publish(load.subjects[origin].clone(), payload.split().freeze())
            .await
            .with_context(|| format!("publishing to {}", load.subjects[origin]))?;
        out.sent += 1;
        inflight.push(async move { (origin, ack.await.map_err(|e| e.to_string())) });
    }
    while let Some(done) = inflight.next().await {
        out.take(done);
    }
    out.span_s = start.elapsed().as_secs_f64();
    Ok(out)
}

type Answer = (
    usize,
    std::result::Result<async_nats::jetstream::publish::PublishAck, String>,
);

impl Published {
    fn take(&mut self, (origin, answer): Answer) {
        match answer {
            Ok(ack) => {
                self.acked[origin].insert(ack.sequence, clock::now_ns());
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }

    pub fn confirmed(&self) -> u64 {
        self.acked.iter().map(|a| a.len() as u64).sum()
    }
}

/// One message into each origin, confirmed: published before the load
/// and awaited in the copy, so the load starts on a copy whose sourcing
/// consumer is up (creating it takes the server 100-300 ms here, which
/// the first messages would otherwise wait out as lag).
pub async fn prime(js: &jetstream::Context, subjects: &[String]) -> Result<()> {
    for subject in subjects {
        js.publish(subject.clone(), u64::MAX.to_le_bytes().to_vec().into())
            .await
            .with_context(|| format!("priming {subject}"))?
            .await
            .with_context(|| format!("the PubAck of the primer on {subject}"))?;
    }
    Ok(())
}
