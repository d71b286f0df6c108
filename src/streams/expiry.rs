//! Messages that expire (ADR-43): a stream that allows per-message TTLs,
//! messages published with `Nats-TTL`, and the three ways their going is
//! watched: each message polled by sequence until a message get finds it
//! gone, the subject delete markers followed as the server writes them,
//! and a late reader that reads the stream while some deadlines have
//! passed and others have not.
//!
//! Every instant here is on jsbench's clock ([`crate::record::clock`]:
//! nanoseconds since the epoch, advanced by the monotonic clock). The
//! server stamps a stored message with its wall clock, which drifts from
//! jsbench's (NTP slew, a stepped clock, a worker's correction), so a
//! stamp is put on jsbench's clock by [`clock::from_wall`] before any
//! deadline is made of it, within [`clock::from_wall_uncertainty_ns`] on
//! one host; against a remote server the two hosts' wall clocks'
//! disagreement adds to that.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, RawMessageErrorKind};
use async_nats::jetstream::{self as js, context::PublishAckFuture};
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::readback::read_ordered;
use crate::record::clock::{self, now_ns};

pub const TTL_HEADER: &str = "Nats-TTL";
pub const MARKER_REASON: &str = "Nats-Marker-Reason";

/// A message's TTL as published: whole seconds (the server truncates a
/// fraction and refuses less than one), or never.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ttl {
    Secs(u64),
    Never,
}

impl Ttl {
    /// The seconds of a TTL that expires.
    pub fn secs(&self) -> Option<u64> {
        match self {
            Ttl::Secs(s) => Some(*s),
            Ttl::Never => None,
        }
    }

    /// The `Nats-TTL` value: plain seconds, or `never`.
    pub fn header(&self) -> String {
        match self {
            Ttl::Secs(s) => s.to_string(),
            Ttl::Never => "never".into(),
        }
    }

    pub fn label(&self) -> String {
        match self {
            Ttl::Secs(s) => format!("{s}s"),
            Ttl::Never => "never".into(),
        }
    }
}

/// The stream `base` made to take per-message TTLs and, with `markers`,
/// to leave a subject delete marker of that TTL when a subject's last
/// message expires. Markers are written as subject roll-ups, so roll-ups
/// are allowed with them: a pedantic server refuses markers without.
pub fn ttl_stream_config(mut base: stream::Config, markers: Option<Duration>) -> stream::Config {
    base.allow_message_ttl = true;
    if let Some(ttl) = markers {
        base.subject_delete_marker_ttl = Some(ttl);
        base.allow_rollup = true;
        base.deny_purge = false;
    }
    base
}

/// One published message and what was seen of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tracked {
    pub seq: u64,
    /// Its subject's index: `<base>.<subject>`.
    pub subject: u32,
    /// How long it should live, by the server's rules (its own TTL raised
    /// to the marker TTL, capped by max_age); `None`: never.
    pub ttl_ns: Option<u64>,
    /// Just before the publish call.
    pub sent_ns: u64,
    /// When its PubAck was read: the stored time is no later.
    pub acked_ns: u64,
    /// The stream's time stamp, from the first message get that found
    /// it, on jsbench's clock ([`Tracked::seen_present`]).
    pub stored_ns: Option<u64>,
    /// The reply of the last message get that found it.
    pub last_present_ns: Option<u64>,
    /// The reply of the first message get that found it gone.
    pub gone_ns: Option<u64>,
}

impl Tracked {
    /// Its deadline, the stored time plus its TTL; before the stored time
    /// is known, the send plus its TTL, the earliest it can be.
    pub fn deadline_ns(&self) -> Option<u64> {
        let ttl = self.ttl_ns?;
        Some(self.stored_ns.unwrap_or(self.sent_ns) + ttl)
    }

    /// The latest its deadline can be: the PubAck bounds the stored time.
    fn latest_deadline_ns(&self) -> Option<u64> {
        let ttl = self.ttl_ns?;
        Some(self.stored_ns.unwrap_or(self.acked_ns) + ttl)
    }

