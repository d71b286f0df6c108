//! Reading atomic batches (ADR-50) back from a stream and auditing them
//! against what their commits' PubAcks promised.
//!
//! A committed batch's PubAck names only its last sequence and its count,
//! so "stored whole, contiguous and once" can only be checked by reading
//! the stream: the server keeps each message's `Nats-Batch-Id` and
//! `Nats-Batch-Sequence` headers (pinned in tests/server_behaviour.rs), and
//! those tell which batch every stored message came from.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use async_nats::jetstream;

use super::readback::read_each;

/// The headers an atomic batch message carries (ADR-50).
pub const BATCH_ID: &str = "Nats-Batch-Id";
pub const BATCH_SEQUENCE: &str = "Nats-Batch-Sequence";
pub const BATCH_COMMIT: &str = "Nats-Batch-Commit";

/// A batch the server committed, as its PubAck told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommittedBatch {
    /// The publisher's batch number (its `Nats-Batch-Id`).
    pub batch: u64,
    /// The PubAck's sequence: the batch's last message.
    pub last_seq: u64,
    /// The PubAck's `count`.
    pub count: u64,
}

/// One stored message, by the batch headers it was stored with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBatchMessage {
    pub seq: u64,
    /// `None` when the message carries no batch id jsbench could read.
    pub batch: Option<u64>,
    pub index: Option<u64>,
}

/// Reads every message's stream sequence and batch headers with an ordered
/// consumer, stopping at the end of the stream or after `idle` without a
/// message; the flag says whether the end was reached.
pub async fn read_batches(
    js: &jetstream::Context,
    stream: &str,
    idle: Duration,
) -> Result<(Vec<StoredBatchMessage>, bool)> {
    read_each(js, stream, idle, |message| {
        let header = |name: &str| {
            message
                .headers
                .as_ref()
                .and_then(|h| h.get(name))
                .and_then(|v| v.as_str().parse::<u64>().ok())
        };
        Some(StoredBatchMessage {
            seq: message.info().ok()?.stream_sequence,
            batch: header(BATCH_ID),
            index: header(BATCH_SEQUENCE),
        })
    })
    .await
}

/// What the read-back showed against the commits, with each breach named
/// by its batch.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BatchAudit {
    /// Committed batches found whole, contiguous and once.
    pub whole: u64,
    /// Breaches of "every committed batch stored whole, contiguous, once".
    pub broken: Vec<String>,
    /// Breaches of "nothing stored from a refused or uncommitted batch".
    pub leaked: Vec<String>,
    /// Messages stored by batches whose commit went unanswered (a timeout:
    /// the server may have stored them or not, both are allowed).
    pub unanswered_stored: u64,
    /// Messages of committed batches missing from the stream: lost by the
    /// server after its PubAck. Counted against each PubAck's `count`, as
    /// the ledger's `persisted` is, so both are messages on one base and
    /// a PubAck that counted short (a breach of its own) loses nothing it
    /// did not acknowledge.
    pub lost: u64,
    /// Committed batches whose PubAck names a sequence past the last one
    /// a stalled read-back reached: neither found whole nor lost.
    pub unread: u64,
    /// The last stream sequence a stalled read-back reached.
    pub read_through: Option<u64>,
}

