//! Message schedules (ADR-51, nats-server 2.12 and 2.14): a stream that
//! allows them, schedules published into it, and the messages they fire
//! watched as they are stored.
//!
//! Every schedule has a subject of its own (`<base>.sched.<i>`: a newer
//! schedule on a subject replaces the older) and fires into a target of its
//! own (`<base>.fired.<i>`), so the stream's per-subject counts are the
//! server's own record of how often each schedule fired, beside what a
//! consumer received. Times here are Unix nanoseconds on the wall clock:
//! the server stamps stored messages with its wall clock, and a schedule's
//! due time is a wall-clock instant, so the firing error compares the two
//! (meaningful where jsbench and the server share a host, or their clocks
//! are synchronised).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, anyhow};
use async_nats::HeaderMap;
use async_nats::header::{NATS_SCHEDULE, NATS_SCHEDULE_NEXT, NATS_SCHEDULE_TARGET};
use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

const SECOND: i128 = 1_000_000_000;

/// Schedules published at once before their PubAcks are awaited.
const PUBLISH_WINDOW: usize = 256;

/// When a schedule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Once, at this instant (`@at <RFC3339>`, nanoseconds kept).
    At(i128),
    /// Every interval, from when the schedule was stored (`@every <dur>`).
    Every(Duration),
    /// A six-field cron whose seconds field steps by this many seconds and
    /// whose other fields are `*`: `*/n * * * * *`.
    CronStep(u32),
}

impl Pattern {
    /// The `Nats-Schedule` header's value.
    pub fn header(&self) -> String {
        match self {
            Pattern::At(ns) => format!("@at {}", rfc3339(*ns)),
            Pattern::Every(d) => format!("@every {}ms", d.as_millis()),
            Pattern::CronStep(n) => format!("*/{n} * * * * *"),
        }
    }

    /// The time between firings of a repeating schedule.
    pub fn period_ns(&self) -> Option<i128> {
        match self {
            Pattern::At(_) => None,
            Pattern::Every(d) => Some(d.as_nanos() as i128),
            Pattern::CronStep(n) => Some(i128::from(*n) * SECOND),
        }
    }

    /// The first due time, as nats-server 2.15 computes it from the stored
    /// time of the schedule message (server/scheduler.go, cron.go): `@at`
    /// as given; `@every` from the stored time rounded to the nearest
    /// second, plus the interval; cron at the first matching whole second
    /// after the stored time's second.
    pub fn first_due(&self, stored_ns: i128) -> i128 {
        match self {
            Pattern::At(ns) => *ns,
            Pattern::Every(d) => {
                (stored_ns + SECOND / 2).div_euclid(SECOND) * SECOND + d.as_nanos() as i128
            }
            Pattern::CronStep(n) => {
                let step = i128::from(*n);
                let next = stored_ns.div_euclid(SECOND) + 1;
                (next + (step - next.rem_euclid(step)) % step) * SECOND
            }
        }
    }
}

/// `ns` as RFC3339 in UTC with its nanoseconds.
pub fn rfc3339(ns: i128) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(ns)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// The wall clock now, Unix nanoseconds.
pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// A stream on `config`'s settings that holds schedules and what they
/// fire; allowing schedules lets the server roll up a schedule's subject.
pub fn stream_config(mut config: stream::Config, base: &str) -> stream::Config {
    config.subjects = vec![format!("{base}.sched.*"), format!("{base}.fired.*")];
    config.allow_message_schedules = true;
    config.allow_rollup = true;
    config
}

/// Publishes schedule `i` of `schedules` on its subject, aimed at its
/// target, the index in its payload; returns each one's stream sequence.
pub async fn publish(
    js: &jetstream::Context,
    base: &str,
    schedules: &[(u64, Pattern)],
) -> Result<Vec<u64>> {
    futures::stream::iter(schedules.iter().map(|&(i, pattern)| async move {
        let mut headers = HeaderMap::new();
        headers.insert(NATS_SCHEDULE, pattern.header().as_str());
        // Schedule `i` under `base`, and its target.
        headers.insert(NATS_SCHEDULE_TARGET, format!("{base}.fired.{i}").as_str());
        let subject = format!("{base}.sched.{i}");
        let ack = js
            .publish_with_headers(subject.clone(), headers, i.to_le_bytes().to_vec().into())
            .await
            .with_context(|| format!("publishing schedule {subject}"))?
            .await
            .with_context(|| format!("schedule {subject} ({})", pattern.header()))?;
        Ok(ack.sequence)
    }))
    .buffered(PUBLISH_WINDOW)
    .collect::<Vec<Result<u64>>>()
    .await
    .into_iter()
    .collect()
}

