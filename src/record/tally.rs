//! A counter per index (a stream sequence, a message number) whose memory
//! stays flat however many indexes a run goes through.
//!
//! A plain vector of counters costs its width per message forever: at two
//! bytes a counter and several counters per message, 50 million messages
//! would hold hundreds of megabytes. Here indexes live in chunks of 4,096.
//! The chunk an index lands in is a dense vector while it fills (marking is
//! an increment, no allocation); once the writer has moved two chunks past
//! it, it is sealed into the smallest form that says the same thing:
//!
//! - `Same`: one value for the whole chunk, with the few indexes that
//!   differ listed (the common case: every message stored once, delivered
//!   once, acked once);
//! - `Bits`: one bit per index, when every count is 0 or 1 but they mix
//!   (several clients sharing a durable, each seeing every other message);
//! - `Dense` otherwise.
//!
//! Sealing is lossless, so every question asked afterwards gets the answer
//! the dense vector would have given. A late mark in a sealed chunk (a
//! redelivery long after its first delivery) opens it again; it is sealed
//! again the next time the writer reaches a new chunk.

/// 4,096 indexes a chunk: a dense chunk is 8 KB, small enough that a short
/// run's open chunks cost little and a late mark reopens cheaply, and the
/// table of chunks costs a few bytes per thousand indexes.
const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;
const WORDS: usize = CHUNK / 64;
/// A sealed chunk keeps at most this many differing indexes as a list;
/// beyond it a bitmap or the dense vector is smaller.
const MAX_EXCEPTIONS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Chunk {
    /// Every index holds `value` except those listed (offset, count), sorted.
    Same {
        value: u16,
        except: Vec<(u16, u16)>,
    },
    Bits(Box<[u64; WORDS]>),
    Dense(Box<[u16]>),
}

impl Chunk {
    const ZERO: Chunk = Chunk::Same {
        value: 0,
        except: Vec::new(),
    };

    #[inline]
    fn get(&self, offset: usize) -> u16 {
        match self {
            Chunk::Dense(v) => v[offset],
            Chunk::Bits(w) => ((w[offset / 64] >> (offset % 64)) & 1) as u16,
            Chunk::Same { value, except } => {
                match except.binary_search_by_key(&(offset as u16), |&(o, _)| o) {
                    Ok(i) => except[i].1,
                    Err(_) => *value,
                }
            }
        }
    }

    fn is_zero(&self) -> bool {
        matches!(self, Chunk::Same { value: 0, except } if except.is_empty())
    }

    /// The chunk's counts, one per offset.
    fn to_dense(&self) -> Box<[u16]> {
        match self {
            Chunk::Dense(v) => v.clone(),
            _ => (0..CHUNK).map(|o| self.get(o)).collect(),
        }
    }

    /// The smallest form of `dense`.
    fn sealed(dense: &[u16]) -> Chunk {
        // The value most indexes hold is, when a list is worth keeping,
        // the value of most of any few indexes: try the first, middle and last.
        for candidate in [dense[CHUNK / 2], dense[0], dense[CHUNK - 1]] {
            let differing = dense.iter().filter(|&&c| c != candidate).count();
            if differing <= MAX_EXCEPTIONS {
                let except = dense
                    .iter()
                    .enumerate()
                    .filter(|&(_, &c)| c != candidate)
                    .map(|(o, &c)| (o as u16, c))
                    .collect();
                return Chunk::Same {
                    value: candidate,
                    except,
                };
            }
        }
        if dense.iter().all(|&c| c <= 1) {
            let mut words = Box::new([0u64; WORDS]);
            for (o, &c) in dense.iter().enumerate() {
                words[o / 64] |= u64::from(c) << (o % 64);
            }
            return Chunk::Bits(words);
        }
        Chunk::Dense(dense.into())
    }

    fn bytes(&self) -> u64 {
        match self {
            Chunk::Dense(v) => (v.len() * 2) as u64,
            Chunk::Bits(_) => (WORDS * 8) as u64,
            Chunk::Same { except, .. } => (except.capacity() * 4) as u64,
        }
    }
}

/// Counts per index, in chunks that seal behind the writer (see the module
/// documentation). Counts saturate at `u16::MAX`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    chunks: Vec<Chunk>,
    /// The highest chunk marked so far: chunks two or more below it seal.
    frontier: usize,
    /// Chunks currently dense (few: the one or two being written, and any
    /// a late mark reopened).
    open: Vec<usize>,
}

