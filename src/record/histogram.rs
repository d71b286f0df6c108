//! Latency histograms: recorded per task on the hot path, merged once after
//! the run, and written as HdrHistogram percentile distributions.
//!
//! Values are nanoseconds with three significant digits from 1 ns to one
//! hour; anything longer saturates at the top (and is counted), so a
//! pathological outlier never aborts a recording. An interval whose end
//! reads earlier than its start (two processes' clocks, a server's
//! timestamp against jsbench's) records zero and is counted too: nothing is
//! clamped silently.

use std::fmt::Write as _;

use anyhow::{Context, Result};
use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use serde::{Deserialize, Serialize};

/// Highest value recorded without saturating: one hour in ns.
const HIGHEST_NS: u64 = 3_600 * 1_000_000_000;
const SIGFIG: u8 = 3;

/// A task-local latency recorder.
#[derive(Clone)]
pub struct Recorder {
    histogram: Histogram<u64>,
    saturated: u64,
    negative: u64,
    /// The smallest interval [`Recorder::record_between`] was given, signed
    /// (below zero where the two clocks disagree): with the smallest of the
    /// hop after it, it bounds the offset between the clocks.
    least: i64,
    /// With [`Recorder::with_intervals`]: the same values again, one
    /// histogram per second of their end time.
    intervals: Option<Box<Intervals>>,
    /// With [`Recorder::with_start_intervals`]: again, one histogram per
    /// second of their start time (the intended send), which is where a
    /// step of a load shape must count them.
    starts: Option<Box<Starts>>,
}

/// Width of an interval of the interval log: one second of jsbench's
/// clock (nanoseconds since the Unix epoch), so every recorder of a run
/// cuts its intervals at the same instants without knowing when the run
/// began.
pub const INTERVAL_NS: u64 = 1_000_000_000;
/// What a finished second of a recorder's interval histograms may hold, by
/// design: one histogram at [`INTERVAL_SIGFIG`] digits, compressed. A
/// second of values spread evenly over seven decades (1 µs to 10 s, wider
/// than any second measured here) takes 1.2 KB with its vector's spare
/// capacity; the soak's took 870 bytes on average (7.3 MB over 1,680 s and
/// five recorders).
pub const INTERVAL_BYTES_PER_SECOND: u64 = 2_048;
/// Interval histograms are coarser than the whole run's (1% against 0.1%):
/// a second's few thousand values need no more, and a recorder keeps one
/// in memory while it fills.
const INTERVAL_SIGFIG: u8 = 2;

/// Per-second histograms: the finished ones compressed (a few hundred
/// bytes each), and the one being filled kept as the difference between
/// the recorder's whole-run histogram and the buckets it held when the
/// second began. A value is thus recorded once, not twice (one
/// HdrHistogram record is most of a delivery's bookkeeping:
/// docs/self-benchmarks.md); the second's histogram is worked out when it
/// closes or is asked for. Nested buckets make it exact: a bucket at three
/// significant digits lies inside one at two. The snapshot keeps only the
/// non-empty buckets (a few hundred), not a copy of the 270 KB histogram:
/// a fan-out keeps two recorders for each of up to 1,000 consumers.
#[derive(Clone, Default)]
struct Intervals {
    /// The second being filled (`u64::MAX` before the first value).
    second: u64,
    /// The whole-run histogram's non-empty buckets (value, count), in
    /// value order, as they stood when `second` began.
    snapshot: Vec<(u64, u64)>,
    /// The number of values in `snapshot`.
    snapshot_len: u64,
    /// (second, V2 + deflate bytes).
    done: Vec<(u64, Vec<u8>)>,
}

impl Intervals {
    fn new() -> Self {
        Intervals {
            second: u64::MAX,
            ..Intervals::default()
        }
    }

    /// Before a value ending at `at_ns` goes into `whole`: once a second
    /// per recorder, the finished second is compressed.
    #[inline]
    fn enter(&mut self, at_ns: u64, whole: &Histogram<u64>) {
        let second = at_ns / INTERVAL_NS;
        if second != self.second {
            self.close(whole);
            self.second = second;
        }
    }

