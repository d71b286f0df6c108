//! The delivery ledger: what happened to every stream sequence.
//!
//! Each publisher and consumer task keeps its own [`LedgerShard`] (no locks,
//! no shared cache lines on the hot path); the scenario merges them after the
//! run and checks its invariants against the merged counts. A benchmark that
//! silently loses messages is worse than none.

use serde::{Deserialize, Serialize};

use crate::record::tally::Tally;

/// Something that happened to a stream sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A PubAck confirmed this sequence was stored.
    Persisted,
    /// A PubAck flagged a publish as a duplicate of this sequence.
    Duplicate,
    /// A consumer received this sequence (every delivery counts).
    Delivered,
    /// A consumer acknowledged this sequence.
    Acked,
    /// A consumer nak'ed a delivery of this sequence.
    Naked,
    /// A consumer terminated this sequence.
    Termed,
}

const EVENTS: usize = 6;

/// Per-task counts of events by stream sequence.
///
/// One [`Tally`] per event, indexed by sequence (jsbench creates its own
/// streams, so sequences start at 1 and stay dense): marking is an
/// increment, and what the task has moved past seals into a form that
/// costs next to nothing when every message fared the same, so a shard's
/// memory stays flat over tens of millions of messages.
#[derive(Debug, Clone, Default)]
pub struct LedgerShard {
    counts: [Tally; EVENTS],
}

impl LedgerShard {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn mark(&mut self, seq: u64, event: Event) {
        self.counts[event as usize].mark(seq);
    }

    pub fn count(&self, seq: u64, event: Event) -> u16 {
        self.counts[event as usize].get(seq)
    }

    pub fn merge(&mut self, other: &LedgerShard) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            mine.merge(theirs);
        }
    }

    /// Bytes its counts hold.
    pub fn bytes(&self) -> u64 {
        self.counts.iter().map(Tally::bytes).sum()
    }

    /// Highest sequence any event was marked for.
    pub fn max_seq(&self) -> u64 {
        self.counts.iter().map(Tally::last).max().unwrap_or(0)
    }

    /// Sequences that were persisted but never delivered, up to `limit` of them.
    pub fn lost_sequences(&self, limit: usize) -> Vec<u64> {
        self.undelivered().take(limit).collect()
    }

    /// Sequences that were persisted but never delivered, in order, without
    /// a list as long as the losses (millions, when a long run's consumer
    /// fell behind).
    pub fn undelivered(&self) -> impl Iterator<Item = u64> + '_ {
        (1..=self.max_seq()).filter(|&s| {
            self.count(s, Event::Persisted) > 0 && self.count(s, Event::Delivered) == 0
        })
    }

    /// The counts every scenario reports, from the merged shard.
    /// Sequences in a run of [`Tally::runs`] fare alike, so each run is
    /// counted once, times its length.
    pub fn counts(&self) -> LedgerCounts {
        let mut c = LedgerCounts::default();
        let tallies: Vec<&Tally> = self.counts.iter().collect();
        Tally::runs(&tallies, self.max_seq(), |seq, n| {
            let persisted = self.count(seq, Event::Persisted);
            let deliveries = u64::from(self.count(seq, Event::Delivered));
            let acks = self.count(seq, Event::Acked);
            c.duplicates += n * u64::from(self.count(seq, Event::Duplicate));
            c.deliveries += n * deliveries;
            if persisted > 0 {
                c.persisted += n;
                if persisted > 1 {
                    c.persisted_twice += n;
                }
                if deliveries == 0 {
                    c.lost += n;
                }
            } else if deliveries > 0 {
                c.delivered_unconfirmed += n;
            }
            if deliveries > 0 {
                c.delivered += n;
            }
            if deliveries > 1 {
                c.redelivered += n;
                c.redeliveries += n * (deliveries - 1);
            }
            if acks > 0 {
                c.acked += n;
            }
            if self.count(seq, Event::Termed) > 0 {
                c.termed += n;
            }
            c.naks += n * u64::from(self.count(seq, Event::Naked));
        });
        c
    }
}

/// A shard crosses processes (worker results) whole, sequence by
/// sequence, not as counts: consumers on different workers share one
/// durable, so only the merged per-sequence ledger can tell a message
/// delivered twice on two hosts from two messages delivered once.
/// Each event goes as its [`Tally`]'s wire form.
#[derive(Serialize, Deserialize)]
struct ShardWire {
    events: Vec<Tally>,
}