impl Tally {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one to `index`'s count. Allocation-free except when a chunk
    /// opens (once per 4,096 indexes written in order).
    #[inline]
    pub fn mark(&mut self, index: u64) {
        let (c, offset) = split(index);
        if let Some(Chunk::Dense(v)) = self.chunks.get_mut(c) {
            v[offset] = v[offset].saturating_add(1);
            return;
        }
        let before = self.get(index);
        self.open_chunk(c)[offset] = before.saturating_add(1);
    }

    /// Makes chunk `c` dense (creating it when it never was), seals what
    /// the writer has left behind, and returns the chunk's counts.
    #[cold]
    fn open_chunk(&mut self, c: usize) -> &mut [u16] {
        if c >= self.chunks.len() {
            self.chunks.resize(c + 1, Chunk::ZERO);
        }
        let dense = match &self.chunks[c] {
            Chunk::Dense(_) => None,
            chunk if chunk.is_zero() => Some(vec![0u16; CHUNK].into_boxed_slice()),
            chunk => Some(chunk.to_dense()),
        };
        if let Some(dense) = dense {
            self.chunks[c] = Chunk::Dense(dense);
            self.open.push(c);
        }
        if c > self.frontier {
            self.frontier = c;
            self.seal_behind();
        }
        match &mut self.chunks[c] {
            Chunk::Dense(v) => v,
            _ => unreachable!("chunk {c} was just made dense"),
        }
    }

    /// Seals every open chunk two or more behind the frontier.
    fn seal_behind(&mut self) {
        let frontier = self.frontier;
        let chunks = &mut self.chunks;
        self.open.retain(|&c| {
            if c + 2 > frontier {
                return true;
            }
            if let Chunk::Dense(v) = &chunks[c] {
                chunks[c] = Chunk::sealed(v);
            }
            false
        });
    }

    #[inline]
    pub fn get(&self, index: u64) -> u16 {
        let (c, offset) = split(index);
        self.chunks.get(c).map_or(0, |chunk| chunk.get(offset))
    }

    /// The highest index with a count, 0 when there is none.
    pub fn last(&self) -> u64 {
        for (c, chunk) in self.chunks.iter().enumerate().rev() {
            if chunk.is_zero() {
                continue;
            }
            if let Some(o) = (0..CHUNK).rev().find(|&o| chunk.get(o) > 0) {
                return (c * CHUNK + o) as u64;
            }
        }
        0
    }

    /// Combines `other` into this tally index by index with `op` (a sum,
    /// or a union for sets), sealing chunks as the writer would.
    pub fn merge_with(&mut self, other: &Tally, op: fn(u16, u16) -> u16) {
        if other.chunks.len() > self.chunks.len() {
            self.chunks.resize(other.chunks.len(), Chunk::ZERO);
        }
        self.frontier = self.frontier.max(other.frontier);
        for (c, theirs) in other.chunks.iter().enumerate() {
            if theirs.is_zero() {
                continue;
            }
            let mine = self.chunks[c].to_dense();
            let combined: Box<[u16]> = (0..CHUNK).map(|o| op(mine[o], theirs.get(o))).collect();
            // Sealed here, chunk by chunk, so a merge never holds the
            // whole range dense at once.
            if c + 2 <= self.frontier {
                self.chunks[c] = Chunk::sealed(&combined);
                self.open.retain(|&o| o != c);
            } else {
                self.chunks[c] = Chunk::Dense(combined);
                if !self.open.contains(&c) {
                    self.open.push(c);
                }
            }
        }
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Tally) {
        self.merge_with(other, u16::saturating_add);
    }

    /// Bytes held: the chunks' storage and the table of chunks.
    pub fn bytes(&self) -> u64 {
        let table = self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.open.capacity() * std::mem::size_of::<usize>();
        table as u64 + self.chunks.iter().map(Chunk::bytes).sum::<u64>()
    }

    /// Calls `f` once per run of indexes in `1..=last` whose counts, in
    /// this tally and in `others`, cannot differ from one another: a
    /// sealed chunk's uniform stretch is one run, everything else is its
    /// own index. `f(first index, run length)`. Lets a question over tens
    /// of millions of indexes cost one call per chunk where all agree.
    pub fn runs(tallies: &[&Tally], last: u64, mut f: impl FnMut(u64, u64)) {
        let mut index = 1u64;
        while index <= last {
            let (c, offset) = split(index);
            let chunk_end = ((c + 1) * CHUNK) as u64 - 1;
            let uniform = offset == 0
                && chunk_end <= last
                && tallies.iter().all(|t| {
                    t.chunks.get(c).is_none_or(
                        |chunk| matches!(chunk, Chunk::Same { except, .. } if except.is_empty()),
                    )
                });
            if uniform {
                f(index, CHUNK as u64);
                index = chunk_end + 1;
            } else {
                f(index, 1);
                index += 1;
            }
        }
    }

