//! The delivery ledger: what happened to every stream sequence.
//!
//! Each publisher and consumer task keeps its own [`LedgerShard`] (no locks,
//! no shared cache lines on the hot path); the scenario merges them after the
//! run and checks its invariants against the merged counts. A benchmark that
//! silently loses messages is worse than none.

use serde::{Deserialize, Serialize};

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
/// Counts live in dense vectors indexed by sequence (jsbench creates its own
/// streams, so sequences start at 1 and stay dense); a vector grows by
/// doubling, so marking is allocation-free except for amortised growth, and
/// `with_capacity` removes even that when the message count is known.
#[derive(Debug, Clone, Default)]
pub struct LedgerShard {
    counts: [Vec<u16>; EVENTS],
}

impl LedgerShard {
    pub fn new() -> Self {
        Self::default()
    }

    /// A shard that can mark sequences up to `max_seq` for `events` without growing.
    pub fn with_capacity(max_seq: u64, events: &[Event]) -> Self {
        let mut shard = Self::default();
        for &e in events {
            shard.counts[e as usize] = vec![0; max_seq as usize + 1];
        }
        shard
    }

    #[inline]
    pub fn mark(&mut self, seq: u64, event: Event) {
        let v = &mut self.counts[event as usize];
        let i = seq as usize;
        if i >= v.len() {
            let len = (i + 1).max(v.len() * 2).max(1024);
            v.resize(len, 0);
        }
        v[i] = v[i].saturating_add(1);
    }

    pub fn count(&self, seq: u64, event: Event) -> u16 {
        self.counts[event as usize]
            .get(seq as usize)
            .copied()
            .unwrap_or(0)
    }

    pub fn merge(&mut self, other: &LedgerShard) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m = m.saturating_add(*t);
            }
        }
    }

    /// Bytes its counts hold (capacity, not length: what the allocator
    /// gave them).
    pub fn bytes(&self) -> u64 {
        self.counts
            .iter()
            .map(|v| (v.capacity() * std::mem::size_of::<u16>()) as u64)
            .sum()
    }

    /// Highest sequence any event was marked for.
    pub fn max_seq(&self) -> u64 {
        self.counts
            .iter()
            .filter_map(|v| v.iter().rposition(|&c| c > 0))
            .max()
            .unwrap_or(0) as u64
    }

    /// Sequences that were persisted but never delivered, up to `limit` of them.
    pub fn lost_sequences(&self, limit: usize) -> Vec<u64> {
        (1..=self.max_seq())
            .filter(|&s| {
                self.count(s, Event::Persisted) > 0 && self.count(s, Event::Delivered) == 0
            })
            .take(limit)
            .collect()
    }

    /// The counts every scenario reports, from the merged shard.
    pub fn counts(&self) -> LedgerCounts {
        let mut c = LedgerCounts::default();
        for seq in 1..=self.max_seq() {
            let persisted = self.count(seq, Event::Persisted);
            let deliveries = u64::from(self.count(seq, Event::Delivered));
            let acks = self.count(seq, Event::Acked);
            c.duplicates += u64::from(self.count(seq, Event::Duplicate));
            c.deliveries += deliveries;
            if persisted > 0 {
                c.persisted += 1;
                if persisted > 1 {
                    c.persisted_twice += 1;
                }
                if deliveries == 0 {
                    c.lost += 1;
                }
            } else if deliveries > 0 {
                c.delivered_unconfirmed += 1;
            }
            if deliveries > 0 {
                c.delivered += 1;
            }
            if deliveries > 1 {
                c.redelivered += 1;
                c.redeliveries += deliveries - 1;
            }
            if acks > 0 {
                c.acked += 1;
            }
            if self.count(seq, Event::Termed) > 0 {
                c.termed += 1;
            }
            c.naks += u64::from(self.count(seq, Event::Naked));
        }
        c
    }
}