/// Holds the stored messages against the commits: each committed batch
/// must sit in `count` consecutive sequences ending at its PubAck's, in
/// batch order, with nothing of it anywhere else, and `count` must be the
/// `size` sent; no refused batch and no batch never committed may have
/// stored anything. `unanswered` batches may have either fate. When the
/// read-back stalled (`complete` false), a committed batch short of
/// messages whose PubAck lies past the last sequence read is "unread",
/// not broken.
pub fn audit(
    size: u64,
    committed: &[CommittedBatch],
    unanswered: &[u64],
    stored: &[StoredBatchMessage],
    complete: bool,
) -> BatchAudit {
    let mut a = BatchAudit {
        read_through: (!complete).then(|| stored.iter().map(|m| m.seq).max().unwrap_or(0)),
        ..BatchAudit::default()
    };
    let mut by_batch: BTreeMap<u64, Vec<(u64, Option<u64>)>> = BTreeMap::new();
    for m in stored {
        match m.batch {
            Some(b) => by_batch.entry(b).or_default().push((m.seq, m.index)),
            None => a
                .leaked
                .push(format!("stream sequence {} carries no batch id", m.seq)),
        }
    }
    for c in committed {
        let mut found = by_batch.remove(&c.batch).unwrap_or_default();
        found.sort_unstable();
        let past_read = a.read_through.is_some_and(|r| c.last_seq > r);
        match breach(size, c, &found) {
            None => a.whole += 1,
            Some(Breach::Stored { .. }) if past_read => a.unread += 1,
            Some(why) => {
                a.lost += c.count.saturating_sub(found.len() as u64);
                a.broken.push(format!(
                    "batch {} (PubAck sequence {}, count {}): {why}",
                    c.batch, c.last_seq, c.count
                ));
            }
        }
    }
    for b in unanswered {
        a.unanswered_stored += by_batch.remove(b).map_or(0, |m| m.len() as u64);
    }
    for (batch, found) in by_batch {
        let seqs: Vec<u64> = found.iter().map(|f| f.0).take(5).collect();
        a.leaked.push(format!(
            "batch {batch} was not committed, yet {} of its messages are stored (sequences {seqs:?}{})",
            found.len(),
            if found.len() > 5 { "..." } else { "" }
        ));
    }
    a
}

/// How a committed batch's stored messages fall short of its whole self,
/// once, in consecutive sequences ending at its PubAck's: a finding of the
/// audit, not a failure to audit.
#[derive(Debug)]
enum Breach {
    /// The PubAck counted other than the `size` sent.
    Counted { count: u64, size: u64 },
    /// Other than `size` of its messages stored.
    Stored { found: usize, size: u64 },
    /// The first message out of place: message `index` (`None`: one
    /// without a batch sequence) at `seq`, where message `expected` was
    /// due at `due`.
    Misplaced {
        expected: u64,
        due: u64,
        index: Option<u64>,
        seq: u64,
    },
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Breach::Counted { count, size } => {
                write!(f, "the PubAck counted {count} of {size} sent")
            }
            Breach::Stored { found, size } => write!(f, "{found} of its {size} messages stored"),
            Breach::Misplaced {
                expected,
                due,
                index,
                seq,
            } => write!(
                f,
                "expected message {expected} at sequence {due}, found message {} at sequence {seq}",
                index.map_or("without a batch sequence".to_string(), |i| i.to_string())
            ),
        }
    }
}

