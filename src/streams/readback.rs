//! Reading a stream back after a run: the server's own answer to "is every
//! message that was confirmed actually stored, exactly as often as
//! confirmed?". PubAcks say what the server promised; the read-back checks
//! the promise.

use std::collections::HashMap;

use crate::record::tally::Tally;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::{
    self,
    consumer::{Consumer, pull::OrderedConfig},
};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::record::stamp::Stamp;

/// What the stream holds, by origin.
#[derive(Debug, Clone, Default)]
pub struct ReadBack {
    /// Messages read.
    pub messages: u64,
    /// `[publisher][message number]`: copies found.
    pub by_origin: Vec<Vec<u8>>,
    /// Messages without a jsbench stamp.
    pub malformed: u64,
    /// Whether the whole stream was read before the idle timeout.
    pub complete: bool,
    /// `present[seq]`: the stream holds that sequence.
    pub present: Vec<bool>,
    /// Every subject read, in the order first seen.
    pub subjects: Vec<String>,
    /// `subject_at[seq]`: the index in `subjects` of that sequence's
    /// subject ([`NO_SUBJECT`] where the stream holds none): which messages
    /// a filtered durable had to deliver, in the server's own words.
    pub subject_at: Vec<u32>,
}

/// `subject_at` of a sequence the stream does not hold.
pub const NO_SUBJECT: u32 = u32::MAX;

/// The comparison of what PubAcks confirmed with what the stream holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Confirmed copies not found in the stream.
    pub missing: u64,
    /// Copies found that no PubAck confirmed.
    pub unconfirmed: u64,
}

impl ReadBack {
    /// Compares by stream sequence: every sequence a PubAck confirmed
    /// (stored, or named as the original of a duplicate) must be present.
    /// Returns the confirmed sequences missing, and the sequences present
    /// that no PubAck confirmed.
    pub fn reconcile_sequences(
        &self,
        ledger: &crate::record::ledger::LedgerShard,
    ) -> Reconciliation {
        use crate::record::ledger::Event;
        let confirmed = |seq: u64| {
            ledger.count(seq, Event::Persisted) > 0 || ledger.count(seq, Event::Duplicate) > 0
        };
        let last = ledger.max_seq().max(self.present.len() as u64);
        let mut r = Reconciliation::default();
        for seq in 1..=last {
            let here = self.present.get(seq as usize).copied().unwrap_or(false);
            match (confirmed(seq), here) {
                (true, false) => r.missing += 1,
                (false, true) => r.unconfirmed += 1,
                _ => {}
            }
        }
        r
    }

    /// `index`: `subjects` by name, kept by the reader.
    fn note_subject(&mut self, index: &mut HashMap<String, u32>, seq: usize, subject: &str) {
        let i = match index.get(subject) {
            Some(&i) => i,
            None => {
                let i = self.subjects.len() as u32;
                self.subjects.push(subject.to_string());
                index.insert(subject.to_string(), i);
                i
            }
        };
        *grown(&mut self.subject_at, seq, NO_SUBJECT) = i;
    }

    /// The subject stored at `seq`, if the stream holds it.
    pub fn subject(&self, seq: u64) -> Option<&str> {
        let i = *self.subject_at.get(seq as usize)?;
        self.subjects.get(i as usize).map(String::as_str)
    }

    /// Messages (publisher, number) stored more than once.
    pub fn stored_twice(&self) -> u64 {
        self.by_origin
            .iter()
            .flat_map(|counts| counts.iter())
            .filter(|&&c| c > 1)
            .count() as u64
    }

    /// Compares with `confirmed[publisher][message]` copies the PubAcks promised.
    pub fn reconcile(&self, confirmed: &[&Tally]) -> Reconciliation {
        let mut r = Reconciliation::default();
        let publishers = confirmed.len().max(self.by_origin.len());
        let none = Tally::new();
        for p in 0..publishers {
            let want = confirmed.get(p).copied().unwrap_or(&none);
            let have: &[u8] = self.by_origin.get(p).map_or(&[], |v| v.as_slice());
            for m in 0..(want.end() as usize).max(have.len()) {
                let w = u64::from(want.get(m as u64));
                let h = u64::from(have.get(m).copied().unwrap_or(0));
                r.missing += w.saturating_sub(h);
                r.unconfirmed += h.saturating_sub(w);
            }
        }
        r
    }
}

/// `v[i]`, `v` grown first (at least doubled, with `fill`) when too short.
fn grown<T: Clone>(v: &mut Vec<T>, i: usize, fill: T) -> &mut T {
    if v.len() <= i {
        v.resize((i + 1).max(v.len() * 2), fill);
    }
    &mut v[i]
}