/// A shard crosses processes (worker results) whole, sequence by
/// sequence, not as counts: consumers on different workers share one
/// durable, so only the merged per-sequence ledger can tell a message
/// delivered twice on two hosts from two messages delivered once.
/// Each event's vector goes as deflated little-endian u16s in base64:
/// runs of equal counts, the common case, compress to almost nothing.
#[derive(Serialize, Deserialize)]
struct ShardWire {
    events: Vec<String>,
}

impl Serialize for LedgerShard {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine as _;
        use std::io::Write as _;
        let mut events = Vec::with_capacity(EVENTS);
        for v in &self.counts {
            // Trailing zeros carry nothing: the capacity of a shard is not
            // part of what it recorded.
            let used = v.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
            let mut raw = Vec::with_capacity(used * 2);
            for c in &v[..used] {
                raw.extend_from_slice(&c.to_le_bytes());
            }
            let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
            z.write_all(&raw).map_err(serde::ser::Error::custom)?;
            let packed = z.finish().map_err(serde::ser::Error::custom)?;
            events.push(base64::engine::general_purpose::STANDARD.encode(packed));
        }
        ShardWire { events }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for LedgerShard {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use base64::Engine as _;
        use serde::de::Error as _;
        use std::io::Read as _;
        let wire = ShardWire::deserialize(d)?;
        if wire.events.len() != EVENTS {
            return Err(D::Error::custom(format!(
                "a ledger shard has {EVENTS} event vectors, this one {}",
                wire.events.len()
            )));
        }
        let mut shard = LedgerShard::new();
        for (slot, text) in shard.counts.iter_mut().zip(&wire.events) {
            let packed = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| D::Error::custom(format!("ledger shard is not base64: {e}")))?;
            let mut raw = Vec::new();
            flate2::read::DeflateDecoder::new(packed.as_slice())
                .read_to_end(&mut raw)
                .map_err(|e| D::Error::custom(format!("ledger shard does not inflate: {e}")))?;
            if raw.len() % 2 != 0 {
                return Err(D::Error::custom("ledger shard has an odd byte count"));
            }
            *slot = raw
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect();
        }
        Ok(shard)
    }
}

/// A set of stream sequences, one bit each: which sequences a consumer
/// saw at their first delivery, so the messages whose first delivery no
/// client saw (it died with a crashed client) can be told apart when the
/// shards merge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqSet {
    words: Vec<u64>,
}

impl SeqSet {
    /// Room for sequences up to `max_seq` without growing on the hot path.
    pub fn with_capacity(max_seq: u64) -> SeqSet {
        SeqSet {
            words: vec![0; (max_seq / 64 + 1) as usize],
        }
    }

    #[inline]
    pub fn insert(&mut self, seq: u64) {
        let word = (seq / 64) as usize;
        if word >= self.words.len() {
            let len = (word + 1).max(self.words.len() * 2).max(16);
            self.words.resize(len, 0);
        }
        self.words[word] |= 1 << (seq % 64);
    }

    /// Inserts `seq`; whether it was not there before.
    #[inline]
    pub fn insert_new(&mut self, seq: u64) -> bool {
        let fresh = !self.contains(seq);
        self.insert(seq);
        fresh
    }

    pub fn contains(&self, seq: u64) -> bool {
        self.words
            .get((seq / 64) as usize)
            .is_some_and(|w| w & (1 << (seq % 64)) != 0)
    }

    pub fn merge(&mut self, other: &SeqSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (mine, theirs) in self.words.iter_mut().zip(&other.words) {
            *mine |= theirs;
        }
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
        let mut s = LedgerShard::with_capacity(2, &[Event::Persisted, Event::Duplicate]);
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
        let mut s = LedgerShard::with_capacity(100_000, &[Event::Persisted, Event::Delivered]);
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
    fn grows_past_its_capacity() {
        let mut s = LedgerShard::with_capacity(4, &[Event::Delivered]);
        s.mark(100_000, Event::Delivered);
        assert_eq!(s.count(100_000, Event::Delivered), 1);
        assert_eq!(s.max_seq(), 100_000);
    }
}