/// How a committed batch's stored messages fall short of it, if they do.
fn breach(size: u64, c: &CommittedBatch, found: &[(u64, Option<u64>)]) -> Option<Breach> {
    if c.count != size {
        return Some(Breach::Counted {
            count: c.count,
            size,
        });
    }
    if found.len() as u64 != size {
        return Some(Breach::Stored {
            found: found.len(),
            size,
        });
    }
    let first = c.last_seq + 1 - size.min(c.last_seq);
    for (k, (seq, index)) in found.iter().enumerate() {
        let k = k as u64;
        if *seq != first + k || *index != Some(k + 1) {
            return Some(Breach::Misplaced {
                expected: k + 1,
                due: first + k,
                index: *index,
                seq: *seq,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(batch: u64, first_seq: u64, n: u64) -> Vec<StoredBatchMessage> {
        (0..n)
            .map(|k| StoredBatchMessage {
                seq: first_seq + k,
                batch: Some(batch),
                index: Some(k + 1),
            })
            .collect()
    }

    fn committed(batch: u64, last_seq: u64, count: u64) -> CommittedBatch {
        CommittedBatch {
            batch,
            last_seq,
            count,
        }
    }

    /// Two batches of 3 at sequences 1-3 and 4-6.
    fn clean() -> (Vec<CommittedBatch>, Vec<StoredBatchMessage>) {
        let mut s = stored(0, 1, 3);
        s.extend(stored(1, 4, 3));
        (vec![committed(0, 3, 3), committed(1, 6, 3)], s)
    }

    #[test]
    fn a_clean_read_back_passes() {
        let (c, s) = clean();
        let a = audit(3, &c, &[], &s, true);
        assert_eq!(a.whole, 2);
        assert!(a.broken.is_empty() && a.leaked.is_empty(), "{a:?}");
    }

    #[test]
    fn a_missing_message_names_its_batch() {
        let (c, mut s) = clean();
        s.remove(4);
        let a = audit(3, &c, &[], &s, true);
        assert_eq!(a.whole, 1);
        assert!(a.broken[0].starts_with("batch 1 "), "{a:?}");
        assert!(a.broken[0].contains("2 of its 3"), "{a:?}");
    }

    #[test]
    fn a_stalled_read_back_loses_no_batch_past_where_it_stopped() {
        // Read through sequence 4: batch 0 lacks its second message (the
        // server's loss, counted in messages), batch 1 is unread.
        let (c, mut s) = clean();
        s.truncate(4);
        s.remove(1);
        let a = audit(3, &c, &[], &s, false);
        assert_eq!(a.read_through, Some(4), "{a:?}");
        assert_eq!((a.whole, a.unread, a.lost), (0, 1, 1), "{a:?}");
        assert!(a.broken[0].starts_with("batch 0 "), "{a:?}");
        // Read whole, batch 1's two missing messages are lost too.
        assert_eq!(audit(3, &c, &[], &s, true).lost, 3);
    }

    #[test]
    fn lost_counts_the_messages_the_pubacks_counted_as_persisted_does() {
        // Batch 1's PubAck counted 1 of the 3 sent, and 1 is stored: the
        // batch is broken, but nothing the server acknowledged is missing.
        // The ledger's persisted counts 3 + 1 messages by the PubAcks, so
        // lost, in the same unit on the same base, is 0, not 2.
        let (mut c, mut s) = clean();
        c[1].count = 1;
        s.truncate(4);
        let a = audit(3, &c, &[], &s, true);
        assert!(a.broken[0].contains("counted 1 of 3"), "{a:?}");
        assert_eq!(a.lost, 0, "{a:?}");
        // Acknowledged whole and found short, the shortfall is lost.
        c[1].count = 3;
        assert_eq!(audit(3, &c, &[], &s, true).lost, 2);
    }

    #[test]
    fn a_batch_split_by_a_foreign_message_is_not_contiguous() {
        let (c, mut s) = clean();
        // Batch 1's second message stored one sequence late.
        s[4].seq = 7;
        let a = audit(3, &c, &[], &s, true);
        assert!(
            a.broken[0].contains("expected message 2 at sequence 5"),
            "{a:?}"
        );
    }

    #[test]
    fn a_batch_stored_twice_is_caught() {
        let (c, mut s) = clean();
        s.extend(stored(0, 7, 3));
        let a = audit(3, &c, &[], &s, true);
        assert!(a.broken[0].starts_with("batch 0 "), "{a:?}");
        assert!(a.broken[0].contains("6 of its 3"), "{a:?}");
    }

    #[test]
    fn out_of_order_messages_are_caught() {
        let (c, mut s) = clean();
        s[0].index = Some(2);
        s[1].index = Some(1);
        let a = audit(3, &c, &[], &s, true);
        assert!(a.broken[0].starts_with("batch 0 "), "{a:?}");
    }

    #[test]
    fn a_pub_ack_counting_less_than_sent_is_caught() {
        let (mut c, s) = clean();
        c[1].count = 2;
        let a = audit(3, &c, &[], &s, true);
        assert!(a.broken[0].contains("counted 2 of 3"), "{a:?}");
    }

    #[test]
    fn anything_stored_from_a_refused_batch_is_named() {
        let (c, mut s) = clean();
        s.extend(stored(2, 7, 1));
        let a = audit(3, &c, &[], &s, true);
        assert_eq!(a.leaked.len(), 1, "{a:?}");
        assert!(
            a.leaked[0].starts_with("batch 2 was not committed"),
            "{a:?}"
        );
    }

    #[test]
    fn an_unanswered_batch_may_be_stored() {
        let (c, mut s) = clean();
        s.extend(stored(2, 7, 3));
        let a = audit(3, &c, &[2], &s, true);
        assert!(a.leaked.is_empty(), "{a:?}");
        assert_eq!(a.unanswered_stored, 3);
    }

    #[test]
    fn a_message_without_a_batch_id_is_named() {
        let (c, mut s) = clean();
        s.push(StoredBatchMessage {
            seq: 7,
            batch: None,
            index: None,
        });
        let a = audit(3, &c, &[], &s, true);
        assert!(a.leaked[0].contains("sequence 7"), "{a:?}");
    }
}