    /// Out of line: once a second, never per value, and named so the
    /// instruction counts (benches/instructions.rs) can leave it out.
    #[cold]
    #[inline(never)]
    fn close(&mut self, whole: &Histogram<u64>) {
        let current = self.current(whole);
        if !current.is_empty() {
            self.done.push((self.second, compress(&current)));
        }
        self.take_snapshot(whole);
    }

    /// `whole`'s buckets as they stand now.
    fn take_snapshot(&mut self, whole: &Histogram<u64>) {
        self.snapshot.clear();
        self.snapshot.extend(
            whole
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value())),
        );
        self.snapshot_len = whole.len();
    }

    /// The second being filled, at the intervals' precision.
    fn current(&self, whole: &Histogram<u64>) -> Histogram<u64> {
        let mut current = interval_histogram();
        if whole.len() == self.snapshot_len {
            return current;
        }
        // The snapshot is an earlier state of `whole`, which only grows:
        // each of its buckets is one of whole's, with a count no larger.
        let mut before = self.snapshot.iter().peekable();
        for v in whole.iter_recorded() {
            let value = v.value_iterated_to();
            let mut count = v.count_at_value();
            while let Some(&&(at, n)) = before.peek() {
                if at > value {
                    break;
                }
                if at == value {
                    count = count.saturating_sub(n);
                }
                before.next();
            }
            if count > 0 {
                current.saturating_record_n(value, count);
            }
        }
        current
    }

    /// Every second's values, finished or not, compressed.
    fn all(&self, whole: &Histogram<u64>) -> Vec<(u64, Vec<u8>)> {
        let mut all = self.done.clone();
        let current = self.current(whole);
        if !current.is_empty() {
            all.push((self.second, compress(&current)));
        }
        all
    }
}

/// Seconds of values' starts open at once: values arrive out of their
/// starts' order (a backlog's, several publishers' lags), so a few seconds
/// stay open and the earliest closes when one more opens.
const OPEN_STARTS: usize = 4;

/// Per-second histograms keyed by when each value began.
#[derive(Clone, Default)]
struct Starts {
    open: Vec<(u64, Histogram<u64>)>,
    /// (second, V2 + deflate bytes); a second closed early and opened again
    /// appears twice.
    done: Vec<(u64, Vec<u8>)>,
}

impl Starts {
    #[inline]
    fn record(&mut self, start_ns: u64, value: u64) {
        let second = start_ns / INTERVAL_NS;
        let i = match self.open.iter().position(|(s, _)| *s == second) {
            Some(i) => i,
            None if self.open.len() < OPEN_STARTS => {
                self.open.push((second, interval_histogram()));
                self.open.len() - 1
            }
            None => {
                let (i, _) = self
                    .open
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, (s, _))| *s)
                    .expect("OPEN_STARTS > 0");
                let (closed, h) = &mut self.open[i];
                self.done.push((*closed, compress(h)));
                h.reset();
                *closed = second;
                i
            }
        };
        self.open[i].1.saturating_record(value);
    }

    /// Every second's values, open or closed, compressed.
    fn all(&self) -> Vec<(u64, Vec<u8>)> {
        let mut all = self.done.clone();
        all.extend(
            self.open
                .iter()
                .filter(|(_, h)| !h.is_empty())
                .map(|(s, h)| (*s, compress(h))),
        );
        all
    }
}

/// An empty histogram at the intervals' precision.
fn interval_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_NS, INTERVAL_SIGFIG)
        .expect("constant histogram bounds are valid")
}

/// Bytes a list of compressed seconds holds.
fn held(seconds: &[(u64, Vec<u8>)]) -> u64 {
    seconds.iter().map(|(_, b)| b.capacity() as u64).sum()
}

fn compress(h: &Histogram<u64>) -> Vec<u8> {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("serialising into memory cannot fail");
    bytes
}

/// The most a serialised histogram may decompress to: 16 MiB. jsbench's
/// histograms (1 ns to an hour, at most 3 significant digits) hold under
/// 35,000 counts, at most 9 bytes each in V2's encoding, so a real one is
/// well under 1 MiB. The crate's reader allocates whatever the header's
/// payload length claims (up to 4 GiB, from a 56-byte input), so the
/// header is checked against this cap and against the bytes actually
/// present before the crate sees them.
pub const MAX_HISTOGRAM_BYTES: usize = 16 * 1024 * 1024;

