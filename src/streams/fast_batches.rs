//! Auditing fast-ingest batches (ADR-50, nats-server 2.14+) against what
//! the server acknowledged, by reading the stream back.
//!
//! A fast batch's acks name only batch sequences: a flow ack "everything
//! up to sequence S of this batch is persisted" (gap mode `fail`), the
//! commit's PubAck the last stream sequence and the batch sequence
//! reached. The server stores nothing that names the batch (pinned in
//! tests/server_behaviour.rs), so every message carries jsbench's payload
//! stamp ([`crate::record::stamp`]) whose message number is the
//! publisher's running count; each batch is a run of those numbers, and
//! the read-back tells for every acknowledged message whether it is in
//! the stream once, in the order it was sent.

use std::time::Duration;

use anyhow::Result;
use async_nats::jetstream;

use crate::record::stamp::Stamp;
use crate::streams::readback::read_each;

/// What one fast batch was sent as and what the server said of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FastBatchOutcome {
    /// The publisher's batch number, also its batch id on the wire.
    pub batch: u64,
    /// The stamp's message number of the batch's sequence 1.
    pub first_message: u64,
    /// Messages of the batch sent to be stored (an end-of-batch commit,
    /// which stores nothing, not counted).
    pub sent: u64,
    /// The highest batch sequence a flow ack or the commit's PubAck
    /// covered: with gap mode `fail`, every message up to it is persisted.
    pub acked_through: u64,
    /// The commit's PubAck: last stream sequence and batch sequence reached.
    pub commit: Option<(u64, u64)>,
    /// Why the batch has no PubAck: the server's code when it refused it,
    /// `None` with the reason when no answer came.
    pub failure: Option<(Option<u64>, String)>,
    /// Gaps the server reported: batch sequences `[from, to)` it never
    /// received.
    pub gaps: Vec<(u64, u64)>,
    /// Errors the server reported per message: batch sequence and code.
    pub errors: Vec<(u64, u64)>,
    /// When the batch's first message was intended (ns on
    /// [`crate::record::clock`]).
    pub first_intended_ns: u64,
}

impl FastBatchOutcome {
    /// Whether the batch has its end: a PubAck, or a failure.
    pub fn settled(&self) -> bool {
        self.commit.is_some() || self.failure.is_some()
    }
}

/// One stored message: its stream sequence and the stamp's message number,
/// `None` when the payload holds no stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredStamp {
    pub seq: u64,
    pub message: Option<u64>,
}

/// Reads every stored message's sequence and stamp (see
/// [`read_each`]).
pub async fn read_stamps(
    js: &jetstream::Context,
    stream: &str,
    idle: Duration,
) -> Result<(Vec<StoredStamp>, bool)> {
    read_each(js, stream, idle, |m| {
        Some(StoredStamp {
            seq: m.info().ok()?.stream_sequence,
            message: Stamp::read(&m.payload).map(|s| s.publisher_seq),
        })
    })
    .await
}

/// What the read-back showed, each breach named by batch and message.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FastAudit {
    /// Messages acknowledged (flow acks and PubAcks), and of those stored.
    pub acked: u64,
    pub acked_stored: u64,
    /// Acknowledged, not in the stream: the server lost them after its ack.
    pub lost_after_ack: Vec<String>,
    /// Stored more than once.
    pub twice: Vec<String>,
    /// Stored after a message sent later.
    pub out_of_order: Vec<String>,
    /// A PubAck whose sequence is not where the batch's last message is.
    pub commit_mismatch: Vec<String>,
    /// Stored but never sent, or without a stamp.
    pub foreign: Vec<String>,
    /// Acknowledged messages inside gaps the server reported (gap mode
    /// `ok` acks "some of" the messages up to a sequence): not held
    /// against the ack, counted apart.
    pub in_reported_gaps: u64,
    /// Acknowledged messages sent after the last one a stalled read-back
    /// reached: neither found nor lost, for the server may hold them past
    /// where the read stopped.
    pub unread: u64,
    /// The highest message number a stalled read-back reached.
    pub read_through: Option<u64>,
}