    /// One past the highest index with a count; 0 when there is none.
    pub fn end(&self) -> u64 {
        if self.chunks.iter().all(Chunk::is_zero) {
            0
        } else {
            self.last() + 1
        }
    }

    /// Every count from index 0 to the last, for serialising.
    pub fn values(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.end()).map(|i| self.get(i))
    }

    /// A tally holding `values` (index 0 first), sealed as if written in order.
    pub fn from_values(values: impl IntoIterator<Item = u16>) -> Tally {
        let mut t = Tally::new();
        let mut chunk = vec![0u16; CHUNK];
        let mut c = 0usize;
        let mut filled = false;
        for (i, v) in values.into_iter().enumerate() {
            let (ci, offset) = split(i as u64);
            if ci != c {
                t.push_chunk(c, &chunk, filled);
                chunk.fill(0);
                c = ci;
                filled = false;
            }
            chunk[offset] = v;
            filled |= v > 0;
        }
        t.push_chunk(c, &chunk, filled);
        t
    }

    fn push_chunk(&mut self, c: usize, dense: &[u16], filled: bool) {
        if !filled {
            return;
        }
        if c >= self.chunks.len() {
            self.chunks.resize(c + 1, Chunk::ZERO);
        }
        self.chunks[c] = Chunk::Dense(dense.into());
        self.open.push(c);
        self.frontier = self.frontier.max(c);
        self.seal_behind();
    }
}

/// A tally crosses processes (a worker's results) as deflated
/// little-endian u16s in base64, index 0 first: runs of equal counts, the
/// common case, compress to almost nothing.
impl serde::Serialize for Tally {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine as _;
        use std::io::Write as _;
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        for c in self.values() {
            z.write_all(&c.to_le_bytes())
                .map_err(serde::ser::Error::custom)?;
        }
        let packed = z.finish().map_err(serde::ser::Error::custom)?;
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(packed))
    }
}

impl<'de> serde::Deserialize<'de> for Tally {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use base64::Engine as _;
        use serde::de::Error as _;
        use std::io::Read as _;
        let text = String::deserialize(d)?;
        let packed = base64::engine::general_purpose::STANDARD
            .decode(&text)
            .map_err(|e| D::Error::custom(format!("a tally is not base64: {e}")))?;
        // Inflated a block at a time straight into the tally (runs seal
        // into almost nothing), never whole: a few packed bytes can
        // inflate a thousandfold, and a worker's results must not take
        // the coordinator's memory that way.
        let mut z =
            flate2::read::DeflateDecoder::new(packed.as_slice()).take(2 * MAX_TALLY_VALUES + 1);
        let mut failed: Option<String> = None;
        let mut block = vec![0u8; 64 * 1024];
        let (mut at, mut filled, mut total) = (0usize, 0usize, 0u64);
        let values = std::iter::from_fn(|| {
            loop {
                if filled - at >= 2 {
                    let v = u16::from_le_bytes([block[at], block[at + 1]]);
                    at += 2;
                    return Some(v);
                }
                // At most one byte left: to the front, and read more.
                block.copy_within(at..filled, 0);
                filled -= at;
                at = 0;
                match z.read(&mut block[filled..]) {
                    Ok(0) => {
                        if filled != 0 {
                            failed = Some("a tally has an odd byte count".into());
                        }
                        return None;
                    }
                    Ok(n) => {
                        total += n as u64;
                        if total > 2 * MAX_TALLY_VALUES {
                            failed = Some(format!(
                                "a tally holds more than {MAX_TALLY_VALUES} counts; refused"
                            ));
                            return None;
                        }
                        filled += n;
                    }
                    Err(e) => {
                        failed = Some(format!("a tally does not inflate: {e}"));
                        return None;
                    }
                }
            }
        });
        let tally = Tally::from_values(values);
        match failed {
            Some(why) => Err(D::Error::custom(why)),
            None => Ok(tally),
        }
    }
}

/// The most counts a tally read from another process may hold: 2^28
/// sequences (268 million messages in one drive, far above any run's),
/// so a deflate bomb is cut off after 512 MiB of counts instead of
/// inflating without end.
pub const MAX_TALLY_VALUES: u64 = 1 << 28;