/// V2 cookies (with the word size in the low bits, as the crate writes).
const V2_COOKIE: u32 = 0x1c84_9303 | 0x10;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304 | 0x10;

/// A V2 header: cookie, payload length, normalising offset, significant
/// digits, lowest and highest trackable values, integer-to-double ratio.
const V2_HEADER: usize = 40;

fn decompress(bytes: &[u8]) -> Result<Histogram<u64>> {
    use std::io::Read as _;
    let cookie = |b: &[u8]| {
        b.get(..4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
    };
    let inflated;
    let plain: &[u8] = match cookie(bytes) {
        Some(V2_COMPRESSED_COOKIE) => {
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(bytes.get(8..).unwrap_or_default())
                .take(MAX_HISTOGRAM_BYTES as u64 + 1)
                .read_to_end(&mut out)
                .context("histogram does not inflate")?;
            if out.len() > MAX_HISTOGRAM_BYTES {
                anyhow::bail!(
                    "histogram inflates beyond {} MiB; refused",
                    MAX_HISTOGRAM_BYTES >> 20
                );
            }
            inflated = out;
            &inflated
        }
        _ => bytes,
    };
    if cookie(plain) != Some(V2_COOKIE) || plain.len() < V2_HEADER {
        anyhow::bail!("histogram does not deserialise: not a V2 histogram");
    }
    let field = |at: usize| u32::from_be_bytes(plain[at..at + 4].try_into().unwrap());
    let (payload, digits) = (field(4) as usize, field(12));
    let high = u64::from_be_bytes(plain[24..32].try_into().unwrap());
    if payload > plain.len() - V2_HEADER {
        anyhow::bail!(
            "histogram header claims {payload} bytes of counts; {} are there",
            plain.len() - V2_HEADER
        );
    }
    // Within jsbench's own bounds: a wider histogram allocates a counts
    // array jsbench never writes, and would not merge into its own.
    if digits > u32::from(SIGFIG) || high > HIGHEST_NS {
        anyhow::bail!(
            "histogram of {digits} significant digits up to {high} ns; jsbench's go to {SIGFIG} and {HIGHEST_NS} ns"
        );
    }
    Deserializer::new()
        .deserialize(&mut &plain[..])
        .map_err(|e| anyhow::anyhow!("histogram does not deserialise: {e:?}"))
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("count", &self.histogram.len())
            .field("saturated", &self.saturated)
            .field("negative", &self.negative)
            .finish()
    }
}

impl Recorder {
    pub fn new() -> Self {
        Recorder {
            histogram: Histogram::new_with_bounds(1, HIGHEST_NS, SIGFIG)
                .expect("constant histogram bounds are valid"),
            saturated: 0,
            negative: 0,
            least: i64::MAX,
            intervals: None,
            starts: None,
        }
    }

    /// A recorder with intervals ([`Recorder::with_intervals`]) that also
    /// keeps one histogram per second of the values' start times (what
    /// [`Recorder::record_between`] is given as `from`), for
    /// [`Recorder::split_by_start`].
    pub fn with_start_intervals() -> Self {
        Recorder {
            starts: Some(Box::default()),
            ..Recorder::with_intervals()
        }
    }

    /// A recorder that also keeps one histogram per second of the values'
    /// end times (what [`Recorder::record_between`] is given as `to`):
    /// latency over time and the HdrHistogram interval log.
    pub fn with_intervals() -> Self {
        Recorder {
            intervals: Some(Box::new(Intervals::new())),
            ..Recorder::new()
        }
    }