impl FastAudit {
    /// Whether every acknowledged message is in the stream once, in order,
    /// where its PubAck said.
    pub fn held(&self) -> bool {
        self.lost_after_ack.is_empty()
            && self.twice.is_empty()
            && self.out_of_order.is_empty()
            && self.commit_mismatch.is_empty()
    }
}

/// Holds the stored messages (in stream order) against the batches:
/// every message a flow ack or a PubAck covered must be stored exactly
/// once, message numbers must rise with the stream sequence (one
/// publisher sends them in that order), a PubAck's sequence must be that
/// of its batch's last message, and nothing but what was sent may be
/// stored. `sent` is the publisher's message count. When the read-back
/// stalled (`complete` false), a message missing after the last one it
/// reached is "unread", not lost: one publisher stores in order, so only
/// a message missing before that point is known to be gone.
pub fn audit(
    batches: &[FastBatchOutcome],
    sent: u64,
    stored: &[StoredStamp],
    complete: bool,
) -> FastAudit {
    let mut a = FastAudit::default();
    // `at[n]`: where message n was first found; 0 when not found.
    let mut at = vec![0u64; sent as usize];
    let mut last: Option<(u64, u64)> = None;
    let mut highest = 0;
    for s in stored {
        let Some(n) = s.message.filter(|n| *n < sent) else {
            a.foreign.push(match s.message {
                Some(n) => format!("sequence {} holds message {n}, never sent", s.seq),
                None => format!("sequence {} carries no jsbench stamp", s.seq),
            });
            continue;
        };
        if at[n as usize] != 0 {
            a.twice.push(format!(
                "message {n} at sequences {} and {}",
                at[n as usize], s.seq
            ));
            continue;
        }
        at[n as usize] = s.seq;
        highest = highest.max(n);
        if let Some((before, seq)) = last
            && n < before
        {
            a.out_of_order.push(format!(
                "message {n} at sequence {}, after message {before} at sequence {seq}",
                s.seq
            ));
        }
        last = Some((n, s.seq));
    }
    a.read_through = (!complete).then_some(highest);
    for b in batches {
        check_batch(b, &at, &mut a);
    }
    a
}

