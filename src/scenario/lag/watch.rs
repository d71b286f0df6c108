//! What the origins stored and what the copies stored, watched while
//! they fill.
//!
//! An origin's stored time comes from its own RePublish (headers only,
//! onto `<base>_stored.*`): the server sends `Nats-Sequence` and
//! `Nats-Time-Stamp` for every message it stores, and the listener needs
//! no consumer on the origin. That matters for a work-queue origin, which
//! refuses a second consumer overlapping the sourcing durable (10099) and
//! removes each message once the copy's flow control acknowledges it, so
//! neither a consumer nor a read-back afterwards could see it.
//!
//! A copy is read by an ordered consumer from its first sequence: each
//! delivery's reply subject carries the copy's stream sequence and stored
//! time; a source's `Nats-Stream-Source` header names the origin stream and
//! sequence it came from (a mirror keeps the origin's sequences); the
//! payload's stamp, when it was sent.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use async_nats::jetstream::{consumer, stream};
use futures::StreamExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::record::clock;
use crate::record::stamp::Stamp;

/// The header a source adds to every message it copies:
/// `<stream>[:<ident>] <seq> <filter> <transform> <subject> <id>`.
pub const STREAM_SOURCE: &str = "Nats-Stream-Source";

/// How long a copy reader waits before making its consumer again after
/// failing to (a node cut off, a leader moving).
const RETRY: Duration = Duration::from_millis(200);

/// The origin's RePublish destination: beside its subjects, never inside.
pub fn stored_subject(base: &str) -> String {
    format!("{base}_stored")
}

/// The stored time of each message an origin republished, by sequence
/// (Unix ns, the server's clock).
pub struct OriginListener {
    task: JoinHandle<HashMap<u64, i128>>,
    stop: CancellationToken,
}

impl OriginListener {
    pub async fn start(client: &async_nats::Client, base: &str) -> Result<OriginListener> {
        let subject = format!("{}.*", stored_subject(base));
        let mut sub = client
            .subscribe(subject.clone())
            .await
            .with_context(|| format!("subscribing to the origin's republished {subject}"))?;
        let stop = CancellationToken::new();
        let halt = stop.clone();
        let task = tokio::spawn(async move {
            let mut stored = HashMap::new();
            loop {
                let m = tokio::select! {
                    _ = halt.cancelled() => break,
                    m = sub.next() => m,
                };
                let Some(m) = m else { break };
                let Some(h) = m.headers.as_ref() else {
                    continue;
                };
                let seq = h.get("Nats-Sequence").and_then(|v| v.as_str().parse().ok());
                let at = h
                    .get("Nats-Time-Stamp")
                    .and_then(|v| clock::parse_server_time(v.as_str()));
                if let (Some(seq), Some(at)) = (seq, at) {
                    stored.entry(seq).or_insert(at);
                }
            }
            stored
        });
        Ok(OriginListener { task, stop })
    }

    /// Stops listening; every origin message heard of, by sequence.
    pub async fn finish(self) -> Result<HashMap<u64, i128>> {
        self.stop.cancel();
        self.task
            .await
            .map_err(|e| anyhow!("the origin listener failed: {e}"))
    }
}

/// One message as the copy stored it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    pub copy_seq: u64,
    /// Which origin (index into the variant's origins); `None` for a
    /// message from no origin of this variant.
    pub origin: Option<usize>,
    pub origin_seq: u64,
    /// The copy's stored time (server clock, Unix ns). A mirror keeps the
    /// origin's.
    pub stored_ns: i128,
    /// When the reader here had it ([`clock`], Unix ns).
    pub received_ns: u64,
    /// When jsbench's publisher sent it, from the stamp its payload
    /// carries ([`clock`], Unix ns); `None` for a message without one
    /// (a primer).
    pub sent_ns: Option<u64>,
}

/// Reads a copy from its first sequence as it fills.
pub struct CopyReader {
    task: JoinHandle<Vec<Copied>>,
    stop: CancellationToken,
    seen: Arc<AtomicU64>,
}

/// How a copy names its origins: a mirror by sequence alone (its one
/// origin), a source by the header's stream name.
#[derive(Debug, Clone)]
pub struct Origins {
    pub names: Vec<String>,
    pub mirror: bool,
}

