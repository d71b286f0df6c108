use super::*;

/// The peak resident memory of this process so far, in bytes.
fn peak_rss() -> u64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is handed.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as u64 * 1024
}

/// Issue 51: a 56-byte histogram whose header claims a 4 GiB payload
/// made the crate's reader allocate (and zero) all of it: 4.2 GB RSS.
/// Refused now from the header, before anything is allocated.
#[test]
fn a_header_claiming_a_huge_payload_is_refused_without_allocating_it() {
    let mut bomb = Vec::new();
    bomb.extend_from_slice(&V2_COOKIE.to_be_bytes());
    bomb.extend_from_slice(&0xFFFF_FFF0u32.to_be_bytes());
    bomb.extend_from_slice(&0u32.to_be_bytes());
    bomb.extend_from_slice(&3u32.to_be_bytes());
    bomb.extend_from_slice(&1u64.to_be_bytes());
    bomb.extend_from_slice(&HIGHEST_NS.to_be_bytes());
    bomb.extend_from_slice(&1.0f64.to_be_bytes());
    bomb.extend_from_slice(&[0; 16]);
    assert_eq!(bomb.len(), 56);
    let text = base64::engine::general_purpose::STANDARD.encode(&bomb);
    let before = peak_rss();
    let e = Recorder::from_base64(&text).unwrap_err();
    assert!(
        format!("{e:#}").contains("claims 4294967280 bytes"),
        "{e:#}"
    );
    let grown = peak_rss().saturating_sub(before);
    assert!(grown < 64 << 20, "refusing it took {grown} bytes");

    // The same header deflated (the compressed form), and a deflate
    // bomb: inflated no further than the cap.
    let zlib = |plain: &[u8]| {
        use std::io::Write as _;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(plain).unwrap();
        let body = z.finish().unwrap();
        let mut out = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    };
    assert!(decompress(&zlib(&bomb)).is_err());
    let mut huge = bomb[..40].to_vec();
    huge.resize(MAX_HISTOGRAM_BYTES + 1024, 0);
    let e = decompress(&zlib(&huge)).unwrap_err();
    assert!(format!("{e:#}").contains("inflates beyond 16 MiB"), "{e:#}");
    // A real one still reads back.
    let mut r = Recorder::new();
    r.record(1_000);
    assert_eq!(Recorder::from_base64(&r.to_base64()).unwrap().count(), 1);
}

impl Recorder {
    /// The values of every second that began in `[from_ns, to_ns)`,
    /// merged (at the intervals' precision).
    fn seconds_between(&self, from_ns: u64, to_ns: u64) -> Histogram<u64> {
        let mut sum = interval_histogram();
        self.for_each_second(|second, h| {
            let at = second * INTERVAL_NS;
            if at >= from_ns && at < to_ns {
                let _ = sum.add(h);
            }
        });
        sum
    }
}

#[test]
fn values_split_by_the_second_they_began_in_whatever_their_order() {
    // Starts in seconds 10..20 arriving round-robin (more seconds open
    // than OPEN_STARTS), every value ending in second 30; then merged
    // and sent as a worker sends it.
    let mut r = Recorder::with_start_intervals();
    for k in 0..1_000u64 {
        let start = (10 + k % 10) * INTERVAL_NS + k;
        r.record_between(start, 30 * INTERVAL_NS);
    }
    let mut merged = Recorder::new();
    merged.merge(&serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap());
    let spans = [
        (10 * INTERVAL_NS, 12 * INTERVAL_NS),
        (12 * INTERVAL_NS, 20 * INTERVAL_NS),
    ];
    let split = merged.split_by_start(&spans);
    assert_eq!((split[0].len(), split[1].len()), (200, 800));
    // By end time all of them fall in second 30.
    assert_eq!(
        merged
            .seconds_between(30 * INTERVAL_NS, 31 * INTERVAL_NS)
            .len(),
        1_000
    );
}

#[test]
fn a_busy_second_fits_the_interval_design() {
    // 100k values received in one second, spread evenly in log space
    // over seven decades (1 µs to 10 s), then the next second opens and
    // closes it.
    let mut r = Recorder::with_intervals();
    let at = 20 * INTERVAL_NS;
    let n = 100_000u64;
    for k in 0..n {
        let ns = 1_000.0 * 10f64.powf(7.0 * k as f64 / n as f64);
        r.record_between(at - ns as u64, at);
    }
    r.record_between(at + INTERVAL_NS, at + INTERVAL_NS + 1);
    let (seconds, bytes) = r.interval_seconds();
    eprintln!("one busy second: {bytes} bytes");
    assert_eq!(seconds, 1);
    assert!(bytes <= INTERVAL_BYTES_PER_SECOND, "{bytes} bytes");
}

#[test]
fn merge_adds_counts_and_keeps_extremes() {
    let mut a = Recorder::new();
    let mut b = Recorder::new();
    for v in 1..=1_000u64 {
        a.record(v * 1_000);
    }
    for v in 1..=1_000u64 {
        b.record(1_000_000 + v * 1_000);
    }
    a.merge(&b);
    assert_eq!(a.count(), 2_000);
    let s = a.summary();
    assert!((s.min_us - 1.0).abs() < 0.01, "min {}", s.min_us);
    assert!(
        (s.max_us - 2_000.0).abs() / 2_000.0 < 0.001,
        "max {}",
        s.max_us
    );
    // The median of 1..=2000 µs is 1000 µs, within 3 significant digits.
    assert!(
        (s.p50_us - 1_000.0).abs() / 1_000.0 < 0.002,
        "p50 {}",
        s.p50_us
    );
}