/// The acknowledged messages of one batch, and its PubAck's sequence.
fn check_batch(b: &FastBatchOutcome, at: &[u64], a: &mut FastAudit) {
    let stored_at = |k: u64| at.get((b.first_message + k - 1) as usize).copied();
    let in_gap = |k: u64| b.gaps.iter().any(|&(from, to)| (from..to).contains(&k));
    let unread = |k: u64| a.read_through.is_some_and(|r| b.first_message + k - 1 > r);
    for k in 1..=b.acked_through.min(b.sent) {
        a.acked += 1;
        match stored_at(k) {
            Some(seq) if seq > 0 => a.acked_stored += 1,
            _ if in_gap(k) => a.in_reported_gaps += 1,
            _ if unread(k) => a.unread += 1,
            _ => a.lost_after_ack.push(format!(
                "batch {} message {k} (message {}), acknowledged, is not in the stream: \
                 lost by the server after its ack",
                b.batch,
                b.first_message + k - 1
            )),
        }
    }
    if let Some((seq, count)) = b.commit
        && count >= 1
        && count <= b.sent
        && stored_at(count) != Some(seq)
    {
        a.commit_mismatch.push(format!(
            "batch {}: its PubAck names sequence {seq} for batch message {count}, \
             which the stream holds at {}",
            b.batch,
            stored_at(count)
                .filter(|s| *s > 0)
                .map_or("no sequence".into(), |s| s.to_string())
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two batches of 3, all acknowledged and committed, stored at 1-6.
    fn clean() -> (Vec<FastBatchOutcome>, Vec<StoredStamp>) {
        let batch = |batch: u64, first: u64, last_seq: u64| FastBatchOutcome {
            batch,
            first_message: first,
            sent: 3,
            acked_through: 3,
            commit: Some((last_seq, 3)),
            ..Default::default()
        };
        let stored = (0..6)
            .map(|n| StoredStamp {
                seq: n + 1,
                message: Some(n),
            })
            .collect();
        (vec![batch(0, 0, 3), batch(1, 3, 6)], stored)
    }

    #[test]
    fn a_clean_read_back_holds() {
        let (b, s) = clean();
        let a = audit(&b, 6, &s, true);
        assert!(a.held() && a.foreign.is_empty(), "{a:?}");
        assert_eq!((a.acked, a.acked_stored), (6, 6));
    }

    #[test]
    fn an_acknowledged_message_missing_is_lost_by_the_server() {
        let (b, mut s) = clean();
        s.remove(4);
        let a = audit(&b, 6, &s, true);
        assert!(!a.held());
        assert!(
            a.lost_after_ack[0].contains("batch 1 message 2")
                && a.lost_after_ack[0].contains("server"),
            "{a:?}"
        );
    }

    #[test]
    fn a_read_back_that_stalled_loses_nothing_past_where_it_stopped() {
        // Read through message 3 of 6: message 1 missing before that
        // point is lost by the server; 4 and 5, past it, are unread.
        let (b, mut s) = clean();
        s.truncate(4);
        s.remove(1);
        let a = audit(&b, 6, &s, false);
        assert_eq!(a.read_through, Some(3), "{a:?}");
        assert_eq!(a.lost_after_ack.len(), 1, "{a:?}");
        assert!(a.lost_after_ack[0].contains("(message 1)"), "{a:?}");
        assert_eq!(a.unread, 2, "{a:?}");
        // Read whole, the same gaps are the server's.
        assert_eq!(audit(&b, 6, &s, true).lost_after_ack.len(), 3);
    }

    #[test]
    fn a_message_not_yet_acknowledged_may_be_missing() {
        let (mut b, mut s) = clean();
        b[1].acked_through = 1;
        b[1].commit = None;
        s.truncate(4);
        let a = audit(&b, 6, &s, true);
        assert!(a.held(), "{a:?}");
        assert_eq!(a.acked, 4);
    }

    #[test]
    fn a_message_stored_twice_is_caught() {
        let (b, mut s) = clean();
        s.push(StoredStamp {
            seq: 7,
            message: Some(2),
        });
        let a = audit(&b, 6, &s, true);
        assert!(
            a.twice[0].contains("message 2 at sequences 3 and 7"),
            "{a:?}"
        );
    }

    #[test]
    fn messages_stored_out_of_order_are_caught() {
        let (b, mut s) = clean();
        s[1].message = Some(2);
        s[2].message = Some(1);
        let a = audit(&b, 6, &s, true);
        assert!(
            a.out_of_order[0].starts_with("message 1 at sequence 3"),
            "{a:?}"
        );
    }

    #[test]
    fn a_pub_ack_naming_another_sequence_is_caught() {
        let (mut b, s) = clean();
        b[1].commit = Some((5, 3));
        let a = audit(&b, 6, &s, true);
        assert!(a.commit_mismatch[0].contains("batch 1"), "{a:?}");
    }

    #[test]
    fn a_message_never_sent_or_unstamped_is_foreign() {
        let (b, mut s) = clean();
        s.push(StoredStamp {
            seq: 7,
            message: Some(99),
        });
        s.push(StoredStamp {
            seq: 8,
            message: None,
        });
        let a = audit(&b, 6, &s, true);
        assert_eq!(a.foreign.len(), 2, "{a:?}");
        assert!(a.held(), "a foreign message is its own check");
    }

    #[test]
    fn messages_in_a_reported_gap_are_counted_apart() {
        let (mut b, mut s) = clean();
        b[0].gaps = vec![(2, 3)];
        s.remove(1);
        let a = audit(&b, 6, &s, true);
        assert!(a.held(), "{a:?}");
        assert_eq!(a.in_reported_gaps, 1);
    }
}