impl Serialize for LedgerShard {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ShardWire {
            events: self.counts.to_vec(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for LedgerShard {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = ShardWire::deserialize(d)?;
        let found = wire.events.len();
        let counts: [Tally; EVENTS] = wire.events.try_into().map_err(|_| {
            serde::de::Error::custom(format!(
                "a ledger shard has {EVENTS} event vectors, this one {found}"
            ))
        })?;
        Ok(LedgerShard { counts })
    }
}

/// A set of stream sequences, one bit each: which sequences a consumer
/// saw at their first delivery, so the messages whose first delivery no
/// client saw (it died with a crashed client) can be told apart when the
/// shards merge.
///
/// A [`Tally`] of 0s and 1s: a consumer that saw every sequence in order
/// holds almost nothing for the chunks it has left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqSet {
    members: Tally,
    len: u64,
}

impl SeqSet {
    #[inline]
    pub fn insert(&mut self, seq: u64) {
        if !self.contains(seq) {
            self.members.mark(seq);
            self.len += 1;
        }
    }

    /// Inserts `seq`; whether it was not there before.
    #[inline]
    pub fn insert_new(&mut self, seq: u64) -> bool {
        let fresh = !self.contains(seq);
        self.insert(seq);
        fresh
    }

    #[inline]
    pub fn contains(&self, seq: u64) -> bool {
        self.members.get(seq) > 0
    }

    pub fn merge(&mut self, other: &SeqSet) {
        self.members.merge_with(&other.members, u16::max);
        self.len = self.iter().count() as u64;
    }

    /// How many sequences it holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The members in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.members
            .values()
            .enumerate()
            .filter(|&(_, c)| c > 0)
            .map(|(seq, _)| seq as u64)
    }

    /// Bytes the set holds.
    pub fn bytes(&self) -> u64 {
        self.members.bytes()
    }
}

impl FromIterator<u64> for SeqSet {
    fn from_iter<I: IntoIterator<Item = u64>>(seqs: I) -> Self {
        let mut set = SeqSet::default();
        for seq in seqs {
            set.insert(seq);
        }
        set
    }
}

/// Crosses processes as the sorted members, in runs `[first, last]`: a
/// consumer's set is mostly long runs.
impl Serialize for SeqSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for seq in self.iter() {
            match runs.last_mut() {
                Some((_, last)) if *last + 1 == seq => *last = seq,
                _ => runs.push((seq, seq)),
            }
        }
        runs.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SeqSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let runs = Vec::<(u64, u64)>::deserialize(d)?;
        let mut set = SeqSet::default();
        for (first, last) in runs {
            for seq in first..=last {
                set.insert(seq);
            }
        }
        Ok(set)
    }
}

/// Ledger totals for one scenario variant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerCounts {
    /// Publishes sent (whatever became of them).
    pub published: u64,
    /// Publishes that got no PubAck in time, or an error instead of one.
    pub publish_errors: u64,
    /// Distinct sequences a PubAck confirmed.
    pub persisted: u64,
    /// Sequences confirmed by more than one non-duplicate PubAck (a server bug).
    pub persisted_twice: u64,
    /// PubAcks flagged duplicate by the server.
    pub duplicates: u64,
    /// Distinct sequences delivered at least once.
    pub delivered: u64,
    /// Deliveries in total, first deliveries and redeliveries.
    pub deliveries: u64,
    /// Distinct sequences delivered more than once.
    pub redelivered: u64,
    /// Deliveries beyond the first, summed over sequences.
    pub redeliveries: u64,
    /// Distinct sequences acknowledged.
    pub acked: u64,
    /// Distinct sequences terminated.
    #[serde(default)]
    pub termed: u64,
    /// Naks sent, over all deliveries.
    #[serde(default)]
    pub naks: u64,
    /// Persisted messages the server failed to keep or deliver: never
    /// delivered while the clients kept asking, or (in scenarios without
    /// consumers) missing when the stream was read back.
    pub lost: u64,
    /// Persisted messages the clients never saw although the server
    /// delivered them, or held them for clients that had stopped asking
    /// (a consumer error, a lost stream): the load generator's loss, not
    /// the server's.
    #[serde(default)]
    pub client_dropped: u64,
    /// Persisted messages no client saw of which nothing could tell whether
    /// the stream still held them (beyond the sequences looked up one by
    /// one, in a stream with deletions): neither counted lost nor dropped.
    #[serde(default)]
    pub unattributed: u64,
    /// Delivered sequences whose PubAck never arrived (stored, but the
    /// publisher could not know it).
    pub delivered_unconfirmed: u64,
    /// Persisted messages the stream removed by its own limits (discard
    /// old at max_msgs, max_bytes or max_age): gone by policy, not lost.
    #[serde(default)]
    pub evicted: u64,
    /// Publishes the stream refused because it stood at a limit with
    /// discard new (JetStream error 10077) or the message exceeded
    /// max_msg_size (10054): counted among `publish_errors` too.
    #[serde(default)]
    pub refused_by_limit: u64,
    /// Acknowledged (or terminated) messages a work-queue or interest
    /// stream removed, as its retention says.
    #[serde(default)]
    pub removed_by_ack: u64,
}

