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
use std::future::Future;
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

/// A task that watches until told to stop, then hands over what it saw.
pub struct Watch<T> {
    task: JoinHandle<T>,
    stop: CancellationToken,
}

impl<T: Send + 'static> Watch<T> {
    fn spawn<F>(watch: impl FnOnce(CancellationToken) -> F) -> Watch<T>
    where
        F: Future<Output = T> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let task = tokio::spawn(watch(stop.clone()));
        Watch { task, stop }
    }

    /// Stops watching; what it saw.
    pub async fn finish(self, what: &str) -> Result<T> {
        self.stop.cancel();
        self.task
            .await
            .map_err(|e| anyhow!("the {what} failed: {e}"))
    }
}

/// Listens to an origin's republish: the stored time of each message it
/// stores, by sequence (Unix ns, the server's clock).
pub async fn listen(client: &async_nats::Client, base: &str) -> Result<Watch<HashMap<u64, i128>>> {
    let subject = format!("{}.*", stored_subject(base));
    let sub = client
        .subscribe(subject.clone())
        .await
        .with_context(|| format!("subscribing to the origin's republished {subject}"))?;
    Ok(Watch::spawn(|stop| async move {
        let mut stored = HashMap::new();
        let mut heard = std::pin::pin!(sub.take_until(stop.cancelled_owned()));
        while let Some(m) = heard.next().await {
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
    }))
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
    watch: Watch<Vec<Copied>>,
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
        let seen = Arc::new(AtomicU64::new(0));
        let (stream, counted) = (stream.clone(), seen.clone());
        let watch = Watch::spawn(move |stop| read(stream, origins, first, stop, counted, expected));
        Ok(CopyReader { watch, seen })
    }

    /// Messages read so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// Stops reading; what the copy held, in its order.
    pub async fn finish(self) -> Result<Vec<Copied>> {
        self.watch.finish("copy reader").await
    }
}

async fn read(
    stream: stream::Stream,
    origins: Origins,
    mut messages: consumer::pull::Ordered,
    stop: CancellationToken,
    seen: Arc<AtomicU64>,
    expected: usize,
) -> Vec<Copied> {
    let mut copied: Vec<Copied> = Vec::with_capacity(expected);
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => break,
            m = messages.next() => m,
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
            _ => loop {
                let from = copied.last().map_or(1, |c| c.copy_seq + 1);
                tokio::select! {
                    _ = stop.cancelled() => return copied,
                    made = ordered(&stream, from) => match made {
                        Ok(m) => break messages = m,
                        Err(_) => tokio::time::sleep(RETRY).await,
                    },
                }
            },
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