    /// Books a message get whose reply came at `at` (jsbench's clock) and
    /// found the message, stored at `stamp_ns` on the server's wall clock.
    /// The stamp is put on jsbench's clock by `to_local` ([`clock::from_wall`];
    /// a test gives it an offset) with the offset read at this reply, the
    /// first of which comes just before the deadline: the server removes a
    /// message once its wall clock passes the stamp plus the TTL, and that
    /// instant is where jsbench's clock meets the offset then, not at the
    /// store, seconds earlier.
    fn seen_present(&mut self, stamp_ns: u64, at: u64, to_local: impl Fn(u64, u64) -> u64) {
        self.stored_ns.get_or_insert_with(|| to_local(stamp_ns, at));
        self.last_present_ns = Some(at);
    }
}

/// What [`publish`] sends.
pub struct TtlLoad<'a> {
    /// Subjects are `<base>.<n>`, n from 0 to `subjects - 1`.
    pub base: &'a str,
    pub messages: u64,
    /// msg/s, paced from the first send.
    pub rate: u64,
    pub subjects: u32,
    /// Message `i` gets `ttls[i % len]`.
    pub ttls: &'a [Ttl],
    /// The lifetime the server gives a TTL (see [`Tracked::ttl_ns`]).
    pub lifetime: &'a dyn Fn(Ttl) -> Option<u64>,
    pub message_size: usize,
}

/// PubAcks outstanding before the publisher waits.
const PUB_ACK_WINDOW: usize = 256;

/// Publishes the load at its rate, subjects and TTLs round-robin, and
/// returns every message with its sequence, in publish order. A refused
/// message is an error: the scenario's accounting needs every one.
pub async fn publish(
    js: &js::Context,
    load: &TtlLoad<'_>,
    stop: &CancellationToken,
) -> Result<Vec<Tracked>> {
    // Subjects and TTL values built once: a subject's clone is a
    // reference count.
    let subjects: Vec<async_nats::Subject> = (0..load.subjects)
        .map(|n| async_nats::Subject::from(format!("{}.{n}", load.base)))
        .collect();
    let values: Vec<String> = load.ttls.iter().map(Ttl::header).collect();
    let payload = Bytes::from(vec![b'x'; load.message_size]);
    let mut tracked = Vec::with_capacity(load.messages as usize);
    let mut acks = FuturesUnordered::new();
    let start = tokio::time::Instant::now();
    for i in 0..load.messages {
        if stop.is_cancelled() {
            break;
        }
        let due = start + Duration::from_secs_f64(i as f64 / load.rate as f64);
        tokio::time::sleep_until(due).await;
        let k = (i % load.ttls.len() as u64) as usize;
        let subject = (i % load.subjects as u64) as u32;
        tracked.push(Tracked {
            subject,
            ttl_ns: (load.lifetime)(load.ttls[k]),
            sent_ns: now_ns(),
            ..Tracked::default()
        });
        let message = PublishMessage::build()
            .payload(payload.clone())
            .header(TTL_HEADER, values[k].as_str());
        let ack = js
            .send_publish(subjects[subject as usize].clone(), message)
            .await
            .with_context(|| format!("publishing message {i} with Nats-TTL"))?;
        acks.push(ack_of(i as usize, ack));
        while let Some(Some(done)) = acks.next().now_or_never() {
            settle(&mut tracked, done)?;
        }
        while acks.len() >= PUB_ACK_WINDOW {
            if let Some(done) = acks.next().await {
                settle(&mut tracked, done)?;
            }
        }
    }
    while let Some(done) = acks.next().await {
        settle(&mut tracked, done)?;
    }
    Ok(tracked)
}

type Acked = (usize, Result<u64, String>, u64);

async fn ack_of(i: usize, ack: PublishAckFuture) -> Acked {
    let r = ack.await.map(|a| a.sequence).map_err(|e| e.to_string());
    (i, r, now_ns())
}

fn settle(tracked: &mut [Tracked], (i, r, at): Acked) -> Result<()> {
    let seq = r.map_err(|e| anyhow!("message {i}: the server refused it: {e}"))?;
    tracked[i].seq = seq;
    tracked[i].acked_ns = at;
    Ok(())
}

/// How [`watch`] polls.
#[derive(Debug, Clone, Copy)]
pub struct Polling {
    /// From one round of message gets to the next: the resolution of
    /// every "seen gone" instant.
    pub every: Duration,
    /// A message is first asked for this long before the latest its
    /// deadline can be, so it is seen present just before it.
    pub lead: Duration,
    /// A message still stored this long after its deadline is given up on.
    pub give_up_after: Duration,
    /// Message gets in flight at once.
    pub concurrency: usize,
}