/// Reads every message of `stream` with an ordered consumer (the fastest
/// way to read a stream in full), stopping at the end of the stream or after
/// `idle` without a message.
pub async fn read_stream(
    js: &jetstream::Context,
    stream: &str,
    idle: Duration,
) -> Result<ReadBack> {
    let mut read = ReadBack::default();
    let mut handle = js
        .get_stream(stream)
        .await
        .with_context(|| format!("opening stream {stream} to read it back"))?;
    let info = handle.info().await.context("reading stream info")?;
    if info.state.messages == 0 {
        read.complete = true;
        return Ok(read);
    }
    // Right after a node restart the stream may still be catching up and
    // refuse new consumers for a while: retry before giving up.
    let mut attempt = 0u64;
    let consumer = loop {
        match handle.create_consumer(OrderedConfig::default()).await {
            Ok(consumer) => break consumer,
            Err(_) if attempt < 10 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(250 * attempt)).await;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("creating an ordered consumer on {stream}"));
            }
        }
    };
    let mut subject_index = HashMap::new();
    let end = read_ordered(consumer, idle, &format!("reading {stream} back"), |next| {
        read.messages += 1;
        if let Ok(info) = next.info() {
            let seq = info.stream_sequence as usize;
            *grown(&mut read.present, seq, false) = true;
            read.note_subject(&mut subject_index, seq, &next.subject);
        }
        match Stamp::read(&next.payload) {
            Some(stamp) => {
                let p = stamp.publisher as usize;
                if read.by_origin.len() <= p {
                    read.by_origin.resize(p + 1, Vec::new());
                }
                let count = grown(&mut read.by_origin[p], stamp.publisher_seq as usize, 0);
                *count = count.saturating_add(1);
            }
            None => read.malformed += 1,
        }
        Ok(())
    })
    .await?;
    read.complete = end == End::Complete;
    Ok(read)
}

/// How a read with an ordered consumer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// A message came with nothing pending after it: the end of the stream.
    Complete,
    /// The consumer's messages ended.
    Closed,
    /// `idle` passed without a message.
    Idle,
}

/// Hands `each` every message `consumer` delivers, in stream order, until
/// one comes with nothing pending after it, the messages end, or `idle`
/// passes without one: the loop every read-back of a stream shares.
/// `reading` names the read in its errors.
pub async fn read_ordered(
    consumer: Consumer<OrderedConfig>,
    idle: Duration,
    reading: &str,
    mut each: impl FnMut(&jetstream::Message) -> Result<()>,
) -> Result<End> {
    let mut messages = consumer
        .messages()
        .await
        .with_context(|| reading.to_string())?;
    loop {
        let next = match tokio::time::timeout(idle, messages.next()).await {
            Ok(Some(next)) => next.with_context(|| reading.to_string())?,
            Ok(None) => return Ok(End::Closed),
            Err(_) => return Ok(End::Idle),
        };
        each(&next)?;
        if next.info().is_ok_and(|i| i.pending == 0) {
            return Ok(End::Complete);
        }
    }
}

/// Reads the whole stream in sequence order with an ordered consumer and
/// keeps what `keep` makes of each message (`None`: nothing), stopping at
/// the end of the stream or after `idle` without a message; the flag says
/// whether the end was reached. Atomic batches are audited by their
/// headers, fast-ingest batches by their payload stamps, dead letters
/// against their originals: all read the stream this one way.
pub async fn read_each<T>(
    js: &jetstream::Context,
    stream: &str,
    idle: Duration,
    mut keep: impl FnMut(&jetstream::Message) -> Option<T>,
) -> Result<(Vec<T>, bool)> {
    let mut handle = js
        .get_stream(stream)
        .await
        .with_context(|| format!("opening stream {stream} to read it back"))?;
    let info = handle.info().await.context("reading stream info")?;
    let mut read = Vec::with_capacity(info.state.messages as usize);
    if info.state.messages == 0 {
        return Ok((read, true));
    }
    let consumer = handle
        .create_consumer(OrderedConfig::default())
        .await
        .with_context(|| format!("creating an ordered consumer on {stream}"))?;
    let end = read_ordered(consumer, idle, &format!("reading {stream} back"), |m| {
        read.extend(keep(m));
        Ok(())
    })
    .await?;
    Ok((read, end == End::Complete))
}

/// What a stream removed by its own limits: with discard old, a stream at
/// max_msgs, max_bytes or max_age drops its oldest messages, so everything
/// below its first sequence is gone by policy, not lost. Only head
/// evictions are told apart: a per-subject limit removes from the middle,
/// where a removal by policy and a loss look the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Eviction {
    /// The limits the stream was created with, e.g. `max_msgs 1000`.
    pub limits: Vec<String>,
    /// Which of them the stream stood at when the run ended (`max_msgs
    /// 1000: holds 1000`), the evidence that the evictions were its.
    pub reached: Vec<String>,
    /// Persisted (PubAck-confirmed) sequences below the first one the
    /// stream still holds.
    pub evicted: u64,
    /// The first sequence the stream holds after the run.
    pub first_kept: u64,
    /// Messages the stream holds after the run.
    pub held: u64,
}