/// The stored time of each message of `seqs`, as the stream stamped it.
pub async fn stored_times(stream: &stream::Stream, seqs: &[u64]) -> Result<Vec<i128>> {
    let mut out = Vec::with_capacity(seqs.len());
    for &seq in seqs {
        let m = stream
            .get_raw_message(seq)
            .await
            .with_context(|| format!("reading schedule message {seq} back"))?;
        out.push(m.time.unix_timestamp_nanos());
    }
    Ok(out)
}

/// What a fired message's `Nats-Schedule-Next` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// `purge`: a one-off schedule, removed as it fires.
    Purge,
    /// The repeating schedule's next due time.
    At(i128),
    /// No header, or one that is neither.
    Unreadable,
}

impl Next {
    fn parse(value: Option<&str>) -> Next {
        match value {
            Some("purge") => Next::Purge,
            Some(t) => {
                crate::record::clock::parse_server_time(t).map_or(Next::Unreadable, Next::At)
            }
            None => Next::Unreadable,
        }
    }
}

/// One fired message as a consumer received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Firing {
    /// The schedule's index, from the target subject.
    pub index: u64,
    pub stream_seq: u64,
    /// When the stream stored it (server clock).
    pub stored_ns: i128,
    /// When the consumer here had it (jsbench's clock).
    pub received_ns: i128,
    pub next: Next,
}

/// A consumer reading every message the schedules fire, from the start of
/// the stream, as a task: an ordered consumer, made again from the next
/// sequence when it fails or when told to (a server restart can leave it
/// waiting on a consumer the server forgot). Dropped unfinished (a later
/// step of its variant failed), it stops the task: left running, it would
/// try to make its consumer again every 100 ms, on a stream deleted with
/// the variant, for the rest of the run.
pub struct Watcher {
    stop: DropGuard,
    reset: Arc<Notify>,
    seen: Arc<AtomicU64>,
    task: JoinHandle<Vec<Firing>>,
}

/// How long the watcher waits before making its consumer again after
/// failing to.
const RETRY: Duration = Duration::from_millis(100);

type Messages = consumer::pull::Ordered;

async fn ordered(stream: &stream::Stream, base: &str, from: u64) -> Result<Messages> {
    stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: format!("{base}.fired.*"),
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: from,
            },
            ..Default::default()
        })
        .await
        .context("creating the ordered consumer that watches firings")?
        .messages()
        .await
        .context("reading the firings")
}

impl Watcher {
    pub async fn start(stream: &stream::Stream, base: &str, expected: usize) -> Result<Watcher> {
        let first = ordered(stream, base, 1).await?;
        let stop = CancellationToken::new();
        let reset = Arc::new(Notify::new());
        let seen = Arc::new(AtomicU64::new(0));
        let (stream, base) = (stream.clone(), base.to_string());
        let task = tokio::spawn(watch(
            (stream, base, first),
            stop.clone(),
            reset.clone(),
            seen.clone(),
            expected,
        ));
        Ok(Watcher {
            stop: stop.drop_guard(),
            reset,
            seen,
            task,
        })
    }

    /// Makes the consumer again from the sequence after the last firing
    /// seen: after a restart.
    pub fn reset(&self) {
        self.reset.notify_one();
    }

    /// Firings received so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// Stops watching; what was received, in arrival order.
    pub async fn finish(self) -> Result<Vec<Firing>> {
        let Watcher { stop, task, .. } = self;
        drop(stop);
        task.await
            .map_err(|e| anyhow!("the firing watcher failed: {e}"))
    }
}