    /// Calls `f` with each second's histogram (of jsbench's clock), merged
    /// across every recorder folded in, seconds in order; not at all for
    /// a recorder without intervals. One second is decompressed at a time: holding them all
    /// (about 40 KB each) took 70 MB at the end of a 28-minute soak whose
    /// drive never passed 35 MB, and would grow with every hour.
    pub fn for_each_second(&self, mut f: impl FnMut(u64, &Histogram<u64>)) {
        let Some(iv) = &self.intervals else {
            return;
        };
        let current = iv.current(&self.histogram);
        let open = (!current.is_empty()).then(|| (iv.second, compress(&current)));
        let mut entries: Vec<(u64, &[u8])> = iv
            .done
            .iter()
            .chain(open.iter())
            .map(|(second, bytes)| (*second, bytes.as_slice()))
            .collect();
        entries.sort_by_key(|(second, _)| *second);
        let mut pending: Option<(u64, Histogram<u64>)> = None;
        for (second, bytes) in entries {
            let Ok(h) = decompress(bytes) else { continue };
            match &mut pending {
                Some((s, sum)) if *s == second => {
                    let _ = sum.add(&h);
                }
                _ => {
                    if let Some((s, sum)) = pending.replace((second, h)) {
                        f(s, &sum);
                    }
                }
            }
        }
        if let Some((s, sum)) = pending {
            f(s, &sum);
        }
    }

    /// The values split by the second they began in, for `spans` of
    /// `[from_ns, to_ns)`: a second counts in the span it begins in, so
    /// spans of whole seconds split exactly. Empty without start intervals
    /// ([`Recorder::with_start_intervals`]). At the intervals' precision.
    pub fn split_by_start(&self, spans: &[(u64, u64)]) -> Vec<Histogram<u64>> {
        let mut out = vec![interval_histogram(); spans.len()];
        let Some(starts) = &self.starts else {
            return out;
        };
        for (second, bytes) in starts.all() {
            let at = second * INTERVAL_NS;
            let Some(i) = spans.iter().position(|&(a, b)| at >= a && at < b) else {
                continue;
            };
            if let Ok(h) = decompress(&bytes) {
                let _ = out[i].add(&h);
            }
        }
        out
    }

    /// The intervals as a standard HdrHistogram interval log (".hlog"):
    /// one line per second, values in nanoseconds, readable by
    /// HistogramLogAnalyzer and the hdrhistogram crate's reader. `None`
    /// without intervals.
    pub fn to_interval_log(&self) -> Option<Vec<u8>> {
        use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
        let iv = self.intervals.as_ref()?;
        let first = iv
            .done
            .iter()
            .map(|(second, _)| *second)
            .chain((!iv.current(&self.histogram).is_empty()).then_some(iv.second))
            .min()?;
        let start = std::time::UNIX_EPOCH + std::time::Duration::from_secs(first);
        let mut out = Vec::new();
        let mut serializer = V2DeflateSerializer::new();
        {
            let mut log = IntervalLogWriterBuilder::new()
                .add_comment("jsbench interval log: values in nanoseconds, one interval per second")
                .with_start_time(start)
                .with_base_time(start)
                .with_max_value_divisor(1e6)
                .begin_log_with(&mut out, &mut serializer)
                .ok()?;
            let mut written = true;
            self.for_each_second(|second, h| {
                written &= log
                    .write_histogram(
                        h,
                        std::time::Duration::from_secs(second - first),
                        std::time::Duration::from_secs(1),
                        None,
                    )
                    .is_ok();
            });
            written.then_some(())?;
        }
        Some(out)
    }