#[inline]
fn split(index: u64) -> (usize, usize) {
    (
        (index >> CHUNK_BITS) as usize,
        (index as usize) & (CHUNK - 1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 51: a tally inflated whole, however far; a few MB of zeros
    /// past the cap are cut off now, and never held at once.
    #[test]
    fn a_tally_beyond_the_cap_is_refused() {
        use base64::Engine as _;
        use std::io::Write as _;
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..(2 * MAX_TALLY_VALUES / zeros.len() as u64 + 1) {
            z.write_all(&zeros).unwrap();
        }
        let text = base64::engine::general_purpose::STANDARD.encode(z.finish().unwrap());
        let e = serde_json::from_value::<Tally>(serde_json::Value::String(text)).unwrap_err();
        assert!(e.to_string().contains("more than 268435456 counts"), "{e}");
    }

    const N: u64 = 10 * CHUNK as u64 + 123;

    #[test]
    fn in_order_marks_seal_into_almost_nothing_and_answer_the_same() {
        let mut t = Tally::new();
        for i in 1..=N {
            t.mark(i);
        }
        // Sealed chunks: one exception each at most; two chunks stay open.
        assert!(t.bytes() < 3 * (CHUNK as u64) * 2, "{} bytes", t.bytes());
        t.mark(77); // one index counted twice, long after: chunk 0 reopens
        assert_eq!(t.get(0), 0);
        assert_eq!(t.get(77), 2);
        assert_eq!(t.get(5 * CHUNK as u64), 1);
        assert_eq!(t.get(N), 1);
        assert_eq!(t.get(N + 1), 0);
        assert_eq!(t.last(), N);
    }

    #[test]
    fn interleaved_writers_seal_into_bitmaps_and_merge_back_to_one_value() {
        let (mut even, mut odd) = (Tally::new(), Tally::new());
        for i in 1..=N {
            if i % 2 == 0 { &mut even } else { &mut odd }.mark(i);
        }
        // A bit per index for the sealed chunks, not two bytes.
        assert!(
            even.bytes() < N / 8 + 3 * (CHUNK as u64) * 2,
            "{} bytes",
            even.bytes()
        );
        assert_eq!(even.get(4), 1);
        assert_eq!(even.get(5), 0);
        let mut all = Tally::new();
        all.merge(&even);
        all.merge(&odd);
        assert!((1..=N).all(|i| all.get(i) == 1));
        assert!(all.bytes() < 3 * (CHUNK as u64) * 2);
    }

    #[test]
    fn a_late_mark_reopens_a_sealed_chunk_without_losing_counts() {
        let mut t = Tally::new();
        for i in 1..=N {
            t.mark(i);
        }
        for _ in 0..3 {
            t.mark(10);
        }
        t.mark(CHUNK as u64 + 5);
        assert_eq!(t.get(10), 4);
        assert_eq!(t.get(11), 1);
        assert_eq!(t.get(CHUNK as u64 + 5), 2);
        // Writing on reseals the reopened chunks.
        for i in N + 1..=N + 2 * CHUNK as u64 {
            t.mark(i);
        }
        assert!(t.bytes() < 3 * (CHUNK as u64) * 2);
        assert_eq!(t.get(10), 4);
    }

    #[test]
    fn mixed_counts_stay_dense_and_runs_cover_every_index_once() {
        let mut t = Tally::new();
        for i in 1..=N {
            for _ in 0..(i % 3) {
                t.mark(i);
            }
        }
        assert!((1..=N).all(|i| t.get(i) == (i % 3) as u16));
        let mut u = Tally::new();
        for i in 1..=N {
            u.mark(i);
        }
        let (mut covered, mut calls) = (0u64, 0u64);
        let mut next = 1u64;
        Tally::runs(&[&u], N, |first, len| {
            assert_eq!(first, next, "runs are contiguous");
            next = first + len;
            covered += len;
            calls += 1;
        });
        assert_eq!(covered, N);
        assert!(
            calls < 3 * CHUNK as u64,
            "sealed uniform chunks are one run each: {calls} calls"
        );
        let mut dense_calls = 0;
        Tally::runs(&[&u, &t], N, |_, _| dense_calls += 1);
        assert_eq!(
            dense_calls, N,
            "a dense tally makes every index its own run"
        );
    }

    #[test]
    fn values_round_trip_and_saturate() {
        let mut t = Tally::new();
        for i in [0u64, 3, 3, 200_000] {
            t.mark(i);
        }
        let back = Tally::from_values(t.values());
        assert_eq!((back.get(0), back.get(3), back.get(200_000)), (1, 2, 1));
        assert_eq!(back.last(), 200_000);
        assert_eq!(Tally::new().values().count(), 0);
        let mut s = Tally::from_values([u16::MAX]);
        s.mark(0);
        assert_eq!(s.get(0), u16::MAX);
    }
}