/// The stream's configured limits that evict from the head, as words.
pub fn head_limits(config: &jetstream::stream::Config) -> Vec<String> {
    let mut limits = Vec::new();
    // A work-queue or interest stream removes from its head what was
    // acknowledged: its first sequence says nothing about limits.
    if config.discard != jetstream::stream::DiscardPolicy::Old
        || config.retention != jetstream::stream::RetentionPolicy::Limits
    {
        return limits;
    }
    if config.max_messages > 0 {
        limits.push(format!("max_msgs {}", config.max_messages));
    }
    if config.max_bytes > 0 {
        limits.push(format!("max_bytes {}", config.max_bytes));
    }
    if !config.max_age.is_zero() {
        limits.push(format!(
            "max_age {}",
            crate::profile::format_duration(config.max_age)
        ));
    }
    limits
}

/// The evictions a stream's limits explain, from its info after the run
/// and the ledger of what PubAcks confirmed; `None` when the stream has no
/// limit that evicts from the head.
pub fn evictions(
    info: &jetstream::stream::Info,
    ledger: &crate::record::ledger::LedgerShard,
) -> Option<Eviction> {
    use crate::record::ledger::Event;
    let limits = head_limits(&info.config);
    if limits.is_empty() {
        return None;
    }
    let state = &info.state;
    let first_kept = if state.messages == 0 {
        state.last_sequence + 1
    } else {
        state.first_sequence
    };
    let evicted = (1..first_kept.min(ledger.max_seq() + 1))
        .filter(|&seq| ledger.count(seq, Event::Persisted) > 0)
        .count() as u64;
    let c = &info.config;
    let mut reached = Vec::new();
    if c.max_messages > 0 && state.messages >= c.max_messages as u64 {
        reached.push(format!(
            "max_msgs {}: holds {}",
            c.max_messages, state.messages
        ));
    }
    // A stream at max_bytes has no room for one more message of the
    // average size it holds.
    if c.max_bytes > 0 && state.messages > 0 {
        let average = state.bytes / state.messages;
        if state.bytes + average > c.max_bytes as u64 {
            reached.push(format!(
                "max_bytes {}: holds {} bytes",
                c.max_bytes, state.bytes
            ));
        }
    }
    if !c.max_age.is_zero() && evicted > 0 && reached.is_empty() {
        reached.push(format!(
            "max_age {}: the oldest messages aged out",
            crate::profile::format_duration(c.max_age)
        ));
    }
    Some(Eviction {
        limits,
        reached,
        evicted,
        first_kept,
        held: state.messages,
    })
}

impl Eviction {
    /// Whether the limits explain the evictions: none, or the stream ended
    /// at one of its limits (a stream below every limit that still lost
    /// its head lost it to something else: a purge, a delete).
    pub fn explained(&self) -> bool {
        self.evicted == 0 || !self.reached.is_empty()
    }

    /// One line for the results: which limit, how many, and from where.
    pub fn describe(&self) -> String {
        if self.evicted == 0 {
            return format!("no message evicted ({})", self.limits.join(", "));
        }
        format!(
            "{} persisted message(s) evicted, stream sequences below {} ({}); the stream holds {}",
            self.evicted,
            self.first_kept,
            if self.reached.is_empty() {
                format!("below every limit: {}", self.limits.join(", "))
            } else {
                format!("at {}", self.reached.join("; "))
            },
            self.held
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_missing_and_unconfirmed_copies() {
        let read = ReadBack {
            messages: 5,
            by_origin: vec![vec![1, 1, 2, 0], vec![1]],
            malformed: 0,
            complete: true,
            present: Vec::new(),
            ..Default::default()
        };
        let confirmed_a = Tally::from_values([1, 1, 1, 1]);
        let confirmed_b = Tally::from_values([1, 1]);
        let r = read.reconcile(&[&confirmed_a, &confirmed_b]);
        // publisher 0: message 2 stored twice but confirmed once, message 3 missing;
        // publisher 1: message 1 missing.
        assert_eq!(
            r,
            Reconciliation {
                missing: 2,
                unconfirmed: 1
            }
        );
        assert_eq!(
            read.reconcile(&[&Tally::from_values([1, 1, 2, 0]), &Tally::from_values([1])]),
            Reconciliation::default()
        );
    }

    #[test]
    fn a_confirmed_sequence_missing_after_a_restart_is_found() {
        use crate::record::ledger::{Event, LedgerShard};
        let mut ledger = LedgerShard::new();
        // 1 and 2 confirmed; 3 named as the original of a duplicate; 4
        // never answered (the server died first).
        ledger.mark(1, Event::Persisted);
        ledger.mark(2, Event::Persisted);
        ledger.mark(3, Event::Duplicate);
        let mut present = vec![false; 5];
        present[1] = true;
        present[3] = true;
        present[4] = true;
        let read = ReadBack {
            messages: 3,
            by_origin: vec![vec![1, 1, 2]],
            malformed: 0,
            complete: true,
            present,
            ..Default::default()
        };
        // 2 was confirmed and is gone; 4 is stored though nothing confirmed it.
        assert_eq!(
            read.reconcile_sequences(&ledger),
            Reconciliation {
                missing: 1,
                unconfirmed: 1
            }
        );
        assert_eq!(read.stored_twice(), 1, "message 2 of publisher 0");
    }
}