/// What watching cost: message gets sent and those that failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Polled {
    pub gets: u64,
    pub errors: u64,
}

/// Polls each message with a deadline, from `lead` before it, every
/// `every`, until a message get finds it gone (or it is given up on);
/// then asks once for each message that never expires. Fills the stored,
/// present and gone instants of `tracked`.
pub async fn watch(
    stream: &stream::Stream,
    tracked: &mut [Tracked],
    p: Polling,
    stop: &CancellationToken,
) -> Result<Polled> {
    let mut polled = Polled::default();
    let give_up = tracked
        .iter()
        .filter_map(Tracked::latest_deadline_ns)
        .max()
        .map(|d| d + p.give_up_after.as_nanos() as u64);
    let lead = p.lead.as_nanos() as u64;
    let every = p.every.as_nanos() as u64;
    let mut tick = tokio::time::Instant::now();
    while let Some(give_up) = give_up {
        let now = now_ns();
        let due: Vec<usize> = (0..tracked.len())
            .filter(|&i| {
                let t = &tracked[i];
                // Asked once `lead` ahead for its stored time, then from
                // one round before its deadline on.
                let ahead = if t.stored_ns.is_some() { every } else { lead };
                t.gone_ns.is_none() && t.latest_deadline_ns().is_some_and(|d| d <= now + ahead)
            })
            .collect();
        let waiting = tracked
            .iter()
            .any(|t| t.gone_ns.is_none() && t.ttl_ns.is_some());
        if !waiting || now > give_up || stop.is_cancelled() {
            break;
        }
        get_round(stream, tracked, &due, p.concurrency, &mut polled).await?;
        tick += p.every;
        tokio::time::sleep_until(tick.max(tokio::time::Instant::now())).await;
    }
    let never: Vec<usize> = (0..tracked.len())
        .filter(|&i| tracked[i].ttl_ns.is_none())
        .collect();
    get_round(stream, tracked, &never, p.concurrency, &mut polled).await?;
    Ok(polled)
}

/// One message get for each of `due`, `concurrency` at once. Errors other
/// than "no message" are counted; ten in a row of every get are fatal.
async fn get_round(
    stream: &stream::Stream,
    tracked: &mut [Tracked],
    due: &[usize],
    concurrency: usize,
    polled: &mut Polled,
) -> Result<()> {
    let seqs: Vec<(usize, u64)> = due.iter().map(|&i| (i, tracked[i].seq)).collect();
    let replies: Vec<_> = futures::stream::iter(seqs)
        .map(|(i, seq)| async move {
            let r = stream.get_raw_message(seq).await;
            (i, r, now_ns())
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut errors = 0;
    for (i, reply, at) in replies {
        polled.gets += 1;
        let t = &mut tracked[i];
        match reply {
            Ok(m) => t.seen_present(wall_ns(&m.time), at, clock::from_wall),
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => {
                t.gone_ns.get_or_insert(at);
            }
            Err(e) => {
                errors += 1;
                polled.errors += 1;
                if errors >= 10 && errors == due.len() {
                    return Err(anyhow!("message get of sequence {}: {e}", t.seq));
                }
            }
        }
    }
    Ok(())
}

/// A server's time stamp in nanoseconds since the epoch, on its wall clock.
fn wall_ns(t: &time::OffsetDateTime) -> u64 {
    t.unix_timestamp_nanos().max(0) as u64
}

/// A message the marker follower read: a subject delete marker, or
/// anything else the stream gained after the load (an extra).
#[derive(Debug, Clone, PartialEq)]
pub struct MarkerSeen {
    pub seq: u64,
    /// Its subject's index under the base; `None` for a subject outside it.
    pub subject: Option<u32>,
    /// Its stored time on jsbench's clock: the server's stamp through
    /// [`clock::from_wall`] as it was read, moments after it was written.
    pub stored_ns: u64,
    /// `Nats-Marker-Reason`; `None` on a message that is no marker.
    pub reason: Option<String>,
    /// Its own `Nats-TTL`.
    pub ttl: Option<String>,
}

/// Reads every message the stream stores from `from_seq` on, each as a
/// marker (or an extra), until `done` is cancelled.
pub async fn follow_markers(
    stream: &stream::Stream,
    base: &str,
    from_seq: u64,
    done: CancellationToken,
) -> Result<Vec<MarkerSeen>> {
    let consumer = stream
        .create_consumer(OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: from_seq,
            },
            ..Default::default()
        })
        .await
        .context("creating the marker follower")?;
    let mut messages = consumer.messages().await.context("following markers")?;
    let prefix = format!("{base}.");
    let mut seen = Vec::new();
    loop {
        let next = tokio::select! {
            next = messages.next() => next,
            _ = done.cancelled() => break,
        };
        let Some(next) = next else { break };
        let m = next.context("following markers")?;
        let info = m.info().map_err(|e| anyhow!("a marker's metadata: {e}"))?;
        let header = |name: &str| {
            m.headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_string())
        };
        seen.push(MarkerSeen {
            seq: info.stream_sequence,
            subject: m
                .subject
                .as_str()
                .strip_prefix(&prefix)
                .and_then(|n| n.parse().ok()),
            stored_ns: clock::from_wall(wall_ns(&info.published), now_ns()),
            reason: header(MARKER_REASON),
            ttl: header(TTL_HEADER),
        });
    }
    Ok(seen)
}