    /// Records one value in ns. No allocation: the counts array is sized
    /// for the whole range up front.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        if ns > HIGHEST_NS {
            self.saturated += 1;
        }
        self.histogram.saturating_record(ns);
    }

    /// Records the elapsed time between two clock readings. An end that
    /// reads earlier than its start (never on one clock; across two, by
    /// their offset) records zero and is counted in [`Recorder::negative`].
    #[inline]
    pub fn record_between(&mut self, from_ns: u64, to_ns: u64) {
        if to_ns < from_ns {
            self.negative += 1;
        }
        self.least = self.least.min(to_ns.wrapping_sub(from_ns) as i64);
        let value = to_ns.saturating_sub(from_ns);
        if let Some(iv) = &mut self.intervals {
            iv.enter(to_ns, &self.histogram);
        }
        self.record(value);
        if let Some(starts) = &mut self.starts {
            starts.record(from_ns, value);
        }
    }

    pub fn merge(&mut self, other: &Recorder) {
        // The second being filled is the whole histogram's growth since
        // its snapshot: close it before the whole takes other values.
        if let Some(iv) = &mut self.intervals {
            iv.close(&self.histogram);
        }
        self.histogram
            .add(&other.histogram)
            .expect("histograms with equal bounds always add");
        self.saturated += other.saturated;
        self.negative += other.negative;
        self.least = self.least.min(other.least);
        if let Some(theirs) = &other.intervals {
            let mine = self
                .intervals
                .get_or_insert_with(|| Box::new(Intervals::new()));
            mine.done.extend(theirs.all(&other.histogram));
        }
        if let Some(mine) = &mut self.intervals {
            mine.take_snapshot(&self.histogram);
        }
        if let Some(theirs) = &other.starts {
            let mine = self.starts.get_or_insert_with(Box::default);
            mine.done.extend(theirs.all());
        }
    }

    /// Bytes the recorder holds: its histogram (fixed by its bounds and
    /// precision, whatever it records) and, with intervals, the second
    /// being filled and the compressed seconds before it (which grow with
    /// the run's length, not its message count).
    pub fn bytes(&self) -> (u64, u64) {
        let counts = |h: &Histogram<u64>| (h.distinct_values() * std::mem::size_of::<u64>()) as u64;
        let intervals = self.intervals.as_ref().map_or(0, |iv| {
            (iv.snapshot.capacity() * std::mem::size_of::<(u64, u64)>()) as u64 + held(&iv.done)
        });
        let starts = self.starts.as_ref().map_or(0, |st| {
            st.open.iter().map(|(_, h)| counts(h)).sum::<u64>() + held(&st.done)
        });
        (counts(&self.histogram), intervals + starts)
    }

    /// The interval histograms' finished seconds (one per recorder and
    /// second, merged recorders' kept apart): how many, and the bytes they
    /// hold. What grows with a run's length, against
    /// [`INTERVAL_BYTES_PER_SECOND`].
    pub fn interval_seconds(&self) -> (u64, u64) {
        let done = |d: &[(u64, Vec<u8>)]| (d.len() as u64, held(d));
        let (a, b) = self.intervals.as_ref().map_or((0, 0), |iv| done(&iv.done));
        let (c, d) = self.starts.as_ref().map_or((0, 0), |st| done(&st.done));
        (a + c, b + d)
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    pub fn saturated(&self) -> u64 {
        self.saturated
    }

    /// Intervals that ended before they started, recorded as zero.
    pub fn negative(&self) -> u64 {
        self.negative
    }

    /// The smallest interval given to [`Recorder::record_between`], signed:
    /// none when it was never called.
    pub fn least_ns(&self) -> Option<i64> {
        (self.least != i64::MAX).then_some(self.least)
    }

    pub fn histogram(&self) -> &Histogram<u64> {
        &self.histogram
    }

    /// Value at a quantile (0.0..=1.0) in ns; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        self.histogram.value_at_quantile(q)
    }

    pub fn summary(&self) -> LatencySummary {
        let h = &self.histogram;
        let us = |ns: u64| ns as f64 / 1_000.0;
        LatencySummary {
            count: h.len(),
            min_us: us(h.min()),
            mean_us: h.mean() / 1_000.0,
            p50_us: us(h.value_at_quantile(0.50)),
            p90_us: us(h.value_at_quantile(0.90)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            p9999_us: us(h.value_at_quantile(0.9999)),
            max_us: us(h.max()),
        }
    }

    /// The HdrHistogram percentile-distribution text (".hgrm"), values in
    /// microseconds, in the layout HdrHistogram's own tools print and its
    /// plotters read.
    pub fn to_hgrm(&self) -> String {
        let h = &self.histogram;
        let scale = 1_000.0;
        let mut out = String::new();
        out.push_str("       Value     Percentile TotalCount 1/(1-Percentile)\n\n");
        if h.is_empty() {
            out.push_str("#[Mean    =        0.000, StdDeviation   =        0.000]\n");
            out.push_str("#[Max     =        0.000, Total count    =            0]\n");
        } else {
            let mut total = 0u64;
            for v in h.iter_quantiles(5) {
                total += v.count_since_last_iteration();
                let q = v.quantile_iterated_to();
                let value = h.highest_equivalent(v.value_iterated_to()) as f64 / scale;
                if q < 1.0 {
                    let _ = writeln!(
                        out,
                        "{value:12.3} {q:2.12} {total:10} {:14.2}",
                        1.0 / (1.0 - q)
                    );
                } else {
                    let _ = writeln!(out, "{value:12.3} {q:2.12} {total:10}");
                }
            }
            let _ = writeln!(
                out,
                "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
                h.mean() / scale,
                h.stdev() / scale
            );
            let _ = writeln!(
                out,
                "#[Max     = {:12.3}, Total count    = {:12}]",
                h.max() as f64 / scale,
                h.len()
            );
        }
        // HdrHistogram's sub-bucket count: the power of two that resolves
        // the configured significant digits.
        let sub_buckets = (2.0 * 10f64.powi(i32::from(h.sigfig())))
            .log2()
            .ceil()
            .exp2();
        let _ = writeln!(
            out,
            "#[Buckets = {:12}, SubBuckets     = {:12}]",
            h.buckets(),
            sub_buckets
        );
        out
    }

    /// The standard compressed serialisation (V2 + deflate), base64: exact,
    /// mergeable, and readable by every HdrHistogram implementation.
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(compress(&self.histogram))
    }

    pub fn from_base64(text: &str) -> Result<Recorder> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .context("histogram is not valid base64")?;
        let histogram = decompress(&bytes)?;
        let mut recorder = Recorder::new();
        recorder
            .histogram
            .add(&histogram)
            .map_err(|e| anyhow::anyhow!("histogram out of range: {e:?}"))?;
        Ok(recorder)
    }
}