/// Field by field through the serialised form, so a count added to the
/// ledger later is summed without this code knowing it (repetitions of a
/// variant, the durables of a fan-out).
impl std::ops::Add for LedgerCounts {
    type Output = LedgerCounts;

    fn add(self, other: LedgerCounts) -> LedgerCounts {
        use serde_json::Value;
        let (Ok(Value::Object(mut sum)), Ok(Value::Object(more))) =
            (serde_json::to_value(self), serde_json::to_value(other))
        else {
            return self;
        };
        for (key, value) in more {
            if let (Some(x), Some(y)) = (sum.get(&key).and_then(Value::as_u64), value.as_u64()) {
                sum.insert(key, Value::from(x.saturating_add(y)));
            }
        }
        serde_json::from_value(Value::Object(sum)).unwrap_or(self)
    }
}

impl std::ops::AddAssign for LedgerCounts {
    fn add_assign(&mut self, other: LedgerCounts) {
        *self = *self + other;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_lost_redelivered_and_unconfirmed() {
        let mut publisher = LedgerShard::new();
        for seq in 1..=5 {
            publisher.mark(seq, Event::Persisted);
        }
        let mut consumer_a = LedgerShard::new();
        let mut consumer_b = LedgerShard::new();
        for seq in [1, 2, 3] {
            consumer_a.mark(seq, Event::Delivered);
            consumer_a.mark(seq, Event::Acked);
        }
        consumer_b.mark(3, Event::Delivered); // a redelivery of 3 to another consumer
        consumer_b.mark(6, Event::Delivered); // stored, but its PubAck was lost

        let mut ledger = LedgerShard::new();
        for shard in [&publisher, &consumer_a, &consumer_b] {
            ledger.merge(shard);
        }
        let c = ledger.counts();
        assert_eq!(c.persisted, 5);
        assert_eq!(c.delivered, 4);
        assert_eq!(c.deliveries, 5);
        assert_eq!(c.redelivered, 1);
        assert_eq!(c.redeliveries, 1);
        assert_eq!(c.acked, 3);
        assert_eq!(c.lost, 2);
        assert_eq!(c.delivered_unconfirmed, 1);
        assert_eq!(ledger.lost_sequences(10), vec![4, 5]);
        assert_eq!(ledger.lost_sequences(1), vec![4]);
    }

    #[test]
    fn duplicates_and_double_persists_are_counted() {
        let mut s = LedgerShard::new();
        s.mark(1, Event::Persisted);
        s.mark(1, Event::Duplicate);
        s.mark(2, Event::Persisted);
        s.mark(2, Event::Persisted);
        s.mark(2, Event::Delivered);
        let c = s.counts();
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.persisted_twice, 1);
        assert_eq!(c.lost, 1);
    }

    #[test]
    fn a_shard_round_trips_sequence_for_sequence() {
        let mut s = LedgerShard::new();
        for seq in (1..=50_000).step_by(3) {
            s.mark(seq, Event::Persisted);
            s.mark(seq, Event::Delivered);
        }
        s.mark(7, Event::Delivered);
        s.mark(9, Event::Termed);
        let json = serde_json::to_string(&s).unwrap();
        // Sparse strided marks still pack small: a worker's whole ledger
        // fits in a few NATS messages.
        assert!(json.len() < 20_000, "{} bytes", json.len());
        let back: LedgerShard = serde_json::from_str(&json).unwrap();
        assert_eq!(back.counts(), s.counts());
        assert_eq!(back.count(7, Event::Delivered), 2);
        assert_eq!(back.count(9, Event::Termed), 1);
        assert_eq!(back.max_seq(), s.max_seq());
        assert!(serde_json::from_str::<LedgerShard>(r#"{"events":["x"]}"#).is_err());
    }

    #[test]
    fn marks_far_ahead() {
        let mut s = LedgerShard::new();
        s.mark(100_000, Event::Delivered);
        assert_eq!(s.count(100_000, Event::Delivered), 1);
        assert_eq!(s.max_seq(), 100_000);
    }
}