/// What the late reader received: the sequences up to the load's last
/// and when each arrived.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LateRead {
    /// Just before the reader was created.
    pub start_ns: u64,
    /// When the last delivery came, or the start if none did.
    pub end_ns: u64,
    /// (sequence, received at), in delivery order.
    pub delivered: Vec<(u64, u64)>,
}

/// Reads the stream from its start with a fresh ordered consumer until
/// nothing is pending (or nothing arrives for `idle`); keeps sequences up
/// to `last_seq`, leaving markers to their follower.
pub async fn read_late(stream: &stream::Stream, last_seq: u64, idle: Duration) -> Result<LateRead> {
    let mut read = LateRead {
        start_ns: now_ns(),
        ..LateRead::default()
    };
    read.end_ns = read.start_ns;
    let consumer = stream
        .create_consumer(OrderedConfig::default())
        .await
        .context("creating the late reader")?;
    read_ordered(consumer, idle, "reading late", |m| {
        let at = now_ns();
        let info = m
            .info()
            .map_err(|e| anyhow!("a late delivery's metadata: {e}"))?;
        read.end_ns = at;
        if info.stream_sequence <= last_seq {
            read.delivered.push((info.stream_sequence, at));
        }
        Ok(())
    })
    .await?;
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const HOUR: i64 = 3_600 * S as i64;
    /// A wall-clock instant, in nanoseconds since the epoch.
    const T: u64 = 1_700_000_000 * S;

    /// A 2 s message the server stamped at wall-clock `T`, first asked
    /// for 250 ms before its deadline by a jsbench whose clock reads
    /// `ahead` of the wall clock (negative: behind), as after the wall
    /// clock was stepped, or on a worker corrected to its coordinator.
    fn stamped(ahead: i64) -> Tracked {
        let local = move |wall: u64, _at: u64| wall.wrapping_add_signed(ahead);
        let mut t = Tracked {
            seq: 1,
            ttl_ns: Some(2 * S),
            ..Tracked::default()
        };
        t.seen_present(T, local(T + 1_750_000_000, 0), local);
        t
    }

    #[test]
    fn a_deadline_is_on_jsbenchs_clock_whatever_the_wall_clock_reads() {
        // jsbench's clock an hour behind: a message seen gone 100 ms after
        // its deadline was removed on time. Compared with the wall-clock
        // stamp plus the TTL it looked removed an hour early.
        let behind = stamped(-HOUR);
        let gone = (T + 2_100_000_000).wrapping_add_signed(-HOUR);
        assert!(
            gone >= behind.deadline_ns().unwrap(),
            "{behind:?} gone at {gone}"
        );
        // An hour ahead: one gone a second before its deadline was removed
        // early, which the wall-clock deadline hid.
        let ahead = stamped(HOUR);
        let gone = (T + S).wrapping_add_signed(HOUR);
        assert!(
            gone < ahead.deadline_ns().unwrap(),
            "{ahead:?} gone at {gone}"
        );
        // The poller asks for it from one round before that deadline, not
        // an hour off it.
        let deadline = (T + 2 * S).wrapping_add_signed(HOUR);
        assert_eq!(ahead.latest_deadline_ns(), Some(deadline));
    }
}