#[test]
fn values_beyond_the_range_saturate_and_are_counted() {
    let mut r = Recorder::new();
    r.record(HIGHEST_NS * 10);
    assert_eq!(r.count(), 1);
    assert_eq!(r.saturated(), 1);
}

#[test]
fn hgrm_text_ends_at_the_total_count() {
    let mut r = Recorder::new();
    for v in 0..10_000u64 {
        r.record(50_000 + v * 10);
    }
    let text = r.to_hgrm();
    assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)"));
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.contains("Value"))
        .collect();
    let last: Vec<&str> = rows.last().unwrap().split_whitespace().collect();
    assert_eq!(last[1], "1.000000000000");
    assert_eq!(last[2], "10000");
    assert!(text.contains("Total count    =        10000"));
    assert!(text.contains("SubBuckets     =         2048"), "{text}");
    // Values are in microseconds: the first row is about 50 µs.
    let first: f64 = rows[0].split_whitespace().next().unwrap().parse().unwrap();
    assert!((first - 50.0).abs() < 0.1, "first {first}");
}

#[test]
fn serde_round_trips_with_the_saturated_count() {
    let mut r = Recorder::new();
    r.record(42_000);
    r.record(HIGHEST_NS * 2);
    let json = serde_json::to_string(&r).unwrap();
    let back: Recorder = serde_json::from_str(&json).unwrap();
    assert_eq!(back.histogram(), r.histogram());
    assert_eq!(back.saturated(), 1);
}

#[test]
fn base64_round_trips_exactly() {
    let mut r = Recorder::new();
    for v in [1u64, 999, 123_456, 9_999_999_999] {
        r.record(v);
    }
    let back = Recorder::from_base64(&r.to_base64()).unwrap();
    assert_eq!(back.histogram(), r.histogram());
    assert!(Recorder::from_base64("not base64!").is_err());
}

#[test]
fn an_interval_that_ends_before_it_starts_is_counted_not_hidden() {
    let mut r = Recorder::new();
    r.record_between(1_000, 3_000);
    r.record_between(5_000, 4_000);
    assert_eq!((r.count(), r.negative()), (2, 1));
    let mut other = Recorder::new();
    other.record_between(9, 1);
    r.merge(&other);
    assert_eq!(r.negative(), 2);
    // The smallest interval keeps its sign: what bounds a clock offset.
    assert_eq!(r.least_ns(), Some(-1_000));
    let back: Recorder = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
    assert_eq!(back.negative(), 2);
    assert_eq!(back.least_ns(), Some(-1_000));
    assert_eq!(Recorder::new().least_ns(), None);
}

#[test]
fn intervals_cut_by_second_merge_and_travel() {
    let base = 1_700_000_000 * INTERVAL_NS;
    let mut a = Recorder::with_intervals();
    a.record_between(base, base + 1_000);
    a.record_between(base + 2 * INTERVAL_NS, base + 2 * INTERVAL_NS + 3_000);
    let mut b = Recorder::with_intervals();
    b.record_between(base + 10, base + 2_010);
    // Through the workers' wire form, then merged.
    let b: Recorder = serde_json::from_value(serde_json::to_value(&b).unwrap()).unwrap();
    let mut merged = Recorder::new();
    merged.merge(&a);
    merged.merge(&b);
    let mut seconds = Vec::new();
    merged.for_each_second(|s, h| seconds.push((s - 1_700_000_000, h.len())));
    assert_eq!(seconds, [(0, 2), (2, 1)]);
    assert_eq!(merged.count(), 3);
    let log = merged.to_interval_log().unwrap();
    assert!(String::from_utf8_lossy(&log).contains("#[StartTime: 1700000000"));
    assert!(Recorder::new().to_interval_log().is_none());
}

#[test]
fn each_second_holds_exactly_its_values_also_around_a_merge() {
    // The open second is the whole histogram's growth since its
    // snapshot: values merged in from another recorder, before or
    // after, must land in their own seconds and nowhere else.
    let base = 1_700_000_000 * INTERVAL_NS;
    let mut want: Vec<Histogram<u64>> = (0..3)
        .map(|_| Histogram::new_with_bounds(1, HIGHEST_NS, INTERVAL_SIGFIG).unwrap())
        .collect();
    let mut r = Recorder::with_intervals();
    let mut other = Recorder::with_intervals();
    for k in 1..3_000u64 {
        let second = k * 3 / 3_000;
        let at = base + second * INTERVAL_NS + k;
        let value = k * k * 37 % 50_000_000 + 1;
        let into = if k % 5 == 0 { &mut other } else { &mut r };
        into.record_between(at - value, at);
        want[second as usize].record(value).unwrap();
        if k == 1_500 {
            r.merge(&std::mem::take(&mut other));
            other = Recorder::with_intervals();
        }
    }
    r.merge(&other);
    let mut got = vec![Histogram::new_with_bounds(1, HIGHEST_NS, INTERVAL_SIGFIG).unwrap(); 3];
    r.for_each_second(|s, h| got[(s - 1_700_000_000) as usize].add(h).unwrap());
    for (second, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), w.len(), "second {second}");
        for q in [0.0, 0.25, 0.5, 0.9, 0.99, 1.0] {
            assert_eq!(
                g.value_at_quantile(q),
                w.value_at_quantile(q),
                "second {second} q {q}"
            );
        }
    }
    assert_eq!(r.count(), 2_999);
}