impl Origins {
    fn of(&self, m: &async_nats::jetstream::Message, copy_seq: u64) -> (Option<usize>, u64) {
        if self.mirror {
            return (Some(0), copy_seq);
        }
        let header = m.headers.as_ref().and_then(|h| h.get(STREAM_SOURCE));
        match header.and_then(|v| parse_source(v.as_str())) {
            Some((stream, seq)) => (self.names.iter().position(|n| n == stream), seq),
            None => (None, 0),
        }
    }
}

/// The origin stream and sequence of a `Nats-Stream-Source` value. A
/// durable-sourced copy writes the stream as `<name>:C=<ident>`
/// (nats-server 2.15.1), an ephemeral one as `<name>`.
pub fn parse_source(value: &str) -> Option<(&str, u64)> {
    let mut parts = value.split(' ');
    let stream = parts.next()?.split(':').next()?;
    let seq = parts.next()?.parse().ok()?;
    Some((stream, seq))
}

async fn ordered(stream: &stream::Stream, from: u64) -> Result<consumer::pull::Ordered> {
    stream
        .create_consumer(consumer::pull::OrderedConfig {
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: from,
            },
            ..Default::default()
        })
        .await
        .context("creating the ordered consumer that reads the copy")?
        .messages()
        .await
        .context("reading the copy")
}

impl CopyReader {
    pub async fn start(
        stream: &stream::Stream,
        origins: Origins,
        expected: usize,
    ) -> Result<CopyReader> {
        let first = ordered(stream, 1).await?;
        let stop = CancellationToken::new();
        let seen = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(read(
            (stream.clone(), origins, first),
            stop.clone(),
            seen.clone(),
            expected,
        ));
        Ok(CopyReader { task, stop, seen })
    }

    /// Messages read so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// Stops reading; what the copy held, in its order.
    pub async fn finish(self) -> Result<Vec<Copied>> {
        self.stop.cancel();
        self.task
            .await
            .map_err(|e| anyhow!("the copy reader failed: {e}"))
    }
}

async fn read(
    (stream, origins, first): (stream::Stream, Origins, consumer::pull::Ordered),
    stop: CancellationToken,
    seen: Arc<AtomicU64>,
    expected: usize,
) -> Vec<Copied> {
    let mut copied: Vec<Copied> = Vec::with_capacity(expected);
    let mut messages = Some(first);
    loop {
        let Some(m) = messages.as_mut() else {
            let from = copied.last().map_or(1, |c| c.copy_seq + 1);
            tokio::select! {
                _ = stop.cancelled() => break,
                made = ordered(&stream, from) => match made {
                    Ok(m) => messages = Some(m),
                    Err(_) => tokio::time::sleep(RETRY).await,
                },
            }
            continue;
        };
        let next = tokio::select! {
            _ = stop.cancelled() => break,
            m = m.next() => m,
        };
        match next {
            Some(Ok(m)) => {
                let received_ns = clock::now_ns();
                let Ok(info) = m.info() else { continue };
                let copy_seq = info.stream_sequence;
                let (origin, origin_seq) = origins.of(&m, copy_seq);
                copied.push(Copied {
                    copy_seq,
                    origin,
                    origin_seq,
                    stored_ns: info.published.unix_timestamp_nanos(),
                    received_ns,
                    sent_ns: Stamp::read(&m.payload).map(|s| s.sent_ns),
                });
                seen.fetch_add(1, Ordering::Relaxed);
            }
            // Failed or ended: made again from the next sequence.
            _ => messages = None,
        }
    }
    copied
}

#[cfg(test)]
mod tests {
    use super::parse_source;

    #[test]
    fn source_headers_of_both_shapes_name_stream_and_sequence() {
        assert_eq!(parse_source("O 2 > > o.x kvKm6Pfe"), Some(("O", 2)));
        assert_eq!(
            parse_source("W:C=bgb4b7ry 17 > > w.x 66eMxM6K"),
            Some(("W", 17))
        );
        assert_eq!(parse_source("O"), None);
        assert_eq!(parse_source("O x"), None);
    }
}