/// Recorders travel between processes (worker results) in the standard
/// compressed form, so what a worker measured merges exactly, bucket for
/// bucket, with what the coordinator measured.
#[derive(Serialize, Deserialize)]
struct RecorderWire {
    histogram: String,
    saturated: u64,
    #[serde(default)]
    negative: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    least: Option<i64>,
    /// (second, base64 of the compressed histogram), when it keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    intervals: Option<Vec<(u64, String)>>,
    /// The same by the second the values began in, when it keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    starts: Option<Vec<(u64, String)>>,
}

fn to_wire(seconds: Vec<(u64, Vec<u8>)>) -> Vec<(u64, String)> {
    seconds
        .into_iter()
        .map(|(second, bytes)| {
            (
                second,
                base64::engine::general_purpose::STANDARD.encode(bytes),
            )
        })
        .collect()
}

fn from_wire(seconds: Vec<(u64, String)>) -> Result<Vec<(u64, Vec<u8>)>> {
    seconds
        .into_iter()
        .map(|(second, text)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .context("interval histogram is not valid base64")?;
            Ok((second, bytes))
        })
        .collect()
}

impl Serialize for Recorder {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RecorderWire {
            histogram: self.to_base64(),
            saturated: self.saturated,
            negative: self.negative,
            least: self.least_ns(),
            intervals: self
                .intervals
                .as_ref()
                .map(|iv| to_wire(iv.all(&self.histogram))),
            starts: self.starts.as_ref().map(|st| to_wire(st.all())),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Recorder {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = RecorderWire::deserialize(d)?;
        let mut recorder =
            Recorder::from_base64(&wire.histogram).map_err(serde::de::Error::custom)?;
        recorder.saturated = wire.saturated;
        recorder.negative = wire.negative;
        recorder.least = wire.least.unwrap_or(i64::MAX);
        if let Some(list) = wire.intervals {
            let mut iv = Intervals::new();
            iv.done = from_wire(list).map_err(serde::de::Error::custom)?;
            // Every value is in a finished second already.
            iv.take_snapshot(&recorder.histogram);
            recorder.intervals = Some(Box::new(iv));
        }
        if let Some(list) = wire.starts {
            let done = from_wire(list).map_err(serde::de::Error::custom)?;
            recorder.starts = Some(Box::new(Starts {
                open: Vec::new(),
                done,
            }));
        }
        Ok(recorder)
    }
}

/// The percentiles every latency report shows, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
}

#[cfg(test)]
mod tests;
