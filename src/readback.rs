//! Reading a stream back after a run: the server's own answer to "is every
//! message that was confirmed actually stored, exactly as often as
//! confirmed?". PubAcks say what the server promised; the read-back checks
//! the promise.

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::{self, consumer::pull::OrderedConfig};
use futures::StreamExt;

use crate::stamp::Stamp;

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
}

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
    pub fn reconcile_sequences(&self, ledger: &crate::ledger::LedgerShard) -> Reconciliation {
        use crate::ledger::Event;
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

    /// Messages (publisher, number) stored more than once.
    pub fn stored_twice(&self) -> u64 {
        self.by_origin
            .iter()
            .flat_map(|counts| counts.iter())
            .filter(|&&c| c > 1)
            .count() as u64
    }

    /// Compares with `confirmed[publisher][message]` copies the PubAcks promised.
    pub fn reconcile(&self, confirmed: &[&[u8]]) -> Reconciliation {
        let mut r = Reconciliation::default();
        let publishers = confirmed.len().max(self.by_origin.len());
        for p in 0..publishers {
            let want = confirmed.get(p).copied().unwrap_or(&[]);
            let have: &[u8] = self.by_origin.get(p).map_or(&[], |v| v.as_slice());
            for m in 0..want.len().max(have.len()) {
                let w = u64::from(want.get(m).copied().unwrap_or(0));
                let h = u64::from(have.get(m).copied().unwrap_or(0));
                r.missing += w.saturating_sub(h);
                r.unconfirmed += h.saturating_sub(w);
            }
        }
        r
    }
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
    let mut attempt = 0;
    let consumer = loop {
        match handle.create_consumer(OrderedConfig::default()).await {
            Ok(consumer) => break consumer,
            Err(e) if attempt < 10 => {
                attempt += 1;
                tracing_pause(attempt, &e).await;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("creating an ordered consumer on {stream}"));
            }
        }
    };
    let mut messages = consumer
        .messages()
        .await
        .with_context(|| format!("reading {stream} back"))?;
    loop {
        let next = match tokio::time::timeout(idle, messages.next()).await {
            Ok(Some(next)) => next.with_context(|| format!("reading {stream} back"))?,
            Ok(None) | Err(_) => break,
        };
        read.messages += 1;
        if let Ok(info) = next.info() {
            let seq = info.stream_sequence as usize;
            if read.present.len() <= seq {
                read.present
                    .resize((seq + 1).max(read.present.len() * 2), false);
            }
            read.present[seq] = true;
        }
        match Stamp::read(&next.payload) {
            Some(stamp) => {
                let p = stamp.publisher as usize;
                if read.by_origin.len() <= p {
                    read.by_origin.resize(p + 1, Vec::new());
                }
                let counts = &mut read.by_origin[p];
                let m = stamp.publisher_seq as usize;
                if counts.len() <= m {
                    counts.resize((m + 1).max(counts.len() * 2), 0);
                }
                counts[m] = counts[m].saturating_add(1);
            }
            None => read.malformed += 1,
        }
        if next.info().map(|i| i.pending == 0).unwrap_or(false) {
            read.complete = true;
            break;
        }
    }
    Ok(read)
}

async fn tracing_pause(attempt: u32, _error: &impl std::fmt::Display) {
    tokio::time::sleep(Duration::from_millis(250 * u64::from(attempt))).await;
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
        };
        let confirmed_a = [1u8, 1, 1, 1];
        let confirmed_b = [1u8, 1];
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
            read.reconcile(&[&[1, 1, 2, 0], &[1]]),
            Reconciliation::default()
        );
    }

    #[test]
    fn a_confirmed_sequence_missing_after_a_restart_is_found() {
        use crate::ledger::{Event, LedgerShard};
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