async fn watch(
    (stream, base, first): (stream::Stream, String, Messages),
    stop: CancellationToken,
    reset: Arc<Notify>,
    seen: Arc<AtomicU64>,
    expected: usize,
) -> Vec<Firing> {
    let mut firings: Vec<Firing> = Vec::with_capacity(expected);
    let mut messages = Some(first);
    loop {
        let Some(m) = messages.as_mut() else {
            let from = firings.iter().map(|f| f.stream_seq).max().unwrap_or(0) + 1;
            tokio::select! {
                _ = stop.cancelled() => break,
                made = ordered(&stream, &base, from) => match made {
                    Ok(m) => messages = Some(m),
                    Err(_) => tokio::time::sleep(RETRY).await,
                },
            }
            continue;
        };
        let next = tokio::select! {
            _ = stop.cancelled() => break,
            _ = reset.notified() => None,
            m = m.next() => m,
        };
        match next {
            Some(Ok(m)) => {
                if let Some(f) = firing(&m) {
                    firings.push(f);
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            }
            // Failed, ended or told to: made again from the next sequence.
            _ => messages = None,
        }
    }
    firings
}

fn firing(m: &jetstream::Message) -> Option<Firing> {
    let received_ns = now_ns();
    let info = m.info().ok()?;
    let index = m.subject.rsplit('.').next()?.parse().ok()?;
    let next = m
        .headers
        .as_ref()
        .and_then(|h| h.get(NATS_SCHEDULE_NEXT))
        .map(|v| v.as_str());
    Some(Firing {
        index,
        stream_seq: info.stream_sequence,
        stored_ns: info.published.unix_timestamp_nanos(),
        received_ns,
        next: Next::parse(next),
    })
}

/// Messages the stream holds per schedule index on the subjects
/// `<base>.<part>.*` (`fired` or `sched`): the server's own record.
pub async fn counts(stream: &stream::Stream, base: &str, part: &str) -> Result<BTreeMap<u64, u64>> {
    let filter = format!("{base}.{part}.*");
    let mut subjects = stream
        .info_with_subjects(&filter)
        .await
        .with_context(|| format!("asking the stream for its subjects {filter}"))?;
    let mut out = BTreeMap::new();
    while let Some(entry) = subjects.next().await {
        let (subject, n) = entry.with_context(|| format!("reading the subjects {filter}"))?;
        if let Some(i) = subject.rsplit('.').next().and_then(|t| t.parse().ok()) {
            out.insert(i, n as u64);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i128 = SECOND;

    #[test]
    fn first_due_follows_the_servers_rounding() {
        let every = Pattern::Every(Duration::from_secs(2));
        // Rounded to the nearest second, then the interval.
        assert_eq!(every.first_due(10 * S + 400_000_000), 12 * S);
        assert_eq!(every.first_due(10 * S + 600_000_000), 13 * S);
        let cron = Pattern::CronStep(5);
        // The next whole second matching the step, strictly after.
        assert_eq!(cron.first_due(10 * S), 15 * S);
        assert_eq!(cron.first_due(14 * S + 999_999_999), 15 * S);
        assert_eq!(cron.first_due(15 * S), 20 * S);
        assert_eq!(Pattern::CronStep(1).first_due(7 * S + 1), 8 * S);
        assert_eq!(Pattern::At(5).first_due(99), 5);
    }

    #[test]
    fn headers_are_what_adr_51_names() {
        assert_eq!(
            Pattern::At(1_700_000_000 * S + 250_000_000).header(),
            "@at 2023-11-14T22:13:20.25Z"
        );
        assert_eq!(
            Pattern::Every(Duration::from_millis(1500)).header(),
            "@every 1500ms"
        );
        assert_eq!(Pattern::CronStep(2).header(), "*/2 * * * * *");
    }

    #[test]
    fn next_reads_purge_a_time_or_nothing() {
        assert_eq!(Next::parse(Some("purge")), Next::Purge);
        assert_eq!(
            Next::parse(Some("2023-11-14T22:13:20.25Z")),
            Next::At(1_700_000_000 * S + 250_000_000)
        );
        assert_eq!(Next::parse(Some("soon")), Next::Unreadable);
        assert_eq!(Next::parse(None), Next::Unreadable);
    }
}
